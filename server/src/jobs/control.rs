//! What people do to a running or finished job: cancel it, or retry what it did not do.
//! Each is one transition in one transaction with its notification; the workers notice a
//! cancel at their next heartbeat, and the reaper queues what a retry made due.

use sqlx::PgPool;
use uuid::Uuid;

use crate::store::{jobs, notify};

/// What became of a request to cancel or retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The job is not in a state the request applies to.
    NotApplicable,
    NoSuchJob,
}

/// `waiting`/`running` → `cancelled`: no new chunk starts, running ones stop.
pub async fn cancel(pool: &PgPool, job_id: Uuid) -> sqlx::Result<Outcome> {
    transition(pool, job_id, Transition::Cancel).await
}

/// `failed`/`cancelled` → running again, for the chunks (or plan) not done.
pub async fn retry(pool: &PgPool, job_id: Uuid) -> sqlx::Result<Outcome> {
    transition(pool, job_id, Transition::Retry).await
}

enum Transition {
    Cancel,
    Retry,
}

async fn transition(pool: &PgPool, job_id: Uuid, transition: Transition) -> sqlx::Result<Outcome> {
    let mut tx = pool.begin().await?;
    let version = match transition {
        Transition::Cancel => jobs::cancel(&mut tx, job_id).await?,
        Transition::Retry => jobs::retry(&mut tx, job_id).await?,
    };
    let Some(version) = version else {
        tx.rollback().await?;
        return Ok(match jobs::find(pool, job_id).await? {
            Some(_) => Outcome::NotApplicable,
            None => Outcome::NoSuchJob,
        });
    };
    notify::job_changed(&mut tx, job_id, version).await?;
    tx.commit().await?;
    Ok(Outcome::Done)
}
