//! The Leptos pages and server functions, and the [`JobsReader`] they read jobs through.

use std::sync::Arc;

use app::{
    App,
    data::{Jobs, JobsReader},
    model::JobView,
    shell,
};
use axum::Router;
use leptos::prelude::{LeptosOptions, get_configuration, provide_context};
use leptos_axum::{LeptosRoutes, file_and_error_handler, generate_route_list};
use sqlx::PgPool;
use uuid::Uuid;

use super::AppState;
use crate::store::jobs;

struct PgJobs(PgPool);

#[async_trait::async_trait]
impl JobsReader for PgJobs {
    async fn job(&self, id: Uuid) -> Result<Option<JobView>, String> {
        jobs::find(&self.0, id).await.map_err(|err| err.to_string())
    }

    async fn recent_jobs(&self, limit: i64) -> Result<Vec<JobView>, String> {
        jobs::recent(&self.0, limit, None)
            .await
            .map_err(|err| err.to_string())
    }
}

/// Adds the pages, the server functions and static files to the router.
pub fn add(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let reader: Jobs = Arc::new(PgJobs(state.pool.clone()));
    let options = state.leptos_options.clone();
    router
        .leptos_routes_with_context(
            state,
            generate_route_list(App),
            move || provide_context(reader.clone()),
            move || shell(options.clone()),
        )
        .fallback(file_and_error_handler::<AppState, _>(shell))
}

/// Leptos's settings: from cargo-leptos's environment when it built or runs us; otherwise
/// (plain `cargo build`/`cargo test`) the defaults, with `LEPTOS_SITE_ADDR` honoured.
pub fn leptos_options() -> LeptosOptions {
    let from_cargo_leptos = std::env::var_os("LEPTOS_OUTPUT_NAME").is_some()
        || option_env!("LEPTOS_OUTPUT_NAME").is_some();
    if from_cargo_leptos && let Ok(conf) = get_configuration(None) {
        return conf.leptos_options;
    }
    let site_addr: std::net::SocketAddr = std::env::var("LEPTOS_SITE_ADDR")
        .ok()
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| ([127, 0, 0, 1], 3000).into());
    LeptosOptions::builder()
        .output_name("conveyor")
        .site_addr(site_addr)
        .build()
}
