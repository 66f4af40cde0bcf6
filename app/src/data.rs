//! How pages get their data on first render. The server renders every page with the current
//! state (so a reload or a browser without JS shows the truth); these server functions read it
//! through [`PageData`], an interface the `server` crate implements over PostgreSQL and hands
//! in as Leptos context. That keeps sqlx and tokio out of this crate, which also compiles to
//! wasm.

use leptos::prelude::*;
use serde_json::Value;
use uuid::Uuid;

use crate::model::{DatasetView, JobView};

/// Rows a dataset page shows.
pub const DATASET_PAGE_ROWS: i64 = 20;

/// Read access for pages, implemented by the server.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait PageData: Send + Sync {
    /// One job, or `None` when no job has that id.
    async fn job(&self, id: Uuid) -> Result<Option<JobView>, String>;
    /// The newest jobs first.
    async fn recent_jobs(&self, limit: i64) -> Result<Vec<JobView>, String>;
    /// Every dataset, by name.
    async fn datasets(&self) -> Result<Vec<DatasetView>, String>;
    /// One dataset and its first rows, or `None` when no dataset has that name.
    async fn dataset(
        &self,
        name: &str,
        rows: i64,
    ) -> Result<Option<(DatasetView, Vec<Value>)>, String>;
}

/// The handle the server provides as context.
#[cfg(feature = "ssr")]
pub type Store = std::sync::Arc<dyn PageData>;

#[cfg(feature = "ssr")]
fn store() -> Result<Store, ServerFnError> {
    use_context::<Store>().ok_or_else(|| ServerFnError::new("the data store is not available"))
}

/// The current state of one job.
#[server(prefix = "/rpc", endpoint = "job")]
pub async fn get_job(id: Uuid) -> Result<Option<JobView>, ServerFnError> {
    store()?.job(id).await.map_err(ServerFnError::new)
}

/// The newest jobs, for the job list page.
#[server(prefix = "/rpc", endpoint = "jobs")]
pub async fn list_jobs() -> Result<Vec<JobView>, ServerFnError> {
    store()?.recent_jobs(100).await.map_err(ServerFnError::new)
}

/// Every dataset, for the dataset list page.
#[server(prefix = "/rpc", endpoint = "datasets")]
pub async fn list_datasets() -> Result<Vec<DatasetView>, ServerFnError> {
    store()?.datasets().await.map_err(ServerFnError::new)
}

/// A dataset and its first rows.
#[server(prefix = "/rpc", endpoint = "dataset")]
pub async fn get_dataset(name: String) -> Result<Option<(DatasetView, Vec<Value>)>, ServerFnError> {
    store()?
        .dataset(&name, DATASET_PAGE_ROWS)
        .await
        .map_err(ServerFnError::new)
}
