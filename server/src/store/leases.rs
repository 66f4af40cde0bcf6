//! Leases on work items, and the items that need a queue message (for `maintenance::requeue`).
//!
//! A work item is one chunk (`job_chunks`) or a job's own step (`jobs`: the plan, or an
//! export's finish). A worker runs an item only while it holds the item's lease, which it
//! takes with an attempt counted, renews by heartbeat, and gives back when done. The lease
//! owner is unique per run, so a worker that lost its lease (stalled past it, or the job was
//! cancelled) can neither renew it nor commit under it.
//!
//! Each item also holds the `ticket` of its current queue message (the message's idempotency
//! key in `apalis.jobs`): re-queueing gives a new message to an item that is due, not leased and
//! has no live message, and only to such an item, so lost messages are replaced and a backlog
//! is never queued twice.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    history::WORKER_LOST,
    queue::{self, Priority, TaskMsg},
    states::{self, ChunkState, JobKind, JobStatus, LIVE},
};

/// A condition on job `j`: it is not waiting behind an earlier job with its serialize key
/// (jobs with the same key start one at a time, in creation order). The statuses are written
/// out, not bound: a generic plan of a bound list cannot use the partial index of live jobs by
/// serialize key, and read every job the deployment keeps (100 ms a lease with 300,000 jobs;
/// PostgreSQL's plan cache chose it once the bench's `jobs` table had grown).
macro_rules! first_in_line {
    () => {
        "(j.status <> 'waiting' or j.serialize_key is null or not exists (
             select 1 from jobs o
             where o.serialize_key = j.serialize_key and o.status in ('waiting', 'running')
               and o.seq < j.seq))"
    };
}
pub(crate) use first_in_line;

/// A work item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// The job's own step: its plan, an export's finish, a deletion's whole work.
    Step(Uuid),
    Chunk {
        job_id: Uuid,
        chunk_no: i32,
    },
}

impl Item {
    pub fn of(task: &TaskMsg) -> Item {
        match *task {
            TaskMsg::Plan { job_id }
            | TaskMsg::ExportPlan { job_id }
            | TaskMsg::ExportFinish { job_id }
            | TaskMsg::DeleteRows { job_id } => Item::Step(job_id),
            TaskMsg::Chunk { job_id, chunk_no } | TaskMsg::ExportChunk { job_id, chunk_no } => {
                Item::Chunk { job_id, chunk_no }
            }
        }
    }

    pub fn job_id(self) -> Uuid {
        match self {
            Item::Step(job_id) | Item::Chunk { job_id, .. } => job_id,
        }
    }
}

/// A lease held: the item, who holds it, and what the attempt may spend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub item: Item,
    pub owner: String,
    /// This run's attempt number (1 = first).
    pub attempt: i32,
    pub max_attempts: i32,
}

/// Takes the lease of an item that is due, unleased (or whose lease expired) and still to do in
/// a live job, counting an attempt, and records the run (`store::history`); the run that held
/// the expired lease it takes over (lease rescue had not come yet) ends as lost. An item whose
/// lease was given back or handed on has no holder, so no run of it is ended here; and if the
/// holder changes while this statement waits for the row, the lease is not taken (the item is
/// queued again), so a run that just ended itself is never called lost. `None`: someone else runs it, it is done, or not yet due.
pub async fn acquire(
    pool: &PgPool,
    item: Item,
    owner: &str,
    ttl: Duration,
) -> sqlx::Result<Option<Lease>> {
    let ttl = ttl.as_secs_f64();
    let taken: Option<(i32, i32)> = match item {
        // Composed with the serialize-key condition it shares with `take_unqueued`, which
        // `sqlx::query!` cannot take: checked by the tests that run it.
        Item::Step(job_id) => {
            sqlx::query_as(concat!(
                "with taken as (
                     update jobs j set lease_owner = $2,
                         lease_expires_at = now() + make_interval(secs => $3),
                         attempts = j.attempts + 1
                     from (select lease_owner as previous from jobs where id = $1) p
                     -- (If the row changed since `p` was read, the update skips it.)
                     where j.id = $1 and j.lease_owner is not distinct from p.previous
                       and j.status in ('waiting', 'running') and j.run_after <= now()
                       and (j.lease_expires_at is null or j.lease_expires_at < now()) and ",
                first_in_line!(),
                "    returning j.id, j.attempts, j.max_failures_per_item, p.previous),
                 run as (insert into job_runs (run, job_id, attempt)
                         select $2, id, attempts from taken),
                 -- Only when there was a holder: tested once, before any run is read (the
                 -- open runs' index holds every run ended since the last vacuum).
                 lost as (update job_runs set ended_at = now(), outcome = 'lost', error = $4
                          where run = (select previous from taken) and ended_at is null
                            and (select previous from taken) is not null)
                 select attempts, max_failures_per_item from taken"
            ))
            .bind(job_id)
            .bind(owner)
            .bind(ttl)
            .bind(WORKER_LOST)
            .fetch_optional(pool)
            .await?
        }
        Item::Chunk { job_id, chunk_no } => sqlx::query!(
            r#"with taken as (
                   update job_chunks c set lease_owner = $3,
                       lease_expires_at = now() + make_interval(secs => $4),
                       attempts = c.attempts + 1
                   from jobs j,
                        (select lease_owner as previous from job_chunks
                         where job_id = $1 and chunk_no = $2) p
                   -- (If the row changed since `p` was read, the update skips it.)
                   where c.job_id = $1 and c.chunk_no = $2 and j.id = c.job_id and j.status = $5
                     and c.lease_owner is not distinct from p.previous
                     and c.state = $6 and c.run_after <= now()
                     and (c.lease_expires_at is null or c.lease_expires_at < now())
                   returning c.job_id, c.chunk_no, c.attempts, j.max_failures_per_item,
                       p.previous),
               run as (insert into job_runs (run, job_id, chunk_no, attempt)
                       select $3, job_id, chunk_no, attempts from taken),
               -- Only when there was a holder, as for a step.
               lost as (update job_runs set ended_at = now(), outcome = 'lost', error = $7
                        where run = (select previous from taken) and ended_at is null
                          and (select previous from taken) is not null)
               select attempts as "attempts!", max_failures_per_item as "max_failures_per_item!"
               from taken"#,
            job_id,
            chunk_no,
            owner,
            ttl,
            JobStatus::Running as JobStatus,
            ChunkState::Pending as ChunkState,
            WORKER_LOST,
        )
        .fetch_optional(pool)
        .await?
        .map(|row| (row.attempts, row.max_failures_per_item)),
    };
    Ok(taken.map(|(attempt, max_attempts)| Lease {
        item,
        owner: owner.to_owned(),
        attempt,
        max_attempts,
    }))
}

/// Extends a lease still held. `false` when it was lost, or the job is no longer live
/// (cancelled, failed): the run must stop.
pub async fn renew(pool: &PgPool, lease: &Lease, ttl: Duration) -> sqlx::Result<bool> {
    let ttl = ttl.as_secs_f64();
    let live = match lease.item {
        Item::Step(job_id) => {
            sqlx::query_scalar!(
                r#"update jobs set lease_expires_at = now() + make_interval(secs => $3)
               where id = $1 and lease_owner = $2
               returning status = any($4) as "live!""#,
                job_id,
                lease.owner,
                ttl,
                &LIVE[..] as &[JobStatus],
            )
            .fetch_optional(pool)
            .await?
        }
        Item::Chunk { job_id, chunk_no } => {
            sqlx::query_scalar!(
                r#"update job_chunks c set lease_expires_at = now() + make_interval(secs => $4)
               from jobs j
               where c.job_id = $1 and c.chunk_no = $2 and c.lease_owner = $3 and j.id = c.job_id
               returning j.status = $5 as "live!""#,
                job_id,
                chunk_no,
                lease.owner,
                ttl,
                JobStatus::Running as JobStatus,
            )
            .fetch_optional(pool)
            .await?
        }
    };
    Ok(live == Some(true))
}

/// Gives a lease back without counting the attempt: the run ended without failing (it had
/// nothing to do, or was stopped: shutdown, a cancel), by the worker after the run. A run that
/// did its work settled its attempts in its own transaction (a chunk marked done and its lease
/// freed, a plan sealed with the attempts reset, a small file imported at once with the plan's
/// lease freed, an export's finish begun with a fresh lease), so nothing is lost here.
pub async fn release(conn: impl sqlx::PgExecutor<'_>, lease: &Lease) -> sqlx::Result<()> {
    match lease.item {
        Item::Step(job_id) => {
            sqlx::query!(
                "update jobs set lease_owner = null, lease_expires_at = null,
                 attempts = greatest(attempts - 1, 0)
             where id = $1 and lease_owner = $2",
                job_id,
                lease.owner,
            )
            .execute(conn)
            .await?
        }
        Item::Chunk { job_id, chunk_no } => {
            sqlx::query!(
                "update job_chunks set lease_owner = null, lease_expires_at = null,
                 attempts = greatest(attempts - 1, 0)
             where job_id = $1 and chunk_no = $2 and lease_owner = $3",
                job_id,
                chunk_no,
                lease.owner,
            )
            .execute(conn)
            .await?
        }
    };
    Ok(())
}

/// What became of an item whose attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// It runs again after the backoff.
    Retry,
    /// That was its last attempt.
    OutOfAttempts,
    /// The lease had already been lost: nothing was recorded.
    LeaseLost,
}

/// Records a failed attempt in the caller's transaction: the item is free again after
/// `backoff`, or, out of attempts, a chunk becomes `failed` (a step stays as it is: its job is
/// failed by the caller).
pub async fn record_failure(
    conn: &mut PgConnection,
    lease: &Lease,
    error: &str,
    backoff: Duration,
) -> sqlx::Result<AfterFailure> {
    let out = lease.attempt >= lease.max_attempts;
    let recorded = match lease.item {
        Item::Step(job_id) => {
            sqlx::query!(
                "update jobs set lease_owner = null, lease_expires_at = null, last_error = $3,
                     run_after = now() + make_interval(secs => $4)
                 where id = $1 and lease_owner = $2",
                job_id,
                lease.owner,
                error,
                backoff.as_secs_f64(),
            )
            .execute(conn)
            .await?
            .rows_affected()
                > 0
        }
        Item::Chunk { job_id, chunk_no } => {
            let chunk = (job_id, chunk_no);
            states::chunk::fail_attempt(conn, chunk, &lease.owner, error, backoff, out).await?
        }
    };
    Ok(match (recorded, out) {
        (false, _) => AfterFailure::LeaseLost,
        (true, true) => AfterFailure::OutOfAttempts,
        (true, false) => AfterFailure::Retry,
    })
}

/// The job's next step (an export's finish) is due: a new ticket, whose message the caller
/// pushes in its transaction, with the step's lease free (the plan that queues it may still
/// hold it) and fresh attempts.
pub async fn next_step(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<Uuid> {
    sqlx::query_scalar!(
        "update jobs set ticket = gen_random_uuid(), lease_owner = null, lease_expires_at = null,
             attempts = 0, last_error = null, run_after = now()
         where id = $1 returning ticket",
        job_id
    )
    .fetch_one(conn)
    .await
}

pub use super::states::Expired;

impl Expired {
    pub fn item(&self) -> Item {
        match self.chunk_no {
            None => Item::Step(self.job_id),
            Some(chunk_no) => Item::Chunk {
                job_id: self.job_id,
                chunk_no,
            },
        }
    }
}

/// Frees the items of live jobs whose lease expired, in the caller's transaction (a chunk out
/// of attempts becomes `failed` with `reason`); returns them.
pub async fn free_expired(conn: &mut PgConnection, reason: &str) -> sqlx::Result<Vec<Expired>> {
    let mut freed = states::chunk::expire_leases(&mut *conn, reason).await?;
    let steps = sqlx::query_as!(
        Expired,
        r#"update jobs set lease_owner = null, lease_expires_at = null, last_error = $1
           where status = any($2) and lease_expires_at < now()
           returning id as job_id, null::integer as "chunk_no?", attempts,
               max_failures_per_item as max_attempts"#,
        reason,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(&mut *conn)
    .await?;
    freed.extend(steps);
    Ok(freed)
}

/// An item that needs a message: due, not leased, and without a live message.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct Unqueued {
    job_id: Uuid,
    kind: JobKind,
    chunk_no: Option<i32>,
    /// For a step: the job has yet to start (or start again, after a retry).
    waiting: bool,
    ticket: Uuid,
    /// The job's place in its owner's turns.
    ahead: i64,
}

/// Items that are due and free but have no live message (never queued, lost, or their last
/// attempt failed and the backoff is over), with a new ticket each (written here, in the
/// caller's transaction, so the caller's push uses it) and the priority of their job's turn. A
/// message is live while it waits, or while a worker that took it within `ttl` may still be
/// about to take the lease.
///
/// Composed from SQL fragments shared with [`acquire`] and `store::queue`, which
/// `sqlx::query!` cannot take: checked by the tests that run it.
pub async fn take_unqueued(
    conn: &mut PgConnection,
    ttl: Duration,
    limit: i64,
) -> sqlx::Result<Vec<(TaskMsg, Uuid, Priority)>> {
    let items: Vec<Unqueued> = sqlx::query_as(concat!(
        "with due as (
             select c.job_id, j.kind, c.chunk_no, false as waiting from job_chunks c
             join jobs j on j.id = c.job_id
             where c.state = $4 and j.status = $5 and c.run_after <= now()
               and c.lease_owner is null and not ",
        queue::message_is_live!("$1", "$2", "c.ticket"),
        "
             union all
             select j.id, j.kind, null, j.status = $6 from jobs j
             where j.status = any($7) and j.run_after <= now()
               -- Batches have no step; a job of a registered type's items are claimed over
               -- HTTP, not queued.
               and j.lease_owner is null and j.kind <> all($8)
               -- A step is to do: the start (and plan) of a waiting job, the plan of an
               -- unplanned one, or the finish of an export whose chunks are done.
               and (j.status = $6 or not j.sealed
                    or (j.kind = $9 and j.chunks_done = j.chunks_total
                        and j.result_upload_id is null))
               and ",
        first_in_line!(),
        "
               and not ",
        queue::message_is_live!("$1", "$2", "j.ticket"),
        "
             limit $3
         ),
         chunk_tickets as (
             update job_chunks c set ticket = gen_random_uuid() from due
             where due.chunk_no is not null and c.job_id = due.job_id and c.chunk_no = due.chunk_no
             returning c.job_id, c.chunk_no, c.ticket
         ),
         step_tickets as (
             update jobs j set ticket = gen_random_uuid() from due
             where due.chunk_no is null and j.id = due.job_id
             returning j.id as job_id, j.ticket
         ),
         -- Each job's turn: how many of its owner's live jobs were created before it, read
         -- once per owner from the index of live jobs by owner (as `store::jobs::ahead`).
         turns as (
             select o.id, row_number() over (partition by o.owner order by o.id) - 1 as ahead
             from jobs o
             where o.status in ('waiting', 'running')
               and o.owner in (select j.owner from jobs j join due on j.id = due.job_id)
         )
         select due.job_id, due.kind, due.chunk_no, due.waiting,
             coalesce(c.ticket, s.ticket) as ticket, coalesce(t.ahead, 0) as ahead
         from due
         left join chunk_tickets c on c.job_id = due.job_id and c.chunk_no = due.chunk_no
         left join step_tickets s on due.chunk_no is null and s.job_id = due.job_id
         left join turns t on t.id = due.job_id"
    ))
    .bind(queue::QUEUE)
    .bind(ttl.as_secs_f64())
    .bind(limit)
    .bind(ChunkState::Pending)
    .bind(JobStatus::Running)
    .bind(JobStatus::Waiting)
    .bind(LIVE)
    .bind([JobKind::Batch, JobKind::Items])
    .bind(JobKind::Export)
    .fetch_all(conn)
    .await?;
    Ok(items
        .iter()
        .map(|item| {
            let ahead = item.ahead;
            let turn = match item.chunk_no {
                Some(_) => Priority::Resume { ahead },
                None => Priority::Turn { ahead },
            };
            (item.task(), item.ticket, turn)
        })
        .collect())
}

impl Unqueued {
    fn task(&self) -> TaskMsg {
        let job_id = self.job_id;
        match (self.kind, self.chunk_no) {
            (JobKind::Export, Some(chunk_no)) => TaskMsg::ExportChunk { job_id, chunk_no },
            (_, Some(chunk_no)) => TaskMsg::Chunk { job_id, chunk_no },
            // Unsealed exports are never running (their plan starts and seals them at once).
            (JobKind::Export, None) if self.waiting => TaskMsg::ExportPlan { job_id },
            (JobKind::Export, None) => TaskMsg::ExportFinish { job_id },
            // Never sealed: a deletion is one step from start to end.
            (JobKind::Delete, None) => TaskMsg::DeleteRows { job_id },
            (JobKind::Import, None) => TaskMsg::Plan { job_id },
            // Never selected (see the query); a plan task would find no import and end.
            (JobKind::Batch | JobKind::Items, None) => TaskMsg::Plan { job_id },
        }
    }
}
