//! Retention: what finished jobs leave behind is deleted after a while (see
//! `store::retention` for what goes when), in rounds of bounded batches.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::store::{
    leadership::{self, Duty},
    retention::{self, Pruned},
};

/// How often retention runs (and once at start).
pub const EVERY: Duration = Duration::from_secs(600);

/// The least pause between rounds while a backlog is worked off; a round pauses at least as
/// long as it took, so that working off a backlog takes at most half of one connection's
/// time, and each round's locks are let go between.
const AGAIN_AFTER: Duration = Duration::from_millis(10);

/// How long finished jobs' items, and their summaries, are kept.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    pub items: Duration,
    pub jobs: Duration,
}

/// Rounds one after the other while the last says more is left, until `stop`; what they
/// deleted in all. A round takes the items of at most a hundred jobs (per registered type)
/// and a hundred files: one round every [`EVERY`] alone fell ever further behind a deployment
/// finishing more than 14,400 jobs a day.
pub async fn catch_up(pool: &PgPool, kept: Kept, stop: &CancellationToken) -> sqlx::Result<Pruned> {
    let mut pruned = Pruned::default();
    loop {
        let started = Instant::now();
        pruned += round(pool, kept).await?;
        if !pruned.more_left {
            return Ok(pruned);
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(pruned),
            () = tokio::time::sleep(started.elapsed().max(AGAIN_AFTER)) => {}
        }
    }
}

/// One round, in one transaction; nothing when another process leads it.
pub async fn round(pool: &PgPool, kept: Kept) -> sqlx::Result<Pruned> {
    let mut tx = pool.begin().await?;
    if !leadership::lead(&mut tx, Duty::Retention).await? {
        return Ok(Pruned::default());
    }
    let pruned = retention::prune(&mut tx, kept.items, kept.jobs).await?;
    tx.commit().await?;
    if !pruned.is_empty() {
        tracing::info!(?pruned, "retention");
    }
    Ok(pruned)
}
