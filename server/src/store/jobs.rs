//! Jobs: creation, reads for the API and pages, and every status transition.

use app::model::{CallbackView, FailedPart, JobKind, JobStatus, JobView};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

use crate::{auth::Sees, spreadsheet::csv::RowFormat};

/// `select … from jobs` with what a [`JobView`] shows, followed by the given SQL.
macro_rules! select_view {
    ($rest:literal) => {
        concat!(
            "select j.id, j.kind, j.status, j.item_count, j.item_progress, j.rows_ok, j.rows_failed, j.rows_updated,
           j.chunks_total, j.chunks_done, j.version, j.error, j.created_at, j.started_at,
           j.finished_at, coalesce(u.filename, j.source_filename) as filename,
           d.name as dataset, j.format,
           j.result_upload_id is not null as has_result,
           extract(epoch from coalesce(j.finished_at, now()) - j.started_at)::float8
               as elapsed_seconds,
           (select coalesce(json_agg(json_build_object('part', c.chunk_no + 1,
                        'firstRow', c.first_row, 'rowCount', c.row_count,
                        'attempts', c.attempts, 'error', c.last_error) order by c.chunk_no), '[]')
            from (select * from job_chunks where job_id = j.id and state = 'failed'
                  order by chunk_no limit 100) c) as failed_parts,
           j.parent_id, j.owner, o.email as owner_email,
           case when j.callback_url is not null then json_build_object(
               'url', j.callback_url,
               'state', case when j.callback_delivered_at is not null then 'delivered'
                             when j.callback_gave_up_at is not null then 'gaveUp'
                             when j.finished_at is null then 'waiting'
                             else 'sending' end,
               'nextAt', case when j.callback_delivered_at is null
                                   and j.callback_gave_up_at is null then j.callback_next_at end,
               'tries', (select coalesce(json_agg(json_build_object('attempt', a.attempt,
                                'at', a.at, 'status', a.status, 'error', a.error)
                                order by a.attempt), '[]')
                         from (select * from callback_attempts where job_id = j.id
                               order by attempt desc limit 20) a)) end as callback
    from jobs j
    join users o on o.id = j.owner
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
    failed_parts: Json<Vec<FailedPart>>,
    parent_id: Option<Uuid>,
    owner: Uuid,
    owner_email: Option<String>,
    callback: Option<Json<CallbackView>>,
}

/// A callback URL as the job's view shows it: its origin only, as the rest often holds a secret
/// (a webhook's token in its path or query), and the job's viewers need not be its owner. The
/// receiver still gets the whole URL.
fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) if url.path() == "/" && url.query().is_none() => url.origin().ascii_serialization(),
        Ok(url) => format!("{}/…", url.origin().ascii_serialization()),
        Err(_) => String::new(),
    }
}

impl From<ViewRow> for JobView {
    fn from(row: ViewRow) -> Self {
        JobView {
            id: row.id,
            job_type: if row.kind == "export" {
                JobKind::Export
            } else if row.kind == "batch" {
                JobKind::Batch
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
            failed_parts: row.failed_parts.0,
            parent_id: row.parent_id,
            owner: row.owner,
            owner_email: row.owner_email,
            callback: row.callback.map(|Json(mut callback)| {
                callback.url = shown_url(&callback.url);
                callback
            }),
        }
    }
}

/// What a request may set on a new job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Options {
    /// A repeated create with this key (same owner) returns the first job.
    pub dedupe_key: Option<String>,
    /// Jobs with the same key start one at a time, in creation order.
    pub serialize_key: Option<String>,
    /// The open batch the job belongs to.
    pub parent_id: Option<Uuid>,
    /// Where the job's final state is POSTed once it ends.
    pub callback_url: Option<String>,
    /// Attempts per chunk (and per step) before it fails; the table's default (5) when `None`.
    pub max_failures_per_item: Option<i32>,
    /// The job stops, failed, once more rows than this failed…
    pub max_row_errors: Option<i64>,
    /// …or more than this percentage of its rows.
    pub max_row_errors_percent: Option<f64>,
    /// Not stored: the most jobs the owner may have waiting or running, checked as this one is
    /// created (`config::LimitArgs`).
    pub active_jobs_limit: Option<i64>,
}

/// A job just inserted, and the ticket of its first message (see [`super::leases`]).
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct NewJob {
    pub id: Uuid,
    pub ticket: Uuid,
}

/// What only one kind of job has.
#[derive(Debug, Clone, Copy)]
pub enum NewKind<'a> {
    /// The upload to read and, for a workbook, the sheet.
    Import {
        upload_id: Uuid,
        sheet: Option<&'a str>,
    },
    /// The file format to write.
    Export { format: &'a str },
}

/// Inserts a new import or export job, `waiting`. `None` when the owner already has a job
/// with the same dedupe key.
pub async fn insert(
    conn: &mut PgConnection,
    owner: Uuid,
    dataset_id: Uuid,
    kind: NewKind<'_>,
    options: &Options,
) -> sqlx::Result<Option<NewJob>> {
    let (kind, upload_id, sheet, format) = match kind {
        NewKind::Import { upload_id, sheet } => ("import", Some(upload_id), sheet, None),
        NewKind::Export { format } => ("export", None, None, Some(format)),
    };
    sqlx::query_as(
        "insert into jobs (id, kind, owner, upload_id, dataset_id, sheet, format,
                           max_failures_per_item, max_row_errors, max_row_errors_percent,
                           dedupe_key, serialize_key, parent_id, callback_url)
         values ($1, $2, $3, $4, $5, $6, $7, coalesce($8, 5), $9, $10, $11, $12, $13, $14)
         on conflict (owner, dedupe_key) where dedupe_key is not null do nothing
         returning id, ticket",
    )
    .bind(Uuid::now_v7())
    .bind(kind)
    .bind(owner)
    .bind(upload_id)
    .bind(dataset_id)
    .bind(sheet)
    .bind(format)
    .bind(options.max_failures_per_item)
    .bind(options.max_row_errors)
    .bind(options.max_row_errors_percent)
    .bind(&options.dedupe_key)
    .bind(&options.serialize_key)
    .bind(options.parent_id)
    .bind(&options.callback_url)
    .fetch_optional(conn)
    .await
}

/// Inserts a batch: a parent job, `running` at once, that children join until it is sealed.
/// `None` as for [`insert`].
pub async fn insert_batch(
    conn: &mut PgConnection,
    owner: Uuid,
    options: &Options,
) -> sqlx::Result<Option<NewJob>> {
    sqlx::query_as(
        "insert into jobs (id, kind, owner, status, started_at, dedupe_key, callback_url)
         values ($1, 'batch', $2, 'running', now(), $3, $4)
         on conflict (owner, dedupe_key) where dedupe_key is not null do nothing
         returning id, ticket",
    )
    .bind(Uuid::now_v7())
    .bind(owner)
    .bind(&options.dedupe_key)
    .bind(&options.callback_url)
    .fetch_optional(conn)
    .await
}

/// Whether `id` is `owner`'s batch still taking children; holds it (against a concurrent
/// seal) until the transaction ends.
pub async fn lock_open_batch(conn: &mut PgConnection, id: Uuid, owner: Uuid) -> sqlx::Result<bool> {
    let open: Option<bool> = sqlx::query_scalar(
        "select true from jobs where id = $1 and owner = $2 and kind = 'batch'
             and status = 'running' and not sealed
         for share",
    )
    .bind(id)
    .bind(owner)
    .fetch_optional(conn)
    .await?;
    Ok(open.is_some())
}

/// A batch takes no more children; the new version, `None` unless it was an open batch that
/// `acts` covers.
pub async fn seal_batch(
    conn: &mut PgConnection,
    id: Uuid,
    acts: Sees,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set sealed = true, version = version + 1
         where id = $1 and kind = 'batch' and status = 'running' and not sealed
           and ($2::uuid is null or owner = $2)
         returning version",
    )
    .bind(id)
    .bind(acts.owner_filter())
    .fetch_optional(conn)
    .await
}

/// Ends every sealed batch whose children have all ended: `completed` if they all completed,
/// else `failed`. Returns each with its new version.
pub async fn settle_batches(conn: &mut PgConnection) -> sqlx::Result<Vec<(Uuid, i64)>> {
    sqlx::query_as(
        "update jobs p set finished_at = now(), version = version + 1,
             status = case when bad.n = 0 then 'completed' else 'failed' end,
             error = case when bad.n = 0 then null
                          else format('%s of its jobs did not complete.', bad.n) end
         from (select b.id, (select count(*) from jobs c
                             where c.parent_id = b.id and c.status <> 'completed') as n
               from jobs b
               where b.kind = 'batch' and b.status = 'running' and b.sealed
                 and not exists (select 1 from jobs c where c.parent_id = b.id
                                 and c.status in ('waiting', 'running'))
               for update of b skip locked) bad
         where p.id = bad.id
         returning p.id, p.version",
    )
    .fetch_all(conn)
    .await
}

/// Holds, until the transaction ends, the lock that orders creates with the same serialize
/// key: job sequence numbers (`seq`) then follow commit order, so "earlier" is well defined.
pub async fn lock_serialize_key(conn: &mut PgConnection, key: &str) -> sqlx::Result<()> {
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(key)
        .execute(conn)
        .await?;
    Ok(())
}

/// The owner's job made with this dedupe key.
pub async fn find_deduped(
    conn: &mut PgConnection,
    owner: Uuid,
    dedupe_key: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar("select id from jobs where owner = $1 and dedupe_key = $2")
        .bind(owner)
        .bind(dedupe_key)
        .fetch_optional(conn)
        .await
}

/// Whether `owner` now has more than `limit` jobs waiting or running, counted in the caller's
/// transaction (which just made one live) after waiting for any other transaction doing the
/// same for this owner: so racing creates cannot all pass.
pub async fn over_active_limit(
    conn: &mut PgConnection,
    owner: Uuid,
    limit: i64,
) -> sqlx::Result<bool> {
    sqlx::query("select pg_advisory_xact_lock(hashtextextended('active jobs:' || $1::text, 0))")
        .bind(owner)
        .execute(&mut *conn)
        .await?;
    let active: i64 = sqlx::query_scalar(
        "select count(*) from jobs where owner = $1 and status in ('waiting', 'running')",
    )
    .bind(owner)
    .fetch_one(&mut *conn)
    .await?;
    Ok(active > limit)
}

/// Whose job it is.
pub async fn owner_of(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Uuid> {
    sqlx::query_scalar("select owner from jobs where id = $1")
        .bind(id)
        .fetch_one(conn)
        .await
}

/// The job with this id, if `sees` covers it.
pub async fn find(pool: &PgPool, id: Uuid, sees: Sees) -> sqlx::Result<Option<JobView>> {
    sqlx::query_as::<_, ViewRow>(select_view!(
        "where j.id = $1 and ($2::uuid is null or j.owner = $2)"
    ))
    .bind(id)
    .bind(sees.owner_filter())
    .fetch_optional(pool)
    .await
    .map(|row| row.map(JobView::from))
}

/// The jobs with these ids that `sees` covers.
pub async fn find_many(pool: &PgPool, ids: &[Uuid], sees: Sees) -> sqlx::Result<Vec<JobView>> {
    sqlx::query_as::<_, ViewRow>(select_view!(
        "where j.id = any($1) and ($2::uuid is null or j.owner = $2)"
    ))
    .bind(ids)
    .bind(sees.owner_filter())
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().map(JobView::from).collect())
}

/// The jobs `sees` covers, newest first; `before` continues a page after the job with that id
/// (keyset paging).
pub async fn recent(
    pool: &PgPool,
    sees: Sees,
    limit: i64,
    before: Option<Uuid>,
) -> sqlx::Result<Vec<JobView>> {
    sqlx::query_as::<_, ViewRow>(select_view!(
        "where ($3::uuid is null or j.owner = $3)
           and ($2::uuid is null
                or (j.created_at, j.id) < (select created_at, id from jobs
                                           where id = $2 and ($3::uuid is null or owner = $3)))
         order by j.created_at desc, j.id desc
         limit $1"
    ))
    .bind(limit)
    .bind(before)
    .bind(sees.owner_filter())
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().map(JobView::from).collect())
}

/// What the workers need to know about an import job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImportJob {
    pub status: String,
    /// Orders this import's rows after earlier imports' (see [`super::datasets::position`]).
    pub seq: i64,
    pub sealed: bool,
    pub owner: Uuid,
    pub upload_id: Uuid,
    pub dataset_id: Uuid,
    pub sheet: Option<String>,
    pub row_format: Option<sqlx::types::Json<RowFormat>>,
}

impl ImportJob {
    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running.as_str()
    }
}

/// Records how a streamed sheet's chunks read their rows (see `jobs::sheet`), the sheet
/// chosen and, until the plan is sealed with the real count, the rows the sheet says it has
/// (so progress shows a percentage), before its first chunk is written.
pub async fn set_format(
    conn: &mut PgConnection,
    id: Uuid,
    format: &RowFormat,
    sheet: &str,
    declared_rows: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query(
        "update jobs set row_format = $2, sheet = $3, item_count = coalesce($4, item_count)
         where id = $1 and status = 'running' and not sealed",
    )
    .bind(id)
    .bind(sqlx::types::Json(format))
    .bind(sheet)
    .bind(declared_rows)
    .execute(conn)
    .await?;
    Ok(())
}

macro_rules! import_job_columns {
    () => {
        "select status, seq, sealed, owner, upload_id, dataset_id, sheet, row_format from jobs"
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
             attempts = 0, last_error = null, version = version + 1
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
    /// Every chunk of an export's sealed plan is done: its file can be assembled.
    pub finish_export: bool,
}

/// Adds a finished chunk to the counters of a running job, then fails the job if its rows in
/// error passed its limit, or else ends it if this was the last chunk of a sealed import.
/// `None` when the job is not running.
pub async fn add_chunk(
    conn: &mut PgConnection,
    id: Uuid,
    counts: ChunkCounts,
) -> sqlx::Result<Option<ChunkAdded>> {
    let added: Option<ChunkAdded> = sqlx::query_as(
        "update jobs set
             item_progress = item_progress + $2 + $3,
             rows_ok = rows_ok + $2,
             rows_failed = rows_failed + $3,
             rows_updated = rows_updated + $4,
             chunks_done = chunks_done + 1,
             version = version + 1
         where id = $1 and status = 'running'
         returning version, kind = 'export' and sealed and chunks_failed = 0
             and chunks_done = chunks_total as finish_export",
    )
    .bind(id)
    .bind(counts.ok)
    .bind(counts.failed)
    .bind(counts.updated)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(added) = added else {
        return Ok(None);
    };
    let stopped = if counts.failed > 0 {
        stop_over_row_error_limit(conn, id).await?
    } else {
        None
    };
    let ended = match stopped {
        Some(version) => Some(version),
        None => end_if_all_chunks_ended(conn, id).await?,
    };
    Ok(Some(match ended {
        Some(version) => ChunkAdded {
            version,
            finish_export: false,
        },
        None => added,
    }))
}

/// Ends a running job that is over its row error limit (failed), or whose sealed plan's chunks
/// have all ended; the new version if it ended. For a plan sealed after its chunks were done
/// (a streamed sheet).
pub async fn settle(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    match stop_over_row_error_limit(conn, id).await? {
        Some(version) => Ok(Some(version)),
        None => end_if_all_chunks_ended(conn, id).await,
    }
}

/// Fails a running job whose rows in error passed its limit; the new version if it did.
async fn stop_over_row_error_limit(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set status = 'failed', finished_at = now(), version = version + 1,
             error = format('Stopped after %s rows with errors, more than the limit of %s. '
                            'Fix the file and import it again.',
                            rows_failed,
                            case when max_row_errors is not null
                                      and rows_failed > max_row_errors
                                 then max_row_errors::text
                                 else max_row_errors_percent::text || '% of the rows' end)
         where id = $1 and status = 'running'
           and (rows_failed > max_row_errors
                -- A streamed sheet's count is only what it declares until it is sealed.
                or sealed and rows_failed * 100.0 > max_row_errors_percent * item_count)
         returning version",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Ends a running job once every chunk of its sealed plan is done or failed: an import is
/// `completed`, any job with a failed chunk `failed` (an export whose chunks are all done goes
/// on to its finish step). The new version if it ended.
async fn end_if_all_chunks_ended(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "update jobs set
             status = case when chunks_failed = 0 then 'completed' else 'failed' end,
             error = case when chunks_failed = 0 then error
                          else format('%s of %s parts could not be processed (each was tried %s '
                                      'times); see the parts below. Retry the job to run them '
                                      'again.', chunks_failed, chunks_total,
                                      max_failures_per_item) end,
             finished_at = now(), version = version + 1
         where id = $1 and status = 'running' and sealed
           and chunks_done + chunks_failed = chunks_total
           and (kind = 'import' or chunks_failed > 0)
         returning version",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Counts a chunk that ran out of attempts; the job ends (failed) when it was the last one
/// outstanding. The new version, `None` when the job is not running.
pub async fn add_failed_chunk(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    let counted: Option<i64> = sqlx::query_scalar(
        "update jobs set chunks_failed = chunks_failed + 1, version = version + 1
         where id = $1 and status = 'running'
         returning version",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    match counted {
        Some(version) => Ok(Some(
            end_if_all_chunks_ended(conn, id).await?.unwrap_or(version),
        )),
        None => Ok(None),
    }
}

/// `waiting`/`running` → `cancelled`, with a batch's live children, if `acts` covers the job.
/// Every job cancelled, with its new version; none when the job had ended.
pub async fn cancel(
    conn: &mut PgConnection,
    id: Uuid,
    acts: Sees,
) -> sqlx::Result<Vec<(Uuid, i64)>> {
    sqlx::query_as(
        "update jobs set status = 'cancelled', finished_at = now(), version = version + 1
         where status in ('waiting', 'running')
           and (id = $1 and ($2::uuid is null or owner = $2)
                or parent_id = $1 and exists (
                    select 1 from jobs p where p.id = $1 and p.status in ('waiting', 'running')
                        and ($2::uuid is null or p.owner = $2)))
         returning id, version",
    )
    .bind(id)
    .bind(acts.owner_filter())
    .fetch_all(conn)
    .await
}

/// A failed or cancelled job (whose items are still kept) runs again: what it had not done (its
/// failed and pending chunks, or its plan) gets fresh attempts; the reaper queues them. Rows
/// already written stay. The new version, `None` when the job was not failed or cancelled, or
/// `acts` does not cover it.
pub async fn retry(conn: &mut PgConnection, id: Uuid, acts: Sees) -> sqlx::Result<Option<i64>> {
    // Chunks before the job, the order a committing chunk takes them in: no deadlock.
    sqlx::query(
        "select 1 from job_chunks where job_id = $1 and state <> 'done'
             and exists (select 1 from jobs where id = $1 and ($2::uuid is null or owner = $2))
         order by chunk_no
         for update",
    )
    .bind(id)
    .bind(acts.owner_filter())
    .execute(&mut *conn)
    .await?;
    // Back to `waiting`: it starts again only when no earlier job with its serialize key is
    // live, and its plan step (which starts a planned job at once) goes first.
    let version: Option<i64> = sqlx::query_scalar(
        "update jobs set status = 'waiting',
             error = null, finished_at = null, chunks_failed = 0, attempts = 0,
             run_after = now(), last_error = null, lease_owner = null, lease_expires_at = null,
             version = version + 1
         where id = $1 and status in ('failed', 'cancelled') and items_pruned_at is null
           and kind <> 'batch' and ($2::uuid is null or owner = $2)
         returning version",
    )
    .bind(id)
    .bind(acts.owner_filter())
    .fetch_optional(&mut *conn)
    .await?;
    if version.is_some() {
        sqlx::query(
            "update job_chunks set state = 'pending', attempts = 0, run_after = now(),
                 last_error = null, lease_owner = null, lease_expires_at = null
             where job_id = $1 and state <> 'done'",
        )
        .bind(id)
        .execute(conn)
        .await?;
    }
    Ok(version)
}

/// What the workers need to know about an export job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExportJob {
    pub status: String,
    pub sealed: bool,
    pub owner: Uuid,
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

/// The file a completed export that `sees` covers produced, with the dataset's name and the
/// format.
pub async fn export_result(
    pool: &PgPool,
    id: Uuid,
    sees: Sees,
) -> sqlx::Result<Option<(Option<Uuid>, String, String)>> {
    sqlx::query_as(
        "select j.result_upload_id, d.name, j.format
         from jobs j join datasets d on d.id = j.dataset_id
         where j.id = $1 and j.kind = 'export' and ($2::uuid is null or j.owner = $2)",
    )
    .bind(id)
    .bind(sees.owner_filter())
    .fetch_optional(pool)
    .await
}
