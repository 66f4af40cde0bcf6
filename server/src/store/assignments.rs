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
    items,
    leases::first_in_line,
    notify,
    states::{self, ChunkState, JobStatus, LIVE},
};

/// An item claimed: what its worker needs to do it and report on it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
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

#[derive(sqlx::FromRow)]
struct Claimed {
    #[sqlx(flatten)]
    assignment: Assignment,
    /// The job was waiting, and this claim starts it.
    starts_job: bool,
}

/// Claims up to `max` items of `types` for `worker`, in one transaction: from the oldest live
/// job first (a waiting one only when first in line for its serialize key; it starts here), in
/// the order they were added, and of a job whose type is `ordered`, only its first unfinished
/// item, once nobody holds it. Items other claims hold at that moment are skipped, not waited
/// for.
///
/// Composed with the serialize-key condition of `store::leases`, which `sqlx::query!` cannot
/// take: checked by the tests that run it. The job statuses are written out (not bound) so the
/// planner can use the partial index of live jobs by type.
pub async fn claim(
    pool: &PgPool,
    worker: &str,
    types: &[String],
    max: i64,
) -> sqlx::Result<Vec<Assignment>> {
    let mut tx = pool.begin().await?;
    let claimed: Vec<Claimed> = sqlx::query_as(concat!(
        "with due as (
             select i.job_id, i.item_no, t.lease_seconds, j.seq, j.job_type,
                 j.status = $5 as starts_job
             from jobs j
             join job_types t on t.name = j.job_type
             cross join lateral (
                 select i.job_id, i.item_no from job_items i
                 where i.job_id = j.id and i.state = $4 and i.run_after <= now()
                   and i.lease_expires_at is null
                   and (not t.ordered
                        or i.item_no = (select min(p.item_no) from job_items p
                                        where p.job_id = j.id and p.state = $4))
                 order by i.item_no
                 limit $3
                 for update skip locked
             ) i
             where j.job_type = any($2) and j.status in ('waiting', 'running') and ",
        first_in_line!("$5", "$6"),
        "
             order by j.seq, i.item_no
             limit $3
         ),
         claimed as (
             update job_items i set assignment = gen_random_uuid(), worker = $1,
                 attempts = i.attempts + 1,
                 lease_expires_at = now() + make_interval(secs => due.lease_seconds)
             from due where i.job_id = due.job_id and i.item_no = due.item_no
             returning i.assignment, i.job_id, i.item_no, i.payload::text as payload,
                 i.dedupe_key, i.attempts as attempt, i.lease_expires_at
         )
         select c.*, due.job_type, due.starts_job from claimed c
         join due on due.job_id = c.job_id and due.item_no = c.item_no
         order by due.seq, c.item_no"
    ))
    .bind(worker)
    .bind(types)
    .bind(max)
    .bind(ChunkState::Pending)
    .bind(JobStatus::Waiting)
    .bind(LIVE)
    .fetch_all(&mut *tx)
    .await?;
    let mut starting: Vec<Uuid> = claimed
        .iter()
        .filter(|c| c.starts_job)
        .map(|c| c.assignment.job_id)
        .collect();
    starting.sort();
    starting.dedup();
    for job_id in starting {
        if let Some(version) = states::job::start(&mut tx, job_id).await? {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
    }
    tx.commit().await?;
    Ok(claimed.into_iter().map(|c| c.assignment).collect())
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
               j.status as "status: JobStatus", j.max_failures_per_item, j.job_type as "job_type!",
               t.backoff_seconds
           from job_items i join jobs j on j.id = i.job_id join job_types t on t.name = j.job_type
           where i.assignment = $1 and j.job_type = any($2)
           -- The job's row too (items, then their job, as claims lock them): a cancel waits,
           -- or is seen, so an item never ends uncounted.
           for no key update of i, j"#,
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
    if item.status != JobStatus::Running {
        return Ok(Finished::JobStopped(item.status));
    }
    let key = (item.job_id, item.item_no);
    let (state, retry_at) = match outcome {
        Outcome::Done(result) => {
            items::record_result(&mut tx, key, result).await?;
            (ChunkState::Done, None)
        }
        Outcome::Failed { message, retry } => {
            let again = retry && item.attempts < item.max_failures_per_item;
            // The backoff doubles at each attempt: 1×, 2×, 4×… the type's.
            let backoff = again.then(|| {
                f64::from(item.backoff_seconds) * 2f64.powi((item.attempts - 1).clamp(0, 20))
            });
            let retry_at = items::record_failure(&mut tx, key, message, backoff).await?;
            if retry_at.is_some() && item.backoff_seconds == 0 {
                notify::items_ready(&mut tx, &item.job_type).await?;
            }
            let state = if again {
                ChunkState::Pending
            } else {
                ChunkState::Failed
            };
            (state, retry_at)
        }
    };
    if state != ChunkState::Pending {
        let done = i32::from(state == ChunkState::Done);
        if let Some(version) = states::job::add_items(&mut tx, item.job_id, done, 1 - done).await? {
            notify::job_changed(&mut tx, item.job_id, version).await?;
        }
    }
    tx.commit().await?;
    Ok(Finished::Recorded { state, retry_at })
}

/// Frees the items whose lease expired (their worker stopped: killed, stalled, gone), in the
/// caller's transaction, recording a failure with `reason`; one out of attempts fails, and
/// counts in its job. Returns the types with items free again, and the jobs whose counters
/// changed, with their new versions.
pub async fn free_expired(
    conn: &mut PgConnection,
    reason: &str,
) -> sqlx::Result<(Vec<String>, Vec<(Uuid, i64)>)> {
    let freed = sqlx::query!(
        r#"update job_items i set lease_expires_at = null, assignment = null,
               failures = i.failures || jsonb_build_array(jsonb_build_object(
                   'message', $1::text, 'at', now(), 'worker', i.worker, 'attempt', i.attempts)),
               state = case when i.attempts >= j.max_failures_per_item then $3 else i.state end,
               done_at = case when i.attempts >= j.max_failures_per_item then now() end
           from jobs j
           where i.lease_expires_at < now() and i.state = $2 and j.id = i.job_id
           returning i.job_id, j.job_type as "job_type!", i.state = $3 as "failed!""#,
        reason,
        ChunkState::Pending as ChunkState,
        ChunkState::Failed as ChunkState,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut types: Vec<String> = freed
        .iter()
        .filter(|item| !item.failed)
        .map(|item| item.job_type.clone())
        .collect();
    types.sort();
    types.dedup();
    let mut failed: Vec<Uuid> = freed
        .iter()
        .filter(|item| item.failed)
        .map(|item| item.job_id)
        .collect();
    failed.sort();
    let mut changed = Vec::new();
    for chunk in failed.chunk_by(|a, b| a == b) {
        let job_id = chunk[0];
        if let Some(version) = states::job::add_items(conn, job_id, 0, chunk.len() as i32).await? {
            changed.push((job_id, version));
        }
    }
    Ok((types, changed))
}
