//! Export jobs: a dataset's rows out as a CSV or XLSX file, with the same lifecycle and live
//! progress as an import.
//!
//! - **plan**: cut the dataset's rows, in key order, into ranges of `chunk_rows`; record them
//!   and queue one task per range (or the finish task at once for an empty dataset).
//! - **chunk**: render the range's rows as CSV records and store them as the chunk's part,
//!   behind the same done-gate as import chunks, so each range counts once. The transaction
//!   that finishes the last chunk queues the finish task.
//! - **finish**: assemble the file from the header and the parts in order (as they are for
//!   CSV; through rust_xlsxwriter, typed by the dataset's columns, for XLSX), store it like an
//!   upload, complete the job and drop the parts.

use futures::{StreamExt, TryStreamExt};
use rust_xlsxwriter::XlsxError;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use app::{history::RunOutcome, model::Remedy};

use super::{Engine, Refusal, Run, TaskError, pipe};
use crate::{
    spreadsheet::output::{self, LongText, MAX_XLSX_ROWS},
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
    let chunk_rows = engine.chunk_rows.max(1) as i64;
    let ranges = exports::plan_ranges(&mut tx, job.dataset_id, chunk_rows).await?;
    let rows: i64 = ranges.iter().map(|r| i64::from(r.row_count)).sum();
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
    let columns = {
        let mut conn = pool.acquire().await?;
        datasets::schema(&mut conn, job.dataset_id).await?.0
    };
    let rows = exports::rows_in(pool, job.dataset_id, &range).await?;
    if rows.len() != range.row_count as usize {
        // An import wrote into the range, or a re-import moved rows out of it, since the
        // plan: a file written now would silently miss or repeat rows.
        return Err(TaskError::refused(
            "The dataset changed while it was being exported (an import wrote to it). Export it \
             again.",
        ));
    }
    let count = rows.len() as i64;
    let part = tokio::task::spawn_blocking(move || output::rows_csv(&columns, &rows)).await?;

    if run.stop.is_cancelled() {
        return Err(TaskError::Stopped);
    }
    let mut tx = pool.begin().await?;
    if !chunks::claim(&mut tx, job_id, chunk_no, &run.lease.owner).await? {
        return Ok(());
    }
    exports::insert_part(&mut tx, job_id, chunk_no, &part).await?;
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
    if added.finish_export {
        let ticket = leases::next_step(&mut tx, job_id).await?;
        queue::push(
            &mut tx,
            &[(TaskMsg::ExportFinish { job_id }, ticket)],
            Priority::New,
        )
        .await?;
    }
    notify::job_changed(&mut tx, job_id, added.version).await?;
    if run.stop.is_cancelled() {
        tx.rollback().await?;
        return Err(TaskError::Stopped);
    }
    tx.commit().await?;
    Ok(())
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
    let columns = {
        let mut conn = pool.acquire().await?;
        datasets::schema(&mut conn, job.dataset_id).await?.0
    };
    let header = output::header_csv(&columns);
    let csv = futures::stream::iter([Ok(header)]).chain(exports::parts(pool, job_id));
    let filename = format!("{}.{}", job.dataset, job.format.as_str());
    let csv = Box::pin(pipe::until_stopped(
        Box::pin(csv.map_err(std::io::Error::other)),
        stop.clone(),
    ));
    let saved = if job.format == ExportFormat::Xlsx {
        let sheet = sheet_name(&job.dataset);
        let (xlsx, written) = pipe::convert(csv, move |input, out| {
            output::csv_to_xlsx(&columns, &sheet, LongText::Refuse, input, out)
                .map(drop)
                .map_err(refusal_of)
        });
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
        saved
    } else {
        let limits = UploadLimits::NONE;
        uploads::save(pool, job.owner, &filename, Some(CSV_TYPE), limits, csv).await
    };
    let saved = saved?;

    let mut tx = pool.begin().await?;
    match states::job::complete_export(&mut tx, job_id, saved.id).await? {
        Some(version) => {
            exports::delete_parts(&mut tx, job_id).await?;
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
