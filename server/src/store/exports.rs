//! Export jobs' SQL: cutting a dataset's rows into chunks by key range, reading a chunk's rows,
//! and the rendered parts waiting to be assembled into the file.

use futures::{Stream, TryStreamExt};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// A run of a dataset's rows, both ends included, in key order `(job_id, row_no)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct RowRange {
    /// The range's first row, counting from 1 in the whole export.
    pub first_row: i64,
    pub row_count: i32,
    pub from_job: Uuid,
    pub from_row: i64,
    pub to_job: Uuid,
    pub to_row: i64,
}

/// Cuts the dataset's rows, in key order, into ranges of `chunk_rows`: one pass over the
/// primary key that keeps only each range's first and last row.
pub async fn plan_ranges(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    chunk_rows: i64,
) -> sqlx::Result<Vec<RowRange>> {
    sqlx::query_as(
        "select min(n) as first_row, count(*)::int as row_count,
                (array_agg(job_id order by n))[1] as from_job,
                (array_agg(row_no order by n))[1] as from_row,
                (array_agg(job_id order by n desc))[1] as to_job,
                (array_agg(row_no order by n desc))[1] as to_row
         from (select job_id, row_no, row_number() over (order by job_id, row_no) as n
               from dataset_rows where dataset_id = $1) numbered
         group by (n - 1) / $2
         order by first_row",
    )
    .bind(dataset_id)
    .bind(chunk_rows)
    .fetch_all(conn)
    .await
}

pub async fn insert_chunks(
    conn: &mut PgConnection,
    job_id: Uuid,
    ranges: &[RowRange],
) -> sqlx::Result<()> {
    let chunk_nos: Vec<i32> = (0..ranges.len() as i32).collect();
    let first_rows: Vec<i64> = ranges.iter().map(|r| r.first_row).collect();
    let row_counts: Vec<i32> = ranges.iter().map(|r| r.row_count).collect();
    let from_jobs: Vec<Uuid> = ranges.iter().map(|r| r.from_job).collect();
    let from_rows: Vec<i64> = ranges.iter().map(|r| r.from_row).collect();
    let to_jobs: Vec<Uuid> = ranges.iter().map(|r| r.to_job).collect();
    let to_rows: Vec<i64> = ranges.iter().map(|r| r.to_row).collect();
    sqlx::query(
        "insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end,
                                 from_job, from_row, to_job, to_row)
         select $1, c.chunk_no, c.first_row, c.row_count, 0, 0, c.from_job, c.from_row,
                c.to_job, c.to_row
         from unnest($2::int[], $3::bigint[], $4::int[], $5::uuid[], $6::bigint[], $7::uuid[],
                     $8::bigint[])
              as c(chunk_no, first_row, row_count, from_job, from_row, to_job, to_row)",
    )
    .bind(job_id)
    .bind(chunk_nos)
    .bind(first_rows)
    .bind(row_counts)
    .bind(from_jobs)
    .bind(from_rows)
    .bind(to_jobs)
    .bind(to_rows)
    .execute(conn)
    .await?;
    Ok(())
}

/// An export chunk's range, unless it is done already.
pub async fn pending_range(
    pool: &PgPool,
    job_id: Uuid,
    chunk_no: i32,
) -> sqlx::Result<Option<RowRange>> {
    sqlx::query_as(
        "select first_row, row_count, from_job, from_row, to_job, to_row from job_chunks
         where job_id = $1 and chunk_no = $2 and state = 'pending' and from_job is not null",
    )
    .bind(job_id)
    .bind(chunk_no)
    .fetch_optional(pool)
    .await
}

/// The rows of a range (their values in dataset column order), in key order.
pub async fn rows_in(
    pool: &PgPool,
    dataset_id: Uuid,
    range: &RowRange,
) -> sqlx::Result<Vec<Vec<Option<String>>>> {
    sqlx::query_scalar(
        "select cells from dataset_rows
         where dataset_id = $1 and (job_id, row_no) between ($2, $3) and ($4, $5)
         order by job_id, row_no",
    )
    .bind(dataset_id)
    .bind(range.from_job)
    .bind(range.from_row)
    .bind(range.to_job)
    .bind(range.to_row)
    .fetch_all(pool)
    .await
}

pub async fn insert_part(
    conn: &mut PgConnection,
    job_id: Uuid,
    chunk_no: i32,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query("insert into export_parts (job_id, chunk_no, data) values ($1, $2, $3)")
        .bind(job_id)
        .bind(chunk_no)
        .bind(data)
        .execute(conn)
        .await?;
    Ok(())
}

/// The rendered parts, in chunk order.
pub fn parts(pool: &PgPool, job_id: Uuid) -> impl Stream<Item = sqlx::Result<Vec<u8>>> + Send + '_ {
    sqlx::query_scalar("select data from export_parts where job_id = $1 order by chunk_no")
        .bind(job_id)
        .fetch(pool)
        .map_ok(|data: Vec<u8>| data)
}

pub async fn delete_parts(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("delete from export_parts where job_id = $1")
        .bind(job_id)
        .execute(conn)
        .await?;
    Ok(())
}
