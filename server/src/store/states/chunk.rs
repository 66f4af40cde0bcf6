//! Every change of a chunk's state (see [`super`]). A chunk is created `pending` by its plan
//! (`store::chunks::insert_all`) or `done` with its rows (`store::chunks::record_done`).

use std::time::Duration;

use sqlx::PgConnection;
use uuid::Uuid;

use super::{ChunkState, Expired, JobStatus};
use crate::auth::Sees;

use ChunkState::{Done, Failed, Pending};

/// `pending` → `done`, its lease freed: the chunk's rows committed with it (the caller holds the
/// chunk from `store::chunks::claim`).
pub async fn done(conn: &mut PgConnection, job_id: Uuid, chunk_no: i32) -> sqlx::Result<()> {
    sqlx::query!(
        "update job_chunks set state = $3, done_at = now(), lease_owner = null,
             lease_expires_at = null
         where job_id = $1 and chunk_no = $2 and state = $4",
        job_id,
        chunk_no,
        Done as ChunkState,
        Pending as ChunkState,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// An attempt failed under the lease `lease_owner` holds: the chunk stays `pending`, free again
/// after `backoff`, or becomes `failed` when that was its last attempt (`out`). `false` when the
/// lease had been lost and nothing changed.
pub async fn fail_attempt(
    conn: &mut PgConnection,
    (job_id, chunk_no): (Uuid, i32),
    lease_owner: &str,
    error: &str,
    backoff: Duration,
    out: bool,
) -> sqlx::Result<bool> {
    let updated = sqlx::query!(
        "update job_chunks set lease_owner = null, lease_expires_at = null, last_error = $4,
             run_after = now() + make_interval(secs => $5),
             state = case when $6 then $7 else state end
         where job_id = $1 and chunk_no = $2 and lease_owner = $3",
        job_id,
        chunk_no,
        lease_owner,
        error,
        backoff.as_secs_f64(),
        out,
        Failed as ChunkState,
    )
    .execute(conn)
    .await?;
    Ok(updated.rows_affected() > 0)
}

/// The `pending` chunks of `running` jobs whose lease expired are freed, with `reason` as their
/// last error; those out of attempts become `failed`.
pub async fn expire_leases(conn: &mut PgConnection, reason: &str) -> sqlx::Result<Vec<Expired>> {
    sqlx::query_as!(
        Expired,
        r#"update job_chunks c set lease_owner = null, lease_expires_at = null, last_error = $1,
             state = case when c.attempts >= j.max_failures_per_item then $4 else $2 end
         from jobs j
         where c.state = $2 and c.lease_expires_at < now() and j.id = c.job_id
           and j.status = $3
         returning c.job_id, c.chunk_no as "chunk_no?", c.attempts,
             j.max_failures_per_item as max_attempts"#,
        reason,
        Pending as ChunkState,
        JobStatus::Running as JobStatus,
        Failed as ChunkState,
    )
    .fetch_all(conn)
    .await
}

/// Locks the chunks not `done` of the jobs of `ids` that `acts` covers, in the order a
/// committing chunk takes them and before their job rows: a retry then cannot deadlock with a
/// chunk's commit, nor with another retry.
pub async fn lock_unfinished(
    conn: &mut PgConnection,
    job_ids: &[Uuid],
    acts: Sees,
) -> sqlx::Result<()> {
    sqlx::query!(
        "select 1 as locked from job_chunks c where c.job_id = any($1) and c.state <> $3
             and exists (select 1 from jobs j where j.id = c.job_id
                         and ($2::uuid is null or j.owner = $2))
         order by c.job_id, c.chunk_no
         for update of c",
        job_ids,
        acts.owner_filter(),
        Done as ChunkState,
    )
    .fetch_all(conn)
    .await?;
    Ok(())
}

/// `failed` (or `pending`) → `pending` with fresh attempts, for jobs being retried.
pub async fn reopen_unfinished(conn: &mut PgConnection, job_ids: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query!(
        "update job_chunks set state = $2, attempts = 0, run_after = now(),
             last_error = null, lease_owner = null, lease_expires_at = null
         where job_id = any($1) and state <> $3",
        job_ids,
        Pending as ChunkState,
        Done as ChunkState,
    )
    .execute(conn)
    .await?;
    Ok(())
}
