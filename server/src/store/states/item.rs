//! An item of a job of a registered type (issue 14) moves through the chunk states: `pending`
//! (claimed or not) → `done` with its result, or `failed` once out of attempts (or failed for
//! good by its worker); back to `pending` when a failed attempt has attempts left, when its
//! lease expires with attempts left, or when its job is retried. Each ends its lease.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{ChunkState, JobStatus};

/// Claimed items are done, each with its result (JSON text): `jobs[n]`'s item `numbers[n]`
/// with `results[n]`. Their leases end (their assignments stay, so the same result sent again
/// is recognised).
pub async fn done(
    conn: &mut PgConnection,
    jobs: &[Uuid],
    numbers: &[i64],
    results: &[&str],
) -> sqlx::Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "update job_items i set state = $4, result = u.result::jsonb, done_at = now(),
             lease_expires_at = null
         from unnest($1::uuid[], $2::int8[], $3::text[]) as u (job_id, item_no, result)
         where i.job_id = u.job_id and i.item_no = u.item_no",
        jobs,
        numbers,
        results as &[&str],
        ChunkState::Done as ChunkState,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records claimed items' failed attempts (`jobs[n]`'s item `numbers[n]`, with `messages[n]`):
/// each is tried again `backoffs[n]` seconds from now, or, without one, it has `failed`. Their
/// leases end. Returns when each item to be tried again is due.
pub async fn fail_attempt(
    conn: &mut PgConnection,
    jobs: &[Uuid],
    numbers: &[i64],
    messages: &[&str],
    backoffs: &[Option<f64>],
) -> sqlx::Result<HashMap<(Uuid, i64), Option<DateTime<Utc>>>> {
    if jobs.is_empty() {
        return Ok(HashMap::new());
    }
    let failed = sqlx::query!(
        r#"update job_items i set lease_expires_at = null,
             failures = i.failures || jsonb_build_array(jsonb_build_object(
                 'message', u.message, 'at', now(), 'worker', i.worker, 'attempt', i.attempts)),
             state = case when u.backoff is null then $5 else i.state end,
             done_at = case when u.backoff is null then now() end,
             run_after = case when u.backoff is null then i.run_after
                              else now() + make_interval(secs => u.backoff) end
         from unnest($1::uuid[], $2::int8[], $3::text[], $4::float8[])
             as u (job_id, item_no, message, backoff)
         where i.job_id = u.job_id and i.item_no = u.item_no
         returning i.job_id, i.item_no,
             case when u.backoff is not null then i.run_after end as "retry_at""#,
        jobs,
        numbers,
        messages as &[&str],
        backoffs as &[Option<f64>],
        ChunkState::Failed as ChunkState,
    )
    .fetch_all(conn)
    .await?;
    Ok(failed
        .into_iter()
        .map(|item| ((item.job_id, item.item_no), item.retry_at))
        .collect())
}

/// Frees the items whose lease expired (their worker stopped: killed, stalled, gone),
/// recording a failure with `reason`; one out of attempts becomes `failed`. An item of a job
/// that stopped (cancelled: its worker was told at its heartbeat) is only freed. Returns each
/// item of a running job freed: its job, type, and whether it failed.
pub async fn expire_leases(
    conn: &mut PgConnection,
    reason: &str,
) -> sqlx::Result<Vec<(Uuid, String, bool)>> {
    let freed = sqlx::query!(
        r#"with expired as (
               -- One being ended or reopened right now is passed over until the next round.
               select job_id, item_no from job_items
               where lease_expires_at < now() and state = $2
               for no key update skip locked
           )
           update job_items i set lease_expires_at = null, assignment = null,
               failures = case when j.status <> $4 then i.failures
                               else i.failures || jsonb_build_array(jsonb_build_object(
                                   'message', $1::text, 'at', now(), 'worker', i.worker,
                                   'attempt', i.attempts)) end,
               state = case when j.status = $4 and i.attempts >= j.max_failures_per_item then $3
                            else i.state end,
               done_at = case when j.status = $4 and i.attempts >= j.max_failures_per_item
                              then now() end
           from expired e, jobs j
           where i.job_id = e.job_id and i.item_no = e.item_no and j.id = i.job_id
           returning i.job_id, j.job_type as "job_type!", i.state = $3 as "failed!",
               j.status = $4 as "running!""#,
        reason,
        ChunkState::Pending as ChunkState,
        ChunkState::Failed as ChunkState,
        JobStatus::Running as JobStatus,
    )
    .fetch_all(conn)
    .await?;
    Ok(freed
        .into_iter()
        .filter(|item| item.running)
        .map(|item| (item.job_id, item.job_type, item.failed))
        .collect())
}

/// `failed` (or `pending`, held or not) → `pending`, free, with fresh attempts, for the items
/// of jobs being retried, locked in order first. Returns the types of the jobs with items
/// free again.
pub async fn reopen(conn: &mut PgConnection, job_ids: &[Uuid]) -> sqlx::Result<Vec<String>> {
    sqlx::query!(
        "select 1 as locked from job_items where job_id = any($1) and state <> $2
         order by job_id, item_no for no key update",
        job_ids,
        ChunkState::Done as ChunkState,
    )
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        r#"with reopened as (
               update job_items set state = $2, attempts = 0, run_after = now(),
                   lease_expires_at = null, assignment = null, done_at = null
               where job_id = any($1) and state <> $3
                 -- Read again once the items are locked: a retry that came first, or
                 -- retention, leaves them alone.
                 and exists (select 1 from jobs j where j.id = job_items.job_id
                             and j.status = any($4) and j.items_pruned_at is null)
               returning job_id
           )
           select distinct j.job_type as "job_type!" from jobs j
           where j.id in (select job_id from reopened)"#,
        job_ids,
        ChunkState::Pending as ChunkState,
        ChunkState::Done as ChunkState,
        &[JobStatus::Failed, JobStatus::Cancelled] as &[JobStatus],
    )
    .fetch_all(conn)
    .await
}
