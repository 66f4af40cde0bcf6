//! Export jobs: a dataset's rows out as a CSV or XLSX file, with the same lifecycle and live
//! progress as an import.
//!
//! - **plan**: cut the dataset's rows, in key order, into ranges of `chunk_rows` positions
//!   (from a few index entries per import, not by reading the rows); make the file the chunks
//!   write (`uploads::create_output`, with a CSV's header as its first part); record the ranges
//!   and queue one task per range (or the finish task at once for an empty dataset).
//! - **chunk**: read the range's records with one `COPY … TO STDOUT`, render them as CSV
//!   records or as a piece of the sheet's deflated XML, and store them as the file's parts for
//!   this chunk ([`super::export_file`]), behind the same done-gate as import chunks, so each
//!   range counts once. Chunks run in parallel on every worker, so the file is written once,
//!   by all of them at the same time. The transaction that finishes the last chunk checks that
//!   every row was written, adds what only the end knows (an XLSX file's zip header and
//!   directory) and completes the export there and then.
//! - **finish**: completes what no last chunk did: an empty dataset, or a job rescued by the
//!   sweeper.

use sqlx::PgConnection;
use uuid::Uuid;

use app::{history::RunOutcome, model::Remedy};

use super::{
    Engine, Refusal, Run, TaskError,
    export_file::{self, MAX_CHUNKS},
};
use crate::{
    spreadsheet::output::{self, MAX_XLSX_ROWS},
    store::{
        chunks, datasets, exports, history,
        jobs::{self, ExportJob},
        leases, notify,
        queue::{self, Priority, TaskMsg},
        states::{self, ExportFormat, job::ChunkCounts},
        uploads,
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
    let filename = format!("{}.{}", job.dataset, job.format.as_str());
    let content_type = match job.format {
        ExportFormat::Csv => CSV_TYPE,
        ExportFormat::Xlsx => XLSX_TYPE,
    };
    let output = uploads::create_output(&mut tx, job.owner, &filename, content_type).await?;
    if job.format == ExportFormat::Csv {
        let columns = datasets::schema(&mut tx, job.dataset_id).await?.0;
        uploads::put_output_part(&mut tx, output, 0, &output::header_csv(&columns)).await?;
    }
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
    let turn = Priority::Turn {
        ahead: jobs::ahead(&mut tx, job_id).await?,
    };
    queue::push(&mut tx, &tasks, turn).await?;
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
    let sheet = job.format == ExportFormat::Xlsx;
    let (count, piece) = export_file::write_parts(
        messages, &mut tx, output, chunk_no, &columns, sheet, run.stop,
    )
    .await?;
    if !chunks::claim(&mut tx, job_id, chunk_no, &run.lease.owner).await? {
        tx.rollback().await?;
        return Ok(());
    }

    states::chunk::done(&mut tx, job_id, chunk_no).await?;
    if let Some(piece) = piece {
        exports::record_piece(&mut tx, job_id, chunk_no, piece).await?;
    }
    history::end_run(&mut *tx, &run.lease.owner, RunOutcome::Ok, None).await?;
    let counts = ChunkCounts {
        ok: count,
        ..ChunkCounts::default()
    };
    let Some(added) = states::job::add_chunk(&mut tx, job_id, counts, None).await? else {
        tx.rollback().await?;
        return Ok(());
    };
    let mut version = added.version;
    if added.finish_export {
        match complete(&mut tx, job_id, &job, output).await? {
            Some(completed) => version = completed,
            None => {
                tx.rollback().await?;
                return Ok(());
            }
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

pub async fn finish(engine: &Engine, job_id: Uuid) -> Result<(), TaskError> {
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
    let mut tx = pool.begin().await?;
    if let Some(version) = complete(&mut tx, job_id, &job, output).await? {
        notify::job_changed(&mut tx, job_id, version).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Completes an export whose chunks are all done, in the caller's transaction: its file is the
/// one its chunks wrote (a workbook's zip closed around their pieces). The job's new version;
/// `None` when another run completed it first, or it ended meanwhile.
async fn complete(
    tx: &mut PgConnection,
    job_id: Uuid,
    job: &ExportJob,
    output: Uuid,
) -> Result<Option<i64>, TaskError> {
    every_row_written(tx, job_id).await?;
    if job.format == ExportFormat::Xlsx {
        let columns = datasets::schema(tx, job.dataset_id).await?.0;
        let sheet = sheet_name(&job.dataset);
        export_file::close_workbook(tx, job_id, output, &columns, &sheet).await?;
    }
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
fn output_of(job: &ExportJob) -> Result<Uuid, TaskError> {
    job.output_upload_id.ok_or_else(|| {
        TaskError::refused("The export's unfinished file was removed. Export the dataset again.")
    })
}

pub const CSV_TYPE: &str = "text/csv; charset=utf-8";
pub const XLSX_TYPE: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

/// Excel sheet names are at most 31 characters; dataset names are already free of the
/// characters Excel forbids.
fn sheet_name(dataset: &str) -> String {
    dataset.chars().take(31).collect()
}
