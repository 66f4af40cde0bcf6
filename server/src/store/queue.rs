//! The task messages, and every use of apalis's own tables (`apalis.jobs`): queueing,
//! whether an item's message is still live, and pruning old messages. Messages carry ids only;
//! everything else is read from our tables when the task runs, so a stale or duplicated
//! message is harmless.
//!
//! apalis-postgres is pinned to an exact version (`Cargo.toml`) because these statements rely
//! on its table layout: `job_type`, `idempotency_key`, `status` (`Pending`, `Queued`,
//! `Running`, `Done`, `Failed`, `Killed`), `lock_at`, `done_at`, `run_at`, `attempts`,
//! `max_attempts`. The `schema_pins` test pins that layout, and `make sqlx` applies apalis's
//! migrations too, so `prune` is checked at compile time like our own statements.
//! [`message_is_live!`] is a fragment of `leases::take_unqueued`, which `sqlx::query!` cannot
//! take (it reads only literals): that statement is checked by the tests that run it.
//!
//! Migration 32 adapts apalis's own tables (apalis's migrations run first: `db::migrate`) so
//! that a task costs the same however many messages the queue keeps: a message apalis is done
//! with lets go of its worker (apalis finds messages by `lock_by` to acknowledge each task and,
//! at every heartbeat, to find dead workers' messages, which read every message those workers
//! had ever run), the fetch (`apalis.get_jobs`) is PL/pgSQL so that it keeps its plan, and two
//! indexes that repeat others are gone. The migration says what each was measured to cost;
//! `schema_pins` fails on a bump of apalis-postgres that undoes them. apalis's `task-tracking`
//! feature must stay off: its heartbeat counts a worker's acknowledged messages by `lock_by`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

/// The apalis queue all Conveyor tasks go through.
pub const QUEUE: &str = "conveyor";

/// Deliveries of one message before apalis gives up on it. Our own attempt count (see
/// [`super::leases`]) is what limits runs; this only bounds apalis's redeliveries of a
/// message whose item is already leased or done.
pub const MAX_ATTEMPTS: usize = 25;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "camelCase")]
pub enum TaskMsg {
    Plan { job_id: Uuid },
    Chunk { job_id: Uuid, chunk_no: i32 },
    ExportPlan { job_id: Uuid },
    ExportChunk { job_id: Uuid, chunk_no: i32 },
    ExportFinish { job_id: Uuid },
    DeleteRows { job_id: Uuid },
}

impl TaskMsg {
    /// Every task's name.
    pub const KINDS: [&'static str; 6] = [
        "plan",
        "chunk",
        "exportPlan",
        "exportChunk",
        "exportFinish",
        "deleteRows",
    ];

    /// The task's name, as its message spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            TaskMsg::Plan { .. } => "plan",
            TaskMsg::Chunk { .. } => "chunk",
            TaskMsg::ExportPlan { .. } => "exportPlan",
            TaskMsg::ExportChunk { .. } => "exportChunk",
            TaskMsg::ExportFinish { .. } => "exportFinish",
            TaskMsg::DeleteRows { .. } => "deleteRows",
        }
    }
}

/// Which messages apalis hands out first: it fetches the highest priority, then the oldest.
///
/// Owners take turns: a job's task is ranked by how many of its owner's live jobs are ahead of
/// the job (and a chunk also by its place in its job), so one owner's backlog of 10,000 jobs
/// does not make another owner's one job wait for all of them: that job's first task ranks with
/// the backlog's first. The rank is fixed when the task is queued; a task queued again takes
/// its job's turn as it is then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// A job's task with `ahead` of its owner's live jobs created before it
    /// ([`super::jobs::ahead`]).
    Turn { ahead: i64 },
    /// A chunk of a running job queued again (its worker died or gave it back, its retry's
    /// backoff ended, a retry re-opened it): at the head of its job's turn, before the job's
    /// chunks not yet run, so it waits behind at most the heads of other owners' turns.
    Resume { ahead: i64 },
}

/// The priority of a turn with nothing ahead: turns count down from it.
/// (Migration 28 lifted the messages queued before turns, at 0 and 1, to it and above.)
const FIRST_TURN: i64 = 1_000_000;

impl Priority {
    /// The priority apalis stores for `task`.
    fn of(self, task: &TaskMsg) -> usize {
        let rank = match self {
            Priority::Turn { ahead } => {
                let place = match task {
                    TaskMsg::Chunk { chunk_no, .. } | TaskMsg::ExportChunk { chunk_no, .. } => {
                        i64::from(*chunk_no)
                    }
                    _ => 0,
                };
                ahead.saturating_add(place)
            }
            Priority::Resume { ahead } => ahead,
        };
        (FIRST_TURN - rank.clamp(0, FIRST_TURN)) as usize
    }
}

/// Queues tasks inside the caller's transaction: they exist exactly when its changes commit.
/// Each goes with its item's ticket (see [`super::leases`]), its idempotency key.
pub async fn push(
    conn: &mut PgConnection,
    tasks: &[(TaskMsg, Uuid)],
    priority: Priority,
) -> Result<(), apalis_postgres::Error> {
    push_ranked(
        conn,
        tasks.iter().map(|&(task, ticket)| (task, ticket, priority)),
    )
    .await
}

/// [`push`], each task with a priority of its own.
pub async fn push_ranked(
    conn: &mut PgConnection,
    tasks: impl IntoIterator<Item = (TaskMsg, Uuid, Priority)>,
) -> Result<(), apalis_postgres::Error> {
    let tasks = tasks
        .into_iter()
        .map(|(task, ticket, priority)| {
            let priority = priority.of(&task);
            let bytes = serde_json::to_vec(&task).expect("task messages always serialize");
            apalis::prelude::TaskBuilder::new(bytes)
                .max_attempts(MAX_ATTEMPTS)
                .idempotency_key(ticket.to_string())
                .priority(priority)
                .build()
        })
        .collect();
    apalis_postgres::queries::push_tasks(conn, QUEUE, tasks).await
}

/// An SQL condition: the message with idempotency key `$ticket` (a uuid column) in queue
/// `$queue` (a parameter) is live: it waits, or a worker took it within `$ttl` seconds (a
/// parameter) and may still be about to take its item's lease.
macro_rules! message_is_live {
    ($queue:literal, $ttl:literal, $ticket:literal) => {
        concat!(
            "exists (select 1 from apalis.jobs m
                 where m.job_type = ",
            $queue,
            " and m.idempotency_key = ",
            $ticket,
            "::text
                   and (m.status = 'Pending'
                        or m.status in ('Queued', 'Running')
                           and m.lock_at > now() - make_interval(secs => ",
            $ttl,
            ")))"
        )
    };
}
pub(crate) use message_is_live;

/// Messages of one task that are due and not taken yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    pub task: String,
    pub count: i64,
    /// How long the oldest has been due.
    pub oldest_secs: f64,
}

/// The messages due and not taken (as apalis fetches them: pending, or failed with attempts
/// left), per task; tasks with none are left out.
pub async fn backlog(conn: &mut PgConnection) -> sqlx::Result<Vec<Due>> {
    sqlx::query_as!(
        Due,
        r#"select convert_from(job, 'UTF8')::jsonb ->> 'task' as "task!",
                  count(*) as "count!",
                  extract(epoch from now() - min(run_at))::float8 as "oldest_secs!"
           from apalis.jobs
           where job_type = $1
             and (status = 'Pending' or status = 'Failed' and attempts < max_attempts)
             and run_at <= now()
           group by 1"#,
        QUEUE,
    )
    .fetch_all(conn)
    .await
}

/// How many messages are due and not taken, of every task.
pub async fn due(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"select count(*) as "due!" from apalis.jobs
           where job_type = $1
             and (status = 'Pending' or status = 'Failed' and attempts < max_attempts)
             and run_at <= now()"#,
        QUEUE,
    )
    .fetch_one(conn)
    .await
}

/// How long a worker apalis recorded may be silent before it is forgotten: a day, long after its
/// messages were queued again (apalis does that after three missed heartbeats).
const WORKER_FORGOTTEN_AFTER: Duration = Duration::from_secs(86_400);

/// Deletes up to `limit` of the workers apalis recorded for our queue that have been silent for
/// [`WORKER_FORGOTTEN_AFTER`] and that no message names (since migration 32, only a queued or
/// running one can); how many. apalis records every worker it starts (each slot of each
/// process start, named anew) and never deletes one, and every worker's heartbeat searches
/// them all for dead workers' messages: 4–6 ms with 50,000 stopped workers, 0.07 ms with none.
/// Held first, passing over one a transaction holds. A worker that wakes after a day and
/// fetches a message as it is deleted: if its fetch commits first, the delete's foreign key
/// fails, and in a savepoint of its own nothing is deleted this time rather than the caller's
/// whole work; if the delete commits first, the fetch fails, and `jobs::worker` starts the
/// worker again under a new name.
pub async fn prune_workers(conn: &mut PgConnection, limit: i64) -> sqlx::Result<u64> {
    let mut savepoint = conn.begin().await?;
    let deleted = sqlx::query!(
        "delete from apalis.workers where id in (
             select w.id from apalis.workers w
             where w.worker_type = $1
               and w.last_seen < now() - make_interval(secs => $2)
               and not exists (select 1 from apalis.jobs m where m.lock_by = w.id)
             limit $3
             for update skip locked)",
        QUEUE,
        WORKER_FORGOTTEN_AFTER.as_secs_f64(),
        limit,
    )
    .execute(&mut *savepoint)
    .await;
    match deleted {
        Ok(deleted) => {
            savepoint.commit().await?;
            Ok(deleted.rows_affected())
        }
        Err(sqlx::Error::Database(err)) if err.is_foreign_key_violation() => {
            savepoint.rollback().await?;
            Ok(0)
        }
        Err(err) => Err(err),
    }
}

/// Deletes up to `limit` of our messages that apalis is done with (done, killed, or failed for
/// good) and that ended more than `age` ago; how many.
pub async fn prune(conn: &mut PgConnection, age: Duration, limit: i64) -> sqlx::Result<u64> {
    let deleted = sqlx::query!(
        "delete from apalis.jobs where id in (
             select id from apalis.jobs
             where job_type = $1
               and (status in ('Done', 'Killed') or status = 'Failed' and attempts >= max_attempts)
               and coalesce(done_at, run_at) < now() - make_interval(secs => $2)
             limit $3)",
        QUEUE,
        age.as_secs_f64(),
        limit,
    )
    .execute(conn)
    .await?;
    Ok(deleted.rows_affected())
}
