//! Assignments (issue 14): the items of jobs of registered types that external workers claim,
//! renew, and finish with a result or a failure.
//!
//! A claim gives each item it takes a new assignment id and a lease (the type's
//! `lease_seconds`), counting an attempt. Only the item's current assignment, inside its lease,
//! may renew it or finish it; anything else (expired, reassigned, never issued) is refused and
//! changes nothing. An item's end and its job's counters change in one transaction, so each item
//! counts exactly once, as a chunk's rows do. An item is free to claim when it is pending, due
//! and unleased (`lease_expires_at is null`); a failure with a retry keeps the assignment id on
//! the item, so the same failure sent twice is recognised, while lease rescue clears it.
//!
//! Every statement names the token's types: a worker touches only items of its types.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    items::{self, NewItem},
    leases::first_in_line,
    notify,
    states::{self, ChunkState, JobKind, JobStatus, LIVE, item_job},
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
/// `sqlx::query!` cannot take: checked by the tests that run it. Their statuses are written out
/// (not bound) so the planner can use the partial index of live jobs by type.
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
           and exists (select 1 from job_items i where i.job_id = j.id and i.state = $4)
           and ",
        first_in_line!("$2", "$3"),
        "
         order by j.seq limit $5"
    ))
    .bind(types)
    .bind(JobStatus::Waiting)
    .bind(LIVE)
    .bind(ChunkState::Pending)
    .bind(JOBS_PER_CLAIM)
    .fetch_all(&mut *tx)
    .await?;
    let mut claimed = Vec::new();
    for job in jobs {
        let wanted = max - claimed.len() as i64;
        if wanted == 0 {
            break;
        }
        let mut taken = sqlx::query!(
            r#"with due as (
                   select i.item_no from job_items i
                   where i.job_id = $1 and i.state = $2 and i.run_after <= now()
                     and i.lease_expires_at is null
                     and (not $3 or i.item_no = (select min(p.item_no) from job_items p
                                                 where p.job_id = $1 and p.state = $2))
                   order by i.item_no limit $4
                   for no key update skip locked
               )
               update job_items i set assignment = gen_random_uuid(), worker = $5,
                   attempts = i.attempts + 1,
                   lease_expires_at = now() + make_interval(secs => $6)
               from due where i.job_id = $1 and i.item_no = due.item_no
               returning i.assignment as "assignment!", i.item_no, i.payload::text as "payload!",
                   i.dedupe_key, i.attempts, i.lease_expires_at as "lease_expires_at!""#,
            job.id,
            ChunkState::Pending as ChunkState,
            job.ordered,
            wanted,
            worker,
            f64::from(job.lease_seconds),
        )
        .fetch_all(&mut *tx)
        .await?;
        if taken.is_empty() {
            continue;
        }
        taken.sort_by_key(|item| item.item_no);
        if job.waiting
            && let Some(version) = states::job::start(&mut tx, job.id).await?
        {
            notify::job_changed(&mut tx, job.id, version).await?;
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
    tx.commit().await?;
    Ok(claimed)
}

/// How long until the next item of `types` in backoff becomes due, if any (a claim that found
/// nothing waits that long at most).
pub async fn next_due(pool: &PgPool, types: &[String]) -> sqlx::Result<Option<Duration>> {
    let seconds = sqlx::query_scalar!(
        r#"select extract(epoch from i.run_after - now())::float8 as "seconds!"
         from job_items i join jobs j on j.id = i.job_id
         where i.state = $2 and i.attempts > 0 and i.run_after > now()
           and j.job_type = any($1) and j.status = any($3)
         order by i.run_after limit 1"#,
        types,
        ChunkState::Pending as ChunkState,
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

/// How a worker ended an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Done, with this result (JSON text).
    Done(&'a str),
    /// Failed: tried again after the backoff if `retry` and attempts are left, else failed.
    Failed { message: &'a str, retry: bool },
}

/// What ending an assignment did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Recorded: the item is now in `state`.
    Recorded {
        state: ChunkState,
        /// When a failed item that will be tried again becomes due.
        retry_at: Option<DateTime<Utc>>,
    },
    /// This assignment already ended the same way (a request sent again): nothing changed.
    AlreadyRecorded { state: ChunkState },
    /// The job stopped (cancelled or failed): nothing recorded.
    JobStopped(JobStatus),
    /// Not current: the lease expired, or the item was handed to another worker.
    NotCurrent,
    /// The result is larger than the follow-up type takes as a payload: nothing recorded.
    TooLargeForFollowUp { limit: i32 },
}

/// Ends an assignment with a result or a failure, in one transaction with its job's counters
/// and (once the job has ended) the job's end.
pub async fn finish(
    pool: &PgPool,
    assignment: Uuid,
    types: &[String],
    outcome: Outcome<'_>,
) -> sqlx::Result<Finished> {
    let mut tx = pool.begin().await?;
    let item = sqlx::query!(
        r#"select i.job_id, i.item_no, i.state as "state: ChunkState", i.attempts,
               coalesce(i.lease_expires_at > now(), false) as "held!",
               i.lease_expires_at is null as "ended!",
               j.max_failures_per_item, j.job_type as "job_type!", t.backoff_seconds, t.ordered,
               f.max_payload_bytes as "follow_up_limit?"
           from job_items i join jobs j on j.id = i.job_id join job_types t on t.name = j.job_type
           left join job_types f on f.name = t.follow_up
           where i.assignment = $1 and j.job_type = any($2)
           for no key update of i"#,
        assignment,
        types,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(item) = item else {
        return Ok(Finished::NotCurrent);
    };
    if item.ended {
        // The assignment ended already: the same ending sent again changes nothing.
        let same = match outcome {
            Outcome::Done(_) => item.state == ChunkState::Done,
            Outcome::Failed { .. } => item.state != ChunkState::Done,
        };
        return Ok(if same {
            Finished::AlreadyRecorded { state: item.state }
        } else {
            Finished::NotCurrent
        });
    }
    if item.state != ChunkState::Pending || !item.held {
        return Ok(Finished::NotCurrent);
    }
    if let (Outcome::Done(result), Some(limit)) = (outcome, item.follow_up_limit)
        && result.len() > limit as usize
    {
        return Ok(Finished::TooLargeForFollowUp { limit });
    }
    // Items, then their jobs (as claims take them); the job's whole tree, as its end may
    // seal its child or end its parent. A cancel waits, or is seen: no item ends uncounted.
    item_job::lock_tree(&mut tx, item.job_id).await?;
    let job = sqlx::query!(
        r#"select status as "status: JobStatus",
               (select c.id from jobs c where c.parent_id = j.id and c.kind = $2) as follow_up
           from jobs j where id = $1"#,
        item.job_id,
        JobKind::Items as JobKind,
    )
    .fetch_one(&mut *tx)
    .await?;
    if job.status != JobStatus::Running {
        return Ok(Finished::JobStopped(job.status));
    }
    let key = (item.job_id, item.item_no);
    let mut changed = Vec::new();
    let (state, retry_at) = match outcome {
        Outcome::Done(result) => {
            states::item::done(&mut tx, key, result).await?;
            if let Some(child) = job.follow_up {
                changed.extend(add_follow_up(&mut tx, child, item.item_no, result).await?);
            }
            (ChunkState::Done, None)
        }
        Outcome::Failed { message, retry } => {
            let again = retry && item.attempts < item.max_failures_per_item;
            // The backoff doubles at each attempt: 1×, 2×, 4×… the type's.
            let backoff = again.then(|| {
                f64::from(item.backoff_seconds) * 2f64.powi((item.attempts - 1).clamp(0, 20))
            });
            let retry_at = states::item::fail_attempt(&mut tx, key, message, backoff).await?;
            let state = if again {
                ChunkState::Pending
            } else {
                ChunkState::Failed
            };
            (state, retry_at)
        }
    };
    // Claims waiting for the type look again: at an item to try again (now, or at a time they
    // must learn), or at the next item of an ordered job.
    if retry_at.is_some() || item.ordered {
        notify::items_ready(&mut tx, &item.job_type).await?;
    }
    if state != ChunkState::Pending {
        let done = i32::from(state == ChunkState::Done);
        changed.extend(item_job::add_items(&mut tx, item.job_id, done, 1 - done).await?);
    }
    for (job_id, version) in changed {
        notify::job_changed(&mut tx, job_id, version).await?;
    }
    tx.commit().await?;
    Ok(Finished::Recorded { state, retry_at })
}

/// Adds the follow-up item of a parent's item `item_no` (its result as the payload) to the
/// child job; nothing when the child was cancelled on its own. The job changed, if it did.
async fn add_follow_up(
    conn: &mut PgConnection,
    child: Uuid,
    item_no: i64,
    result: &str,
) -> sqlx::Result<Option<(Uuid, i64)>> {
    let item = NewItem {
        payload: result.to_owned(),
        // One follow-up per parent item, whatever happens.
        dedupe_key: Some(format!("parent-item-{item_no}")),
    };
    Ok(match items::add(conn, child, None, &[item]).await? {
        Ok(added) => added.version.map(|version| (child, version)),
        Err(_) => None,
    })
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
    let mut types: Vec<String> = freed
        .iter()
        .filter(|(_, _, failed)| !failed)
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
    for same_job in failed.chunk_by(|a, b| a == b) {
        let job_id = same_job[0];
        item_job::lock_tree(conn, job_id).await?;
        changed.extend(item_job::add_items(conn, job_id, 0, same_job.len() as i32).await?);
    }
    Ok((types, changed))
}
