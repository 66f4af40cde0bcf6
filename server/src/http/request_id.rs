//! Every request gets an id, in its `x-request-id` header both ways and in the `request_id` field
//! of every log line written while it is handled (the `request` span, [`span`]). A caller's own
//! id (a proxy's or load balancer's) is kept when it is a plain token of at most 64 characters;
//! anything else is replaced, so a hostile header never reaches the logs. (tower-http's request-id
//! layers keep whatever arrives, hence this small middleware.)

use axum::{
    extract::Request,
    http::{HeaderName, HeaderValue},
    middleware::Next,
    response::Response,
};
use uuid::Uuid;

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Middleware: gives the request its id (the caller's, if fit to log) and echoes it.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&HEADER)
        .filter(|value| fit(value.as_bytes()))
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&Uuid::now_v7().to_string()).expect("a uuid is a header value")
        });
    request.headers_mut().insert(HEADER, id.clone());
    let mut response = next.run(request).await;
    response.headers_mut().insert(HEADER, id);
    response
}

fn fit(id: &[u8]) -> bool {
    (1..=64).contains(&id.len())
        && id
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The span a request is handled in (tower-http's `TraceLayer`): the id [`assign`] gave it, the
/// method and the path (never the query). At level `error`, so that whatever `RUST_LOG` lets
/// through (`warn` only, say) still carries its fields.
pub fn span(request: &Request) -> tracing::Span {
    let id = request
        .headers()
        .get(&HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    tracing::error_span!(
        "request",
        request_id = id,
        method = %request.method(),
        path = request.uri().path(),
    )
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn only_plain_short_ids_are_kept() {
        for kept in [
            "a",
            "0192f1c2-7d3e-7a51-8b2a-3f1c2d4e5f60",
            "lb.req_42",
            &"x".repeat(64),
        ] {
            assert!(fit(kept.as_bytes()), "{kept}");
        }
        for replaced in ["", "a b", "a\u{1b}[31m", "id\"}", "é", &"x".repeat(65)] {
            assert!(!fit(replaced.as_bytes()), "{replaced:?}");
        }
    }
}
