//! Re-queueing: every item that is due and free but has no live message (never queued, its
//! message lost or spent, or its retry's backoff over) gets one. So nothing depends on apalis's
//! own recovery, and a backlog is never queued twice.

use std::time::Duration;

use sqlx::PgPool;

use crate::{
    jobs::TaskError,
    store::{
        leadership::{self, Duty},
        leases, queue,
    },
};

/// Messages queued per round at most, so one round stays one short transaction.
const BATCH: i64 = 1000;

/// One round, in one transaction; nothing when another process leads it. A message taken by a
/// worker within `lease` still counts as live.
pub async fn round(pool: PgPool, lease: Duration) -> Result<(), TaskError> {
    let mut tx = pool.begin().await?;
    if !leadership::lead(&mut tx, Duty::Requeue).await? {
        return Ok(());
    }
    let unqueued = leases::take_unqueued(&mut tx, lease, BATCH).await?;
    if !unqueued.is_empty() {
        tracing::info!(messages = unqueued.len(), "queued items without a message");
        queue::push_ranked(&mut tx, unqueued).await?;
    }
    tx.commit().await?;
    Ok(())
}
