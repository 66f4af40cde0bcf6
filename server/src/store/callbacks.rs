//! Completion callbacks' SQL: claiming ended jobs whose final state is still to be POSTed,
//! and recording each try (see `jobs::callbacks`).

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::notify;

/// A callback claimed for one try.
#[derive(Debug)]
pub struct Due {
    pub job_id: Uuid,
    pub url: String,
    pub attempt: i32,
}

/// Claims up to `limit` ended jobs whose callback is due, for `hold` (no other process sends
/// them meanwhile), counting a try.
pub async fn claim_due(pool: &PgPool, limit: i64, hold: Duration) -> sqlx::Result<Vec<Due>> {
    sqlx::query_as!(
        Due,
        r#"update jobs set callback_next_at = now() + make_interval(secs => $2),
             callback_attempts = callback_attempts + 1
         where id in (select id from jobs
                      where callback_url is not null and callback_delivered_at is null
                        and callback_gave_up_at is null and finished_at is not null
                        and coalesce(callback_next_at, '-infinity') <= now()
                      order by callback_next_at nulls first limit $1
                      for update skip locked)
         returning id as job_id, callback_url as "url!", callback_attempts as attempt"#,
        limit,
        hold.as_secs_f64()
    )
    .fetch_all(pool)
    .await
}

/// How a try went.
#[derive(Debug)]
pub enum Outcome<'a> {
    /// A 2xx answer: never sent again.
    Delivered { status: u16 },
    /// Tried again after `backoff`, unless that is past `horizon` after the job ended.
    Failed {
        status: Option<u16>,
        error: &'a str,
        backoff: Duration,
        horizon: Duration,
    },
}

/// Records a try and what comes next; the job's view (which shows its callback) changes, so
/// its version does too, and its watchers are told.
pub async fn record(pool: &PgPool, due: &Due, outcome: Outcome<'_>) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let (status, error) = match &outcome {
        Outcome::Delivered { status } => (Some(*status), None),
        Outcome::Failed { status, error, .. } => (*status, Some(*error)),
    };
    sqlx::query!(
        "insert into callback_attempts (job_id, attempt, status, error) values ($1, $2, $3, $4)
         on conflict do nothing",
        due.job_id,
        due.attempt,
        status.map(i32::from),
        error,
    )
    .execute(&mut *tx)
    .await?;
    let version: i64 = match outcome {
        Outcome::Delivered { .. } => {
            sqlx::query_scalar!(
                "update jobs set callback_delivered_at = now(), version = version + 1
                 where id = $1 returning version",
                due.job_id,
            )
            .fetch_one(&mut *tx)
            .await?
        }
        Outcome::Failed {
            backoff, horizon, ..
        } => {
            sqlx::query_scalar!(
                "update jobs set version = version + 1,
                     callback_next_at = now() + make_interval(secs => $2),
                     callback_gave_up_at = case
                         when now() + make_interval(secs => $2)
                              > finished_at + make_interval(secs => $3)
                         then now() end
                 where id = $1 returning version",
                due.job_id,
                backoff.as_secs_f64(),
                horizon.as_secs_f64(),
            )
            .fetch_one(&mut *tx)
            .await?
        }
    };
    notify::job_changed(&mut tx, due.job_id, version).await?;
    tx.commit().await
}
