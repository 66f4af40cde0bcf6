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
           j.finished_at, u.filename, d.name as dataset, j.format,
           j.result_upload_id is not null as has_result,
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
    format: Option<String>,
    has_result: bool,
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
            format: row.format,
            result_url: row
                .has_result
                .then(|| format!("/api/jobs/{}/result", row.id)),
            created_at: row.created_at,
            started_at: row.started_at,
            finished_at: row.finished_at,
            elapsed_seconds: row.elapsed_seconds,
        }
    }
}

/// Inserts a new import job, `waiting`; `sheet` names the workbook sheet to read.
pub async fn insert_import(
    conn: &mut PgConnection,
    owner: &str,
    upload_id: Uuid,
    dataset_id: Uuid,
    sheet: Option<&str>,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query(
        "insert into jobs (id, kind, owner, upload_id, dataset_id, sheet)
         values ($1, 'import', $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(owner)
    .bind(upload_id)
    .bind(dataset_id)
    .bind(sheet)
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
    pub owner: String,
    pub upload_id: Uuid,
    pub dataset_id: Uuid,
    pub sheet: Option<String>,
    /// The CSV converted from a workbook upload, once planning made it.
    pub data_upload_id: Option<Uuid>,
    pub header_row: Option<i64>,
    pub row_format: Option<sqlx::types::Json<RowFormat>>,
}

impl ImportJob {
    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running.as_str()
    }

    /// The CSV bytes the chunks read.
    pub fn csv_upload_id(&self) -> Uuid {
        self.data_upload_id.unwrap_or(self.upload_id)
    }
}

/// Records the CSV a workbook sheet became, unless another run of the plan did first
/// (`false`: the caller's copy is surplus).
pub async fn set_converted(
    conn: &mut PgConnection,
    id: Uuid,
    data_upload_id: Uuid,
    sheet: &str,
    header_row: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "update jobs set data_upload_id = $2, sheet = $3, header_row = $4
         where id = $1 and data_upload_id is null",
    )
    .bind(id)
    .bind(data_upload_id)
    .bind(sheet)
    .bind(header_row)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

macro_rules! import_job_columns {
    () => {
        "select status, sealed, owner, upload_id, dataset_id, sheet, data_upload_id, header_row,
                row_format
         from jobs"
    };
}

pub async fn import_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ImportJob>> {
    sqlx::query_as(concat!(
        import_job_columns!(),
        " where id = $1 and kind = 'import'"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Locks the job row for the rest of the transaction and returns it.
pub async fn lock_import_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ImportJob>> {
    sqlx::query_as(concat!(
        import_job_columns!(),
        " where id = $1 and kind = 'import' for update"
    ))
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

/// Records the plan of a running job: how an import reads its rows, its row and chunk counts
/// (an import has at least one row: a file without rows fails at planning; an export of an
/// empty dataset has none). Returns the new version.
pub async fn seal(
    conn: &mut PgConnection,
    id: Uuid,
    format: Option<&RowFormat>,
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
    .bind(format.map(sqlx::types::Json))
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

/// A chunk added to its job's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct ChunkAdded {
    pub version: i64,
    /// Every chunk of the sealed plan is done: an import is now complete, an export's file
    /// can be assembled.
    pub last: bool,
}

/// Adds a finished chunk to the counters of a running job, completing an import when this was
/// the last chunk of a sealed plan. `None` when the job is not running.
pub async fn add_chunk(
    conn: &mut PgConnection,
    id: Uuid,
    counts: ChunkCounts,
) -> sqlx::Result<Option<ChunkAdded>> {
    sqlx::query_as(
        "update jobs set
             item_progress = item_progress + $2 + $3,
             rows_ok = rows_ok + $2,
             rows_failed = rows_failed + $3,
             rows_updated = rows_updated + $4,
             chunks_done = chunks_done + 1,
             status = case when sealed and chunks_done + 1 = chunks_total and kind = 'import'
                           then 'completed' else status end,
             finished_at = case when sealed and chunks_done + 1 = chunks_total and kind = 'import'
                                then now() end,
             version = version + 1
         where id = $1 and status = 'running'
         returning version, sealed and chunks_done = chunks_total as last",
    )
    .bind(id)
    .bind(counts.ok)
    .bind(counts.failed)
    .bind(counts.updated)
    .fetch_optional(conn)
    .await
}

/// Inserts a new export job, `waiting`.
pub async fn insert_export(
    conn: &mut PgConnection,
    owner: &str,
    dataset_id: Uuid,
    format: &str,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query(
        "insert into jobs (id, kind, owner, dataset_id, format)
         values ($1, 'export', $2, $3, $4)",
    )
    .bind(id)
    .bind(owner)
    .bind(dataset_id)
    .bind(format)
    .execute(conn)
    .await?;
    Ok(id)
}

/// What the workers need to know about an export job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExportJob {
    pub status: String,
    pub sealed: bool,
    pub owner: String,
    pub dataset_id: Uuid,
    pub dataset: String,
    pub format: String,
    pub chunks_total: i32,
    pub chunks_done: i32,
    pub result_upload_id: Option<Uuid>,
}

impl ExportJob {
    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running.as_str()
    }
}

macro_rules! export_job_select {
    ($rest:literal) => {
        concat!(
            "select j.status, j.sealed, j.owner, j.dataset_id, d.name as dataset, j.format,
                    j.chunks_total, j.chunks_done, j.result_upload_id
             from jobs j join datasets d on d.id = j.dataset_id
             where j.id = $1 and j.kind = 'export'",
            $rest
        )
    };
}

pub async fn export_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ExportJob>> {
    sqlx::query_as(export_job_select!(""))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Locks the export's job row for the rest of the transaction and returns it.
pub async fn lock_export_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ExportJob>> {
    sqlx::query_as(export_job_select!(" for update of j"))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// A running export whose chunks are all done → `completed`, with its file. `None` when the
/// job is not in that state (another run of the task finished it, or it was cancelled).
pub async fn complete_export(
    conn: &mut PgConnection,
    id: Uuid,
    result_upload_id: Uuid,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set status = 'completed', result_upload_id = $2, finished_at = now(),
             version = version + 1
         where id = $1 and kind = 'export' and status = 'running' and sealed
           and chunks_done = chunks_total and result_upload_id is null
         returning version",
    )
    .bind(id)
    .bind(result_upload_id)
    .fetch_optional(conn)
    .await
}

/// The file a completed export produced, with the dataset's name and the format.
pub async fn export_result(
    pool: &PgPool,
    id: Uuid,
) -> sqlx::Result<Option<(Option<Uuid>, String, String)>> {
    sqlx::query_as(
        "select j.result_upload_id, d.name, j.format
         from jobs j join datasets d on d.id = j.dataset_id
         where j.id = $1 and j.kind = 'export'",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
}
