//! Batch settlement: a sealed batch ends once none of its children is waiting or running,
//! `completed` if they all completed, else `failed` (and its callback becomes due).

use sqlx::PgPool;

use crate::store::{
    leadership::{self, Duty},
    notify, states,
};

/// One round, in one transaction; nothing when another process leads it.
pub async fn round(pool: PgPool) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    if !leadership::lead(&mut tx, Duty::BatchSettlement).await? {
        return Ok(());
    }
    for (job_id, version) in states::job::settle_batches(&mut tx).await? {
        notify::job_changed(&mut tx, job_id, version).await?;
    }
    tx.commit().await?;
    Ok(())
}
