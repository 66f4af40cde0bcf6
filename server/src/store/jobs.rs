//! Jobs: creation, reads for the API and pages, and every status transition.

use app::model::{JobKind, JobStatus, JobView};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::spreadsheet::csv::RowFormat;

/// `select … from jobs` with what a [`JobView`] shows, followed by the given SQL.
macro_rules! select_view {
    ($rest:literal) => {
        concat!(
            "select j.id, j.kind, j.status, j.item_count, j.item_progress, j.rows_ok, j.rows_failed, j.rows_updated,
           j.chunks_total, j.chunks_done, j.version, j.error, j.created_at, j.started_at,
           j.finished_at, u.filename, d.name as dataset,
           extract(epoch from coalesce(j.finished_at, now()) - j.started_at)::float8
               as elapsed_seconds
    from jobs j
    left join uploads u on u.id = j.upload_id
    left join datasets d on d.id = j.dataset_id ",
            $rest
        )
    };
}

#[derive(sqlx::FromRow)]
struct ViewRow {
    id: Uuid,
    kind: String,
    status: String,
    item_count: Option<i64>,
    item_progress: i64,
    rows_ok: i64,
    rows_failed: i64,
    rows_updated: i64,
    chunks_total: i32,
    chunks_done: i32,
    version: i64,
    error: Option<String>,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    filename: Option<String>,
    dataset: Option<String>,
    elapsed_seconds: Option<f64>,
}

impl From<ViewRow> for JobView {
    fn from(row: ViewRow) -> Self {
        JobView {
            id: row.id,
            job_type: if row.kind == "export" {
                JobKind::Export
            } else {
                JobKind::Import
            },
            // The column's check constraint admits only the five words.
            status: JobStatus::parse(&row.status).unwrap_or(JobStatus::Failed),
            item_count: row.item_count,
            item_progress: row.item_progress,
            rows_ok: row.rows_ok,
            rows_failed: row.rows_failed,
            rows_updated: row.rows_updated,
            chunks_total: row.chunks_total,
            chunks_done: row.chunks_done,
            version: row.version,
            error: row.error,
            filename: row.filename,
            dataset: row.dataset,
            created_at: row.created_at,
            started_at: row.started_at,
            finished_at: row.finished_at,
            elapsed_seconds: row.elapsed_seconds,
        }
    }
}

/// Inserts a new import job, `waiting`.
pub async fn insert_import(
    conn: &mut PgConnection,
    owner: &str,
    upload_id: Uuid,
    dataset_id: Uuid,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query(
        "insert into jobs (id, kind, owner, upload_id, dataset_id) values ($1, 'import', $2, $3, $4)",
    )
    .bind(id)
    .bind(owner)
    .bind(upload_id)
    .bind(dataset_id)
    .execute(conn)
    .await?;
    Ok(id)
}

pub async fn find(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<JobView>> {
    sqlx::query_as::<_, ViewRow>(select_view!("where j.id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await
        .map(|row| row.map(JobView::from))
}

pub async fn find_many(pool: &PgPool, ids: &[Uuid]) -> sqlx::Result<Vec<JobView>> {
    sqlx::query_as::<_, ViewRow>(select_view!("where j.id = any($1)"))
        .bind(ids)
        .fetch_all(pool)
        .await
        .map(|rows| rows.into_iter().map(JobView::from).collect())
}

/// Newest first; `before` continues a page after the job with that id (keyset paging).
pub async fn recent(pool: &PgPool, limit: i64, before: Option<Uuid>) -> sqlx::Result<Vec<JobView>> {
    sqlx::query_as::<_, ViewRow>(select_view!(
        "where $2::uuid is null
            or (j.created_at, j.id) < (select created_at, id from jobs where id = $2)
         order by j.created_at desc, j.id desc
         limit $1"
    ))
    .bind(limit)
    .bind(before)
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().map(JobView::from).collect())
}

/// What the workers need to know about an import job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImportJob {
    pub status: String,
    pub sealed: bool,
    pub upload_id: Uuid,
    pub dataset_id: Uuid,
    pub row_format: Option<sqlx::types::Json<RowFormat>>,
}

impl ImportJob {
    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running.as_str()
    }
}

pub async fn import_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ImportJob>> {
    sqlx::query_as(
        "select status, sealed, upload_id, dataset_id, row_format from jobs
         where id = $1 and kind = 'import'",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Locks the job row for the rest of the transaction and returns it.
pub async fn lock_import_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ImportJob>> {
    sqlx::query_as(
        "select status, sealed, upload_id, dataset_id, row_format from jobs
         where id = $1 and kind = 'import' for update",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// `waiting` → `running`; the new version, or `None` when the job was not waiting.
pub async fn start(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set status = 'running', started_at = now(), version = version + 1
         where id = $1 and status = 'waiting'
         returning version",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// `waiting`/`running` → `failed` with a reason for people; `None` when already finished.
pub async fn fail(conn: &mut PgConnection, id: Uuid, reason: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set status = 'failed', error = $2, finished_at = now(), version = version + 1
         where id = $1 and status in ('waiting', 'running')
         returning version",
    )
    .bind(id)
    .bind(reason)
    .fetch_optional(conn)
    .await
}

/// Records the plan of a running job: how its rows are read, its row and chunk counts (never
/// zero: a file without rows fails at planning). Returns the new version.
pub async fn seal(
    conn: &mut PgConnection,
    id: Uuid,
    format: &RowFormat,
    item_count: i64,
    chunks_total: i32,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set sealed = true, row_format = $2, item_count = $3, chunks_total = $4,
             version = version + 1
         where id = $1 and status = 'running' and not sealed
         returning version",
    )
    .bind(id)
    .bind(sqlx::types::Json(format))
    .bind(item_count)
    .bind(chunks_total)
    .fetch_optional(conn)
    .await
}

/// What a chunk did, for the job's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Good rows: imported, whether new or replacing a row with the same key.
    pub ok: i64,
    /// Of `ok`, rows whose key was already there (in the dataset, or earlier in the file).
    pub updated: i64,
    pub failed: i64,
}

/// Adds a finished chunk to the counters of a running job, completing the job when this was the
/// last chunk of a sealed plan. Returns the new version, or `None` when the job is not running.
pub async fn add_chunk(
    conn: &mut PgConnection,
    id: Uuid,
    counts: ChunkCounts,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set
             item_progress = item_progress + $2 + $3,
             rows_ok = rows_ok + $2,
             rows_failed = rows_failed + $3,
             rows_updated = rows_updated + $4,
             chunks_done = chunks_done + 1,
             status = case when sealed and chunks_done + 1 = chunks_total
                           then 'completed' else status end,
             finished_at = case when sealed and chunks_done + 1 = chunks_total
                                then now() end,
             version = version + 1
         where id = $1 and status = 'running'
         returning version",
    )
    .bind(id)
    .bind(counts.ok)
    .bind(counts.failed)
    .bind(counts.updated)
    .fetch_optional(conn)
    .await
}
