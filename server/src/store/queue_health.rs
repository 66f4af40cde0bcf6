//! The reads behind the queue health page (`app::queue_health`): processes
//! ([`super::processes`]), the backlog ([`super::queue::backlog`]), the job waiting longest,
//! and throughput by time window. Each window is read from its start through indexes on time
//! (migration 20), so it reads only that window's chunks, changes of status and lost runs,
//! however many jobs there are.

use std::time::Duration;

use app::queue_health::{Bucket, OldestWaiting, QueueHealth, TaskBacklog, Throughput};
use sqlx::{PgConnection, PgPool};

use super::{processes, queue};

/// A window of time: `buckets` buckets of `bucket`, the last one holding now.
#[derive(Debug, Clone, Copy)]
struct Window {
    bucket: Duration,
    buckets: u32,
}

/// The last hour, by minute.
const HOUR: Window = Window {
    bucket: Duration::from_secs(60),
    buckets: 60,
};
/// The last day, by quarter of an hour.
const DAY: Window = Window {
    bucket: Duration::from_secs(15 * 60),
    buckets: 96,
};

/// Everything the page shows, read now: in one read-only snapshot, so every figure is of the
/// same instant (`now()` is the transaction's).
pub async fn read(pool: &PgPool) -> sqlx::Result<QueueHealth> {
    let mut tx = pool.begin().await?;
    sqlx::query!("set transaction isolation level repeatable read, read only")
        .execute(&mut *tx)
        .await?;
    let at = sqlx::query_scalar!(r#"select now() as "now!""#)
        .fetch_one(&mut *tx)
        .await?;
    let backlog = queue::backlog(&mut tx)
        .await?
        .into_iter()
        .map(|due| TaskBacklog {
            task: due.task,
            due: due.count,
            oldest_secs: due.oldest_secs,
        })
        .collect();
    let health = QueueHealth {
        at,
        processes: processes::list(&mut tx).await?,
        backlog,
        oldest_waiting: oldest_waiting(&mut tx).await?,
        hour: throughput(&mut tx, HOUR).await?,
        day: throughput(&mut tx, DAY).await?,
    };
    tx.commit().await?;
    Ok(health)
}

/// The waiting job due longest (since it was created, or retried), of those a worker runs (a
/// batch waits for its children); one in a retry's backoff is not due yet.
async fn oldest_waiting(conn: &mut PgConnection) -> sqlx::Result<Option<OldestWaiting>> {
    sqlx::query_as!(
        OldestWaiting,
        r#"select id, created_at,
                  extract(epoch from now() - run_after)::float8 as "waited_secs!"
           from jobs
           where status = 'waiting' and kind not in ('batch', 'items') and run_after <= now()
           order by run_after
           limit 1"#
    )
    .fetch_optional(conn)
    .await
}

/// Rows done, jobs ended and runs lost in each bucket of `window`. Buckets start on whole
/// multiples of their length (minutes, quarter hours). The window's start is read first and
/// passed in, so each table is read through its index on time from there (a bound the
/// planner cannot see would read the whole table).
async fn throughput(conn: &mut PgConnection, window: Window) -> sqlx::Result<Throughput> {
    let size = window.bucket.as_secs_f64();
    let buckets = i32::try_from(window.buckets).unwrap_or(i32::MAX);
    let from = sqlx::query_scalar!(
        r#"select date_bin(make_interval(secs => $1), now(), timestamptz '2000-01-01 00:00+00')
                  - make_interval(secs => $1 * ($2::int - 1)) as "from!""#,
        size,
        buckets,
    )
    .fetch_one(&mut *conn)
    .await?;
    let rows = sqlx::query!(
        r#"with done as (
               select floor(extract(epoch from done_at - $3::timestamptz) / $1::float8)::int as n,
                      sum(row_count)::bigint as rows
               from job_chunks
               where done_at >= $3 and state = 'done'
               group by 1),
           ended as (
               select floor(extract(epoch from at - $3) / $1)::int as n,
                      count(*) filter (where to_status = 'completed') as completed,
                      count(*) filter (where to_status = 'failed') as failed,
                      count(*) filter (where to_status = 'cancelled') as cancelled
               from job_transitions
               where at >= $3 and to_status in ('completed', 'failed', 'cancelled')
               group by 1),
           lost as (
               select floor(extract(epoch from ended_at - $3) / $1)::int as n,
                      count(*) as rescued
               from job_runs
               where outcome = 'lost' and ended_at >= $3
               group by 1)
           select coalesce(d.rows, 0) as "rows!",
                  coalesce(e.completed, 0) as "completed!",
                  coalesce(e.failed, 0) as "failed!",
                  coalesce(e.cancelled, 0) as "cancelled!",
                  coalesce(l.rescued, 0) as "rescued!"
           from generate_series(0, $2::int - 1) as b(n)
           left join done d on d.n = b.n
           left join ended e on e.n = b.n
           left join lost l on l.n = b.n
           order by b.n"#,
        size,
        buckets,
        from,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Throughput {
        from,
        bucket_secs: window.bucket.as_secs() as i64,
        buckets: rows
            .into_iter()
            .map(|r| Bucket {
                rows: r.rows,
                completed: r.completed,
                failed: r.failed,
                cancelled: r.cancelled,
                rescued: r.rescued,
            })
            .collect(),
    })
}
