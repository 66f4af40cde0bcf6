//! The `job_progress` channel: every change to a job sends `{"id","version"}` in the same
//! transaction as the change, so listeners hear of it exactly when it becomes visible.
//! Payloads carry ids only (NOTIFY's 8 kB limit); readers fetch the row.

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

pub const CHANNEL: &str = "job_progress";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobChanged {
    pub id: Uuid,
    pub version: i64,
}

pub async fn job_changed(conn: &mut PgConnection, id: Uuid, version: i64) -> sqlx::Result<()> {
    let payload = serde_json::to_string(&JobChanged { id, version })
        .expect("a uuid and an integer always serialize");
    sqlx::query("select pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload)
        .execute(conn)
        .await?;
    Ok(())
}
