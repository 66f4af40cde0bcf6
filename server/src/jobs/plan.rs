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

use super::{Engine, TaskError, pipe, sheet};
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;

use crate::{
    spreadsheet::{
        Plan,
        csv::{self, RowFormat, ScanError},
        schema::{self, Column},
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
    match scan_upload(engine, job.upload_id, stop).await {
        Ok(plan) => seal(engine, job_id, plan).await,
        Err(ScanError::File(reason)) => {
            super::fail(&engine.pool, job_id, &reason.to_string()).await
        }
        Err(ScanError::Io(err)) => Err(err.into()),
    }
}

async fn scan_upload(
    engine: &Engine,
    upload_id: Uuid,
    stop: &CancellationToken,
) -> Result<Plan, ScanError> {
    let chunk_rows = engine.chunk_rows;
    let parts = uploads::stream(engine.pool.clone(), upload_id).map_err(io::Error::other);
    let parts = Box::pin(pipe::until_stopped(Box::pin(parts), stop.clone()));
    pipe::read_with(parts, move |input| csv::scan(input, chunk_rows))
        .await
        .map_err(io::Error::other)?
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
    let format = if last_row_no > datasets::MAX_ROW_NO {
        Err(too_many_rows())
    } else {
        row_format(&mut tx, job.dataset_id, &plan).await?
    };
    let format = match format {
        Ok(format) => format,
        Err(reason) => {
            // Release the job row before failing it.
            tx.rollback().await?;
            return super::fail(&engine.pool, job_id, &reason).await;
        }
    };
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

/// The refusal for a file with more rows than a job's row numbers hold.
pub fn too_many_rows() -> String {
    format!(
        "The file has more than {} rows, the most one import takes. Split it into parts.",
        datasets::MAX_ROW_NO
    )
}

/// How the chunks will read rows: the file's header lined up with the dataset's columns. A
/// dataset without columns takes the header's, as text; a header that does not fit the
/// dataset is the person's problem (`Err` with the reason).
pub async fn row_format(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    plan: &Plan,
) -> sqlx::Result<Result<RowFormat, String>> {
    let (mut declared, key) = datasets::schema(conn, dataset_id).await?;
    let columns = if declared.is_empty() {
        declared = plan.columns.iter().map(|name| Column::text(name)).collect();
        datasets::adopt_columns(conn, dataset_id, &declared).await?;
        declared.clone()
    } else {
        match schema::align(&plan.columns, &declared) {
            Ok(columns) => columns,
            Err(reason) => return Ok(Err(reason)),
        }
    };
    // Every header cell names a dataset column (`align` made sure).
    let slots = columns
        .iter()
        .filter_map(|column| declared.iter().position(|d| d.name == column.name))
        .collect();
    let key = key.and_then(|key| columns.iter().position(|column| column.name == key));
    Ok(Ok(RowFormat {
        delimiter: plan.delimiter,
        columns,
        slots,
        width: declared.len(),
        key,
        header_row: plan.header_row,
    }))
}
