//! The plan task: read the upload once, streaming, and turn it into chunks. A workbook's sheet
//! is imported as it streams out of the converter instead ([`super::sheet`]), and a CSV file
//! small enough to be one chunk is imported by the plan itself, in one transaction that also
//! gives the plan's lease back and ends its run ([`import_at_once`]).
//!
//! The scan runs on a blocking thread and pulls the upload's parts through a small channel, so
//! memory stays flat however large the file. Everything the plan decides is written in one
//! transaction with the chunk tasks; a plan that dies half-way leaves nothing behind and simply
//! runs again.

use std::io;

use app::history::RunOutcome;
use futures::TryStreamExt;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use tokio_util::sync::CancellationToken;

use super::{
    Done, Engine, Run, TaskError,
    chunk::{self, ChunkWrite},
    format, pipe, sheet,
};
use crate::{
    spreadsheet::{
        ChunkSpan, Plan,
        csv::{self, ChunkRows, ScanError},
        reading::Reading,
        workbook,
    },
    store::{
        chunks, datasets, history,
        jobs::{self, ImportJob},
        notify,
        queue::{self, Priority, TaskMsg},
        states::{self, job::WholePlan},
        uploads,
    },
    telemetry,
};

/// Plans (or imports at once) an import job, under `run`'s lease of the job's step.
pub async fn run(engine: &Engine, job_id: Uuid, run: Run<'_>) -> Result<Done, TaskError> {
    let stop = run.stop;
    let mut tx = engine.pool.begin().await?;
    let Some(job) = jobs::lock_import_job(&mut tx, job_id).await? else {
        return Ok(Done::LeaseHeld);
    };
    if !job.is_live() {
        // Finished or cancelled before it started.
        return Ok(Done::LeaseHeld);
    }
    if job.sealed {
        // Planned already: its chunks were queued with the plan (a retried job, started again
        // just now, has them re-queued by `maintenance::requeue`). A retried job with no chunk
        // left to run (a streamed sheet, all written, that failed its row error limit at the
        // end) ends here.
        start(&mut tx, job_id).await?;
        if let Some(version) = states::job::settle(&mut tx, job_id).await? {
            notify::job_changed(&mut tx, job_id, version).await?;
        }
        tx.commit().await?;
        return Ok(Done::LeaseHeld);
    }
    // Read under the job's lock: a small file of one chunk is imported in this transaction,
    // which also starts the job, so a small job's whole run is one transaction.
    let head = uploads::read_range(&mut *tx, job.upload_id, 0, SMALL_FILE).await?;
    if !is_small_csv(&head) {
        start(&mut tx, job_id).await?;
        tx.commit().await?;
        if workbook::Kind::of(&head).is_some() {
            sheet::run(engine, job_id, &job, stop).await?;
        } else {
            let plan = scan_upload(engine, job.upload_id, job.reading(), stop).await?;
            seal(engine, job_id, plan).await?;
        }
        return Ok(Done::LeaseHeld);
    }
    // The whole file: scanned from memory, and imported at once if it is one chunk. (A file
    // refused here fails while still `waiting`: it never started.)
    let (reading, chunk_rows) = (job.reading(), engine.chunk_rows);
    let (plan, file) =
        tokio::task::spawn_blocking(move || (csv::scan(&head[..], &reading, chunk_rows), head))
            .await?;
    let plan = plan.map_err(scan_failed)?;
    if let [span] = plan.chunks[..] {
        match import_at_once(tx, job_id, &job, &plan, span, file, run).await {
            // A fault of ours (a full disk, say): the chunk runs as its own task instead,
            // with its own attempts, and is listed as a failed part if they all fail.
            Err(TaskError::Retry(cause)) => {
                tracing::warn!(%job_id, "importing at once failed, queueing its chunk: {cause}");
            }
            imported => return imported,
        }
        tx = engine.pool.begin().await?;
        if jobs::lock_import_job(&mut tx, job_id).await?.is_none() {
            return Ok(Done::LeaseHeld);
        }
    }
    start(&mut tx, job_id).await?;
    tx.commit().await?;
    seal(engine, job_id, plan).await?;
    Ok(Done::LeaseHeld)
}

/// `waiting` → `running`, announced; nothing if it runs already.
async fn start(tx: &mut PgConnection, job_id: Uuid) -> sqlx::Result<()> {
    if let Some(version) = states::job::start(&mut *tx, job_id).await? {
        notify::job_changed(tx, job_id, version).await?;
    }
    Ok(())
}

/// Files smaller than this are read whole by the plan (one part of an upload), and imported
/// in the plan's first transaction when they are one chunk: a small job pays for one task and
/// one transaction, not a plan and a chunk each with its queue round trip, lease and
/// transactions (`make bench ONLY=small`).
pub(super) const SMALL_FILE: u64 = uploads::PART_BYTES as u64;

/// Whether `head`, the first [`SMALL_FILE`] bytes of an upload, is all of a file that is not a
/// workbook: the plan reads it from memory, and imports it at once if it is one chunk.
pub(super) fn is_small_csv(head: &[u8]) -> bool {
    workbook::Kind::of(head).is_none() && (head.len() as u64) < SMALL_FILE
}

/// Imports a file of one chunk in `tx`, which holds the job's lock: its format, its chunk
/// recorded done with its rows, the job started, sealed, counted, its plan's lease given back
/// and the job ended in one update (two when rows failed), with one notification; and the
/// plan's run ended, so that the worker need not (`make bench ONLY=small`). Rolled back on an
/// error, before the caller goes on.
async fn import_at_once(
    mut tx: Transaction<'_, Postgres>,
    job_id: Uuid,
    job: &ImportJob,
    plan: &Plan,
    span: ChunkSpan,
    file: Vec<u8>,
    run: Run<'_>,
) -> Result<Done, TaskError> {
    let lease_owner = &run.lease.owner;
    let whole = AtOnce {
        job,
        plan,
        span,
        file,
        lease_owner,
    };
    let written = write_at_once(&mut tx, vec![whole]).await;
    let (version, parsed) = match written {
        Ok(Some(mut written)) => written.pop().expect("one import written"),
        // The job is locked, live and not sealed: nothing can have moved it.
        Ok(None) => {
            tx.rollback().await?;
            return Ok(Done::LeaseHeld);
        }
        Err(err) => {
            tx.rollback().await?;
            return Err(err);
        }
    };
    notify::job_changed(&mut tx, job_id, version).await?;
    history::end_run(&mut *tx, lease_owner, RunOutcome::Ok, None).await?;
    if run.stop.is_cancelled() {
        tx.rollback().await?;
        return Err(TaskError::Stopped);
    }
    tx.commit().await?;
    telemetry::rows_imported(parsed.rows.len() as i64, parsed.errors.len() as i64);
    tracing::info!(%job_id, rows = plan.row_count, "job imported at once");
    Ok(Done::RunEnded)
}

/// A locked, live, unsealed import whose file is one chunk, to import at once.
pub(super) struct AtOnce<'a> {
    pub job: &'a ImportJob,
    pub plan: &'a Plan,
    /// The plan's one chunk.
    pub span: ChunkSpan,
    /// The whole file (taken by the write).
    pub file: Vec<u8>,
    /// The owner of the lease of the job's plan.
    pub lease_owner: &'a str,
}

/// Writes the one chunk's rows of each import and ends each job, as [`import_at_once`] says
/// (a batch of imports at once: [`super::batch`], with one statement for what they all
/// write alike): each job's new version and rows, in the order given; `None` if a job was not
/// live and unsealed. Refused if any import is.
pub(super) async fn write_at_once(
    tx: &mut PgConnection,
    mut imports: Vec<AtOnce<'_>>,
) -> Result<Option<Vec<(i64, ChunkRows)>>, TaskError> {
    for import in &imports {
        check_row_numbers(import.plan)?;
    }
    let planned: Vec<(&ImportJob, &Plan)> = imports.iter().map(|i| (i.job, i.plan)).collect();
    let formats = format::row_formats(&mut *tx, &planned)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let read: Vec<_> = imports
        .iter_mut()
        .zip(&formats)
        .map(|(import, (format, _))| {
            (
                import.span,
                format.clone(),
                std::mem::take(&mut import.file),
            )
        })
        .collect();
    let parsed = tokio::task::spawn_blocking(move || {
        read.into_iter()
            .map(|(span, format, file)| {
                let bytes = file.get(span.byte_start as usize..span.byte_end as usize);
                csv::rows_of(&span, bytes.unwrap_or_default(), &format)
            })
            .collect::<Vec<_>>()
    })
    .await?;
    let spans: Vec<(Uuid, &ChunkSpan)> = imports.iter().map(|i| (i.job.id, &i.span)).collect();
    let recorded = chunks::record_whole(&mut *tx, &spans).await?;
    if recorded != imports.len() as u64 {
        // The jobs were locked and not sealed, and a chunk is recorded with the seal: no other
        // run can have recorded one.
        let found = "the one chunk of an unsealed job was recorded already";
        return Err(std::io::Error::other(found).into());
    }
    // Each started, sealed with its one chunk, counted, its plan's lease given back and (when
    // no row failed) completed in one update; with rows in error, the job then ends as after
    // the last chunk of any import (completed, or failed past its row error limit).
    let writes: Vec<ChunkWrite> = imports
        .iter()
        .zip(&formats)
        .zip(&parsed)
        .map(|((import, (format, columns)), parsed)| ChunkWrite {
            job: import.job,
            keyed: format.key.is_some(),
            parsed,
            whole_plan: Some(WholePlan {
                format,
                item_count: import.plan.row_count,
                lease_owner: import.lease_owner,
            }),
            columns: columns.as_deref(),
        })
        .collect();
    let versions = chunk::write_rows(tx, &writes).await?;
    Ok(versions.map(|versions| versions.into_iter().zip(parsed).collect()))
}

/// Refused: the plan's last row would pass the row numbers a dataset keeps.
fn check_row_numbers(plan: &Plan) -> Result<(), TaskError> {
    let last_row_no = plan
        .chunks
        .last()
        .map_or(0, |last| last.first_row + i64::from(last.row_count));
    if last_row_no > datasets::MAX_ROW_NO {
        return Err(format::too_many_rows());
    }
    Ok(())
}

fn scan_failed(err: ScanError) -> TaskError {
    match err {
        ScanError::File(reason) => TaskError::refused(reason.to_string()),
        ScanError::Io(err) => err.into(),
    }
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
    scanned.map_err(scan_failed)
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
    check_row_numbers(&plan)?;
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
    let turn = Priority::Turn {
        ahead: jobs::ahead(&mut tx, job_id).await?,
    };
    queue::push(&mut tx, &tasks, turn).await?;
    notify::job_changed(&mut tx, job_id, version).await?;
    tx.commit().await?;
    tracing::info!(%job_id, rows = plan.row_count, chunks = chunks_total, "job planned");
    Ok(())
}
