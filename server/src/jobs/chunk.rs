//! The chunk task: parse a chunk's rows and commit them exactly once.
//!
//! Parsing happens before the transaction, on a blocking thread. The transaction then takes the
//! chunk's done-gate (a row lock on a `pending` chunk): a second delivery of the same task waits
//! there and then finds the chunk done, so rows and counters are written once however often
//! the task runs.

use uuid::Uuid;

use super::{Engine, TaskError};
use crate::{
    spreadsheet::csv,
    store::{chunks, datasets, errors, jobs, notify, uploads},
};

pub async fn run(engine: &Engine, job_id: Uuid, chunk_no: i32) -> Result<(), TaskError> {
    let pool = &engine.pool;
    let Some(chunk) = chunks::find(pool, job_id, chunk_no).await? else {
        return Ok(());
    };
    let job = {
        let mut conn = pool.acquire().await?;
        jobs::import_job(&mut conn, job_id).await?
    };
    let Some(job) = job.filter(|job| job.is_running() && !chunk.is_done()) else {
        return Ok(());
    };

    let bytes = uploads::read_range(
        pool,
        job.upload_id,
        chunk.byte_start as u64,
        chunk.byte_end as u64,
    )
    .await?;
    let delimiter = job.delimiter();
    let columns = job.columns.map(|columns| columns.0).unwrap_or_default();
    let first_row = chunk.first_row;
    let parsed = tokio::task::spawn_blocking(move || {
        csv::parse_chunk(&bytes, delimiter, &columns, first_row)
    })
    .await?;
    let found = parsed.rows.len() + parsed.errors.len();
    if found != chunk.row_count as usize {
        return Err(TaskError::ChunkMismatch {
            chunk_no,
            planned: chunk.row_count,
            found,
        });
    }

    let mut tx = pool.begin().await?;
    if !chunks::claim(&mut tx, job_id, chunk_no).await? {
        return Ok(());
    }
    datasets::insert_rows(
        &mut tx,
        job.dataset_id,
        job_id,
        &parsed.row_nos,
        &parsed.rows,
    )
    .await?;
    errors::insert(&mut tx, job_id, &parsed.errors).await?;
    chunks::mark_done(&mut tx, job_id, chunk_no).await?;
    let Some(version) = jobs::add_chunk(
        &mut tx,
        job_id,
        parsed.rows.len() as i64,
        parsed.errors.len() as i64,
    )
    .await?
    else {
        // The job ended while we worked (failed or cancelled): write nothing.
        tx.rollback().await?;
        return Ok(());
    };
    notify::job_changed(&mut tx, job_id, version).await?;
    tx.commit().await?;
    Ok(())
}
