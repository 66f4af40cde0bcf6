//! The Leptos pages and server functions, and the [`PageData`] they read through: the same
//! store functions as the JSON API, scoped to the reader in the same way.

use std::sync::Arc;

use app::{
    App,
    auth::{Me, SessionView, TokenView, UserView},
    data::{PageData, Store},
    history::JobHistory,
    job_list::{JobPage, ListQuery},
    model::{DatasetView, JobView},
    shell,
};
use axum::{
    Router,
    http::{HeaderValue, header::CONTENT_SECURITY_POLICY},
};
use leptos::prelude::{LeptosOptions, get_configuration, provide_context, use_context};
use leptos_axum::{
    LeptosRoutes, ResponseOptions, file_and_error_handler_with_context, generate_route_list,
};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::{AppState, defences};
use crate::{
    auth::Sees,
    config::{AuthArgs, AuthMode},
    incident,
    store::{
        datasets, history,
        job_list::{self, Owners},
        jobs, sessions, users,
    },
};

struct PgPageData {
    pool: PgPool,
    auth: Arc<AuthArgs>,
}

fn text(err: sqlx::Error) -> String {
    let reference = incident::error("page data", &err);
    format!("{} Please try again.", reference.sentence())
}

#[async_trait::async_trait]
impl PageData for PgPageData {
    async fn job(&self, me: Option<&Me>, id: Uuid) -> Result<Option<JobView>, String> {
        jobs::find(&self.pool, id, Sees::of(me)).await.map_err(text)
    }

    async fn job_history(&self, me: Option<&Me>, id: Uuid) -> Result<Option<JobHistory>, String> {
        history::read(&self.pool, id, Sees::of(me))
            .await
            .map_err(text)
    }

    async fn job_page(&self, me: Option<&Me>, query: &ListQuery) -> Result<JobPage, String> {
        let owners = Owners::resolve(&self.pool, Sees::of(me), query.filter.owner.as_deref())
            .await
            .map_err(text)?;
        job_list::page(&self.pool, owners, query)
            .await
            .map_err(text)
    }

    async fn datasets(&self, me: Option<&Me>) -> Result<Vec<DatasetView>, String> {
        datasets::list(&self.pool, Sees::of(me)).await.map_err(text)
    }

    async fn dataset(
        &self,
        me: Option<&Me>,
        name: &str,
        owner: Option<Uuid>,
        rows: i64,
    ) -> Result<Option<(DatasetView, Vec<Value>)>, String> {
        let Some(owner) = me
            .map(|me| owner.unwrap_or(me.id))
            .filter(|owner| me.is_some_and(|me| me.sees(*owner)))
        else {
            return Ok(None);
        };
        let Some(dataset) = datasets::find(&self.pool, owner, name)
            .await
            .map_err(text)?
        else {
            return Ok(None);
        };
        let rows = datasets::rows(&self.pool, owner, name, None, rows)
            .await
            .map_err(text)?
            .map(|(rows, _)| rows)
            .unwrap_or_default();
        Ok(Some((dataset, rows)))
    }

    fn session(&self, me: Option<Me>) -> SessionView {
        SessionView {
            me,
            sign_up: self.auth.sign_up,
            guests: self.auth.mode == AuthMode::Guest,
        }
    }

    async fn users(&self) -> Result<Vec<UserView>, String> {
        users::accounts(&self.pool).await.map_err(text)
    }

    async fn tokens(&self, me: &Me) -> Result<Vec<TokenView>, String> {
        sessions::tokens_of(&self.pool, me.id).await.map_err(text)
    }

    async fn queue_health(&self) -> Result<app::queue_health::QueueHealth, String> {
        crate::store::queue_health::read(&self.pool)
            .await
            .map_err(text)
    }
}

/// What every page render and server function gets: the data, and a Content-Security-Policy
/// naming the nonce Leptos put on this response's inline scripts.
fn context(store: Store) -> impl Fn() + Clone + Send + 'static {
    move || {
        provide_context(store.clone());
        if let (Some(nonce), Some(response)) =
            (leptos::nonce::use_nonce(), use_context::<ResponseOptions>())
            && let Ok(policy) = HeaderValue::from_str(&defences::page_policy(&nonce))
        {
            response.insert_header(CONTENT_SECURITY_POLICY, policy);
        }
    }
}

/// Adds the pages, the server functions and static files to the router.
pub fn add(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let store: Store = Arc::new(PgPageData {
        pool: state.pool.clone(),
        auth: state.auth.clone(),
    });
    let options = state.leptos_options.clone();
    router
        .leptos_routes_with_context(
            state,
            generate_route_list(App),
            context(store.clone()),
            move || shell(options.clone()),
        )
        .fallback(file_and_error_handler_with_context::<AppState, _>(
            context(store),
            shell,
        ))
}

/// The pages' paths, as the router serves them (for tests that walk every route).
pub fn page_paths() -> Vec<String> {
    generate_route_list(App)
        .iter()
        .map(|route| route.path().to_owned())
        .collect()
}

/// The server functions' paths (for tests that walk every route).
pub fn rpc_paths() -> Vec<String> {
    let mut paths: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_owned())
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// Leptos's settings, from the environment (cargo-leptos sets `LEPTOS_SITE_ADDR`,
/// `LEPTOS_SITE_ROOT`… when it runs us), with Leptos's defaults for the rest. The output name
/// is fixed when Leptos is compiled (`LEPTOS_OUTPUT_NAME` in `.cargo/config.toml`).
pub fn leptos_options() -> anyhow::Result<LeptosOptions> {
    use anyhow::Context as _;
    Ok(get_configuration(None)
        .context("reading Leptos's settings from the environment")?
        .leptos_options)
}
