//! The reaper: every heartbeat, one process at a time (a transaction-level advisory lock, so
//! it needs no leader election and survives any process dying) frees items whose lease
//! expired and queues a message for every item that is due and has none. So a killed
//! worker's chunk runs again about one lease later, a lost or spent message is replaced, a
//! retry's backoff ends in a run, and nothing depends on apalis's own recovery. It also ends
//! sealed batches whose children have ended. Every
//! `PRUNE_EVERY` it also applies retention ([`crate::store::retention`]), under its own lock.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{
    TaskError,
    queue::{self, Priority},
};
use crate::store::{
    jobs,
    leases::{self, Item},
    notify, retention,
};

/// Any constant shared by every Conveyor process; it names the reaper's advisory lock.
const REAPER_LOCK: i64 = 0x636f_6e76_6579_6f72; // "conveyor"

/// The retention round's advisory lock.
const PRUNE_LOCK: i64 = REAPER_LOCK + 1;

/// Messages queued per round at most, so one round stays one short transaction.
const BATCH: i64 = 1000;

/// How often retention runs (and once at start).
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// How long finished jobs' items, and their summaries, are kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub items: Duration,
    pub jobs: Duration,
}

pub async fn run(
    pool: PgPool,
    every: Duration,
    lease: Duration,
    retention: Retention,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_prune = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(err) = round(&pool, lease).await {
            tracing::warn!("reaper round failed (the next one retries): {err}");
        }
        if tokio::time::Instant::now() >= next_prune {
            next_prune += PRUNE_EVERY;
            if let Err(err) = prune(&pool, retention).await {
                tracing::warn!("retention round failed (the next one retries): {err}");
            }
        }
    }
}

/// One retention round, unless another process's is under way.
pub async fn prune(pool: &PgPool, retention: Retention) -> sqlx::Result<retention::Pruned> {
    let mut tx = pool.begin().await?;
    let ours: bool = sqlx::query_scalar("select pg_try_advisory_xact_lock($1)")
        .bind(PRUNE_LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !ours {
        return Ok(retention::Pruned::default());
    }
    let pruned = retention::prune(&mut tx, retention.items, retention.jobs).await?;
    tx.commit().await?;
    if !pruned.is_empty() {
        tracing::info!(?pruned, "retention");
    }
    Ok(pruned)
}

/// One round, in one transaction; does nothing if another process's round is under way.
async fn round(pool: &PgPool, lease: Duration) -> Result<(), TaskError> {
    let mut tx = pool.begin().await?;
    let ours: bool = sqlx::query_scalar("select pg_try_advisory_xact_lock($1)")
        .bind(REAPER_LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !ours {
        return Ok(());
    }
    let freed = leases::free_expired(
        &mut tx,
        "The worker running this stopped responding (it crashed, was killed, or lost the \
         database).",
    )
    .await?;
    for expired in &freed {
        tracing::warn!(item = ?expired.item(), attempts = expired.attempts, "lease expired");
        if expired.attempts < expired.max_attempts {
            continue;
        }
        let job_id = expired.job_id;
        let version = match expired.item() {
            Item::Chunk { .. } => jobs::add_failed_chunk(&mut tx, job_id).await?,
            Item::Step(_) => {
                let reason = format!(
                    "The job could not be processed: its worker stopped responding during each \
                     of {} attempts.",
                    expired.attempts
                );
                jobs::fail(&mut tx, job_id, &reason).await?
            }
        };
        if let Some(version) = version {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
    }
    for (job_id, version) in jobs::settle_batches(&mut tx).await? {
        notify::job_changed(&mut tx, job_id, version).await?;
    }
    let unqueued = leases::take_unqueued(&mut tx, lease, BATCH).await?;
    if !unqueued.is_empty() {
        tracing::info!(
            messages = unqueued.len(),
            "reaper queued items without a message"
        );
        queue::push(&mut tx, &unqueued, Priority::Rerun).await?;
    }
    tx.commit().await?;
    Ok(())
}
