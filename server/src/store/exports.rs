//! Export jobs' SQL: cutting a dataset's rows into chunks by key range, reading a chunk's rows,
//! and the rendered parts waiting to be assembled into the file.

use futures::Stream;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::states::ChunkState;
use crate::spreadsheet::record;

/// A run of a dataset's rows, both ends included, by position (see
/// [`super::datasets::position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRange {
    /// The range's first row, counting from 1 in the whole export.
    pub first_row: i64,
    pub row_count: i32,
    pub from_pos: i64,
    pub to_pos: i64,
}

/// Cuts the dataset's rows, in order, into ranges of `chunk_rows`: one pass over the primary
/// key that returns only the rows where a range starts or ends.
pub async fn plan_ranges(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    chunk_rows: i64,
) -> sqlx::Result<Vec<RowRange>> {
    let edges = sqlx::query!(
        r#"select n as "n!", pos, last as "last!"
         from (select pos, row_number() over keys as n, lead(pos) over keys is null as last
               from dataset_rows where dataset_id = $1
               window keys as (order by pos)) numbered
         where (n - 1) % $2 = 0 or n % $2 = 0 or last
         order by n"#,
        dataset_id,
        chunk_rows
    )
    .fetch_all(conn)
    .await?;
    let mut ranges = Vec::with_capacity(edges.len() / 2 + 1);
    let mut open: Option<(i64, i64)> = None;
    for edge in edges {
        let (n, pos, last) = (edge.n, edge.pos, edge.last);
        if (n - 1) % chunk_rows == 0 {
            open = Some((n, pos));
        }
        if (n % chunk_rows == 0 || last)
            && let Some((first_row, from_pos)) = open.take()
        {
            ranges.push(RowRange {
                first_row,
                row_count: (n - first_row + 1) as i32,
                from_pos,
                to_pos: pos,
            });
        }
    }
    Ok(ranges)
}

pub async fn insert_chunks(
    conn: &mut PgConnection,
    job_id: Uuid,
    ranges: &[RowRange],
) -> sqlx::Result<()> {
    let chunk_nos: Vec<i32> = (0..ranges.len() as i32).collect();
    let first_rows: Vec<i64> = ranges.iter().map(|r| r.first_row).collect();
    let row_counts: Vec<i32> = ranges.iter().map(|r| r.row_count).collect();
    let from: Vec<i64> = ranges.iter().map(|r| r.from_pos).collect();
    let to: Vec<i64> = ranges.iter().map(|r| r.to_pos).collect();
    sqlx::query!(
        "insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end,
                                 from_pos, to_pos)
         select $1, c.chunk_no, c.first_row, c.row_count, 0, 0, c.from_pos, c.to_pos
         from unnest($2::int[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[])
              as c(chunk_no, first_row, row_count, from_pos, to_pos)",
        job_id,
        &chunk_nos,
        &first_rows,
        &row_counts,
        &from,
        &to,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The range of an export chunk still to do.
pub async fn pending_range(
    pool: &PgPool,
    job_id: Uuid,
    chunk_no: i32,
) -> sqlx::Result<Option<RowRange>> {
    sqlx::query_as!(
        RowRange,
        r#"select first_row, row_count, from_pos as "from_pos!", to_pos as "to_pos!"
           from job_chunks
           where job_id = $1 and chunk_no = $2 and state = $3 and from_pos is not null"#,
        job_id,
        chunk_no,
        ChunkState::Pending as ChunkState,
    )
    .fetch_optional(pool)
    .await
}

/// The rows of a range (their values in dataset column order), in order.
pub async fn rows_in(
    pool: &PgPool,
    dataset_id: Uuid,
    range: &RowRange,
) -> sqlx::Result<Vec<Vec<Option<String>>>> {
    sqlx::query_scalar!(
        "select record from dataset_rows
         where dataset_id = $1 and pos between $2 and $3
         order by pos",
        dataset_id,
        range.from_pos,
        range.to_pos,
    )
    .fetch_all(pool)
    .await
    .map(|records: Vec<String>| records.iter().map(|r| record::decode(r)).collect())
}

pub async fn insert_part(
    conn: &mut PgConnection,
    job_id: Uuid,
    chunk_no: i32,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into export_parts (job_id, chunk_no, data) values ($1, $2, $3)",
        job_id,
        chunk_no,
        data,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The rendered parts, in chunk order.
pub fn parts(pool: &PgPool, job_id: Uuid) -> impl Stream<Item = sqlx::Result<Vec<u8>>> + Send + '_ {
    sqlx::query_scalar!(
        "select data from export_parts where job_id = $1 order by chunk_no",
        job_id,
    )
    .fetch(pool)
}

pub async fn delete_parts(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<()> {
    sqlx::query!("delete from export_parts where job_id = $1", job_id,)
        .execute(conn)
        .await?;
    Ok(())
}
