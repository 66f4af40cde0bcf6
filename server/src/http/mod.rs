//! The HTTP surface: the JSON API and SSE under `/api`, server functions under `/rpc`, and the
//! Leptos pages for everything else. One file per resource.

mod datasets;
pub mod error;
mod events;
mod jobs;
mod pages;
mod reports;
mod results;
pub mod session;
mod uploads;

use axum::{
    Router,
    extract::{DefaultBodyLimit, FromRef},
    middleware,
    routing::{any, get, post},
};
use leptos::prelude::LeptosOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

pub use pages::leptos_options;

use crate::progress::Hub;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub hub: Hub,
    pub leptos_options: LeptosOptions,
    pub max_upload_bytes: usize,
    /// Fires on shutdown; open event streams end with it.
    pub shutdown: CancellationToken,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// Multipart framing around the file itself.
const MULTIPART_OVERHEAD: usize = 64 * 1024;

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route(
            "/api/uploads",
            post(uploads::create).layer(DefaultBodyLimit::max(
                state.max_upload_bytes.saturating_add(MULTIPART_OVERHEAD),
            )),
        )
        .route("/api/jobs", post(jobs::create).get(jobs::list))
        .route("/api/jobs/events", get(events::all_jobs))
        .route("/api/jobs/{id}", get(jobs::show))
        .route("/api/jobs/{id}/events", get(events::one_job))
        .route("/api/jobs/{id}/cancel", post(jobs::cancel))
        .route("/api/jobs/{id}/retry", post(jobs::retry))
        .route("/api/jobs/{id}/seal", post(jobs::seal))
        .route("/api/jobs/{id}/errors", get(reports::json))
        .route("/api/jobs/{id}/errors.csv", get(reports::csv))
        .route("/api/jobs/{id}/errors.xlsx", get(reports::xlsx))
        .route("/api/jobs/{id}/result", get(results::download))
        .route("/api/datasets", post(datasets::create).get(datasets::list))
        .route("/api/datasets/{name}", get(datasets::show))
        .route("/api/datasets/{name}/rows", get(datasets::rows))
        .route("/api/{*rest}", any(error::no_such_endpoint));
    pages::add(api, &state)
        .layer(middleware::from_fn(session::ensure))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
