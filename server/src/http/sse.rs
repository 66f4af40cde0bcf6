//! A server-sent event response whose events are made already ([`Shown::event`]): each stream
//! sends the bytes every stream shares, with no allocation of its own, where axum's `Sse`
//! formats each event again per stream (a buffer grown three times, the version printed) and
//! resets a keep-alive timer of its own after every event (ours is one tick for the process:
//! `progress::views`). In a profile of the server under ten thousand streams of one job (perf,
//! `make bench ONLY=fanout`, 2026-11-27), glibc's malloc and free took about a fifth of its
//! samples; the kernel's `writev` is now the largest part of a push (docs/architecture.md,
//! "Known gaps").
//!
//! [`Shown::event`]: crate::progress::views::Shown

use std::convert::Infallible;

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

use crate::progress::feed::Push;

/// The comment that keeps an idle stream open.
const COMMENT: &[u8] = b":\n\n";

/// A `text/event-stream` response of `pushes`; it ends when they do.
pub fn response(pushes: impl Stream<Item = Push> + Send + 'static) -> Response {
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
        let body = response(futures::stream::iter(pushes)).into_body();
        let sent = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        assert_eq!(sent, [&shown.event[..], COMMENT].concat());
    }
}
