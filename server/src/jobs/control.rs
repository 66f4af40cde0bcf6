//! What people do to a running or finished job: cancel it (a batch with its children), retry
//! what it did not do, seal a batch. Each is one transition in one transaction with its
//! notifications; the workers notice a cancel at their next heartbeat, and maintenance
//! (`jobs::maintenance`) queues what a retry made due and ends a sealed batch whose children
//! have ended.

use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    auth::Sees,
    store::{jobs, notify, states},
};

/// What became of a request to cancel or retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The job is not in a state the request applies to.
    NotApplicable,
    NoSuchJob,
    /// A retry would give the job's owner more live jobs than `limit`.
    OverLimit {
        limit: i64,
    },
}

/// `waiting`/`running` → `cancelled`: no new chunk starts, running ones stop.
pub async fn cancel(pool: &PgPool, job_id: Uuid, acts: Sees) -> sqlx::Result<Outcome> {
    transition(pool, job_id, acts, Transition::Cancel).await
}

/// `failed`/`cancelled` → running again, for the chunks (or plan) not done, unless someone
/// retrying their own job (`acts` is [`Sees::OwnedBy`]) has `limit` jobs waiting or running
/// already.
pub async fn retry(
    pool: &PgPool,
    job_id: Uuid,
    acts: Sees,
    limit: Option<i64>,
) -> sqlx::Result<Outcome> {
    transition(pool, job_id, acts, Transition::Retry { limit }).await
}

/// A batch takes no more children; a job of a registered type no more items.
pub async fn seal(pool: &PgPool, job_id: Uuid, acts: Sees) -> sqlx::Result<Outcome> {
    transition(pool, job_id, acts, Transition::Seal).await
}

enum Transition {
    Cancel,
    Retry { limit: Option<i64> },
    Seal,
}

/// One transition of a job that `acts` covers (someone else's job is `NoSuchJob`).
async fn transition(
    pool: &PgPool,
    job_id: Uuid,
    acts: Sees,
    transition: Transition,
) -> sqlx::Result<Outcome> {
    let mut tx = pool.begin().await?;
    // Someone retrying their own job under a limit: their live jobs, counted under the lock
    // that orders creates and retries of theirs, taken before any job row as a bulk retry
    // takes it (so the two wait for each other rather than deadlock).
    let held = match (&transition, acts) {
        (Transition::Retry { limit: Some(limit) }, Sees::OwnedBy(owner)) => {
            jobs::hold_owners_jobs(&mut tx, owner).await?;
            Some((*limit, jobs::live_jobs(&mut tx, owner).await?.limited))
        }
        _ => None,
    };
    // Every job changed, with its new version (a cancelled batch takes its children along).
    let this_job = |version: Option<i64>| version.map(|v| (job_id, v)).into_iter().collect();
    let changed: Vec<(Uuid, i64)> = match transition {
        Transition::Cancel => states::job::cancel(&mut tx, &[job_id], acts).await?,
        Transition::Retry { .. } => states::job::retry(&mut tx, &[job_id], acts).await?,
        Transition::Seal => match states::job::seal_batch(&mut tx, job_id, acts).await? {
            Some(version) => this_job(Some(version)),
            None => states::item_job::seal(&mut tx, job_id, acts).await?,
        },
    };
    if changed.is_empty() {
        tx.rollback().await?;
        return Ok(match jobs::find(pool, job_id, acts).await? {
            Some(_) => Outcome::NotApplicable,
            None => Outcome::NoSuchJob,
        });
    }
    if let Some((limit, active)) = held
        && active + changed.len() as i64 > limit
    {
        tx.rollback().await?;
        return Ok(Outcome::OverLimit { limit });
    }
    for (id, version) in changed {
        notify::job_changed(&mut tx, id, version).await?;
    }
    tx.commit().await?;
    Ok(Outcome::Done)
}
