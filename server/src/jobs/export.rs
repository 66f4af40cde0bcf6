//! Export jobs: a dataset's rows out as a CSV or XLSX file, with the same lifecycle and live
//! progress as an import.
//!
//! - **plan**: cut the dataset's rows, in key order, into ranges of `chunk_rows` positions
//!   (from a few index entries per import, not by reading the rows); make the file the chunks
//!   write (`uploads::create_output`) with the header as its first part; record the ranges and
//!   queue one task per range (or the finish task at once for an empty dataset).
//! - **chunk**: read the range's records with one `COPY … TO STDOUT`, render them as CSV
//!   records and store them as the file's part for this chunk, behind the same done-gate as
//!   import chunks, so each range counts once. Chunks run in parallel on every worker, so the
//!   file is written once, by all of them at the same time. The transaction that finishes the
//!   last chunk checks that every row was written, then completes a CSV export there and then,
//!   or queues the finish task of an XLSX one.
//! - **finish**: for XLSX, pour the CSV file through rust_xlsxwriter, typed by the dataset's
//!   columns, into a new file, complete the job and drop the CSV. (For CSV it only completes
//!   what no last chunk did: an empty dataset, or a job rescued by the sweeper.)

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use rust_xlsxwriter::XlsxError;
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use app::{history::RunOutcome, model::Remedy};

use super::{Engine, Refusal, Run, TaskError, pipe};
use crate::{
    spreadsheet::{
        output::{self, CsvRows, LongText, MAX_XLSX_ROWS},
        schema::Column,
    },
    store::{
        chunks, datasets, exports, history, jobs, leases, notify,
        queue::{self, Priority, TaskMsg},
        states::{self, ExportFormat, job::ChunkCounts},
        uploads::{self, UploadError, UploadLimits},
    },
};

pub async fn plan(engine: &Engine, job_id: Uuid) -> Result<(), TaskError> {
    let mut tx = engine.pool.begin().await?;
    let Some(job) = jobs::lock_export_job(&mut tx, job_id).await? else {
        return Ok(());
    };
    let started = states::job::start(&mut tx, job_id).await?;
    if job.sealed {
        // Planned already: a retried export starts again here; `maintenance::requeue` queues its chunks.
        if let Some(version) = started {
            notify::job_changed(&mut tx, job_id, version).await?;
            tx.commit().await?;
        }
        return Ok(());
    }
    let Some(version) = started else {
        // Finished or cancelled before it started.
        return Ok(());
    };
    let rows = datasets::row_count_held(&mut tx, job.dataset_id).await?;
    if job.format == ExportFormat::Xlsx && rows > MAX_XLSX_ROWS {
        return Err(TaskError::Refused(Refusal {
            reason: format!(
                "The dataset has {rows} rows, more than an Excel sheet holds ({MAX_XLSX_ROWS}). \
                 Export it as CSV instead."
            ),
            remedy: Some(Remedy::ExportCsv),
        }));
    }
    notify::job_changed(&mut tx, job_id, version).await?;
    let chunk_rows = engine.export_chunk_rows.clamp(1, 1 << 30) as i64;
    let mut ranges = exports::plan_ranges(&mut tx, job.dataset_id, chunk_rows).await?;
    if ranges.len() as i64 > 2 * (rows / chunk_rows) + 8 {
        // Many small (or thinned-out) imports: counted ranges make far fewer chunks.
        ranges = exports::plan_ranges_counted(&mut tx, job.dataset_id, chunk_rows).await?;
    }
    if ranges.len() > MAX_CHUNKS {
        return Err(TaskError::refused(format!(
            "The dataset's rows make {} parts, more than an export writes ({MAX_CHUNKS}). \
             Export it with more rows per part (CONVEYOR_EXPORT_CHUNK_ROWS).",
            ranges.len()
        )));
    }
    let columns = datasets::schema(&mut tx, job.dataset_id).await?.0;
    let csv_name = format!("{}.csv", job.dataset);
    let output = uploads::create_output(&mut tx, job.owner, &csv_name, CSV_TYPE).await?;
    uploads::put_output_part(&mut tx, output, 0, &output::header_csv(&columns)).await?;
    exports::set_output(&mut tx, job_id, output).await?;
    exports::insert_chunks(&mut tx, job_id, &ranges).await?;
    let chunks_total = ranges.len() as i32;
    let Some(version) = states::job::seal(&mut tx, job_id, None, rows, chunks_total).await? else {
        return Ok(());
    };
    let tasks: Vec<(TaskMsg, Uuid)> = if ranges.is_empty() {
        let ticket = leases::next_step(&mut tx, job_id).await?;
        vec![(TaskMsg::ExportFinish { job_id }, ticket)]
    } else {
        chunks::tickets(&mut tx, job_id)
            .await?
            .into_iter()
            .map(|(chunk_no, ticket)| (TaskMsg::ExportChunk { job_id, chunk_no }, ticket))
            .collect()
    };
    queue::push(&mut tx, &tasks, Priority::New).await?;
    notify::job_changed(&mut tx, job_id, version).await?;
    tx.commit().await?;
    tracing::info!(%job_id, rows, chunks = chunks_total, "export planned");
    Ok(())
}

pub async fn chunk(
    engine: &Engine,
    job_id: Uuid,
    chunk_no: i32,
    run: Run<'_>,
) -> Result<(), TaskError> {
    let pool = &engine.pool;
    let Some(range) = exports::pending_range(pool, job_id, chunk_no).await? else {
        return Ok(());
    };
    let job = {
        let mut conn = pool.acquire().await?;
        jobs::export_job(&mut conn, job_id).await?
    };
    let Some(job) = job.filter(|job| job.is_running()) else {
        return Ok(());
    };
    let output = output_of(&job)?;
    let columns = {
        let mut conn = pool.acquire().await?;
        datasets::schema(&mut conn, job.dataset_id).await?.0
    };
    // The rows come on a connection of their own, and their parts go into the transaction
    // that marks the chunk done as they are rendered: a part at a time in memory, however
    // wide the rows. The `COPY` starts last and is always read to its end (`write_parts`).
    // The chunk's row is locked only at the end (its heartbeat renews its lease meanwhile); a
    // run that lost its lease to another finds the chunk not its own then, or its parts taken.
    let mut tx = pool.begin().await?;
    let messages = exports::records_in(pool, job.dataset_id, &range).await?;
    let count = write_parts(messages, &mut tx, output, chunk_no, &columns, run.stop).await?;
    if !chunks::claim(&mut tx, job_id, chunk_no, &run.lease.owner).await? {
        tx.rollback().await?;
        return Ok(());
    }

    states::chunk::done(&mut tx, job_id, chunk_no).await?;
    history::end_run(&mut *tx, &run.lease.owner, RunOutcome::Ok, None).await?;
    let counts = ChunkCounts {
        ok: count,
        ..ChunkCounts::default()
    };
    let Some(added) = states::job::add_chunk(&mut tx, job_id, counts).await? else {
        tx.rollback().await?;
        return Ok(());
    };
    let mut version = added.version;
    if added.finish_export {
        if job.format == ExportFormat::Csv {
            match complete_csv(&mut tx, job_id, output).await? {
                Some(completed) => version = completed,
                None => {
                    tx.rollback().await?;
                    return Ok(());
                }
            }
        } else {
            every_row_written(&mut tx, job_id).await?;
            let ticket = leases::next_step(&mut tx, job_id).await?;
            let finish = [(TaskMsg::ExportFinish { job_id }, ticket)];
            queue::push(&mut tx, &finish, Priority::New).await?;
        }
    }
    notify::job_changed(&mut tx, job_id, version).await?;
    if run.stop.is_cancelled() {
        tx.rollback().await?;
        return Err(TaskError::Stopped);
    }
    tx.commit().await?;
    Ok(())
}

/// Renders a chunk's rows as CSV into parts of the export's file as they come; how many rows.
/// The `COPY` is read to its end whatever happens, so that its connection goes back to the
/// pool ready for the next query (one dropped half-read would greet it with the rest).
async fn write_parts(
    messages: impl Stream<Item = sqlx::Result<Bytes>>,
    tx: &mut PgConnection,
    output: Uuid,
    chunk_no: i32,
    columns: &[Column],
    stop: &CancellationToken,
) -> Result<i64, TaskError> {
    let mut messages = std::pin::pin!(messages);
    let mut parts = Parts::of_chunk(chunk_no);
    let mut csv = CsvRows::with_capacity(columns, uploads::PART_BYTES + (64 << 10));
    let mut copied = exports::CopiedRecords::default();
    let mut failed = None;
    while let Some(message) = messages.try_next().await? {
        if failed.is_some() {
            continue;
        }
        let mut render = || {
            for record in copied.of(&message) {
                csv.push(record?);
            }
            sqlx::Result::<()>::Ok(())
        };
        if let Err(err) = render() {
            failed = Some(err.into());
        } else if stop.is_cancelled() {
            failed = Some(TaskError::Stopped);
        } else if csv.bytes() >= uploads::PART_BYTES
            && let Err(err) = parts.put(tx, output, csv.take()).await
        {
            failed = Some(err);
        }
        // Rendering runs on this task: let others run between messages that arrive at once.
        tokio::task::consume_budget().await;
    }
    if let Some(err) = failed {
        return Err(err);
    }
    parts.put(tx, output, csv.take()).await?;
    Ok(csv.rows())
}

/// The parts of the export's file a chunk writes. The header is part 0; chunk `c` writes parts
/// `(c + 1) << 12` and up, as many as its rows need (each about `uploads::PART_BYTES`), without
/// knowing how many any other chunk writes: the file is its parts in order.
struct Parts {
    next: i32,
    last: i32,
}

/// Chunks an export may have (the plan refuses more), and parts one chunk may write (4 GiB).
const MAX_CHUNKS: usize = (1 << 19) - 1;
const PARTS_PER_CHUNK: i32 = 1 << 12;

impl Parts {
    fn of_chunk(chunk_no: i32) -> Self {
        let first = (chunk_no + 1) * PARTS_PER_CHUNK;
        Parts {
            next: first,
            last: first + PARTS_PER_CHUNK - 1,
        }
    }

    async fn put(
        &mut self,
        conn: &mut PgConnection,
        output: Uuid,
        part: Vec<u8>,
    ) -> Result<(), TaskError> {
        if part.is_empty() {
            return Ok(());
        }
        if self.next > self.last {
            return Err(TaskError::refused(format!(
                "A part of the dataset holds more than {} GiB of rows. Export it with fewer \
                 rows per part (CONVEYOR_EXPORT_CHUNK_ROWS).",
                (PARTS_PER_CHUNK as usize * uploads::PART_BYTES) >> 30
            )));
        }
        uploads::put_output_part(conn, output, self.next, &part).await?;
        self.next += 1;
        Ok(())
    }
}

pub async fn finish(
    engine: &Engine,
    job_id: Uuid,
    stop: &CancellationToken,
) -> Result<(), TaskError> {
    let pool = &engine.pool;
    let job = {
        let mut conn = pool.acquire().await?;
        jobs::export_job(&mut conn, job_id).await?
    };
    let Some(job) =
        job.filter(|job| job.is_running() && job.sealed && job.chunks_done == job.chunks_total)
    else {
        return Ok(());
    };
    let output = output_of(&job)?;
    if job.format == ExportFormat::Csv {
        let mut tx = pool.begin().await?;
        if let Some(version) = complete_csv(&mut tx, job_id, output).await? {
            notify::job_changed(&mut tx, job_id, version).await?;
            tx.commit().await?;
        }
        return Ok(());
    }
    every_row_written(&mut *pool.acquire().await?, job_id).await?;
    let columns = {
        let mut conn = pool.acquire().await?;
        datasets::schema(&mut conn, job.dataset_id).await?.0
    };
    let csv = uploads::stream(pool.clone(), output).map_err(std::io::Error::other);
    let csv = Box::pin(pipe::until_stopped(Box::pin(csv), stop.clone()));
    let sheet = sheet_name(&job.dataset);
    let (xlsx, written) = pipe::convert(csv, move |input, out| {
        output::csv_to_xlsx(&columns, &sheet, LongText::Refuse, input, out)
            .map(drop)
            .map_err(refusal_of)
    });
    let filename = format!("{}.{}", job.dataset, job.format.as_str());
    let save = uploads::save(
        pool,
        job.owner,
        &filename,
        Some(XLSX_TYPE),
        UploadLimits::NONE,
        xlsx,
    );
    let (saved, written) = tokio::join!(save, written);
    // Storing the file failed first (the writer then only saw a broken pipe): retry.
    let saved = match saved {
        Err(UploadError::Database(err)) => return Err(err.into()),
        other => other,
    };
    written?;
    let saved = saved?;

    let mut tx = pool.begin().await?;
    match states::job::complete_export(&mut tx, job_id, saved.id).await? {
        Some(version) => {
            uploads::delete(&mut *tx, output).await?;
            notify::job_changed(&mut tx, job_id, version).await?;
            tx.commit().await?;
            tracing::info!(%job_id, bytes = saved.size, "export complete");
        }
        None => {
            // Another run of this task finished first, or the job ended meanwhile.
            tx.rollback().await?;
            uploads::delete(pool, saved.id).await?;
        }
    }
    Ok(())
}

/// Completes a CSV export whose chunks are all done, in the caller's transaction: its file is
/// the one its chunks wrote. The job's new version; `None` when another run completed it
/// first, or it ended meanwhile.
async fn complete_csv(
    tx: &mut PgConnection,
    job_id: Uuid,
    output: Uuid,
) -> Result<Option<i64>, TaskError> {
    every_row_written(tx, job_id).await?;
    let bytes = uploads::seal_output(tx, output).await?;
    let completed = states::job::complete_export(tx, job_id, output).await?;
    if completed.is_some() {
        tracing::info!(%job_id, bytes, "export complete");
    }
    Ok(completed)
}

/// Refuses an export whose chunks wrote fewer or more rows than the dataset held when it was
/// planned: rows were added to or removed from its ranges since.
async fn every_row_written(conn: &mut PgConnection, job_id: Uuid) -> Result<(), TaskError> {
    if exports::wrote_every_row(conn, job_id).await? {
        return Ok(());
    }
    Err(TaskError::refused(
        "The dataset changed while it was being exported (an import wrote to it). Export it \
         again.",
    ))
}

/// The file the export's chunks write; gone only if retention removed it from a job that
/// stopped long ago.
fn output_of(job: &jobs::ExportJob) -> Result<Uuid, TaskError> {
    job.output_upload_id.ok_or_else(|| {
        TaskError::refused("The export's unfinished file was removed. Export the dataset again.")
    })
}

/// Why the rows could not be written as XLSX: the disk or pipe (tried again), or the data,
/// which no attempt can fix.
fn refusal_of(err: XlsxError) -> TaskError {
    match err {
        XlsxError::IoError(err) => err.into(),
        XlsxError::MaxStringLengthExceeded => TaskError::Refused(Refusal {
            reason: format!(
                "A cell holds more than {} characters, more than Excel allows. Export the \
                 dataset as CSV instead.",
                output::MAX_XLSX_CELL_CHARS
            ),
            remedy: Some(Remedy::ExportCsv),
        }),
        other => TaskError::refused(format!("The XLSX file could not be written: {other}.")),
    }
}

pub const CSV_TYPE: &str = "text/csv; charset=utf-8";
pub const XLSX_TYPE: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

/// Excel sheet names are at most 31 characters; dataset names are already free of the
/// characters Excel forbids.
fn sheet_name(dataset: &str) -> String {
    dataset.chars().take(31).collect()
}
