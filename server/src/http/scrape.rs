//! `GET /metrics`, the [`crate::telemetry`] metrics in Prometheus's text format. On the API
//! router it answers admins (signed in or with an API token) and a scraper showing the metrics
//! token (`CONVEYOR_METRICS_TOKEN`), which needs no account; with `CONVEYOR_METRICS_ADDR` set,
//! a listener of its own on that address answers it, and nothing else, to anyone who reaches it.

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, HeaderValue, header::CONTENT_TYPE},
    response::{IntoResponse, Response},
    routing::get,
};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::AppState;
use crate::{config::MetricsArgs, telemetry};

pub const PATH: &str = "/metrics";

/// Marks a request that showed the metrics token (set by `identity::resolve`).
#[derive(Debug, Clone, Copy)]
pub struct Scraper;

/// Whether `headers` carry the metrics token. Compared as digests, so the time a comparison
/// takes says nothing about the token.
pub fn shows_token(headers: &HeaderMap, args: &MetricsArgs) -> bool {
    match (
        args.metrics_token.as_deref(),
        super::identity::bearer(headers),
    ) {
        (Some(token), Some(shown)) if !token.is_empty() => {
            Sha256::digest(token.as_bytes()) == Sha256::digest(shown.as_bytes())
        }
        _ => false,
    }
}

/// The metrics, in Prometheus's text format.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses((status = 200, description = "The metrics.", body = String, content_type = "text/plain; version=0.0.4; charset=utf-8"))
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    text(&state.pool).await
}

/// The router of the metrics address: `GET /metrics` only.
pub fn alone(pool: PgPool) -> Router {
    Router::new()
        .route(
            PATH,
            get(|State(pool): State<PgPool>| async move { text(&pool).await }),
        )
        .with_state(pool)
}

async fn text(pool: &PgPool) -> Response {
    let body = telemetry::render(pool).await;
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}
