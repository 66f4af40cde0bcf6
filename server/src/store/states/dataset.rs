//! A dataset's life ([`DatasetState`]):
//!
//! ```text
//!           first import                  an import into it completes
//!  (none) ──────────────▶ provisional ─────────────────────────────────▶ ready
//!     │                        │  a new import (or declaration) finds     │
//!     │ declared               │  no live job on it: taken over           │ deleted by its owner
//!     └──────────▶ ready       └────────────────▶ deleted ◀───────────────┘  (no live job on it)
//! ```
//!
//! Only `ready` datasets are seen (listed, browsed, exported, offered); a `deleted` one keeps
//! its row while jobs name it, and its rows go by a `delete` job. Taking over an abandoned
//! provisional dataset is what makes a failed import leave nothing: the next import of that
//! name starts a fresh dataset, with the header it brings.

use sqlx::{PgConnection, types::Json};
use uuid::Uuid;

use app::model::Column;

use super::{JobKind, JobStatus, LIVE};
use crate::spreadsheet::schema::Declared;

/// Where a dataset is in its life: the `dataset_state` type of PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "dataset_state", rename_all = "lowercase")]
pub enum DatasetState {
    /// Made by an import that has not completed: seen by nobody.
    Provisional,
    Ready,
    /// Its name is free; its rows are being (or have been) deleted.
    Deleted,
}

/// A dataset just `deleted`, with the rows a `delete` job has to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doomed {
    pub id: Uuid,
    pub row_count: i64,
}

/// A provisional dataset taken over: what goes, and the schema it was declared with, if it
/// was (the new dataset keeps it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    pub doomed: Doomed,
    pub declared: Option<Declared>,
}

/// Why a dataset could not be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotDeleted {
    /// The owner has no `ready` dataset with that name.
    NotFound,
    /// Jobs are waiting or running on it: they would write to, or read, a deleted dataset.
    Busy { live_jobs: i64 },
}

/// `provisional` → `deleted`, for `owner`'s provisional dataset of this name when no job is
/// waiting or running on it (what a failed, cancelled or abandoned import left). One that was
/// declared and holds no rows (a dry run's into a new dataset, or an import's that wrote
/// nothing) stays, for the new import to use as it is, unless the request declares the
/// dataset anew (`redeclaring`).
pub async fn take_over_abandoned(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
    redeclaring: bool,
) -> sqlx::Result<Option<Abandoned>> {
    let Some(found) = lock(conn, owner, name, DatasetState::Provisional).await? else {
        return Ok(None);
    };
    if live_jobs(conn, found.id).await? > 0 {
        return Ok(None);
    }
    if found.declared && found.row_count == 0 && !redeclaring {
        return Ok(None);
    }
    let doomed = Doomed {
        id: found.id,
        row_count: found.row_count,
    };
    let declared = sqlx::query!(
        r#"update datasets set state = $2 where id = $1
           returning declared, columns as "columns: Json<Vec<Column>>", key"#,
        doomed.id,
        DatasetState::Deleted as DatasetState,
    )
    .fetch_one(conn)
    .await?;
    Ok(Some(Abandoned {
        doomed,
        declared: declared.declared.then_some(Declared {
            columns: declared.columns.0,
            key: declared.key,
        }),
    }))
}

/// `ready` → `deleted`, for `owner`'s dataset of this name, unless a job is waiting or running
/// on it.
pub async fn delete(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
) -> sqlx::Result<Result<Doomed, NotDeleted>> {
    let Some(found) = lock(conn, owner, name, DatasetState::Ready).await? else {
        return Ok(Err(NotDeleted::NotFound));
    };
    let doomed = Doomed {
        id: found.id,
        row_count: found.row_count,
    };
    let live_jobs = live_jobs(conn, doomed.id).await?;
    if live_jobs > 0 {
        return Ok(Err(NotDeleted::Busy { live_jobs }));
    }
    mark_deleted(conn, doomed.id).await?;
    Ok(Ok(doomed))
}

/// `provisional` → `ready`, for the datasets of (real, not dry-run) imports that completed.
pub async fn ready_after(conn: &mut PgConnection, job_ids: &[Uuid]) -> sqlx::Result<()> {
    if job_ids.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "update datasets d set state = $3
         from jobs j
         where j.id = any($1) and d.id = j.dataset_id and j.kind = $4 and j.status = $5
           and not j.dry_run and d.state = $2",
        job_ids,
        DatasetState::Provisional as DatasetState,
        DatasetState::Ready as DatasetState,
        JobKind::Import as JobKind,
        JobStatus::Completed as JobStatus,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Holds the datasets of these jobs `for share` until the caller commits (after their jobs'
/// rows, the order chunk commits lock them in): a retry then sees whether they were deleted,
/// and a delete waits for the retry and counts its jobs live.
pub async fn hold_for_jobs(conn: &mut PgConnection, job_ids: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query!(
        "select 1 as held from datasets
         where id in (select dataset_id from jobs where id = any($1))
         order by id for share",
        job_ids,
    )
    .fetch_all(conn)
    .await?;
    Ok(())
}

/// Locks `owner`'s dataset of this name in `state` `for update`: a job being created on it
/// (which holds it `for share`) commits first, so [`live_jobs`], a later statement, sees it.
/// `state` is never `deleted` (a name is unique among the `live` datasets): saying `live` lets the
/// one plan of the statement read the unique index by name, instead of each create planning it
/// anew (`make bench ONLY=small`).
async fn lock(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
    state: DatasetState,
) -> sqlx::Result<Option<Locked>> {
    sqlx::query_as!(
        Locked,
        "select id, row_count, declared from datasets
         where owner = $1 and name = $2 and live and state = $3
         for update",
        owner,
        name,
        state as DatasetState,
    )
    .fetch_optional(conn)
    .await
}

/// A dataset as [`lock`] found it.
struct Locked {
    id: Uuid,
    row_count: i64,
    declared: bool,
}

async fn live_jobs(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from jobs where dataset_id = $1 and status = any($2)"#,
        id,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_one(conn)
    .await
}

async fn mark_deleted(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "update datasets set state = $2 where id = $1",
        id,
        DatasetState::Deleted as DatasetState,
    )
    .execute(conn)
    .await?;
    Ok(())
}
