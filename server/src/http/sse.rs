//! A server-sent event response whose events are made already ([`Shown::event`]): each stream
//! sends the bytes every stream shares, with no allocation of its own, where axum's `Sse`
//! formats each event again per stream (a buffer grown three times, the version printed) and
//! resets a keep-alive timer of its own after every event (ours is one tick for the process:
//! `progress::views`). In a profile of the server under ten thousand streams of one job (perf,
//! `make bench ONLY=fanout`, 2026-11-27), glibc's malloc and free took about a fifth of its
//! samples; the kernel's `writev` is now the largest part of a push (docs/architecture.md,
//! "Known gaps").
//!
//! A stream also ends when its `end` does (the server's shutdown, or the session it was opened
//! with ending), and `end` is polled only once it has woken the stream, not each time hyper
//! polls the body: hyper polls it twice per push (the event, then `Pending`), and polling the
//! two ends each time (a lock of the shutdown token, the accounts channel's lock, the recheck
//! timer) was about a fifth of the server's user-space CPU per push in perf, a twelfth of all
//! of it (`make bench ONLY=fanout`, 10,000 streams, 2026-11-28).
//!
//! [`Shown::event`]: crate::progress::views::Shown

use std::{
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

use axum::{
    body::Body,
    http::{
        HeaderValue,
        header::{CACHE_CONTROL, CONTENT_TYPE},
    },
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use futures::{Stream, StreamExt, task::AtomicWaker};

use crate::progress::feed::Push;

/// The comment that keeps an idle stream open.
const COMMENT: &[u8] = b":\n\n";

/// A `text/event-stream` response of `pushes`; it ends when they do, or when `end` does.
pub fn response(
    pushes: impl Stream<Item = Push> + Send + 'static,
    end: impl Future<Output = ()> + Send + 'static,
) -> Response {
    let pushes = Until::new(Box::pin(pushes), end);
    let body = Body::from_stream(pushes.map(|push| Ok::<_, Infallible>(bytes(push))));
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// What a push puts on the wire: the state's event (shared by every stream), or a comment.
fn bytes(push: Push) -> Bytes {
    match push {
        Push::Job(shown) => shown.event.clone(),
        Push::KeepAlive => Bytes::from_static(COMMENT),
    }
}

/// `pushes` until `end` completes, `end` polled at first and then only after it woke the task.
struct Until<S, F> {
    pushes: Pin<Box<S>>,
    /// `None` once it has completed.
    end: Option<Pin<Box<F>>>,
    woke: Arc<Woke>,
    /// Wakes `woke`: what `end` is polled with.
    end_waker: Waker,
}

/// Whether `end` woke since it was last polled, and the task to wake when it does.
struct Woke {
    woke: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Woke {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woke.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<S, F> Until<S, F> {
    fn new(pushes: Pin<Box<S>>, end: F) -> Self {
        let woke = Arc::new(Woke {
            woke: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            pushes,
            end: Some(Box::pin(end)),
            end_waker: Waker::from(woke.clone()),
            woke,
        }
    }
}

impl<S: Stream, F: Future<Output = ()>> Stream for Until<S, F> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        let Some(end) = this.end.as_mut() else {
            return Poll::Ready(None);
        };
        // Before looking at the flag: a wake between the two is not lost.
        this.woke.task.register(cx.waker());
        if this.woke.woke.swap(false, Ordering::AcqRel)
            && end
                .as_mut()
                .poll(&mut Context::from_waker(&this.end_waker))
                .is_ready()
        {
            this.end = None;
            return Poll::Ready(None);
        }
        this.pushes.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::progress::views::Shown;

    #[tokio::test]
    async fn a_state_goes_as_its_event_a_keep_alive_as_a_comment_and_the_body_ends_with_them() {
        let view: app::model::JobView = serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::nil(), "jobType": "import", "status": "running",
            "itemCount": null, "itemProgress": 0, "rowsOk": 0, "rowsFailed": 0,
            "rowsUpdated": 0, "chunksTotal": 0, "chunksDone": 0, "version": 7, "error": null,
            "filename": null, "dataset": null, "format": null, "resultUrl": null,
            "createdAt": "2026-11-27T00:00:00Z", "startedAt": null, "finishedAt": null,
            "elapsedSeconds": null, "owner": uuid::Uuid::nil(), "ownerEmail": null
        }))
        .unwrap();
        let shown = Arc::new(Shown::new(view));
        let pushes = [Push::Job(shown.clone()), Push::KeepAlive];
        let body = response(futures::stream::iter(pushes), std::future::pending()).into_body();
        let sent = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        assert_eq!(sent, [&shown.event[..], COMMENT].concat());
    }

    #[tokio::test]
    async fn the_end_is_polled_only_once_it_woke_and_ends_the_stream() {
        use std::sync::atomic::AtomicUsize;

        let polls = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut stopped = Box::pin(stopped);
        let counted = polls.clone();
        let end = std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::Relaxed);
            stopped.as_mut().poll(cx).map(|_| ())
        });
        let pushes = futures::stream::repeat_with(|| Push::KeepAlive);
        let mut until = Until::new(Box::pin(pushes), end);
        for _ in 0..100 {
            assert!(matches!(until.next().await, Some(Push::KeepAlive)));
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled at first only");
        stop.send(()).unwrap();
        assert!(until.next().await.is_none());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
        assert!(until.next().await.is_none(), "and stays ended");
    }
}
