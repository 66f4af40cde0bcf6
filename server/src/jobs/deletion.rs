//! Deleting a dataset. At once it is `deleted` (seen nowhere, its name free for a new one:
//! `store::states::dataset`); a `delete` job then removes its rows, a batch of
//! [`BATCH_ROWS`] per transaction, each counted as progress: a dataset of any size goes with
//! bounded memory, short locks and a live progress bar, and a run stopped half way (killed,
//! lease lost) leaves only rows for the next run to remove.

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use app::model::JobView;

use super::{Engine, TaskError};
use crate::{
    auth::Sees,
    store::{
        datasets, jobs,
        jobs::{NewKind, Options},
        notify,
        queue::{self, Priority, TaskMsg},
        states::{
            self, JobStatus,
            dataset::{self, Doomed, NotDeleted},
        },
    },
};

/// Rows deleted per transaction: about 20 ms of work, so progress moves several times a
/// second and no transaction holds many locks.
pub const BATCH_ROWS: i64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("no dataset is named \"{0}\"")]
    NotFound(String),
    #[error(
        "\"{name}\" has {live_jobs} jobs waiting or running; cancel them, or let them end, \
         before deleting it"
    )]
    Busy { name: String, live_jobs: i64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Queue(#[from] apalis_postgres::Error),
}

/// Deletes `owner`'s dataset `name`; the job that removes its rows.
pub async fn request(pool: &sqlx::PgPool, owner: Uuid, name: &str) -> Result<JobView, DeleteError> {
    let mut tx = pool.begin().await?;
    // The lock the owner's creates and retries take first: the deletion and the jobs made
    // around it then count their places in the owner's turns in one order.
    jobs::hold_owners_jobs(&mut tx, owner).await?;
    let doomed = match dataset::delete(&mut tx, owner, name).await? {
        Ok(doomed) => doomed,
        Err(NotDeleted::NotFound) => return Err(DeleteError::NotFound(name.to_owned())),
        Err(NotDeleted::Busy { live_jobs }) => {
            return Err(DeleteError::Busy {
                name: name.to_owned(),
                live_jobs,
            });
        }
    };
    let job_id = queue(&mut tx, owner, doomed).await?;
    tx.commit().await?;
    Ok(jobs::find(pool, job_id, Sees::OwnedBy(owner))
        .await?
        .ok_or(sqlx::Error::RowNotFound)?)
}

/// Queues, in the caller's transaction, the `delete` job of a dataset just deleted.
pub async fn queue(
    conn: &mut sqlx::PgConnection,
    owner: Uuid,
    doomed: Doomed,
) -> Result<Uuid, DeleteError> {
    let kind = NewKind::Delete {
        rows: doomed.row_count,
    };
    let job = jobs::insert(
        conn,
        owner,
        Some(doomed.id),
        kind,
        &Options::default(),
        None,
    )
    .await?
    .ok_or(sqlx::Error::RowNotFound)?;
    let task = TaskMsg::DeleteRows { job_id: job.id };
    let turn = Priority::Turn {
        ahead: jobs::ahead(conn, job.id).await?,
    };
    queue::push(conn, &[(task, job.ticket)], turn).await?;
    Ok(job.id)
}

/// The `delete` job's one step: starts it, removes its dataset's rows batch by batch, and
/// completes it when none are left. Each batch locks the job first, so two runs take turns.
pub async fn run(engine: &Engine, job_id: Uuid, stop: &CancellationToken) -> Result<(), TaskError> {
    let mut after = -1;
    loop {
        let mut tx = engine.pool.begin().await?;
        let Some(job) = jobs::lock_delete_job(&mut tx, job_id).await? else {
            // Ended (completed by another run) or gone.
            return Ok(());
        };
        if job.status == JobStatus::Waiting
            && let Some(version) = states::job::start(&mut tx, job_id).await?
        {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
        let (deleted, last) =
            datasets::delete_rows(&mut tx, job.dataset_id, after, BATCH_ROWS).await?;
        after = last;
        let version = if deleted == 0 {
            states::job::complete_delete(&mut tx, job_id).await?
        } else {
            states::job::add_rows_deleted(&mut tx, job_id, deleted).await?
        };
        if let Some(version) = version {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
        if stop.is_cancelled() {
            tx.rollback().await?;
            return Err(TaskError::Stopped);
        }
        tx.commit().await?;
        if deleted == 0 {
            tracing::info!(%job_id, "dataset deleted");
            return Ok(());
        }
    }
}
