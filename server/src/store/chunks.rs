//! A job's chunks: the plan's row ranges, and the done-gate that makes each chunk count once.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::spreadsheet::ChunkSpan;

/// A planned chunk as a worker reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Chunk {
    pub first_row: i64,
    pub row_count: i32,
    pub byte_start: i64,
    pub byte_end: i64,
    pub state: String,
}

impl Chunk {
    pub fn is_done(&self) -> bool {
        self.state == "done"
    }
}

pub async fn insert_all(
    conn: &mut PgConnection,
    job_id: Uuid,
    spans: &[ChunkSpan],
) -> sqlx::Result<()> {
    let chunk_nos: Vec<i32> = (0..spans.len() as i32).collect();
    let first_rows: Vec<i64> = spans.iter().map(|s| s.first_row).collect();
    let row_counts: Vec<i32> = spans.iter().map(|s| s.row_count).collect();
    let starts: Vec<i64> = spans.iter().map(|s| s.byte_start as i64).collect();
    let ends: Vec<i64> = spans.iter().map(|s| s.byte_end as i64).collect();
    sqlx::query(
        "insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end)
         select $1, * from unnest($2::int[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[])",
    )
    .bind(job_id)
    .bind(chunk_nos)
    .bind(first_rows)
    .bind(row_counts)
    .bind(starts)
    .bind(ends)
    .execute(conn)
    .await?;
    Ok(())
}

/// Every chunk's number and ticket, for queueing them all (see [`super::leases`]).
pub async fn tickets(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<Vec<(i32, Uuid)>> {
    sqlx::query_as("select chunk_no, ticket from job_chunks where job_id = $1 order by chunk_no")
        .bind(job_id)
        .fetch_all(conn)
        .await
}

pub async fn find(pool: &PgPool, job_id: Uuid, chunk_no: i32) -> sqlx::Result<Option<Chunk>> {
    sqlx::query_as(
        "select first_row, row_count, byte_start, byte_end, state from job_chunks
         where job_id = $1 and chunk_no = $2",
    )
    .bind(job_id)
    .bind(chunk_no)
    .fetch_optional(pool)
    .await
}

/// The done-gate: locks the chunk for the rest of the transaction and tells whether it is
/// still to do under the caller's lease. A second worker holding the same task waits here, then
/// finds it done; a worker whose lease was lost (and given to another) finds it not its own.
pub async fn claim(
    conn: &mut PgConnection,
    job_id: Uuid,
    chunk_no: i32,
    lease_owner: &str,
) -> sqlx::Result<bool> {
    let mine: Option<bool> = sqlx::query_scalar(
        "select state = 'pending' and lease_owner is not distinct from $3 from job_chunks
         where job_id = $1 and chunk_no = $2 for update",
    )
    .bind(job_id)
    .bind(chunk_no)
    .bind(lease_owner)
    .fetch_optional(conn)
    .await?;
    Ok(mine == Some(true))
}

/// Marks a claimed chunk done and frees its lease.
pub async fn mark_done(conn: &mut PgConnection, job_id: Uuid, chunk_no: i32) -> sqlx::Result<()> {
    sqlx::query(
        "update job_chunks set state = 'done', done_at = now(), lease_owner = null,
             lease_expires_at = null
         where job_id = $1 and chunk_no = $2 and state = 'pending'",
    )
    .bind(job_id)
    .bind(chunk_no)
    .execute(conn)
    .await?;
    Ok(())
}

/// What recording a streamed chunk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded now, as done: its rows go in the same transaction.
    New,
    /// An earlier run of the stream recorded the same chunk: nothing to write.
    Before,
    /// An earlier run cut the stream differently: its chunk holds other rows.
    Different,
}

/// Records a chunk of a streamed sheet (see `jobs::sheet`) as done, unless a run recorded it
/// before. There is no pending state to claim: the chunk exists only once its rows are written.
pub async fn record_done(
    conn: &mut PgConnection,
    job_id: Uuid,
    chunk_no: i32,
    span: &ChunkSpan,
) -> sqlx::Result<Recorded> {
    let (new, same): (bool, Option<bool>) = sqlx::query_as(
        "with new as (
             insert into job_chunks
                 (job_id, chunk_no, first_row, row_count, byte_start, byte_end, state, done_at)
             values ($1, $2, $3, $4, $5, $6, 'done', now())
             on conflict (job_id, chunk_no) do nothing
             returning 1)
         select exists (select from new),
                (select first_row = $3 and row_count = $4 from job_chunks
                 where job_id = $1 and chunk_no = $2)",
    )
    .bind(job_id)
    .bind(chunk_no)
    .bind(span.first_row)
    .bind(span.row_count)
    .bind(span.byte_start as i64)
    .bind(span.byte_end as i64)
    .fetch_one(conn)
    .await?;
    Ok(match (new, same) {
        (true, _) => Recorded::New,
        (false, Some(true)) => Recorded::Before,
        (false, _) => Recorded::Different,
    })
}

/// The numbers of the chunks a job has.
pub async fn numbers(pool: &PgPool, job_id: Uuid) -> sqlx::Result<Vec<i32>> {
    sqlx::query_scalar("select chunk_no from job_chunks where job_id = $1")
        .bind(job_id)
        .fetch_all(pool)
        .await
}
