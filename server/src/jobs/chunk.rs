//! The chunk task: parse a chunk's rows and commit them exactly once.
//!
//! Parsing happens before the transaction, on a blocking thread. The transaction then takes the
//! chunk's done-gate (a row lock on a `pending` chunk): a second delivery of the same task waits
//! there and then finds the chunk done, so rows and counters are written once however often
//! the task runs. A run told to stop (see [`super::Run`]) stops before writing or instead of
//! committing.
//!
//! A chunk of a streamed sheet ([`super::sheet`]) arrives with its bytes and has no pending
//! state: its transaction records it as done (once: a unique key) together with its rows.

use std::{collections::HashMap, sync::Arc};

use sqlx::{PgConnection, Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use app::{history::RunOutcome, model::Column};

use super::{Engine, Run, TaskError};
use crate::{
    spreadsheet::{
        ChunkSpan,
        csv::{self, RowFormat},
    },
    store::{
        chunks::{self, Recorded},
        datasets, errors, history,
        jobs::{self, ImportJob},
        notify,
        states::{
            self,
            job::{ChunkCounts, WholePlan},
        },
        uploads,
    },
    telemetry,
};

pub async fn run(
    engine: &Engine,
    job_id: Uuid,
    chunk_no: i32,
    run: Run<'_>,
) -> Result<(), TaskError> {
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
    let Some(format) = job.row_format.clone().map(|format| format.0) else {
        // Chunks exist only once the plan recorded the format; nothing to do without it.
        return Ok(());
    };

    let span = chunk.span();
    let bytes = if csv::is_one_row_too_large(&span) {
        Vec::new()
    } else {
        uploads::read_range(pool, job.upload_id, span.byte_start, span.byte_end).await?
    };
    let keyed = format.key.is_some();
    let parsed = tokio::task::spawn_blocking(move || csv::rows_of(&span, &bytes, &format)).await?;
    let found = parsed.rows.len() + parsed.errors.len();
    if found != chunk.row_count as usize {
        // The bytes no longer read as planned: no retry can fix that.
        return Err(TaskError::refused(format!(
            "Part {} of the file could not be read back as planned ({found} rows instead of {}).",
            chunk_no + 1,
            chunk.row_count
        )));
    }

    if run.stop.is_cancelled() {
        return Err(TaskError::Stopped);
    }
    let mut tx = pool.begin().await?;
    if !chunks::claim(&mut tx, job_id, chunk_no, &run.lease.owner).await? {
        return Ok(());
    }
    states::chunk::done(&mut tx, job_id, chunk_no).await?;
    history::end_run(&mut *tx, &run.lease.owner, RunOutcome::Ok, None).await?;
    write(tx, job_id, &job, keyed, &parsed, run.stop).await
}

/// A chunk of a streamed sheet: its bytes as the stream cut them.
pub struct Streamed {
    pub chunk_no: i32,
    pub span: ChunkSpan,
    pub bytes: Vec<u8>,
}

/// Writes a streamed chunk's rows and records it done, unless an earlier run of the stream
/// did; refused if that run cut the stream differently (the job cannot go on).
pub async fn run_streamed(
    engine: &Engine,
    job_id: Uuid,
    job: &ImportJob,
    format: Arc<RowFormat>,
    chunk: Streamed,
    stop: &CancellationToken,
) -> Result<(), TaskError> {
    let Streamed {
        chunk_no,
        span,
        bytes,
    } = chunk;
    let keyed = format.key.is_some();
    let parsed = tokio::task::spawn_blocking(move || csv::rows_of(&span, &bytes, &format)).await?;
    if stop.is_cancelled() {
        return Err(TaskError::Stopped);
    }
    let mut tx = engine.pool.begin().await?;
    match chunks::record_done(&mut tx, job_id, chunk_no, &span).await? {
        Recorded::New => {}
        Recorded::Before => return Ok(()),
        Recorded::Different => return Err(cut_differently(chunk_no)),
    }
    write(tx, job_id, job, keyed, &parsed, stop).await
}

/// Why a streamed import cannot go on when an earlier run cut its sheet into other chunks: the
/// rows of the chunks it recorded would not line up with this run's.
pub fn cut_differently(chunk_no: i32) -> TaskError {
    TaskError::refused(format!(
        "Part {} of the sheet was cut differently by an earlier run of this import (are workers \
         running with different CONVEYOR_CHUNK_ROWS?). Import the file again.",
        chunk_no + 1
    ))
}

/// Writes a done chunk's rows, row errors and counts, then commits, unless the job ended
/// meanwhile or the run was told to stop (then nothing is written).
async fn write(
    mut tx: Transaction<'_, Postgres>,
    job_id: Uuid,
    job: &ImportJob,
    keyed: bool,
    parsed: &csv::ChunkRows,
    stop: &CancellationToken,
) -> Result<(), TaskError> {
    let chunk = ChunkWrite {
        job,
        keyed,
        parsed,
        whole_plan: None,
        columns: None,
    };
    let Some(version) = write_rows(&mut tx, &[chunk])
        .await?
        .and_then(|v| v.first().copied())
    else {
        // The job ended while we worked (failed or cancelled): write nothing.
        tx.rollback().await?;
        return Ok(());
    };
    notify::job_changed(&mut tx, job_id, version).await?;
    if stop.is_cancelled() {
        // Stopped while writing (the job was cancelled, the lease lost, the process is
        // stopping): this run counts for nothing.
        tx.rollback().await?;
        return Err(TaskError::Stopped);
    }
    tx.commit().await?;
    telemetry::rows_imported(parsed.rows.len() as i64, parsed.errors.len() as i64);
    Ok(())
}

/// A done chunk's rows to write, of one import.
#[derive(Clone, Copy)]
pub struct ChunkWrite<'a> {
    pub job: &'a ImportJob,
    /// Its dataset has a key its rows carry (they replace rows with the same key).
    pub keyed: bool,
    pub parsed: &'a csv::ChunkRows,
    /// The job's plan, when this chunk is all of it ([`states::job::add_chunk`]).
    pub whole_plan: Option<WholePlan<'a>>,
    /// The columns its dataset takes, if it has none: its plan's header, when the plan is
    /// written with its rows (a whole plan).
    pub columns: Option<&'a [Column]>,
}

/// Writes done chunks' rows and row errors (one import's, or those of a batch of small imports
/// at once: [`super::batch`]) and adds them to their jobs' and datasets' counts, in the
/// caller's transaction; each job's new version, or `None` (and the transaction must be rolled
/// back) if a job is no longer running (with a `whole_plan`: no longer live and unsealed; see
/// [`states::job::add_chunk`]). The rows of datasets without a key take one statement, and so
/// do the jobs' counters ([`states::job::add_chunks`]).
pub async fn write_rows(
    tx: &mut PgConnection,
    chunks: &[ChunkWrite<'_>],
) -> sqlx::Result<Option<Vec<i64>>> {
    let mut counted = Vec::with_capacity(chunks.len());
    let mut appended = Vec::new();
    for chunk in chunks {
        let (job, parsed) = (chunk.job, chunk.parsed);
        let mut counts = ChunkCounts {
            ok: parsed.rows.len() as i64,
            updated: 0,
            failed: parsed.errors.len() as i64,
        };
        let new_rows = if chunk.keyed {
            let (row_nos, keys, rows) = last_of_each_key(parsed);
            let new_rows = if job.dry_run {
                // A dry run writes no row: it counts the keys it has not met.
                datasets::dry_run_new_keys(&mut *tx, chunk.job.id, job.dataset_id, &keys).await?
            } else {
                datasets::upsert_rows(&mut *tx, job.dataset_id, job.seq, &row_nos, &keys, &rows)
                    .await?
            };
            counts.updated = counts.ok - new_rows;
            new_rows
        } else {
            if !job.dry_run {
                appended.push(datasets::NewRows {
                    dataset_id: job.dataset_id,
                    job_seq: job.seq,
                    row_nos: &parsed.row_nos,
                    rows: &parsed.rows,
                });
            }
            counts.ok
        };
        counted.push((counts, new_rows));
    }
    datasets::insert_rows(&mut *tx, &appended).await?;
    let mut counters = Vec::with_capacity(chunks.len());
    for (chunk, &(counts, _)) in chunks.iter().zip(&counted) {
        errors::insert(&mut *tx, chunk.job.id, &chunk.parsed.errors).await?;
        counters.push((chunk.job.id, counts, chunk.whole_plan));
    }
    let Some(added) = states::job::add_chunks(&mut *tx, &counters).await? else {
        return Ok(None);
    };
    let written: Vec<datasets::Written<'_>> = chunks
        .iter()
        .zip(&counted)
        .zip(&added)
        .filter(|((chunk, _), _)| !chunk.job.dry_run)
        .map(|((chunk, &(_, new_rows)), added)| datasets::Written {
            dataset_id: chunk.job.dataset_id,
            columns: chunk.columns,
            added: new_rows,
            completed: added.completed,
        })
        .collect();
    datasets::record_written(&mut *tx, &written).await?;
    Ok(Some(added.iter().map(|chunk| chunk.version).collect()))
}

/// The rows to write for a keyed dataset: of rows sharing a key, only the last (it replaces the
/// others, which count as updated, as they would had they been in different chunks).
fn last_of_each_key(parsed: &csv::ChunkRows) -> (Vec<i64>, Vec<&str>, Vec<&str>) {
    let mut last = HashMap::with_capacity(parsed.rows.len());
    for (i, key) in parsed.keys.iter().enumerate() {
        if let Some(key) = key {
            last.insert(key.as_str(), i);
        }
    }
    let mut chosen: Vec<(usize, &str)> = last.into_iter().map(|(key, i)| (i, key)).collect();
    chosen.sort_unstable();
    (
        chosen.iter().map(|&(i, _)| parsed.row_nos[i]).collect(),
        chosen.iter().map(|&(_, key)| key).collect(),
        chosen
            .iter()
            .map(|&(i, _)| parsed.rows[i].as_str())
            .collect(),
    )
}
