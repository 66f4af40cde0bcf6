//! A server-sent event response whose events are made already ([`Shown::event`]): each stream
//! sends the bytes every stream shares, with no allocation of its own, where axum's `Sse`
//! formats each event again per stream (a buffer grown three times, the version printed) and
//! resets its keep-alive timer after every event. In a profile of the server under ten
//! thousand streams of one job (perf, `make bench ONLY=fanout`, 2026-11-27), glibc's malloc
//! and free took about a fifth of its samples; the kernel's `writev` is now the largest part
//! of a push, about 8 of its 19–20 µs (docs/architecture.md, "Known gaps").
//!
//! [`Shown::event`]: crate::progress::views::Shown

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
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
use futures::{Stream, StreamExt};
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// How often an idle stream sends a comment, so that proxies and browsers keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The comment sent to keep a stream open.
const COMMENT: &[u8] = b":\n\n";

/// A `text/event-stream` response of `events` (each a whole event, its blank line included),
/// with a comment every [`KEEP_ALIVE`]; it ends when `events` does.
pub fn response(events: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    let body = Body::from_stream(kept_alive(events, KEEP_ALIVE));
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

fn kept_alive(events: impl Stream<Item = Bytes> + Send + 'static, every: Duration) -> KeptAlive {
    let mut keep_alive = tokio::time::interval_at(Instant::now() + every, every);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    KeptAlive {
        events: Box::pin(events),
        keep_alive,
    }
}

/// `events`, and a comment whenever the keep-alive ticks. The tick runs on its own: an event
/// does not reset it (a comment between events costs three bytes; a reset per event cost a
/// timer update per stream per push).
struct KeptAlive {
    events: Pin<Box<dyn Stream<Item = Bytes> + Send>>,
    keep_alive: Interval,
}

impl Stream for KeptAlive {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Poll::Ready(event) = self.events.poll_next_unpin(cx) {
            return Poll::Ready(event.map(Ok));
        }
        ready!(self.keep_alive.poll_tick(cx));
        Poll::Ready(Some(Ok(Bytes::from_static(COMMENT))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_stream_sends_comments_and_ends_with_its_events() {
        let every = Duration::from_millis(20);
        let event = Bytes::from_static(b"event: job\ndata: {}\n\n");
        let events = futures::stream::iter([event.clone()]).chain(futures::stream::pending());
        let mut kept = kept_alive(events, every);
        assert_eq!(kept.next().await.unwrap().unwrap(), event);
        assert_eq!(kept.next().await.unwrap().unwrap(), COMMENT);
        assert_eq!(kept.next().await.unwrap().unwrap(), COMMENT);

        let mut ended = kept_alive(futures::stream::iter([event.clone()]), every);
        assert_eq!(ended.next().await.unwrap().unwrap(), event);
        assert!(ended.next().await.is_none());
    }
}
