//! Completion callbacks' SQL: claiming ended jobs whose final state is still to be POSTed,
//! and recording how each try went (see `jobs::callbacks`).

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

/// Tries per callback before giving up.
pub const MAX_TRIES: i32 = 10;

/// Claims up to `limit` ended jobs whose callback is due, for `hold` (no other process sends
/// them meanwhile), counting a try; returns each with its URL and the try's number.
pub async fn claim_due(
    pool: &PgPool,
    limit: i64,
    hold: Duration,
) -> sqlx::Result<Vec<(Uuid, String, i32)>> {
    sqlx::query_as(
        "update jobs set callback_next_at = now() + make_interval(secs => $2),
             callback_attempts = callback_attempts + 1
         where id in (select id from jobs
                      where callback_url is not null and callback_delivered_at is null
                        and finished_at is not null and callback_attempts < $3
                        and coalesce(callback_next_at, '-infinity') <= now()
                      order by finished_at limit $1
                      for update skip locked)
         returning id, callback_url, callback_attempts",
    )
    .bind(limit)
    .bind(hold.as_secs_f64())
    .bind(MAX_TRIES)
    .fetch_all(pool)
    .await
}

/// A 2xx answer: never sent again.
pub async fn delivered(pool: &PgPool, id: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "update jobs set callback_delivered_at = now(), callback_error = null where id = $1",
    )
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// A failed try: the next one after `backoff` (none after the last try).
pub async fn failed(pool: &PgPool, id: Uuid, error: &str, backoff: Duration) -> sqlx::Result<()> {
    sqlx::query(
        "update jobs set callback_error = $2,
             callback_next_at = now() + make_interval(secs => $3)
         where id = $1",
    )
    .bind(id)
    .bind(error)
    .bind(backoff.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}
