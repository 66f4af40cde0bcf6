//! A job's history (`app::history`): the runs of its items, written where leases are taken
//! (`leases::acquire`) and ended here; its changes of status, written by a trigger (migration
//! 17); and the reads that put them together with its chunks and what it waits for.

use app::history::{Chunk, Chunks, JobHistory, Run, RunOutcome, Transition, Waiting};
use app::model::{JobKind, JobStatus};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{queue, states::LIVE};
use crate::{auth::Sees, store::states::Expired};

/// Why a run ended as lost (and its item's last error, when lease rescue freed it).
pub const WORKER_LOST: &str =
    "The worker running this stopped responding (it crashed, was killed, or lost the database).";

/// Ends a run (`run`: its lease owner) with how it went, unless it has ended already. A chunk's
/// run ends `ok` in the transaction that commits its work (a worker dying right after still
/// leaves the truth); its worker's own end then changes nothing.
pub async fn end_run(
    conn: impl sqlx::PgExecutor<'_>,
    run: &str,
    outcome: RunOutcome,
    error: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update job_runs set ended_at = now(), outcome = $2, error = $3
         where run = $1 and ended_at is null",
        run,
        outcome as RunOutcome,
        error,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends these runs, all as `outcome`, in one statement.
pub async fn end_runs(
    conn: impl sqlx::PgExecutor<'_>,
    runs: &[&str],
    outcome: RunOutcome,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update job_runs set ended_at = now(), outcome = $2
         where run = any($1) and ended_at is null",
        runs as &[&str],
        outcome as RunOutcome,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends, as lost, the runs of items whose lease expired (in lease rescue's transaction).
pub async fn lose_runs(
    conn: &mut PgConnection,
    expired: &[Expired],
    reason: &str,
) -> sqlx::Result<()> {
    if expired.is_empty() {
        return Ok(());
    }
    let jobs: Vec<Uuid> = expired.iter().map(|e| e.job_id).collect();
    let chunks: Vec<i32> = expired.iter().map(|e| e.chunk_no.unwrap_or(-1)).collect();
    sqlx::query!(
        "update job_runs r set ended_at = now(), outcome = 'lost', error = $3
         from unnest($1::uuid[], $2::int[]) as e(job_id, chunk_no)
         where r.job_id = e.job_id and coalesce(r.chunk_no, -1) = e.chunk_no
           and r.ended_at is null",
        &jobs,
        &chunks,
        reason,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The history of a job `sees` covers; `None` when there is no such job. Which worker ran
/// what, and the deployment's queue, are shown to operators (those who see everything) only.
pub async fn read(pool: &PgPool, job_id: Uuid, sees: Sees) -> sqlx::Result<Option<JobHistory>> {
    let operator = sees == Sees::Everything;
    let mut conn = pool.acquire().await?;
    let visible = sqlx::query_scalar!(
        r#"select exists (select 1 from jobs where id = $1 and ($2::uuid is null or owner = $2))
           as "visible!""#,
        job_id,
        sees.owner_filter(),
    )
    .fetch_one(&mut *conn)
    .await?;
    if !visible {
        return Ok(None);
    }
    let transitions = sqlx::query_as!(
        Transition,
        r#"select at, from_status as "from: JobStatus", to_status as "to: JobStatus"
           from job_transitions where job_id = $1 order by id"#,
        job_id
    )
    .fetch_all(&mut *conn)
    .await?;
    // A run still open whose worker is gone reads as lost: its item's lease, still its own,
    // expired (nothing came to free it: the job ended), or its job ended a minute ago.
    let mut runs = sqlx::query_as!(
        Run,
        r#"select r.chunk_no + 1 as part, r.attempt,
                  case when $3 then split_part(r.run, '/', 1) end as worker,
                  r.started_at, r.ended_at,
                  coalesce(r.outcome, case when gone then 'lost'::run_outcome end)
                      as "outcome: RunOutcome",
                  coalesce(r.error, case when gone then $4 end) as error
           from (select r.*, r.ended_at is null
                            and ((case when r.chunk_no is null then j.lease_owner
                                       else c.lease_owner end) = r.run
                                  and (case when r.chunk_no is null then j.lease_expires_at
                                            else c.lease_expires_at end) < now()
                                 or j.finished_at < now() - interval '1 minute') as gone
                 from job_runs r
                 join jobs j on j.id = r.job_id
                 left join job_chunks c on c.job_id = r.job_id and c.chunk_no = r.chunk_no
                 where r.job_id = $1
                 order by r.started_at desc limit $2) r
           order by r.started_at desc"#,
        job_id,
        JobHistory::RUNS,
        operator,
        WORKER_LOST,
    )
    .fetch_all(&mut *conn)
    .await?;
    runs.reverse();
    let counts = sqlx::query!(
        r#"select count(*) filter (where state = 'pending') as "pending!",
                  count(*) filter (where state = 'done') as "done!",
                  count(*) filter (where state = 'failed') as "failed!"
           from job_chunks where job_id = $1"#,
        job_id
    )
    .fetch_one(&mut *conn)
    .await?;
    let notable = sqlx::query_as!(
        Chunk,
        r#"select chunk_no + 1 as "part!", first_row, row_count, state::text as "state!",
                  attempts, case when $3 then split_part(lease_owner, '/', 1) end as leased_by,
                  last_error
           from job_chunks
           where job_id = $1 and (state <> 'done' or attempts > 1)
           order by chunk_no limit $2"#,
        job_id,
        Chunks::SHOWN,
        operator,
    )
    .fetch_all(&mut *conn)
    .await?;
    let waiting = waiting(&mut conn, job_id, operator).await?;
    Ok(Some(JobHistory {
        transitions,
        runs,
        chunks: Chunks {
            pending: counts.pending,
            done: counts.done,
            failed: counts.failed,
            notable,
        },
        waiting,
    }))
}

/// What a waiting job waits for; `None` when it is not waiting. How many tasks the whole
/// deployment has due is for operators (`operator`) only.
async fn waiting(
    conn: &mut PgConnection,
    job_id: Uuid,
    operator: bool,
) -> sqlx::Result<Option<Waiting>> {
    let Some(job) = sqlx::query!(
        // Keys are stored as `<owner>:<key>` (`jobs::create`); people gave only the key.
        r#"select j.attempts, j.run_after, j.kind = $4 as "claimed_by_workers!", j.sealed,
                  j.chunks_total as items,
                  substr(j.serialize_key, length(j.owner::text) + 2) as key,
                  (select o.id from jobs o
                   where o.serialize_key = j.serialize_key and o.status = any($3) and o.seq < j.seq
                   order by o.seq limit 1) as ahead
           from jobs j where j.id = $1 and j.status = $2"#,
        job_id,
        JobStatus::Waiting as JobStatus,
        &LIVE[..] as &[JobStatus],
        JobKind::Items as JobKind,
    )
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    if let (Some(id), Some(key)) = (job.ahead, job.key) {
        return Ok(Some(Waiting::BehindJob { id, key }));
    }
    if job.claimed_by_workers {
        return Ok(Some(Waiting::Claim {
            items: i64::from(job.items),
            sealed: job.sealed,
        }));
    }
    if job.attempts > 0 && job.run_after > chrono::Utc::now() {
        return Ok(Some(Waiting::RetryAt { at: job.run_after }));
    }
    let due = if operator {
        Some(queue::due(conn).await?)
    } else {
        None
    };
    Ok(Some(Waiting::Queue { due }))
}
