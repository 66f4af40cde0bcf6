//! The task messages and how they are queued. Messages carry ids only; everything else is read
//! from our tables when the task runs, so a stale or duplicated message is harmless.

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

/// The apalis queue all Conveyor tasks go through.
pub const QUEUE: &str = "conveyor";

/// Deliveries of one message before apalis gives up on it. Our own attempt count (see
/// [`crate::store::leases`]) is what limits runs; this only bounds apalis's redeliveries of a
/// message whose item is already leased or done.
pub const MAX_ATTEMPTS: usize = 25;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "camelCase")]
pub enum TaskMsg {
    Plan { job_id: Uuid },
    Chunk { job_id: Uuid, chunk_no: i32 },
    ExportPlan { job_id: Uuid },
    ExportChunk { job_id: Uuid, chunk_no: i32 },
    ExportFinish { job_id: Uuid },
}

/// Which messages apalis hands out first (it fetches by priority, then by age).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    New = 0,
    /// Queued by the reaper: a dead worker's chunk, a retry after its backoff, a lost message.
    /// Work already under way goes before the backlog, so a crash costs about one lease,
    /// whatever is queued behind it.
    Rerun = 1,
}

/// Queues tasks inside the caller's transaction: they exist exactly when its changes commit.
/// Each goes with its item's ticket (see [`crate::store::leases`]), its idempotency key.
pub async fn push(
    conn: &mut PgConnection,
    tasks: &[(TaskMsg, Uuid)],
    priority: Priority,
) -> Result<(), apalis_postgres::Error> {
    let tasks = tasks
        .iter()
        .map(|(task, ticket)| {
            let bytes = serde_json::to_vec(task).expect("task messages always serialize");
            apalis::prelude::TaskBuilder::new(bytes)
                .max_attempts(MAX_ATTEMPTS)
                .idempotency_key(ticket.to_string())
                .priority(priority as usize)
                .build()
        })
        .collect();
    apalis_postgres::queries::push_tasks(conn, QUEUE, tasks).await
}
