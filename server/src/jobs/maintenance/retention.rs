//! Retention: what finished jobs leave behind is deleted after a while (see
//! `store::retention` for what goes when), in rounds of bounded batches.

use std::time::Duration;

use sqlx::PgPool;

use crate::store::{
    leadership::{self, Duty},
    retention::{self, Pruned},
};

/// How often a round runs (and once at start).
pub const EVERY: Duration = Duration::from_secs(600);

/// How long finished jobs' items, and their summaries, are kept.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    pub items: Duration,
    pub jobs: Duration,
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
