//! How pages get job data on first render. The server renders every page with the job's current
//! state (so a reload or a browser without JS shows the truth); these server functions read it
//! through [`JobsReader`], an interface the `server` crate implements and hands in as Leptos
//! context. That keeps sqlx and tokio out of this crate, which also compiles to wasm.

use leptos::prelude::*;
use uuid::Uuid;

use crate::model::JobView;

/// Read access to jobs, implemented by the server over PostgreSQL.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait JobsReader: Send + Sync {
    /// One job, or `None` when no job has that id.
    async fn job(&self, id: Uuid) -> Result<Option<JobView>, String>;
    /// The newest jobs first.
    async fn recent_jobs(&self, limit: i64) -> Result<Vec<JobView>, String>;
}

/// The handle the server provides as context.
#[cfg(feature = "ssr")]
pub type Jobs = std::sync::Arc<dyn JobsReader>;

#[cfg(feature = "ssr")]
fn jobs() -> Result<Jobs, ServerFnError> {
    use_context::<Jobs>().ok_or_else(|| ServerFnError::new("the job store is not available"))
}

/// The current state of one job.
#[server(prefix = "/rpc", endpoint = "job")]
pub async fn get_job(id: Uuid) -> Result<Option<JobView>, ServerFnError> {
    jobs()?.job(id).await.map_err(ServerFnError::new)
}

/// The newest jobs, for the job list page.
#[server(prefix = "/rpc", endpoint = "jobs")]
pub async fn list_jobs() -> Result<Vec<JobView>, ServerFnError> {
    jobs()?.recent_jobs(100).await.map_err(ServerFnError::new)
}
