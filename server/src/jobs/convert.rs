//! The first step of planning a workbook import: turn the chosen sheet into a CSV upload, which
//! the rest of the plan and every chunk then read like any CSV file.
//!
//! The conversion runs in a child process (`server convert`) under a virtual-memory limit
//! ([`CHILD_MEMORY_KB`]): calamine reads XLS and ODS sheets whole, sized by what the file
//! declares, and a hostile file could otherwise make it allocate until the worker (and an HTTP
//! server sharing its process) dies. The child reads the workbook on stdin and writes CSV on
//! stdout, which streams into a new upload (one transaction); its last stderr line says how it
//! went. Anything but a clean exit rolls the upload back: no half sheet is ever stored.

use std::{
    io::{self, Read, Write},
    process::Stdio,
};

use futures::{StreamExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};
use tokio::{io::AsyncReadExt, io::AsyncWriteExt, process::Command};
use tokio_util::{io::ReaderStream, sync::CancellationToken};
use uuid::Uuid;

use super::{Engine, TaskError, export::CSV_TYPE, pipe};
use crate::{
    config::ConvertArgs,
    spreadsheet::{
        FileError,
        csv::ScanError,
        workbook::{self, MAX_WORKBOOK_BYTES},
    },
    store::{
        jobs::{self, ImportJob},
        uploads::{self, UploadError},
    },
};

/// The child's address-space limit: the workbook (≤ 256 MB), calamine's cells and headroom.
const CHILD_MEMORY_KB: u64 = 3 << 20;

/// The child's CPU-time limit, in seconds: a 256 MB workbook converts in well under a minute,
/// so a file that keeps calamine busy for ten is hostile (or broken) and must not hang its job.
const CHILD_CPU_SECONDS: u64 = 600;

/// How much of the child's stderr is kept: its outcome is the last line.
const REPORT_BYTES: usize = 64 << 10;

/// What the plan reads next: the upload itself, or the CSV a workbook sheet became.
pub struct Source {
    pub upload_id: Uuid,
    /// The sheet row of the header (1 for a CSV file).
    pub header_row: i64,
}

/// The child's report, its last line on stderr.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Outcome {
    Converted { sheet: String, header_row: i64 },
    Refused { reason: String },
}

/// The CSV this job's chunks will read, converting a workbook sheet when that has not been
/// done yet. `Ok(Err(..))` is the file's fault: the job fails with that message.
pub async fn source(
    engine: &Engine,
    job_id: Uuid,
    job: &ImportJob,
    stop: &CancellationToken,
) -> Result<Result<Source, FileError>, TaskError> {
    if let Some(upload_id) = job.data_upload_id {
        return Ok(Ok(Source {
            upload_id,
            header_row: job.header_row.unwrap_or(1),
        }));
    }
    let pool = &engine.pool;
    let head = uploads::read_range(pool, job.upload_id, 0, 8).await?;
    if workbook::Kind::of(&head).is_none() {
        return Ok(Ok(Source {
            upload_id: job.upload_id,
            header_row: 1,
        }));
    }
    let upload = uploads::find(pool, job.upload_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    if upload.size as u64 > MAX_WORKBOOK_BYTES {
        return Ok(Err(FileError::NotCsv(format!(
            "The workbook is larger than {} MB, the most we open. Save the sheet as CSV (which \
             has no such limit) and upload that.",
            MAX_WORKBOOK_BYTES >> 20
        ))));
    }

    // `sh` sets the limits, then becomes the converter: `$0` is the program, `$1` the memory
    // limit, `$2` the CPU limit.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"ulimit -v "$1" && ulimit -t "$2" && shift 2 && exec "$0" convert "$@""#)
        .arg(&engine.converter)
        .arg(CHILD_MEMORY_KB.to_string())
        .arg(CHILD_CPU_SECONDS.to_string())
        .env("RUST_BACKTRACE", "0");
    if let Some(sheet) = &job.sheet {
        command.arg("--sheet").arg(sheet);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io::Error::other("the converter's pipes are missing").into());
    };

    let feed = async move {
        let mut parts = std::pin::pin!(uploads::stream(pool.clone(), job.upload_id));
        while let Some(part) = parts.next().await {
            // A closed pipe means the child stopped early; its exit says why.
            if stdin.write_all(&part?).await.is_err() {
                break;
            }
        }
        Ok::<_, TaskError>(())
    };
    // Read all of stderr (a child blocked on a full pipe would never exit), keep the end.
    let report = async move {
        let mut kept = Vec::new();
        let mut buf = vec![0; 8 << 10];
        loop {
            let n = stderr.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > REPORT_BYTES {
                kept.drain(..kept.len() - REPORT_BYTES);
            }
        }
        Ok::<_, io::Error>(String::from_utf8_lossy(&kept).into_owned())
    };
    // The CSV, then one more item once the child has exited: an error unless it succeeded,
    // so that a child that died half-way never leaves a stored upload.
    let exited = stream::once(async move {
        match child.wait().await {
            Ok(status) if status.success() => Ok(tokio_util::bytes::Bytes::new()),
            Ok(status) => Err(io::Error::other(format!(
                "the converter ended with {status}"
            ))),
            Err(err) => Err(err),
        }
    });
    // Owned by `save`: if storing fails, dropping the stream kills the child (`kill_on_drop`),
    // which ends the feed and stderr instead of leaving them blocked on full pipes.
    let csv = Box::pin(
        pipe::until_stopped(
            Box::pin(ReaderStream::new(stdout).chain(exited)),
            stop.clone(),
        )
        .map_err(UploadError::from),
    );
    let filename = format!("{}.csv", upload.filename);
    let save = uploads::save(pool, &job.owner, &filename, Some(CSV_TYPE), usize::MAX, csv);
    let (fed, report, saved) = tokio::join!(feed, report, save);
    if stop.is_cancelled() {
        // The child was killed for the stop, not for the file.
        return Err(io::Error::other(pipe::STOPPED).into());
    }
    fed?;
    let outcome = report?
        .lines()
        .last()
        .and_then(|line| serde_json::from_str::<Outcome>(line).ok());
    let (sheet, header_row, saved) = match (outcome, saved) {
        (Some(Outcome::Refused { reason }), _) => return Ok(Err(FileError::NotCsv(reason))),
        (_, Err(UploadError::Database(err))) => return Err(err.into()),
        (Some(Outcome::Converted { sheet, header_row }), Ok(saved)) => (sheet, header_row, saved),
        // Killed (out of memory or time, most likely) or crashed: it would happen again.
        _ => {
            return Ok(Err(FileError::NotCsv(
                "The workbook could not be read: it is damaged, or reading it would take more \
                 memory or time than a spreadsheet of its size should."
                    .into(),
            )));
        }
    };

    let mut conn = pool.acquire().await?;
    if !jobs::set_converted(&mut conn, job_id, saved.id, &sheet, header_row).await? {
        // Another run of this plan converted the sheet first; use that copy.
        uploads::delete(pool, saved.id).await?;
        let job = jobs::import_job(&mut conn, job_id)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        return Ok(Ok(Source {
            upload_id: job.csv_upload_id(),
            header_row: job.header_row.unwrap_or(1),
        }));
    }
    tracing::info!(%job_id, sheet, bytes = saved.size, "sheet converted to CSV");
    Ok(Ok(Source {
        upload_id: saved.id,
        header_row,
    }))
}

/// `server convert`: the workbook on stdin, its sheet as CSV on stdout, the [`Outcome`] as the
/// last line on stderr. Returns the exit code: 0 converted, 2 refused, 1 broken pipe.
pub fn child(args: &ConvertArgs) -> i32 {
    let mut bytes = Vec::new();
    let read = io::stdin()
        .take(MAX_WORKBOOK_BYTES + 1)
        .read_to_end(&mut bytes);
    if let Err(err) = read {
        eprintln!("reading the workbook: {err}");
        return 1;
    }
    let mut out = io::BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let result = workbook::to_csv(bytes, args.sheet.as_deref(), &mut out);
    let (outcome, code) = match result.and_then(|converted| Ok((converted, out.flush()?))) {
        Ok((converted, ())) => (
            Outcome::Converted {
                sheet: converted.sheet,
                header_row: converted.header_row,
            },
            0,
        ),
        Err(ScanError::File(reason)) => (
            Outcome::Refused {
                reason: reason.to_string(),
            },
            2,
        ),
        Err(ScanError::Io(err)) => {
            eprintln!("writing the CSV: {err}");
            return 1;
        }
    };
    eprintln!(
        "{}",
        serde_json::to_string(&outcome).expect("outcomes always serialize")
    );
    code
}
