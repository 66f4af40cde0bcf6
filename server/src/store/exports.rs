//! Export jobs' SQL: cutting a dataset's rows into chunks by key range without reading them,
//! reading a chunk's rows with `COPY … TO STDOUT`, and what XLSX chunks wrote of the sheet.
//!
//! A range's rows come out of one `COPY` in PostgreSQL's binary format: no per-row message
//! decoding or allocation on our side, so the chunk's CSV is rendered straight from the bytes.

use bytes::Bytes;
use futures::Stream;
use sqlx::{PgConnection, PgPool, postgres::PgPoolCopyExt};
use uuid::Uuid;

use super::states::ChunkState;
use crate::spreadsheet::sheet_writer::Summary;

/// A run of a dataset's rows by position (see [`super::datasets::position`]), both ends
/// included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRange {
    pub from_pos: i64,
    pub to_pos: i64,
    /// The rows it held when planned: exact when counted, else its positions (exact unless rows
    /// were removed since they were imported: an upsert by key moves a row to its new import).
    pub rows: i64,
}

/// Cuts the dataset's rows, in order, into ranges of at most `chunk_rows` positions, reading
/// two index entries per range: positions are the importing job's number then the row's number
/// in its file, so each import's rows are cut by row number; a range starts at the first row
/// after the last one and ends at its last row. A range may hold fewer rows than positions
/// (rows removed since), and each import makes one at least: [`plan_ranges_counted`] is for
/// datasets of many small or thinned-out imports.
///
/// Counting each range's rows instead reads every index entry: a million rows took 0.28–0.46 s
/// that way, next to about 0.8 s for a whole `\copy … to`.
pub async fn plan_ranges(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    chunk_rows: i64,
) -> sqlx::Result<Vec<RowRange>> {
    sqlx::query_as!(
        RowRange,
        r#"with recursive ranges (from_pos, bucket_end) as (
               select f.pos, ((f.pos >> 32) << 32)
                             | least(((f.pos & 4294967295) / $2 + 1) * $2 - 1, 4294967295)
               from (select min(pos) as pos from dataset_rows where dataset_id = $1) f
               where f.pos is not null
             union all
               select n.pos, ((n.pos >> 32) << 32)
                             | least(((n.pos & 4294967295) / $2 + 1) * $2 - 1, 4294967295)
               from ranges r
               cross join lateral (select min(pos) as pos from dataset_rows
                                   where dataset_id = $1 and pos > r.bucket_end) n
               where n.pos is not null
           )
           select r.from_pos as "from_pos!", l.to_pos as "to_pos!",
                  l.to_pos - r.from_pos + 1 as "rows!"
           from ranges r
           cross join lateral (select max(pos) as to_pos from dataset_rows
                               where dataset_id = $1 and pos between r.from_pos
                                                                 and r.bucket_end) l
           order by r.from_pos"#,
        dataset_id,
        chunk_rows,
    )
    .fetch_all(conn)
    .await
}

/// Cuts the dataset's rows, in order, into ranges of exactly `chunk_rows` rows (the last one
/// fewer): one pass over the primary key that returns only the rows where a range starts or
/// ends.
pub async fn plan_ranges_counted(
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
    let mut open = None;
    for edge in edges {
        if (edge.n - 1) % chunk_rows == 0 {
            open = Some((edge.n, edge.pos));
        }
        if (edge.n % chunk_rows == 0 || edge.last)
            && let Some((first, from_pos)) = open.take()
        {
            ranges.push(RowRange {
                from_pos,
                to_pos: edge.pos,
                rows: edge.n - first + 1,
            });
        }
    }
    Ok(ranges)
}

/// Records the plan's ranges as the job's chunks, with the rows each held when planned
/// (`RowRange::rows`): a chunk counts its rows when it runs, and the export checks the total at
/// its end.
pub async fn insert_chunks(
    conn: &mut PgConnection,
    job_id: Uuid,
    ranges: &[RowRange],
) -> sqlx::Result<()> {
    let chunk_nos: Vec<i32> = (0..ranges.len() as i32).collect();
    let from: Vec<i64> = ranges.iter().map(|r| r.from_pos).collect();
    let to: Vec<i64> = ranges.iter().map(|r| r.to_pos).collect();
    let rows: Vec<i32> = ranges.iter().map(|r| r.rows as i32).collect();
    sqlx::query!(
        "insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end,
                                 from_pos, to_pos)
         select $1, c.chunk_no, 1 + coalesce(sum(c.rows) over before, 0), c.rows, 0, 0,
                c.from_pos, c.to_pos
         from unnest($2::int[], $3::bigint[], $4::bigint[], $5::int[])
              as c(chunk_no, from_pos, to_pos, rows)
         window before as (order by c.chunk_no rows between unbounded preceding
                                                       and 1 preceding)",
        job_id,
        &chunk_nos,
        &from,
        &to,
        &rows,
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
        r#"select from_pos as "from_pos!", to_pos as "to_pos!", row_count::int8 as "rows!"
           from job_chunks
           where job_id = $1 and chunk_no = $2 and state = $3 and from_pos is not null"#,
        job_id,
        chunk_no,
        ChunkState::Pending as ChunkState,
    )
    .fetch_optional(pool)
    .await
}

/// The range's records (see [`crate::spreadsheet::record`]), in order, as `COPY` sends them: one
/// message per row (PostgreSQL never splits a row across messages), the first after the
/// format's header; read each with [`CopiedRecords::of`]. Holds a connection of its own until
/// it ends: read it to the end (a half-read `COPY` left on a pooled connection would answer
/// that connection's next query).
pub async fn records_in(
    pool: &PgPool,
    dataset_id: Uuid,
    range: &RowRange,
) -> sqlx::Result<impl Stream<Item = sqlx::Result<Bytes>> + Send + 'static> {
    // `COPY` takes no parameters: the values are a uuid and two integers, written by us.
    let statement = format!(
        "copy (select record from dataset_rows
               where dataset_id = '{dataset_id}' and pos between {} and {}
               order by pos)
         to stdout (format binary)",
        range.from_pos, range.to_pos
    );
    pool.copy_out_raw(&statement).await
}

/// Reads the records out of the messages of [`records_in`], in PostgreSQL's binary `COPY`
/// format: a header first; then per row a 16-bit field count (-1 after the last row) and per
/// field a 32-bit length and the bytes.
#[derive(Debug, Default)]
pub struct CopiedRecords {
    after_header: bool,
}

impl CopiedRecords {
    /// The records in one message (UTF-8 bytes, as PostgreSQL keeps text); an error if the
    /// bytes are not the one-text-column rows we asked for.
    pub fn of<'m>(&mut self, message: &'m [u8]) -> RecordIter<'m> {
        let rest = if std::mem::replace(&mut self.after_header, true) {
            Some(message)
        } else {
            // The signature, 32 bits of flags, then the length of a header extension to skip.
            message.strip_prefix(SIGNATURE).and_then(|rest| {
                let extension = u32::from_be_bytes(rest.get(4..8)?.try_into().ok()?) as usize;
                rest.get(8 + extension..)
            })
        };
        RecordIter { rest, ended: false }
    }
}

/// What every binary `COPY` starts with.
const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// The records of one message of a binary `COPY` (see [`CopiedRecords`]).
pub struct RecordIter<'m> {
    /// What is left to read; `None` when the header was not a binary `COPY`'s.
    rest: Option<&'m [u8]>,
    ended: bool,
}

impl<'m> RecordIter<'m> {
    fn take(&mut self) -> sqlx::Result<Option<&'m [u8]>> {
        let rest = self.rest.ok_or_else(malformed)?;
        let Some(fields) = rest.get(..2) else {
            // The end of the message.
            return Ok(None);
        };
        match i16::from_be_bytes([fields[0], fields[1]]) {
            // The trailer, after the last row.
            -1 => return Ok(None),
            1 => {}
            _ => return Err(malformed()),
        }
        let length = rest.get(2..6).ok_or_else(malformed)?;
        let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        let end = 6 + usize::try_from(length).map_err(|_| malformed())?;
        let record = rest.get(6..end).ok_or_else(malformed)?;
        self.rest = Some(&rest[end..]);
        Ok(Some(record))
    }
}

impl<'m> Iterator for RecordIter<'m> {
    type Item = sqlx::Result<&'m [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        let taken = self.take();
        self.ended = !matches!(taken, Ok(Some(_)));
        taken.transpose()
    }
}

fn malformed() -> sqlx::Error {
    sqlx::Error::Protocol("an export's COPY returned rows in an unexpected shape".into())
}

/// Whether a finished export wrote as many rows as the dataset held when it was planned: if
/// not, rows were added to or removed from it meanwhile, and the file would miss or repeat
/// some.
pub async fn wrote_every_row(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select rows_ok = item_count as "same!" from jobs where id = $1"#,
        job_id
    )
    .fetch_one(conn)
    .await
}

/// Records the file a planned export's chunks write (see `uploads::create_output`).
pub async fn set_output(
    conn: &mut PgConnection,
    job_id: Uuid,
    upload_id: Uuid,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update jobs set output_upload_id = $2 where id = $1",
        job_id,
        upload_id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records what an XLSX export's chunk wrote of the sheet (see `spreadsheet::sheet_writer`).
pub async fn record_piece(
    conn: &mut PgConnection,
    job_id: Uuid,
    chunk_no: i32,
    piece: Summary,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update job_chunks set sheet_crc32 = $3, sheet_bytes = $4, sheet_deflated = $5
         where job_id = $1 and chunk_no = $2",
        job_id,
        chunk_no,
        i64::from(piece.crc32),
        piece.bytes as i64,
        piece.deflated as i64,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// What each chunk of an XLSX export wrote of the sheet, in the sheet's order; `None` if a
/// chunk recorded nothing (it was written before exports wrote pieces).
pub async fn pieces(conn: &mut PgConnection, job_id: Uuid) -> sqlx::Result<Option<Vec<Summary>>> {
    let rows = sqlx::query!(
        "select sheet_crc32, sheet_bytes, sheet_deflated from job_chunks
         where job_id = $1 order by chunk_no",
        job_id,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            Some(Summary {
                crc32: u32::try_from(row.sheet_crc32?).ok()?,
                bytes: u64::try_from(row.sheet_bytes?).ok()?,
                deflated: u64::try_from(row.sheet_deflated?).ok()?,
            })
        })
        .collect())
}
