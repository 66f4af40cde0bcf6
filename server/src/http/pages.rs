//! The Leptos pages and server functions, and the [`PageData`] they read through.

use std::sync::Arc;

use app::{
    App,
    data::{PageData, Store},
    model::{DatasetView, JobView},
    shell,
};
use axum::Router;
use leptos::prelude::{LeptosOptions, get_configuration, provide_context};
use leptos_axum::{LeptosRoutes, file_and_error_handler, generate_route_list};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::AppState;
use crate::store::{datasets, jobs};

struct PgPageData(PgPool);

#[async_trait::async_trait]
impl PageData for PgPageData {
    async fn job(&self, id: Uuid) -> Result<Option<JobView>, String> {
        jobs::find(&self.0, id).await.map_err(|err| err.to_string())
    }

    async fn recent_jobs(&self, limit: i64) -> Result<Vec<JobView>, String> {
        jobs::recent(&self.0, limit, None)
            .await
            .map_err(|err| err.to_string())
    }

    async fn datasets(&self) -> Result<Vec<DatasetView>, String> {
        datasets::list(&self.0).await.map_err(|err| err.to_string())
    }

    async fn dataset(
        &self,
        name: &str,
        rows: i64,
    ) -> Result<Option<(DatasetView, Vec<Value>)>, String> {
        let Some(dataset) = datasets::find(&self.0, name)
            .await
            .map_err(|err| err.to_string())?
        else {
            return Ok(None);
        };
        let rows = datasets::rows(&self.0, name, None, rows)
            .await
            .map_err(|err| err.to_string())?
            .map(|(rows, _)| rows)
            .unwrap_or_default();
        Ok(Some((dataset, rows)))
    }
}

/// Adds the pages, the server functions and static files to the router.
pub fn add(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let reader: Store = Arc::new(PgPageData(state.pool.clone()));
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
