//! The plan task: read the upload once, streaming, and turn it into chunks. A workbook's sheet
//! is imported as it streams out of the converter instead ([`super::sheet`]).
//!
//! The scan runs on a blocking thread and pulls the upload's parts through a small channel, so
//! memory stays flat however large the file. Everything the plan decides is written in one
//! transaction with the chunk tasks; a plan that dies half-way leaves nothing behind and simply
//! runs again.

use std::io;

use futures::TryStreamExt;
use uuid::Uuid;

use tokio_util::sync::CancellationToken;

use super::{Engine, TaskError, format, pipe, sheet};
use crate::{
    spreadsheet::{
        Plan,
        csv::{self, ScanError},
        reading::Reading,
        workbook,
    },
    store::{
        chunks, datasets, jobs, notify,
        queue::{self, Priority, TaskMsg},
        states, uploads,
    },
};

pub async fn run(engine: &Engine, job_id: Uuid, stop: &CancellationToken) -> Result<(), TaskError> {
    let mut tx = engine.pool.begin().await?;
    let Some(job) = jobs::lock_import_job(&mut tx, job_id).await? else {
        return Ok(());
    };
    match states::job::start(&mut tx, job_id).await? {
        Some(version) => notify::job_changed(&mut tx, job_id, version).await?,
        None if job.is_running() => {}
        // Finished or cancelled before it started.
        None => return Ok(()),
    }
    if job.sealed {
        // Planned already: its chunks were queued with the plan (a retried job, started again
        // just now, has them re-queued by `maintenance::requeue`). A retried job with no chunk
        // left to run (a streamed sheet, all written, that failed its row error limit at the
        // end) ends here.
        if let Some(version) = states::job::settle(&mut tx, job_id).await? {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
        tx.commit().await?;
        return Ok(());
    }
    tx.commit().await?;

    let head = uploads::read_range(&engine.pool, job.upload_id, 0, 8).await?;
    if workbook::Kind::of(&head).is_some() {
        return sheet::run(engine, job_id, &job, stop).await;
    }
    let plan = scan_upload(engine, job.upload_id, job.reading(), stop).await?;
    seal(engine, job_id, plan).await
}

async fn scan_upload(
    engine: &Engine,
    upload_id: Uuid,
    reading: Reading,
    stop: &CancellationToken,
) -> Result<Plan, TaskError> {
    let chunk_rows = engine.chunk_rows;
    let parts = uploads::stream(engine.pool.clone(), upload_id).map_err(io::Error::other);
    let parts = Box::pin(pipe::until_stopped(Box::pin(parts), stop.clone()));
    let scanned =
        pipe::read_with(parts, move |input| csv::scan(input, &reading, chunk_rows)).await?;
    scanned.map_err(|err| match err {
        ScanError::File(reason) => TaskError::refused(reason.to_string()),
        ScanError::Io(err) => err.into(),
    })
}

async fn seal(engine: &Engine, job_id: Uuid, plan: Plan) -> Result<(), TaskError> {
    let mut tx = engine.pool.begin().await?;
    let Some(job) = jobs::lock_import_job(&mut tx, job_id).await? else {
        return Ok(());
    };
    if job.sealed || !job.is_running() {
        // Another run of this task got here first, or the job ended meanwhile.
        return Ok(());
    }
    let last_row_no = plan
        .chunks
        .last()
        .map_or(0, |last| last.first_row + i64::from(last.row_count));
    if last_row_no > datasets::MAX_ROW_NO {
        return Err(format::too_many_rows());
    }
    // A refusal drops the transaction: it rolls back as its connection returns to the pool,
    // releasing the job row the runner then fails.
    let format = format::row_format(&mut tx, &job, &plan).await?;
    chunks::insert_all(&mut tx, job_id, &plan.chunks).await?;
    let chunks_total = plan.chunks.len() as i32;
    let Some(version) =
        states::job::seal(&mut tx, job_id, Some(&format), plan.row_count, chunks_total).await?
    else {
        return Ok(());
    };
    let tasks: Vec<(TaskMsg, Uuid)> = chunks::tickets(&mut tx, job_id)
        .await?
        .into_iter()
        .map(|(chunk_no, ticket)| (TaskMsg::Chunk { job_id, chunk_no }, ticket))
        .collect();
    queue::push(&mut tx, &tasks, Priority::New).await?;
    notify::job_changed(&mut tx, job_id, version).await?;
    tx.commit().await?;
    tracing::info!(%job_id, rows = plan.row_count, chunks = chunks_total, "job planned");
    Ok(())
}
