//! All SQL, one module per concern. Callers get domain types back, never rows.
//!
//! Every change of a job's status or a chunk's state is in [`states`], and names the state it
//! expects, so a late or duplicated message can never move a job that has moved on. Every use
//! of apalis's own tables is in [`queue`].

pub mod assignments;
pub mod audit;
pub mod callbacks;
pub mod chunks;
pub mod datasets;
pub mod endings;
pub mod errors;
pub mod exports;
pub mod history;
pub mod items;
pub mod job_counts;
pub mod job_list;
pub mod job_types;
pub mod jobs;
pub mod leadership;
pub mod leases;
pub mod notify;
pub mod processes;
pub mod queue;
pub mod queue_health;
pub mod retention;
pub mod sessions;
pub mod states;
pub mod uploads;
pub mod users;
pub mod worker_tokens;

/// The database's clock: the one `now()` stamps rows with (the processes' clocks may differ).
pub async fn now(pool: &sqlx::PgPool) -> sqlx::Result<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar!(r#"select now() as "now!""#)
        .fetch_one(pool)
        .await
}
