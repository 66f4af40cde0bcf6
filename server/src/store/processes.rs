//! The worker processes (`worker_processes`, migration 20): each registers when its workers
//! start, beats while they run and says when it stops, so the queue health page can tell who
//! is alive, since when, and what each runs now. Nothing decides correctness by it: leases do.

use std::time::Duration;

use app::queue_health::{ProcessState, WorkerProcess};
use sqlx::{PgConnection, PgPool};

/// How long a process that stopped or went quiet stays on the page.
const SHOWN_FOR: Duration = Duration::from_secs(3600);
/// How long a row is kept after its process was last seen.
const KEPT_FOR: Duration = Duration::from_secs(24 * 3600);

/// A worker process, as it says it is alive.
#[derive(Debug, Clone)]
pub struct Beat {
    pub process: String,
    pub host: String,
    pub pid: u32,
    pub slots: usize,
    /// How often it beats.
    pub every: Duration,
}

/// The process is alive now: its row is written (the first beat, or again after a database
/// restored without it) or its `seen_at` renewed. It also forgets processes not seen for a
/// day (a handful of rows, so every beat may).
pub async fn beat(pool: &PgPool, me: &Beat) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "insert into worker_processes (process, host, pid, slots, beat_secs)
         values ($1, $2, $3, $4, $5)
         on conflict (process) do update set seen_at = now(), stopped_at = null",
        me.process,
        me.host,
        i32::try_from(me.pid).unwrap_or(i32::MAX),
        i32::try_from(me.slots).unwrap_or(i32::MAX),
        me.every.as_secs_f64(),
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "delete from worker_processes where seen_at < now() - make_interval(secs => $1)",
        KEPT_FOR.as_secs_f64(),
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The process's workers have stopped, their leases given back.
pub async fn stopped(pool: &PgPool, process: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "update worker_processes set stopped_at = now(), seen_at = now() where process = $1",
        process
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The processes seen within the last hour (alive ones beat far more often), newest first,
/// each with the leases it holds now: its open runs (few, from their index) whose lease it
/// still holds, so a run its worker could not end, or one of a job that ended before the
/// lease was rescued, does not count.
pub async fn list(conn: &mut PgConnection) -> sqlx::Result<Vec<WorkerProcess>> {
    let rows = sqlx::query!(
        r#"with running as (
               select split_part(r.run, '/', 1) as process, count(*) as runs
               from job_runs r
               where r.ended_at is null
                 and case when r.chunk_no is null
                          then exists (select 1 from jobs j
                                       where j.id = r.job_id and j.lease_owner = r.run
                                         and j.lease_expires_at > now())
                          else exists (select 1 from job_chunks c
                                       where c.job_id = r.job_id and c.chunk_no = r.chunk_no
                                         and c.lease_owner = r.run
                                         and c.lease_expires_at > now())
                     end
               group by 1)
           select p.process, p.host, p.pid, p.slots, p.started_at, p.seen_at,
                  p.stopped_at is not null as "stopped!",
                  p.seen_at < now() - make_interval(secs => 3 * p.beat_secs) as "quiet!",
                  coalesce(r.runs, 0) as "running!"
           from worker_processes p left join running r using (process)
           where p.seen_at >= now() - make_interval(secs => $1)
           order by p.started_at desc, p.process"#,
        SHOWN_FOR.as_secs_f64(),
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|p| WorkerProcess {
            state: match (p.stopped, p.quiet) {
                (true, _) => ProcessState::Stopped,
                (false, true) => ProcessState::Gone,
                (false, false) => ProcessState::Alive,
            },
            process: p.process,
            host: p.host,
            pid: p.pid,
            slots: p.slots,
            started_at: p.started_at,
            seen_at: p.seen_at,
            running: p.running,
        })
        .collect())
}
