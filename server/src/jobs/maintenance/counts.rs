//! Job counts: folds the deltas the `jobs` triggers append into the per-owner counts and the
//! totals (`store::job_counts`), so the deltas a count reads stay few. Counts are exact whether
//! or not this has run; it only keeps reading them cheap.

use sqlx::PgPool;

use crate::store::{
    job_counts,
    leadership::{self, Duty},
};

/// One round, in one transaction; nothing when another process leads it.
pub async fn round(pool: PgPool) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    if !leadership::lead(&mut tx, Duty::CountFolding).await? {
        return Ok(());
    }
    job_counts::fold(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}
