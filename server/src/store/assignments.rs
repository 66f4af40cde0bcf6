//! Assignments (issue 14): the items of jobs of registered types that external workers claim
//! and renew (their endings are `store::endings`), and lease rescue of those whose worker
//! stopped.
//!
//! A claim gives each item it takes a new assignment id and a lease (the type's
//! `lease_seconds`), counting an attempt. Only the item's current assignment, inside its lease,
//! may renew it. An item is free to claim when it is pending, due and unleased
//! (`lease_expires_at is null`). Every statement names the token's types: a worker touches only
//! items of its types.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    leases::first_in_line,
    notify,
    states::{self, ChunkState, JobStatus, LIVE, item_job},
};

/// An item claimed: what its worker needs to do it and report on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub assignment: Uuid,
    pub job_id: Uuid,
    pub item_no: i64,
    pub job_type: String,
    /// The item's payload, as JSON text.
    pub payload: String,
    pub dedupe_key: Option<String>,
    /// 1 on the first attempt.
    pub attempt: i32,
    pub lease_expires_at: DateTime<Utc>,
}

/// A live job a claim may take items of.
#[derive(sqlx::FromRow)]
struct Candidate {
    id: Uuid,
    job_type: String,
    lease_seconds: i32,
    ordered: bool,
    /// It has not started: this claim starts it.
    waiting: bool,
}

/// The most jobs one claim looks into.
const JOBS_PER_CLAIM: i64 = 100;

/// Claims up to `max` items of `types` for `worker`, in one transaction: from the oldest live
/// job first (a waiting one only when first in line for its serialize key; it starts here), in
/// the order they were added, and of a job whose type is `ordered`, only its first unfinished
/// item, once nobody holds it. Items other claims hold at that moment are skipped, not waited
/// for, and only the items taken are locked: claims at once take different items.
///
/// The jobs are found with the serialize-key condition of `store::leases`, which
/// `sqlx::query!` cannot take: checked by the tests that run it. There the live statuses and
/// the `pending` state are written out (not bound), so that every plan, generic ones included,
/// can use the partial indexes of live jobs by type and of pending items.
///
/// Taking a job's items is two statements, each with one plan whatever the statistics say:
/// the items locked, through the partial index of pending items (`pending` written out), then
/// updated by their row addresses (a TID scan). Planned otherwise, claims late in a
/// 100,000-item job took from 50 ms to seconds on some bench runs (800–4,400 items/s end to
/// end instead of 9,000–12,000): with `pending` bound, the generic plan PostgreSQL's plan cache
/// switches a prepared statement to cannot use the partial index, and walked every item of the
/// job; updated by `item_no = any(…)`, a plan made while the table's statistics still said it
/// was small read every item of the job to find the ones taken.
pub async fn claim(
    pool: &PgPool,
    worker: &str,
    types: &[String],
    max: i64,
) -> sqlx::Result<Vec<Assignment>> {
    let mut tx = pool.begin().await?;
    let jobs: Vec<Candidate> = sqlx::query_as(concat!(
        "select j.id, j.job_type, t.lease_seconds, t.ordered, j.status = $2 as waiting
         from jobs j join job_types t on t.name = j.job_type
         where j.job_type = any($1) and j.status in ('waiting', 'running')
           and case when t.ordered
                    -- Its first unfinished item, if nobody holds it and it is due.
                    then exists (select 1 from (select i.lease_expires_at, i.run_after
                                                from job_items i
                                                where i.job_id = j.id and i.state = 'pending'
                                                order by i.item_no limit 1) first
                                 where first.lease_expires_at is null
                                   and first.run_after <= now())
                    else exists (select 1 from job_items i
                                 where i.job_id = j.id and i.state = 'pending'
                                   and i.lease_expires_at is null and i.run_after <= now())
               end
           and ",
        first_in_line!(),
        "
         order by j.seq limit $3"
    ))
    .bind(types)
    .bind(JobStatus::Waiting)
    .bind(JOBS_PER_CLAIM)
    .fetch_all(&mut *tx)
    .await?;
    let mut claimed = Vec::new();
    let mut starting = Vec::new();
    for job in jobs {
        let wanted = max - claimed.len() as i64;
        if wanted == 0 {
            break;
        }
        // An ordered job gives only its first unfinished item, and only if it is free.
        let first = if job.ordered {
            let first = sqlx::query_scalar!(
                "select min(item_no) from job_items where job_id = $1 and state = 'pending'",
                job.id,
            )
            .fetch_one(&mut *tx)
            .await?;
            if first.is_none() {
                continue;
            }
            first
        } else {
            None
        };
        // The items to take, locked (see the doc comment for why `pending` is written out).
        let due: Vec<String> = sqlx::query_scalar!(
            r#"select i.ctid::text as "ctid!" from job_items i
               where i.job_id = $1 and i.state = 'pending' and i.run_after <= now()
                 and i.lease_expires_at is null
                 -- Bounds rather than `$2 is null or …`, so that a generic plan keeps them in
                 -- its index scan (an ordered job's first item held elsewhere reads no further).
                 and i.item_no between coalesce($2::int8, 0) and coalesce($2::int8, 9223372036854775807)
               order by i.item_no limit $3
               for no key update skip locked"#,
            job.id,
            first,
            wanted,
        )
        .fetch_all(&mut *tx)
        .await?;
        if due.is_empty() {
            continue;
        }
        // Then taken by their row addresses, which stay put while this transaction holds their
        // locks: a TID scan, whatever the planner's statistics say of the job's size.
        let mut taken = sqlx::query!(
            r#"update job_items i set assignment = gen_random_uuid(), worker = $3,
                   attempts = i.attempts + 1,
                   lease_expires_at = now() + make_interval(secs => $4)
               where i.ctid = any($2::text[]::tid[]) and i.job_id = $1
                 -- Still live (it may have been cancelled since it was picked).
                 and exists (select 1 from jobs j where j.id = $1 and j.status = any($5))
               returning i.assignment as "assignment!", i.item_no, i.payload::text as "payload!",
                   i.dedupe_key, i.attempts, i.lease_expires_at as "lease_expires_at!""#,
            job.id,
            &due,
            worker,
            f64::from(job.lease_seconds),
            &LIVE[..] as &[JobStatus],
        )
        .fetch_all(&mut *tx)
        .await?;
        if taken.is_empty() {
            continue;
        }
        taken.sort_by_key(|item| item.item_no);
        if job.waiting {
            starting.push(job.id);
        }
        claimed.extend(taken.into_iter().map(|item| Assignment {
            assignment: item.assignment,
            job_id: job.id,
            item_no: item.item_no,
            job_type: job.job_type.clone(),
            payload: item.payload,
            dedupe_key: item.dedupe_key,
            attempt: item.attempts,
            lease_expires_at: item.lease_expires_at,
        }));
    }
    // In id order, as every change of many jobs takes them.
    starting.sort();
    for job_id in starting {
        if let Some(version) = states::job::start(&mut tx, job_id).await? {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
    }
    tx.commit().await?;
    Ok(claimed)
}

/// How long until the next item of `types` in backoff becomes due, if any (a claim that found
/// nothing waits that long at most).
pub async fn next_due(pool: &PgPool, types: &[String]) -> sqlx::Result<Option<Duration>> {
    let seconds = sqlx::query_scalar!(
        // `pending` written out, so that any plan can use the partial index of items in backoff.
        r#"select extract(epoch from i.run_after - now())::float8 as "seconds!"
         from job_items i join jobs j on j.id = i.job_id
         where i.state = 'pending' and i.attempts > 0 and i.run_after > now()
           and j.job_type = any($1) and j.status = any($2)
         order by i.run_after limit 1"#,
        types,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_optional(pool)
    .await?;
    Ok(seconds.map(|s| Duration::from_secs_f64(s.max(0.0))))
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease runs until then.
    Renewed(DateTime<Utc>),
    /// The job stopped (cancelled, or failed): the worker should drop the item.
    JobStopped(JobStatus),
    /// The assignment is not current: its lease expired or it ended (or it was never issued).
    NotCurrent,
}

/// Renews the lease of a current assignment by its type's lease length.
pub async fn heartbeat(
    pool: &PgPool,
    assignment: Uuid,
    types: &[String],
) -> sqlx::Result<Heartbeat> {
    let held = sqlx::query!(
        r#"select j.status as "status: JobStatus" from job_items i join jobs j on j.id = i.job_id
           where i.assignment = $1 and j.job_type = any($2) and i.state = $3
             and i.lease_expires_at > now()"#,
        assignment,
        types,
        ChunkState::Pending as ChunkState,
    )
    .fetch_optional(pool)
    .await?;
    let Some(held) = held else {
        return Ok(Heartbeat::NotCurrent);
    };
    if held.status != JobStatus::Running {
        return Ok(Heartbeat::JobStopped(held.status));
    }
    let renewed = sqlx::query_scalar!(
        r#"update job_items i set lease_expires_at = now() + make_interval(secs => t.lease_seconds)
           from jobs j join job_types t on t.name = j.job_type
           where i.assignment = $1 and i.state = $2 and i.lease_expires_at > now()
             and j.id = i.job_id and j.status = $3
           returning i.lease_expires_at as "lease_expires_at!""#,
        assignment,
        ChunkState::Pending as ChunkState,
        JobStatus::Running as JobStatus,
    )
    .fetch_optional(pool)
    .await?;
    Ok(renewed.map_or(Heartbeat::NotCurrent, Heartbeat::Renewed))
}

/// Frees the items whose lease expired (their worker stopped: killed, stalled, gone), in the
/// caller's transaction, recording a failure with `reason`; one out of attempts fails, and
/// counts in its job. Returns the types with items free again, and the jobs that changed, with
/// their new versions.
pub async fn free_expired(
    conn: &mut PgConnection,
    reason: &str,
) -> sqlx::Result<(Vec<String>, Vec<(Uuid, i64)>)> {
    let freed = states::item::expire_leases(conn, reason).await?;
    // Free again, or (failed for good) making an ordered job's next item claimable.
    let mut types: Vec<String> = freed
        .iter()
        .map(|(_, job_type, _)| job_type.clone())
        .collect();
    types.sort();
    types.dedup();
    let mut failed: Vec<Uuid> = freed
        .iter()
        .filter(|(_, _, failed)| *failed)
        .map(|(job_id, _, _)| *job_id)
        .collect();
    failed.sort();
    let mut changed = Vec::new();
    if !failed.is_empty() {
        // Every tree at once, in id order (as any change in a tree takes them).
        item_job::lock_tree(conn, &failed).await?;
    }
    for same_job in failed.chunk_by(|a, b| a == b) {
        let job_id = same_job[0];
        changed.extend(item_job::add_items(conn, job_id, 0, same_job.len() as i32).await?);
    }
    Ok((types, changed))
}
