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
/// still to do. A second worker holding the same task waits here, then finds it done.
pub async fn claim(conn: &mut PgConnection, job_id: Uuid, chunk_no: i32) -> sqlx::Result<bool> {
    let state: Option<String> = sqlx::query_scalar(
        "select state from job_chunks where job_id = $1 and chunk_no = $2 for update",
    )
    .bind(job_id)
    .bind(chunk_no)
    .fetch_optional(conn)
    .await?;
    Ok(state.as_deref() == Some("pending"))
}

pub async fn mark_done(conn: &mut PgConnection, job_id: Uuid, chunk_no: i32) -> sqlx::Result<()> {
    sqlx::query(
        "update job_chunks set state = 'done', done_at = now()
         where job_id = $1 and chunk_no = $2 and state = 'pending'",
    )
    .bind(job_id)
    .bind(chunk_no)
    .execute(conn)
    .await?;
    Ok(())
}
