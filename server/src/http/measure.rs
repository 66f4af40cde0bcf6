//! Middleware: every response counted and timed by method, route pattern and status
//! ([`crate::telemetry::http_response`]). Requests no route matched count under `unmatched`,
//! and made-up methods as `other`, so a scan of random paths or methods adds no series.

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request},
    middleware::Next,
    response::Response,
};

use crate::telemetry;

pub async fn requests(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |path| path.as_str())
        .to_owned();
    let response = next.run(request).await;
    telemetry::http_response(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
