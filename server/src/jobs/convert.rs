//! The workbook converter: a child process (`server convert`) that reads the workbook on stdin
//! and writes the chosen sheet as CSV on stdout, first a line announcing the sheet and its
//! header row ([`Converted`]), as soon as the header is found. Its last stderr line says how
//! it went ([`Outcome`]). [`super::sheet`] streams the CSV straight into chunks. Asked for the
//! head instead (`--head`), it writes the workbook's sheets and the first rows of one as JSON
//! ([`WorkbookHead`]), for the preview of an upload.
//!
//! It is a child process under a virtual-memory limit ([`CHILD_MEMORY_KB`]) and a CPU-time
//! limit: calamine reads XLS and ODS sheets whole, sized by what the file declares, and a
//! hostile file could otherwise make it allocate until the worker (and an HTTP server sharing
//! its process) dies, or keep it busy for ever.

use std::{
    fs::File,
    io::{self, BufRead, Read, Write},
    os::unix::process::ExitStatusExt,
    process::Stdio,
};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    process::{Child, Command},
    task::JoinHandle,
};

use sqlx::PgPool;
use uuid::Uuid;

use super::TaskError;
use crate::{
    config::ConvertArgs,
    spreadsheet::{
        FileError,
        csv::ScanError,
        workbook::{self, Converted, MAX_WORKBOOK_BYTES, WorkbookHead},
    },
    store::uploads,
};

/// The child's address-space limit: the workbook (≤ 256 MB), calamine's cells and headroom.
const CHILD_MEMORY_KB: u64 = 3 << 20;

/// The child's CPU-time limit, in seconds: a 256 MB workbook converts in well under a minute,
/// so a file that keeps calamine busy for ten is hostile (or broken) and must not hang its job.
const CHILD_CPU_SECONDS: u64 = 600;

/// How much of the child's stderr is kept: its outcome is the last line.
const REPORT_BYTES: usize = 64 << 10;

/// The child's report, its last line on stderr.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Outcome {
    Converted,
    Refused {
        reason: String,
        /// The workbook's sheets, when the one asked for is not among them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sheets: Option<Vec<String>>,
    },
}

/// A running converter.
pub struct Conversion {
    child: Child,
    feed: JoinHandle<Result<(), TaskError>>,
    report: JoinHandle<io::Result<String>>,
}

/// How a converter ended.
pub enum Ended {
    Converted,
    /// The file's fault, in the converter's words; the workbook's sheets when the one asked
    /// for is not among them.
    Refused {
        reason: String,
        sheets: Option<Vec<String>>,
    },
    /// Killed or crashed: the reason to give the person.
    Died(String),
}

/// The refusal for a workbook too large to open, if it is one.
pub fn too_large(size: u64) -> Option<FileError> {
    (size > MAX_WORKBOOK_BYTES).then(|| {
        FileError::NotCsv(format!(
            "The workbook is larger than {} MB, the most we open. Save the sheet as CSV (which \
             has no such limit) and upload that.",
            MAX_WORKBOOK_BYTES >> 20
        ))
    })
}

/// What a converter is asked for.
#[derive(Debug, Clone, Copy)]
pub enum Ask<'a> {
    /// The sheet named (or the first holding a table) as CSV, its header the first row with a
    /// value at or below `header_row`.
    Sheet {
        sheet: Option<&'a str>,
        header_row: Option<i64>,
    },
    /// The workbook's sheets and the first rows (from sheet row `from_row` on) of the one
    /// named (or picked), as JSON.
    Head {
        sheet: Option<&'a str>,
        from_row: i64,
    },
}

impl Conversion {
    /// Starts a converter on an upload; the child's stdout, for reading on a blocking thread
    /// (for a sheet: the announcement, then the CSV).
    pub fn start(
        converter: &std::path::Path,
        pool: &PgPool,
        upload_id: Uuid,
        ask: Ask<'_>,
    ) -> Result<(Conversion, File), TaskError> {
        // `sh` sets the limits, then becomes the converter: `$0` is the program, `$1` the
        // memory limit, `$2` the CPU limit. The child parses hostile files, so it gets none of
        // our environment (the database's address and password are in it).
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(r#"ulimit -v "$1" && ulimit -t "$2" && shift 2 && exec "$0" convert "$@""#)
            .arg(converter)
            .arg(CHILD_MEMORY_KB.to_string())
            .arg(CHILD_CPU_SECONDS.to_string())
            .env_clear()
            .env("RUST_BACKTRACE", "0")
            // Our allocator (jemalloc) as suits a child under an address-space limit: freed
            // space unmapped rather than kept reserved, and no background thread's stack.
            .env("_RJEM_MALLOC_CONF", "retain:false,background_thread:false");
        let (sheet, header_row) = match ask {
            Ask::Sheet { sheet, header_row } => (sheet, header_row),
            Ask::Head { sheet, from_row } => {
                command.arg("--head");
                (sheet, Some(from_row))
            }
        };
        if let Some(sheet) = sheet {
            // One argument, so that a sheet named like a flag is still a sheet name.
            command.arg(format!("--sheet={sheet}"));
        }
        if let Some(row) = header_row {
            command.arg(format!("--header-row={row}"));
        }
        // Its own process group: a Ctrl-C meant for the worker's terminal is not the file's
        // fault (the worker stops it when it stops).
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(io::Error::other("the converter's pipes are missing").into());
        };
        let csv = File::from(stdout.into_owned_fd()?);

        let pool = pool.clone();
        let feed = tokio::spawn(async move {
            let mut parts = std::pin::pin!(uploads::stream(pool, upload_id));
            while let Some(part) = parts.next().await {
                // A closed pipe means the child stopped early; its exit says why.
                if stdin.write_all(&part?).await.is_err() {
                    break;
                }
            }
            Ok(())
        });
        // Read all of stderr (a child blocked on a full pipe would never exit), keep the end.
        let report = tokio::spawn(async move {
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
            Ok(String::from_utf8_lossy(&kept).into_owned())
        });
        Ok((
            Conversion {
                child,
                feed,
                report,
            },
            csv,
        ))
    }

    /// Stops the child (when its reader gave up early).
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Waits for the child. Stopped by a signal asking it to stop (a deploy stopping every
    /// process, say), it is an error of the run, tried again, not a verdict on the file.
    pub async fn finish(mut self) -> Result<Ended, TaskError> {
        let status = self.child.wait().await?;
        if let Some(signal @ (libc::SIGHUP | libc::SIGINT | libc::SIGTERM)) = status.signal() {
            return Err(
                io::Error::other(format!("the converter was stopped (signal {signal})")).into(),
            );
        }
        self.feed.await??;
        let outcome = self
            .report
            .await??
            .lines()
            .last()
            .and_then(|line| serde_json::from_str::<Outcome>(line).ok());
        Ok(match outcome {
            Some(Outcome::Converted) if status.success() => Ended::Converted,
            Some(Outcome::Refused { reason, sheets }) => Ended::Refused { reason, sheets },
            // Killed (out of memory or time, most likely) or crashed: it would happen again.
            _ => Ended::Died(
                "The workbook could not be read: it is damaged, or reading it would take more \
                 memory or time than a spreadsheet of its size should."
                    .into(),
            ),
        })
    }
}

/// Reads the announcement line that comes before the CSV; `None` if the output ended first
/// (the child refused the file: its outcome says why).
pub fn read_announcement(csv: &mut impl io::BufRead) -> io::Result<Option<Converted>> {
    let mut line = Vec::new();
    csv.take(REPORT_BYTES as u64).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(&line).map(Some).map_err(|err| {
        io::Error::other(format!("the converter's announcement is unreadable: {err}"))
    })
}

/// Reads a head the converter wrote (`--head`); `None` if it wrote none (it refused the file:
/// its outcome says why).
pub fn read_head(out: impl Read) -> io::Result<Option<WorkbookHead>> {
    let mut text = Vec::new();
    out.take(HEAD_BYTES).read_to_end(&mut text)?;
    if text.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|err| io::Error::other(format!("the converter's head is unreadable: {err}")))
}

/// The most a head may take as JSON: its text is at most 8 MiB and a few (`workbook::head`),
/// which escaping may make a few times longer.
const HEAD_BYTES: u64 = 64 << 20;

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
    let sheet = args.sheet.as_deref();
    let result = if args.head {
        workbook::head(bytes, sheet, args.header_row.unwrap_or(1)).and_then(|head| {
            serde_json::to_writer(&mut out, &head).map_err(io::Error::from)?;
            Ok(())
        })
    } else {
        workbook::to_csv(bytes, sheet, args.header_row, true, &mut out).map(|_| ())
    };
    let (outcome, code) = match result.and_then(|()| Ok(out.flush()?)) {
        Ok(()) => (Outcome::Converted, 0),
        Err(ScanError::File(reason)) => (
            Outcome::Refused {
                reason: reason.to_string(),
                sheets: match reason {
                    FileError::NoSuchSheet { sheets, .. } => Some(sheets),
                    _ => None,
                },
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
