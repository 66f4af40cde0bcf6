//! A job's chunks: the plan's row ranges, and the done-gate that makes each chunk count once.
//! Their state changes are in [`super::states::chunk`].

use std::collections::HashMap;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::states::ChunkState;
use crate::spreadsheet::ChunkSpan;

/// A planned chunk as a worker reads it.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub first_row: i64,
    pub row_count: i32,
    pub byte_start: i64,
    pub byte_end: i64,
    pub state: ChunkState,
}

impl Chunk {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    pub fn span(&self) -> ChunkSpan {
        ChunkSpan {
            first_row: self.first_row,
            row_count: self.row_count,
            byte_start: self.byte_start as u64,
            byte_end: self.byte_end as u64,
        }
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
    sqlx::query!(
        "insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end)
         select $1, * from unnest($2::int[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[])",
        job_id,
        &chunk_nos,
        &first_rows,
        &row_counts,
        &starts,
        &ends,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Every chunk's number and ticket, for queueing them all (see [`super::leases`]).
pub async fn tickets(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<Vec<(i32, Uuid)>> {
    let chunks = sqlx::query!(
        "select chunk_no, ticket from job_chunks where job_id = $1 order by chunk_no",
        job_id
    )
    .fetch_all(conn)
    .await?;
    Ok(chunks.into_iter().map(|c| (c.chunk_no, c.ticket)).collect())
}

pub async fn find(pool: &PgPool, job_id: Uuid, chunk_no: i32) -> sqlx::Result<Option<Chunk>> {
    sqlx::query_as!(
        Chunk,
        r#"select first_row, row_count, byte_start, byte_end, state as "state: ChunkState"
           from job_chunks where job_id = $1 and chunk_no = $2"#,
        job_id,
        chunk_no
    )
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
    let mine: Option<bool> = sqlx::query_scalar!(
        r#"select state = $4 and lease_owner is not distinct from $3 as "mine!" from job_chunks
         where job_id = $1 and chunk_no = $2 for update"#,
        job_id,
        chunk_no,
        lease_owner,
        ChunkState::Pending as ChunkState,
    )
    .fetch_optional(conn)
    .await?;
    Ok(mine == Some(true))
}

/// Records as done the one chunk of each of these jobs, imported at once (`jobs::plan`), with
/// their rows in the same transaction; how many were new (a chunk recorded before is left).
pub async fn record_whole(
    conn: &mut PgConnection,
    jobs: &[(Uuid, &ChunkSpan)],
) -> sqlx::Result<u64> {
    let ids: Vec<Uuid> = jobs.iter().map(|(id, _)| *id).collect();
    let first_rows: Vec<i64> = jobs.iter().map(|(_, span)| span.first_row).collect();
    let row_counts: Vec<i32> = jobs.iter().map(|(_, span)| span.row_count).collect();
    let starts: Vec<i64> = jobs
        .iter()
        .map(|(_, span)| span.byte_start as i64)
        .collect();
    let ends: Vec<i64> = jobs.iter().map(|(_, span)| span.byte_end as i64).collect();
    let inserted = sqlx::query!(
        "insert into job_chunks
             (job_id, chunk_no, first_row, row_count, byte_start, byte_end, state, done_at)
         select id, 0, first_row, row_count, byte_start, byte_end, $6, now()
         from unnest($1::uuid[], $2::int8[], $3::int4[], $4::int8[], $5::int8[])
             as c (id, first_row, row_count, byte_start, byte_end)
         on conflict (job_id, chunk_no) do nothing",
        &ids,
        &first_rows,
        &row_counts,
        &starts,
        &ends,
        ChunkState::Done as ChunkState,
    )
    .execute(conn)
    .await?;
    Ok(inserted.rows_affected())
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
    let inserted = sqlx::query!(
        "insert into job_chunks
             (job_id, chunk_no, first_row, row_count, byte_start, byte_end, state, done_at)
         values ($1, $2, $3, $4, $5, $6, $7, now())
         on conflict (job_id, chunk_no) do nothing",
        job_id,
        chunk_no,
        span.first_row,
        span.row_count,
        span.byte_start as i64,
        span.byte_end as i64,
        ChunkState::Done as ChunkState,
    )
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 1 {
        return Ok(Recorded::New);
    }
    // A statement of its own: it sees the row another run committed while the insert waited.
    let before = sqlx::query!(
        "select first_row, row_count from job_chunks where job_id = $1 and chunk_no = $2",
        job_id,
        chunk_no
    )
    .fetch_optional(conn)
    .await?;
    Ok(match before {
        Some(before) if cut_alike((before.first_row, before.row_count), span) => Recorded::Before,
        _ => Recorded::Different,
    })
}

/// Whether a recorded chunk (its first row and row count) holds the same rows as `span`.
pub fn cut_alike((first_row, row_count): (i64, i32), span: &ChunkSpan) -> bool {
    (first_row, row_count) == (span.first_row, span.row_count)
}

/// The chunks a job has, by number: their first row and row count.
pub async fn recorded(pool: &PgPool, job_id: Uuid) -> sqlx::Result<HashMap<i32, (i64, i32)>> {
    let chunks = sqlx::query!(
        "select chunk_no, first_row, row_count from job_chunks where job_id = $1",
        job_id
    )
    .fetch_all(pool)
    .await?;
    Ok(chunks
        .into_iter()
        .map(|c| (c.chunk_no, (c.first_row, c.row_count)))
        .collect())
}
