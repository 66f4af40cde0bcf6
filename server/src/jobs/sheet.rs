//! A workbook import, streamed: the converter ([`super::convert`]) writes the sheet as CSV,
//! a blocking thread cuts it into chunks as it arrives ([`csv::scan_each`]), and each chunk is
//! written ([`chunk::run_streamed`]) while the sheet is still being read. Converting a sheet
//! costs about as much as importing it, so doing both at once nearly halves a workbook
//! import; and no converted copy of the sheet is stored.
//!
//! This all runs as the job's plan task, under its lease. A chunk is recorded done in the
//! transaction that writes its rows, so a run that dies half-way leaves only whole chunks, and
//! the next run (re-queued once the lease runs out) converts the sheet again and
//! skips them: rows count once. The plan is sealed, with the row count, at the end.
//!
//! What this gives up: a sheet found damaged part-way fails its job with the rows before the
//! damage already imported (a CSV file is checked whole before any row is written).

use std::{io::BufReader, sync::Arc};

use tokio::{
    sync::mpsc,
    task::{JoinError, JoinSet},
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use app::model::Remedy;

use super::{
    Engine, Refusal, TaskError,
    chunk::{self, Streamed},
    convert::{self, Ask, Conversion, Ended},
    error::stopped_io,
    format,
};
use crate::{
    auth::Sees,
    spreadsheet::{
        ChunkSpan, Plan,
        csv::{self, RowFormat, ScanError, Scanned},
        encoding::Encoding,
        reading::Reading,
        workbook::Converted,
    },
    store::{
        chunks, datasets,
        jobs::{self, ImportJob},
        notify, states, uploads,
    },
};

/// Chunks written at once while the sheet streams: enough to keep PostgreSQL busy while the
/// converter works, few enough to leave it a core.
const IN_FLIGHT: usize = 2;

/// What the reading thread found, in order.
enum Found {
    Announced(Converted),
    Header { delimiter: u8, columns: Vec<String> },
    Chunk { span: ChunkSpan, bytes: Vec<u8> },
}

pub async fn run(
    engine: &Engine,
    job_id: Uuid,
    job: &ImportJob,
    stop: &CancellationToken,
) -> Result<(), TaskError> {
    let pool = &engine.pool;
    let upload = uploads::find(pool, job.upload_id, Sees::Everything)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    if let Some(reason) = convert::too_large(upload.size as u64) {
        return Err(TaskError::refused(reason.to_string()));
    }
    let recorded = chunks::recorded(pool, job_id).await?;

    let (mut conversion, csv_out) = Conversion::start(
        &engine.converter,
        &engine.pool,
        job.upload_id,
        Ask::Sheet {
            sheet: job.sheet.as_deref(),
            header_row: job.reading().header_row,
        },
    )?;
    let (found_tx, mut found) = mpsc::channel(2);
    let chunk_rows = engine.chunk_rows;
    let reader = tokio::task::spawn_blocking(move || {
        let mut input = BufReader::with_capacity(64 << 10, csv_out);
        let Some(announced) = convert::read_announcement(&mut input)? else {
            return Ok(None);
        };
        let send = |found| found_tx.blocking_send(found).map_err(|_| stopped_io());
        send(Found::Announced(announced))?;
        // The converter writes UTF-8 with commas, the header first (rows above it skipped).
        let written = Reading {
            header_row: None,
            delimiter: Some(b','),
            encoding: Some(Encoding::Utf8),
        };
        let plan = csv::scan_each(input, &written, chunk_rows, |scanned| {
            Ok(send(match scanned {
                Scanned::Header { delimiter, columns } => Found::Header {
                    delimiter,
                    columns: columns.to_vec(),
                },
                Scanned::Chunk { span, bytes } => Found::Chunk {
                    span,
                    bytes: bytes.to_vec(),
                },
            })?)
        })?;
        Ok::<_, ScanError>(Some(plan))
    });

    let mut writers = Writers {
        engine,
        job_id,
        job,
        stop,
        running: JoinSet::new(),
    };
    let mut announced = None;
    let mut row_format: Option<Arc<RowFormat>> = None;
    let mut chunks_total = 0i32;
    // The newest chunk waits for the next one: the last is written only once the converter
    // has exited cleanly (a converter that dies may have cut its last row short). The loop
    // ends with why the stream must stop early, if it must.
    let mut held: Option<Streamed> = None;
    let stopped: Option<TaskError> = loop {
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => break Some(TaskError::Stopped),
            next = found.recv() => next,
        };
        let Some(next) = next else { break None };
        match next {
            Found::Announced(converted) => announced = Some(converted),
            Found::Header { delimiter, columns } => {
                let Some(announced) = &announced else {
                    break Some(out_of_order("the header came before the announcement"));
                };
                match start_format(engine, job_id, job, delimiter, columns, announced).await {
                    Ok(ready) => row_format = Some(Arc::new(ready)),
                    Err(err) => break Some(err),
                }
            }
            Found::Chunk { span, bytes } => {
                let chunk_no = chunks_total;
                chunks_total += 1;
                if span.first_row + i64::from(span.row_count) > datasets::MAX_ROW_NO {
                    break Some(format::too_many_rows());
                }
                let Some(format) = row_format.clone() else {
                    break Some(out_of_order("a chunk came before the header"));
                };
                if let Some(&before) = recorded.get(&chunk_no) {
                    if chunks::cut_alike(before, &span) {
                        continue;
                    }
                    break Some(chunk::cut_differently(chunk_no));
                }
                let chunk = Streamed {
                    chunk_no,
                    span,
                    bytes,
                };
                if let Some(ready) = held.replace(chunk)
                    && let Some(stopped) = writers.write(ready, &format).await
                {
                    break Some(stopped);
                }
            }
        }
    };
    // Whatever happened, every chunk being written ends on its own (a write is never dropped
    // half-way: that would spoil its connection).
    drop(found);
    let mut stopped = stopped.or(writers.wait_all().await);
    if stopped.is_some() {
        conversion.kill().await;
    }
    let scanned = reader.await?;
    let ended = conversion.finish().await?;
    if stopped.is_none()
        && let (Ended::Converted, Ok(Some(_))) = (&ended, &scanned)
        && let (Some(last), Some(format)) = (held, &row_format)
    {
        stopped = writers.write(last, format).await;
        stopped = stopped.or(writers.wait_all().await);
    }

    if stop.is_cancelled() {
        return Err(TaskError::Stopped);
    }
    let plan = match (stopped, ended, scanned) {
        (Some(err), ..) => return Err(err),
        (None, Ended::Refused { reason, sheets }, _) => {
            let remedy = sheets.map(|sheets| Remedy::OtherSheet {
                sheets,
                file_guid: job.upload_id,
            });
            return Err(TaskError::Refused(Refusal { reason, remedy }));
        }
        // The child ended early because the reader did (a CSV it cannot use): the reader says why.
        (None, _, Err(ScanError::File(reason))) => {
            return Err(TaskError::refused(reason.to_string()));
        }
        (None, Ended::Died(reason), _) => return Err(TaskError::refused(reason)),
        (None, Ended::Converted, Err(ScanError::Io(err))) => return Err(err.into()),
        (None, Ended::Converted, Ok(None)) => {
            return Err(out_of_order("the converter announced no sheet"));
        }
        (None, Ended::Converted, Ok(Some(plan))) => plan,
    };
    seal(engine, job_id, row_format, plan, chunks_total).await
}

/// The converter spoke out of turn: a fault of ours (the run is tried again), not the file's.
fn out_of_order(what: &'static str) -> TaskError {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what).into()
}

/// The chunks being written, at most [`IN_FLIGHT`] at once.
struct Writers<'a> {
    engine: &'a Engine,
    job_id: Uuid,
    job: &'a ImportJob,
    stop: &'a CancellationToken,
    running: JoinSet<Result<(), TaskError>>,
}

impl Writers<'_> {
    /// Starts writing `chunk` once there is room; why the stream must stop, if a chunk that
    /// ended meanwhile says so.
    async fn write(&mut self, chunk: Streamed, format: &Arc<RowFormat>) -> Option<TaskError> {
        if self.running.len() >= IN_FLIGHT
            && let Some(stopped) = joined(self.running.join_next().await)
        {
            return Some(stopped);
        }
        let (engine, job, stop) = (self.engine.clone(), self.job.clone(), self.stop.clone());
        let (job_id, format) = (self.job_id, format.clone());
        self.running.spawn(async move {
            chunk::run_streamed(&engine, job_id, &job, format, chunk, &stop).await
        });
        None
    }

    /// Waits for every chunk being written; the first reason to stop, if any.
    async fn wait_all(&mut self) -> Option<TaskError> {
        let mut stopped = None;
        while let Some(result) = self.running.join_next().await {
            stopped = stopped.or(joined(Some(result)));
        }
        stopped
    }
}

/// A chunk's end: `None` if it was written (or skipped), else why the stream must stop.
fn joined(ended: Option<Result<Result<(), TaskError>, JoinError>>) -> Option<TaskError> {
    ended?
        .map_err(TaskError::from)
        .and_then(|written| written)
        .err()
}

/// Lines the sheet's header up with the dataset and records the format (and the sheet
/// chosen) before any chunk is written; refused if the header does not fit.
async fn start_format(
    engine: &Engine,
    job_id: Uuid,
    job: &ImportJob,
    delimiter: u8,
    columns: Vec<String>,
    announced: &Converted,
) -> Result<RowFormat, TaskError> {
    let plan = Plan {
        delimiter,
        // The converter writes UTF-8.
        encoding: Encoding::Utf8,
        header_row: announced.header_row,
        columns,
        row_count: 0,
        chunks: Vec::new(),
    };
    let mut tx = engine.pool.begin().await?;
    let format = format::row_format(&mut tx, job, &plan).await?;
    jobs::set_format(
        &mut tx,
        job_id,
        &format,
        &announced.sheet,
        announced.declared_rows,
    )
    .await?;
    tx.commit().await?;
    Ok(format)
}

/// Records the row and chunk counts; the job ends at once, as its chunks are all written.
async fn seal(
    engine: &Engine,
    job_id: Uuid,
    format: Option<Arc<RowFormat>>,
    plan: Plan,
    chunks_total: i32,
) -> Result<(), TaskError> {
    let mut tx = engine.pool.begin().await?;
    let Some(mut version) = states::job::seal(
        &mut tx,
        job_id,
        format.as_deref(),
        plan.row_count,
        chunks_total,
    )
    .await?
    else {
        return Ok(());
    };
    if let Some(ended) = states::job::settle(&mut tx, job_id).await? {
        version = ended;
    }
    notify::job_changed(&mut tx, job_id, version).await?;
    tx.commit().await?;
    tracing::info!(%job_id, rows = plan.row_count, chunks = chunks_total, "sheet imported");
    Ok(())
}
