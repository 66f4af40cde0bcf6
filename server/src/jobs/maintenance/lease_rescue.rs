//! Lease rescue: an item whose worker stopped renewing its lease (killed, machine gone,
//! stalled) is freed, so another worker runs it about one lease later; one out of attempts
//! fails (a chunk counts against its job, a step fails the job). An item an external worker
//! claimed is freed the same way (`store::assignments`).

use sqlx::PgPool;

use crate::{
    jobs::TaskError,
    store::{
        assignments,
        history::{self, WORKER_LOST},
        leadership::{self, Duty},
        leases::{self, Item},
        notify, states,
    },
};

/// The failure an item of an external worker records when its lease runs out.
const ITEM_LOST: &str = "The worker stopped sending heartbeats: its lease expired.";

/// One round, in one transaction; nothing when another process leads it.
pub async fn round(pool: PgPool) -> Result<(), TaskError> {
    let mut tx = pool.begin().await?;
    if !leadership::lead(&mut tx, Duty::LeaseRescue).await? {
        return Ok(());
    }
    let freed = leases::free_expired(&mut tx, WORKER_LOST).await?;
    history::lose_runs(&mut tx, &freed, WORKER_LOST).await?;
    let (ready_types, item_jobs) = assignments::free_expired(&mut tx, ITEM_LOST).await?;
    for job_type in &ready_types {
        notify::items_ready(&mut tx, job_type).await?;
    }
    for (job_id, version) in item_jobs {
        notify::job_changed(&mut tx, job_id, version).await?;
    }
    let rescued = freed.len();
    for expired in freed {
        tracing::warn!(item = ?expired.item(), attempts = expired.attempts, "lease expired");
        if expired.attempts < expired.max_attempts {
            continue;
        }
        let job_id = expired.job_id;
        let version = match expired.item() {
            Item::Chunk { .. } => states::job::add_failed_chunk(&mut tx, job_id).await?,
            Item::Step(_) => {
                let reason = format!(
                    "The job could not be processed: its worker stopped responding during each \
                     of {} attempts.",
                    expired.attempts
                );
                states::job::fail(&mut tx, job_id, &reason, None).await?
            }
        };
        if let Some(version) = version {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
    }
    tx.commit().await?;
    crate::telemetry::leases_rescued(rescued);
    Ok(())
}
