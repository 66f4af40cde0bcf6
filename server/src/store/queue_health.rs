//! The reads behind the queue health page (`app::queue_health`): processes
//! ([`super::processes`]), the backlog ([`super::queue::backlog`]), the job waiting longest,
//! and throughput by time window. Each window is one statement over indexes on time (migration
//! 20), so it reads only that window's chunks, changes of status and lost runs, however many
//! jobs there are.

use std::time::Duration;

use app::queue_health::{Bucket, OldestWaiting, QueueHealth, TaskBacklog, Throughput};
use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{processes, queue};

/// A window of time: `buckets` buckets of `bucket`, the last one holding now.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub bucket: Duration,
    pub buckets: u32,
}

/// The last hour, by minute.
pub const HOUR: Window = Window {
    bucket: Duration::from_secs(60),
    buckets: 60,
};
/// The last day, by quarter of an hour.
pub const DAY: Window = Window {
    bucket: Duration::from_secs(15 * 60),
    buckets: 96,
};

/// Everything the page shows, read now.
pub async fn read(pool: &PgPool) -> sqlx::Result<QueueHealth> {
    let mut conn = pool.acquire().await?;
    let at = sqlx::query_scalar!(r#"select now() as "now!""#)
        .fetch_one(&mut *conn)
        .await?;
    let backlog = queue::backlog(&mut conn)
        .await?
        .into_iter()
        .map(|due| TaskBacklog {
            task: due.task,
            due: due.count,
            oldest_secs: due.oldest_secs,
        })
        .collect();
    drop(conn);
    Ok(QueueHealth {
        at,
        processes: processes::list(pool).await?,
        backlog,
        oldest_waiting: oldest_waiting(pool).await?,
        hour: throughput(pool, HOUR).await?,
        day: throughput(pool, DAY).await?,
    })
}

/// The waiting job created first, of those a worker runs (a batch waits for its children).
/// Ids are UUIDv7, so the first by id is the oldest, read from the index of open jobs.
async fn oldest_waiting(pool: &PgPool) -> sqlx::Result<Option<OldestWaiting>> {
    sqlx::query_as!(
        OldestWaiting,
        r#"select id, created_at,
                  extract(epoch from now() - created_at)::float8 as "waited_secs!"
           from jobs
           where status = 'waiting' and kind <> 'batch'
           order by id
           limit 1"#
    )
    .fetch_optional(pool)
    .await
}

/// Rows done, jobs ended and runs lost in each bucket of `window`. Buckets start on whole
/// multiples of their length (minutes, quarter hours), so the charts do not shift between reads.
pub async fn throughput(pool: &PgPool, window: Window) -> sqlx::Result<Throughput> {
    let size = window.bucket.as_secs_f64();
    let rows = sqlx::query!(
        r#"with span as (
               select date_bin(make_interval(secs => $1), now(), timestamptz '2000-01-01')
                      - make_interval(secs => $1 * ($2 - 1)) as "from"),
           buckets as (select generate_series(0, $2 - 1) as n),
           done as (
               select floor(extract(epoch from c.done_at - s."from") / $1)::int as n,
                      sum(c.row_count)::bigint as rows
               from job_chunks c, span s
               where c.done_at >= s."from" and c.done_at is not null and c.state = 'done'
               group by 1),
           ended as (
               select floor(extract(epoch from t.at - s."from") / $1)::int as n,
                      count(*) filter (where t.to_status = 'completed') as completed,
                      count(*) filter (where t.to_status = 'failed') as failed,
                      count(*) filter (where t.to_status = 'cancelled') as cancelled
               from job_transitions t, span s
               where t.at >= s."from"
                 and t.to_status in ('completed', 'failed', 'cancelled')
               group by 1),
           lost as (
               select floor(extract(epoch from r.ended_at - s."from") / $1)::int as n,
                      count(*) as rescued
               from job_runs r, span s
               where r.outcome = 'lost' and r.ended_at >= s."from"
               group by 1)
           select s."from" as "from!", b.n as "n!",
                  coalesce(d.rows, 0) as "rows!",
                  coalesce(e.completed, 0) as "completed!",
                  coalesce(e.failed, 0) as "failed!",
                  coalesce(e.cancelled, 0) as "cancelled!",
                  coalesce(l.rescued, 0) as "rescued!"
           from span s cross join buckets b
           left join done d on d.n = b.n
           left join ended e on e.n = b.n
           left join lost l on l.n = b.n
           order by b.n"#,
        size,
        i32::try_from(window.buckets).unwrap_or(i32::MAX),
    )
    .fetch_all(pool)
    .await?;
    let from: Option<DateTime<Utc>> = rows.first().map(|r| r.from);
    Ok(Throughput {
        from: from.unwrap_or_else(Utc::now),
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
