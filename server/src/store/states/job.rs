//! Every change of a job's status (see the diagram in [`super`]), and the plan's seal. Each
//! returns the job's new version, or `None` (nothing changed) when the job was not in the state
//! the transition expects.

use sqlx::{PgConnection, types::Json};
use uuid::Uuid;

use super::{DatasetState, JobKind, JobStatus, LIVE, chunk, dataset};
use crate::{auth::Sees, spreadsheet::csv::RowFormat};
use app::model::Remedy;

use JobStatus::{Cancelled, Completed, Failed, Running, Waiting};

/// `waiting` → `running`.
pub async fn start(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set status = $2, started_at = now(), version = version + 1
         where id = $1 and status = $3
         returning version",
        id,
        Running as JobStatus,
        Waiting as JobStatus,
    )
    .fetch_optional(conn)
    .await
}

/// `waiting`/`running` → `failed`, with a reason for people (a step that cannot succeed
/// however often it is tried), and what fixes it when another attempt would fail the same way
/// (such a job is never retried: see [`retry`]).
pub async fn fail(
    conn: &mut PgConnection,
    id: Uuid,
    reason: &str,
    remedy: Option<&Remedy>,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set status = $3, error = $2, remedy = $5, finished_at = now(),
             version = version + 1
         where id = $1 and status = any($4)
         returning version",
        id,
        reason,
        Failed as JobStatus,
        &LIVE[..] as &[JobStatus],
        remedy.map(Json) as Option<Json<&Remedy>>,
    )
    .fetch_optional(conn)
    .await
}

/// A `running` job's plan is sealed: how an import reads its rows, its row and chunk counts (an
/// import has at least one row: a file without rows fails at planning; an export of an empty
/// dataset has none).
pub async fn seal(
    conn: &mut PgConnection,
    id: Uuid,
    format: Option<&RowFormat>,
    item_count: i64,
    chunks_total: i32,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set sealed = true, row_format = $2, item_count = $3, chunks_total = $4,
             attempts = 0, last_error = null, version = version + 1
         where id = $1 and status = $5 and not sealed
         returning version",
        id,
        format.map(Json) as _,
        item_count,
        chunks_total,
        Running as JobStatus,
    )
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkAdded {
    pub version: i64,
    /// Every chunk of an export's sealed plan is done: its file can be assembled.
    pub finish_export: bool,
    /// The count ended the job `completed` (its whole plan, no row in error): the caller
    /// makes its import's dataset `ready` with the rows it wrote (`datasets::record_written`).
    /// A job that ends as its last chunk is counted has its dataset made `ready` here.
    pub completed: bool,
}

/// The plan of an import that is one chunk, sealed by [`add_chunk`] as it counts that chunk.
#[derive(Debug, Clone, Copy)]
pub struct WholePlan<'a> {
    pub format: &'a RowFormat,
    pub item_count: i64,
    /// The owner of the plan's lease, which the same update gives back (as a chunk's is when
    /// the chunk is done).
    pub lease_owner: &'a str,
}

/// Adds a finished chunk to the counters of a `running` job; then the job is `failed` if its rows
/// in error passed its limit, or else `completed` if this was the last chunk of a sealed import.
///
/// With a `whole_plan`, the chunk is the one chunk of an import not sealed yet (`waiting`, or
/// `running` unsealed): the same update starts the job and seals its plan, as [`start`],
/// [`seal`] and the count one after the other would leave it, gives the plan's lease back,
/// and, when no row failed and the job has no child job, ends it `completed` too (its dataset
/// is made `ready` by the caller: [`ChunkAdded::completed`]). For a small
/// file imported at once (`jobs::plan`): each update of a job writes a new row version and,
/// when an indexed column changes, an entry in most of the table's indexes. Its start is then
/// its transaction's (when the plan took the job), its end the moment it ends; as nobody could
/// see it running, its history goes from `waiting` to `completed` in one step.
pub async fn add_chunk(
    conn: &mut PgConnection,
    id: Uuid,
    counts: ChunkCounts,
    whole_plan: Option<WholePlan<'_>>,
) -> sqlx::Result<Option<ChunkAdded>> {
    let added = add_chunks(conn, &[(id, counts, whole_plan)]).await?;
    Ok(added.and_then(|added| added.first().copied()))
}

/// [`add_chunk`] for the chunks of several jobs (a batch of small imports, each its whole
/// plan), their counters in one statement; each job's outcome in the order given, or `None`
/// if any job was not in the state its chunk expects (and the transaction must be rolled
/// back). Each job at most once, and several only when the caller holds their rows already
/// (the update takes them in no particular order).
pub async fn add_chunks(
    conn: &mut PgConnection,
    chunks: &[(Uuid, ChunkCounts, Option<WholePlan<'_>>)],
) -> sqlx::Result<Option<Vec<ChunkAdded>>> {
    let ids: Vec<Uuid> = chunks.iter().map(|(id, ..)| *id).collect();
    let count = |of: fn(&ChunkCounts) -> i64| -> Vec<i64> {
        chunks.iter().map(|(_, counts, _)| of(counts)).collect()
    };
    let whole: Vec<bool> = chunks.iter().map(|(.., plan)| plan.is_some()).collect();
    let formats: Vec<Option<Json<&RowFormat>>> = chunks
        .iter()
        .map(|(.., plan)| plan.map(|plan| Json(plan.format)))
        .collect();
    let item_counts: Vec<Option<i64>> = chunks
        .iter()
        .map(|(.., plan)| plan.map(|plan| plan.item_count))
        .collect();
    let lease_owners: Vec<Option<&str>> = chunks
        .iter()
        .map(|(.., plan)| plan.map(|plan| plan.lease_owner))
        .collect();
    debug_assert!(
        ids.iter().collect::<std::collections::HashSet<_>>().len() == ids.len(),
        "each job at most once"
    );
    let rows = sqlx::query!(
        r#"update jobs set
             status = case when e.ends then $13 else $9 end,
             started_at = case when status = $11 then now() else started_at end,
             finished_at = case when e.ends then clock_timestamp() else finished_at end,
             lease_owner = case when lease_owner = e.plan_lease then null else lease_owner end,
             lease_expires_at = case when lease_owner = e.plan_lease then null
                                     else lease_expires_at end,
             sealed = sealed or e.whole,
             row_format = coalesce(e.plan_format, row_format),
             item_count = coalesce(e.plan_items, item_count),
             chunks_total = case when e.whole then 1 else chunks_total end,
             attempts = case when e.whole then 0 else attempts end,
             last_error = case when e.whole then null else last_error end,
             item_progress = item_progress + e.add_ok + e.add_failed,
             rows_ok = rows_ok + e.add_ok,
             rows_failed = rows_failed + e.add_failed,
             rows_updated = rows_updated + e.add_updated,
             chunks_done = chunks_done + 1,
             version = version + 1
         from (select c.*, c.whole and c.add_failed = 0
                      and not exists (select 1 from jobs p where p.parent_id = c.job) as ends
               from unnest($1::uuid[], $2::int8[], $3::int8[], $4::int8[], $5::bool[],
                           $6::jsonb[], $7::int8[], $8::text[])
                   as c (job, add_ok, add_failed, add_updated, whole, plan_format, plan_items,
                         plan_lease)
               offset 0) e
         where jobs.id = e.job
           and case when e.whole then status = any($14) and not sealed and kind = $12
                    else status = $9 end
         returning jobs.id, version, e.ends as "ended!", kind = $10 and sealed
             and chunks_failed = 0 and chunks_done = chunks_total as "finish_export!""#,
        &ids,
        &count(|c| c.ok),
        &count(|c| c.failed),
        &count(|c| c.updated),
        &whole,
        &formats as _,
        &item_counts as &[Option<i64>],
        &lease_owners as &[Option<&str>],
        Running as JobStatus,
        JobKind::Export as JobKind,
        Waiting as JobStatus,
        JobKind::Import as JobKind,
        Completed as JobStatus,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(&mut *conn)
    .await?;
    if rows.len() != chunks.len() {
        return Ok(None);
    }
    let mut added = Vec::with_capacity(chunks.len());
    for (id, counts, _) in chunks {
        let row = rows
            .iter()
            .find(|row| row.id == *id)
            .expect("one row a job");
        if row.ended {
            added.push(ChunkAdded {
                version: row.version,
                finish_export: false,
                completed: true,
            });
            continue;
        }
        let stopped = if counts.failed > 0 {
            stop_over_row_error_limit(conn, *id).await?
        } else {
            None
        };
        let ended = match stopped {
            Some(version) => Some(version),
            None => end_if_all_chunks_ended(conn, *id).await?,
        };
        added.push(ChunkAdded {
            version: ended.unwrap_or(row.version),
            finish_export: ended.is_none() && row.finish_export,
            completed: false,
        });
    }
    Ok(Some(added))
}

/// Ends a `running` job that is over its row error limit (`failed`), or whose sealed plan's
/// chunks have all ended. For a plan sealed after its chunks were done (a streamed sheet).
pub async fn settle(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    match stop_over_row_error_limit(conn, id).await? {
        Some(version) => Ok(Some(version)),
        None => end_if_all_chunks_ended(conn, id).await,
    }
}

/// `running` → `failed` when its rows in error passed its limit. It ends at the moment it does
/// (`clock_timestamp()`): its transaction's start (`now()`) is also when a small file imported
/// at once started.
async fn stop_over_row_error_limit(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set status = $3, finished_at = clock_timestamp(), version = version + 1,
             error = format('Stopped after %s rows with errors, more than the limit of %s. '
                            'Fix the file and import it again.',
                            rows_failed,
                            case when max_row_errors is not null
                                      and rows_failed > max_row_errors
                                 then max_row_errors::text
                                 else max_row_errors_percent::text || '% of the rows' end)
         where id = $1 and status = $2
           and (rows_failed > max_row_errors
                -- A streamed sheet's count is only what it declares until it is sealed.
                or sealed and rows_failed * 100.0 > max_row_errors_percent * item_count)
         returning version",
        id,
        Running as JobStatus,
        Failed as JobStatus,
    )
    .fetch_optional(conn)
    .await
}

/// `running` → `completed` (an import, whose dataset is then `ready`) or `failed` (any job with
/// a failed chunk) once every chunk of its sealed plan is done or failed, at the moment it does
/// (as [`stop_over_row_error_limit`]). An export whose chunks are all done goes on to its
/// finish step instead ([`complete_export`]).
pub(super) async fn end_if_all_chunks_ended(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<i64>> {
    let ended = sqlx::query_scalar!(
        "update jobs set
             status = case when chunks_failed = 0 and not exists (
                               select 1 from jobs c where c.parent_id = jobs.id and c.kind = $6
                                   and c.status <> $3)
                           then $3::job_status else $4 end,
             error = case when chunks_failed > 0 and kind = $6
                              then format('%s of %s items failed; see their failures below.',
                                          chunks_failed, chunks_total)
                          when chunks_failed > 0
                              then format('%s of %s parts could not be processed (each was '
                                          'tried %s times); see the parts below. Retry the job '
                                          'to run them again.', chunks_failed, chunks_total,
                                          max_failures_per_item)
                          when exists (select 1 from jobs c where c.parent_id = jobs.id
                                           and c.kind = $6 and c.status <> $3)
                              then 'Its follow-up job did not complete.'
                          else error end,
             finished_at = clock_timestamp(), version = version + 1
         where id = $1 and status = $2 and sealed
           and chunks_done + chunks_failed = chunks_total
           and (kind = any($5) or chunks_failed > 0)
           -- A job of a registered type ends after its follow-up job (`item_job`).
           and not exists (select 1 from jobs c where c.parent_id = jobs.id and c.kind = $6
                               and c.status = any($7))
         returning version",
        id,
        Running as JobStatus,
        Completed as JobStatus,
        Failed as JobStatus,
        &[JobKind::Import, JobKind::Items] as &[JobKind],
        JobKind::Items as JobKind,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_optional(&mut *conn)
    .await?;
    if ended.is_some() {
        // The dataset an import made comes into being when the import completes.
        dataset::ready_after(conn, &[id]).await?;
    }
    Ok(ended)
}

/// Counts a chunk of a `running` job that ran out of attempts; the job ends (`failed`) when it
/// was the last one outstanding.
pub async fn add_failed_chunk(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    let counted: Option<i64> = sqlx::query_scalar!(
        "update jobs set chunks_failed = chunks_failed + 1, version = version + 1
         where id = $1 and status = $2
         returning version",
        id,
        Running as JobStatus,
    )
    .fetch_optional(&mut *conn)
    .await?;
    match counted {
        Some(version) => Ok(Some(
            end_if_all_chunks_ended(conn, id).await?.unwrap_or(version),
        )),
        None => Ok(None),
    }
}

/// A `running` export whose chunks are all done → `completed`, with its file. `None` when
/// another run of the finish step did it first, or the job was cancelled.
pub async fn complete_export(
    conn: &mut PgConnection,
    id: Uuid,
    result_upload_id: Uuid,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set status = $3, result_upload_id = $2, output_upload_id = null,
             finished_at = now(), version = version + 1
         where id = $1 and kind = $5 and status = $4 and sealed
           and chunks_done = chunks_total and result_upload_id is null
         returning version",
        id,
        result_upload_id,
        Completed as JobStatus,
        Running as JobStatus,
        JobKind::Export as JobKind,
    )
    .fetch_optional(conn)
    .await
}

/// Counts rows a `running` deletion removed.
pub async fn add_rows_deleted(
    conn: &mut PgConnection,
    id: Uuid,
    rows: i64,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set item_progress = item_progress + $2, rows_ok = rows_ok + $2,
             item_count = greatest(item_count, item_progress + $2), version = version + 1
         where id = $1 and status = $3 and kind = $4
         returning version",
        id,
        rows,
        Running as JobStatus,
        JobKind::Delete as JobKind,
    )
    .fetch_optional(conn)
    .await
}

/// A `running` deletion whose dataset has no rows left → `completed`.
pub async fn complete_delete(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set status = $2, finished_at = now(), item_count = item_progress,
             version = version + 1
         where id = $1 and status = $3 and kind = $4
         returning version",
        id,
        Completed as JobStatus,
        Running as JobStatus,
        JobKind::Delete as JobKind,
    )
    .fetch_optional(conn)
    .await
}

/// `waiting`/`running` → `cancelled`, for each of `ids` that `acts` covers, with their live
/// descendants (a batch's children, a chain's follow-up jobs; a `delete` job goes on: its
/// dataset is gone already). A chain's follow-up job is cancelled with its root, never alone.
/// Every job cancelled, with its new version; none when they had all ended.
pub async fn cancel(
    conn: &mut PgConnection,
    ids: &[Uuid],
    acts: Sees,
) -> sqlx::Result<Vec<(Uuid, i64)>> {
    lock_in_order(conn, ids, acts, true).await?;
    let cancelled = sqlx::query!(
        "with recursive below as (
             select c.id from jobs c join jobs p on p.id = c.parent_id
             where p.id = any($1) and p.status = any($4) and ($2::uuid is null or p.owner = $2)
               and not exists (select 1 from jobs g where g.id = p.parent_id and g.kind = $6)
             union
             -- A follow-up chain's jobs, however deep (`item_job`).
             select c.id from jobs c join below b on c.parent_id = b.id
         )
         update jobs set status = $3, finished_at = now(), version = version + 1
         where status = any($4) and kind <> $5
           and (id = any($1) and ($2::uuid is null or owner = $2)
                -- A chain's follow-up job goes with its root, never alone.
                and not exists (select 1 from jobs p where p.id = jobs.parent_id and p.kind = $6)
                or id in (select id from below))
         returning id, version",
        ids,
        acts.owner_filter(),
        Cancelled as JobStatus,
        &LIVE[..] as &[JobStatus],
        JobKind::Delete as JobKind,
        JobKind::Items as JobKind,
    )
    .fetch_all(conn)
    .await?;
    Ok(cancelled
        .into_iter()
        .map(|job| (job.id, job.version))
        .collect())
}

/// `failed`/`cancelled` → `waiting`, for each of `ids` that `acts` covers whose items are still
/// kept (not a batch, nor a failure with a remedy, which would fail the same way, nor an
/// import or export of a deleted dataset): what it had not done (its failed and pending chunks, or its plan) gets
/// fresh attempts, and re-queueing queues them. Rows already written stay. Every job retried,
/// with its new version.
pub async fn retry(
    conn: &mut PgConnection,
    ids: &[Uuid],
    acts: Sees,
) -> sqlx::Result<Vec<(Uuid, i64)>> {
    // Jobs of registered types first: their items, then their rows (as results take them).
    let items_retried = super::item_job::retry(conn, ids, acts).await?;
    chunk::lock_unfinished(conn, ids, acts).await?;
    lock_in_order(conn, ids, acts, false).await?;
    dataset::hold_for_jobs(conn, ids).await?;
    // Back to `waiting`: it starts again only when no earlier job with its serialize key is
    // live, and its plan step (which starts a planned job at once) goes first.
    let retried = sqlx::query!(
        "update jobs set status = $3,
             error = null, finished_at = null, chunks_failed = 0, attempts = 0,
             run_after = now(), last_error = null, lease_owner = null, lease_expires_at = null,
             version = version + 1
         where id = any($1) and status = any($4) and items_pruned_at is null
           and kind <> all($5) and ($2::uuid is null or owner = $2) and remedy is null
           and (kind = $6 or not exists (select 1 from datasets d
                                         where d.id = jobs.dataset_id and d.state = $7))
         returning id, version",
        ids,
        acts.owner_filter(),
        Waiting as JobStatus,
        &[Failed, Cancelled] as &[JobStatus],
        &[JobKind::Batch, JobKind::Items] as &[JobKind],
        JobKind::Delete as JobKind,
        DatasetState::Deleted as DatasetState,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut retried: Vec<(Uuid, i64)> = retried.into_iter().map(|j| (j.id, j.version)).collect();
    let ids: Vec<Uuid> = retried.iter().map(|(id, _)| *id).collect();
    chunk::reopen_unfinished(conn, &ids).await?;
    retried.extend(items_retried);
    Ok(retried)
}

/// Locks the rows of `ids` that `acts` covers (and with `children`, their live descendants:
/// the children of batches, the chains of jobs of registered types) in id order, so that two transactions changing overlapping sets of jobs
/// wait for each other rather than deadlock. A chunk's commit locks its chunk and then its job:
/// callers that lock chunks do so first. `for no key update` is the lock the update takes
/// anyway, and does not hold up rows that only refer to the job.
async fn lock_in_order(
    conn: &mut PgConnection,
    ids: &[Uuid],
    acts: Sees,
    children: bool,
) -> sqlx::Result<()> {
    sqlx::query!(
        "with recursive below as (
             select c.id from jobs c where $3 and c.parent_id = any($1)
             union
             select c.id from jobs c join below b on c.parent_id = b.id
         )
         select 1 as locked from jobs
         where ($2::uuid is null or owner = $2)
           and (id = any($1) or status = any($4) and id in (select id from below))
         order by id for no key update",
        ids,
        acts.owner_filter(),
        children,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(conn)
    .await?;
    Ok(())
}

/// A `running` batch takes no more children; `None` also when `acts` does not cover it.
pub async fn seal_batch(
    conn: &mut PgConnection,
    id: Uuid,
    acts: Sees,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "update jobs set sealed = true, version = version + 1
         where id = $1 and kind = $3 and status = $4 and not sealed
           and ($2::uuid is null or owner = $2)
         returning version",
        id,
        acts.owner_filter(),
        JobKind::Batch as JobKind,
        Running as JobStatus,
    )
    .fetch_optional(conn)
    .await
}

/// Every sealed `running` batch whose children have all ended → `completed` if they all
/// completed, else `failed`. Returns each with its new version.
pub async fn settle_batches(conn: &mut PgConnection) -> sqlx::Result<Vec<(Uuid, i64)>> {
    let settled = sqlx::query!(
        "update jobs p set finished_at = now(), version = version + 1,
             status = case when bad.n = 0 then $3::job_status else $4 end,
             error = case when bad.n = 0 then null
                          else format('%s of its jobs did not complete.', bad.n) end
         from (select b.id, (select count(*) from jobs c
                             where c.parent_id = b.id and c.status <> $3) as n
               from jobs b
               where b.kind = $1 and b.status = $2 and b.sealed
                 and not exists (select 1 from jobs c where c.parent_id = b.id
                                 and c.status = any($5))
               for update of b skip locked) bad
         where p.id = bad.id
         returning p.id, p.version",
        JobKind::Batch as JobKind,
        Running as JobStatus,
        Completed as JobStatus,
        Failed as JobStatus,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(conn)
    .await?;
    Ok(settled
        .into_iter()
        .map(|job| (job.id, job.version))
        .collect())
}
