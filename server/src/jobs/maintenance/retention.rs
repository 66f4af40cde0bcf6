//! Retention: what finished jobs leave behind is deleted after a while (see
//! `store::retention` for what goes when), in rounds of bounded batches.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::store::{
    leadership::{self, Duty},
    retention::{self, Pruned},
};

/// How often retention runs (and once at start).
pub const EVERY: Duration = Duration::from_secs(600);

/// The pause between rounds while a backlog is worked off: each round's locks are let go, and
/// the rest of the work gets the database in between.
const AGAIN_AFTER: Duration = Duration::from_millis(100);

/// How long finished jobs' items, and their summaries, are kept.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    pub items: Duration,
    pub jobs: Duration,
}

/// Rounds one after the other while the last says more is left (a round takes at most a
/// hundred jobs' items: one every [`EVERY`] alone would fall behind any deployment finishing
/// more than 14,400 jobs a day), until `stop`; what they deleted in all.
pub async fn catch_up(pool: &PgPool, kept: Kept, stop: &CancellationToken) -> sqlx::Result<Pruned> {
    let mut pruned = round(pool, kept).await?;
    while pruned.more_left {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(AGAIN_AFTER) => {}
        }
        pruned += round(pool, kept).await?;
    }
    Ok(pruned)
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
