//! How pages get their data on first render. The server renders every page with the current
//! state (so a reload or a browser without JS shows the truth); these server functions read it
//! through [`PageData`], an interface the `server` crate implements over PostgreSQL and hands
//! in as Leptos context. That keeps sqlx and tokio out of this crate, which also compiles to
//! wasm.
//!
//! Each function reads as the person the request comes from: the server's identity middleware
//! puts their [`Me`] in the request's extensions, and [`PageData`] scopes every read to it, as
//! the JSON API does.

use leptos::prelude::*;
use serde_json::Value;
use uuid::Uuid;

#[cfg(feature = "ssr")]
use crate::auth::Me;
use crate::{
    auth::{SessionView, TokenView, UserView},
    job_list::JobPage,
    model::{DatasetView, JobView},
};

/// Rows a dataset page shows.
pub const DATASET_PAGE_ROWS: i64 = 20;

/// Read access for pages, implemented by the server. `me` is the reader (`None`: a visitor
/// without a session, who owns nothing).
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait PageData: Send + Sync {
    /// One job, or `None` when no job the reader may see has that id.
    async fn job(&self, me: Option<&Me>, id: Uuid) -> Result<Option<JobView>, String>;
    /// One job's history, or `None` when no job the reader may see has that id.
    async fn job_history(
        &self,
        me: Option<&Me>,
        id: Uuid,
    ) -> Result<Option<crate::history::JobHistory>, String>;
    /// A page of the jobs the reader may see that the query selects.
    async fn job_page(
        &self,
        me: Option<&Me>,
        query: &crate::job_list::ListQuery,
    ) -> Result<JobPage, String>;
    /// Every dataset the reader may see, by name.
    async fn datasets(&self, me: Option<&Me>) -> Result<Vec<DatasetView>, String>;
    /// A dataset (the reader's own, or `owner`'s when the reader may see theirs) and its first
    /// rows, or `None`.
    async fn dataset(
        &self,
        me: Option<&Me>,
        name: &str,
        owner: Option<Uuid>,
        rows: i64,
    ) -> Result<Option<(DatasetView, Vec<Value>)>, String>;
    /// The reader and the sign-in settings.
    fn session(&self, me: Option<Me>) -> SessionView;
    /// Every account (the caller checks that the reader is an admin).
    async fn users(&self) -> Result<Vec<UserView>, String>;
    /// The reader's API tokens.
    async fn tokens(&self, me: &Me) -> Result<Vec<TokenView>, String>;
    /// The queue's health (the caller checks that the reader sees everything).
    async fn queue_health(&self) -> Result<crate::queue_health::QueueHealth, String>;
}

/// The handle the server provides as context.
#[cfg(feature = "ssr")]
pub type Store = std::sync::Arc<dyn PageData>;

#[cfg(feature = "ssr")]
fn store() -> Result<Store, ServerFnError> {
    use_context::<Store>().ok_or_else(|| ServerFnError::new("the data store is not available"))
}

/// The person the request being answered comes from.
#[cfg(feature = "ssr")]
fn reader() -> Option<Me> {
    use_context::<http::request::Parts>().and_then(|parts| parts.extensions.get::<Me>().cloned())
}

/// Refuses a reader the function is not for, with `status` (the pages show the message).
#[cfg(feature = "ssr")]
fn refuse(status: http::StatusCode, message: &str) -> ServerFnError {
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(status);
    }
    ServerFnError::new(message)
}

/// The current state of one job.
#[server(prefix = "/rpc", endpoint = "job")]
pub async fn get_job(id: Uuid) -> Result<Option<JobView>, ServerFnError> {
    store()?
        .job(reader().as_ref(), id)
        .await
        .map_err(ServerFnError::new)
}

/// One job's history (runs, changes of status, chunks, what it waits for).
#[server(prefix = "/rpc", endpoint = "job_history")]
pub async fn get_job_history(
    id: Uuid,
) -> Result<Option<crate::history::JobHistory>, ServerFnError> {
    store()?
        .job_history(reader().as_ref(), id)
        .await
        .map_err(ServerFnError::new)
}

/// A page of the job list, for the query string of the `/jobs` page's URL.
#[server(prefix = "/rpc", endpoint = "jobs")]
pub async fn list_jobs(query: String) -> Result<JobPage, ServerFnError> {
    let query = crate::job_list::ListQuery::from_query_string(&query)
        .map_err(|message| refuse(http::StatusCode::BAD_REQUEST, &message))?;
    store()?
        .job_page(reader().as_ref(), &query)
        .await
        .map_err(ServerFnError::new)
}

/// Every dataset, for the dataset list page.
#[server(prefix = "/rpc", endpoint = "datasets")]
pub async fn list_datasets() -> Result<Vec<DatasetView>, ServerFnError> {
    store()?
        .datasets(reader().as_ref())
        .await
        .map_err(ServerFnError::new)
}

/// A dataset and its first rows (`owner`: someone else's, for admins and viewers).
#[server(prefix = "/rpc", endpoint = "dataset")]
pub async fn get_dataset(
    name: String,
    owner: Option<Uuid>,
) -> Result<Option<(DatasetView, Vec<Value>)>, ServerFnError> {
    store()?
        .dataset(reader().as_ref(), &name, owner, DATASET_PAGE_ROWS)
        .await
        .map_err(ServerFnError::new)
}

/// Who is signed in, for the header and the sign-in pages.
#[server(prefix = "/rpc", endpoint = "session")]
pub async fn get_session() -> Result<SessionView, ServerFnError> {
    Ok(store()?.session(reader()))
}

/// Every account, for the admin page.
#[server(prefix = "/rpc", endpoint = "users")]
pub async fn list_users() -> Result<Vec<UserView>, ServerFnError> {
    match reader() {
        Some(me) if me.role == crate::auth::Role::Admin => {
            store()?.users().await.map_err(ServerFnError::new)
        }
        _ => Err(refuse(
            http::StatusCode::FORBIDDEN,
            "Only admins can see the users.",
        )),
    }
}

/// The queue's health, for the `/admin` page: admins and viewers.
#[server(prefix = "/rpc", endpoint = "queue_health")]
pub async fn get_queue_health() -> Result<crate::queue_health::QueueHealth, ServerFnError> {
    match reader() {
        Some(me) if me.role.sees_everything() => {
            store()?.queue_health().await.map_err(ServerFnError::new)
        }
        _ => Err(refuse(
            http::StatusCode::FORBIDDEN,
            "Only admins and viewers can see the queue.",
        )),
    }
}

/// The reader's API tokens, for the account page.
#[server(prefix = "/rpc", endpoint = "tokens")]
pub async fn list_tokens() -> Result<Vec<TokenView>, ServerFnError> {
    match reader() {
        Some(me) if me.email.is_some() => store()?.tokens(&me).await.map_err(ServerFnError::new),
        _ => Err(refuse(
            http::StatusCode::FORBIDDEN,
            "Only accounts have API tokens: sign up or sign in.",
        )),
    }
}
