//! An export's file, written by its chunks in parallel as parts of one upload
//! (`uploads::create_output`): each chunk renders its rows as they come out of its `COPY` and
//! stores them about a MiB at a time, and the export's end adds what only it knows.
//!
//! - CSV: the header is part 0 (written by the plan); chunk `c` writes its records as parts
//!   `(c + 1) << 12` and up. The file is its parts in order.
//! - XLSX: chunk `c` writes its rows as a piece of the sheet's deflated XML
//!   (`spreadsheet::sheet_writer`) into the same parts, and records the piece's CRC-32 and
//!   lengths with its done mark; the end writes part 0 (the zip's header for the sheet and the
//!   sheet's start) and [`TAIL_PART`] (the sheet's end, the workbook's other parts and the zip's
//!   directory). The XML is rendered as the `COPY`'s messages come, and deflated on a blocking
//!   thread a batch (a MiB of XML) at a time.

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use app::model::Remedy;

use super::{Refusal, TaskError};
use crate::{
    spreadsheet::{
        output::{CsvRows, MAX_XLSX_CELL_CHARS},
        schema::Column,
        sheet_writer::{self, Piece, SHEET_END, SheetRows, Summary, package},
    },
    store::{exports, uploads},
};

/// The last part of an XLSX export's file, after every chunk's.
const TAIL_PART: i32 = i32::MAX;

/// Chunks an export may have (the plan refuses more; the last chunk's parts end before
/// [`TAIL_PART`]), and parts one chunk may write (4 GiB).
pub const MAX_CHUNKS: usize = (1 << 19) - 2;
const PARTS_PER_CHUNK: i32 = 1 << 12;

/// XML rendered before it is deflated: a blocking thread's batch.
const XML_BATCH: usize = 1 << 20;

/// What a chunk writes: its rows as CSV records, or as a piece of the sheet.
enum Rendering<'c> {
    Csv(CsvRows<'c>),
    Sheet {
        rows: SheetRows<'c>,
        /// Out while a batch is deflated on a blocking thread.
        piece: Option<Piece>,
    },
}

impl<'c> Rendering<'c> {
    fn new(columns: &'c [Column], sheet: bool) -> Self {
        if sheet {
            Rendering::Sheet {
                rows: SheetRows::with_capacity(columns, XML_BATCH + (64 << 10)),
                piece: Some(Piece::default()),
            }
        } else {
            Rendering::Csv(CsvRows::with_capacity(
                columns,
                uploads::PART_BYTES + (64 << 10),
            ))
        }
    }

    fn push(&mut self, record: &[u8]) -> Result<(), TaskError> {
        match self {
            Rendering::Csv(csv) => csv.push(record),
            Rendering::Sheet { rows, .. } => rows.push(record).map_err(|_| too_long())?,
        }
        Ok(())
    }

    /// A part's worth of the file, once there is one.
    async fn ready_part(&mut self) -> Result<Option<Vec<u8>>, TaskError> {
        match self {
            Rendering::Csv(csv) => Ok((csv.bytes() >= uploads::PART_BYTES).then(|| csv.take())),
            Rendering::Sheet { rows, piece } => {
                if rows.bytes() >= XML_BATCH {
                    deflate(piece, rows.take()).await?;
                }
                let piece = piece.as_mut().expect("the piece is back after each batch");
                Ok((piece.deflated() >= uploads::PART_BYTES).then(|| piece.take()))
            }
        }
    }

    /// The rest of the chunk's bytes, its rows, and (XLSX) what its piece holds.
    async fn end(self) -> Result<(Vec<u8>, i64, Option<Summary>), TaskError> {
        match self {
            Rendering::Csv(mut csv) => Ok((csv.take(), csv.rows(), None)),
            Rendering::Sheet {
                mut rows,
                mut piece,
            } => {
                deflate(&mut piece, rows.take()).await?;
                let piece = piece.expect("the piece is back after each batch");
                let (rest, summary) = tokio::task::spawn_blocking(move || {
                    let mut piece = piece;
                    let mut bytes = piece.take();
                    let (rest, summary) = piece.end();
                    bytes.extend_from_slice(&rest);
                    (bytes, summary)
                })
                .await?;
                Ok((rest, rows.rows(), Some(summary)))
            }
        }
    }
}

/// Deflates a batch of XML on a blocking thread.
async fn deflate(piece: &mut Option<Piece>, xml: Vec<u8>) -> Result<(), TaskError> {
    let mut taken = piece.take().expect("one batch at a time");
    *piece = Some(
        tokio::task::spawn_blocking(move || {
            taken.write(&xml);
            taken
        })
        .await?,
    );
    Ok(())
}

fn too_long() -> TaskError {
    TaskError::Refused(Refusal {
        reason: format!(
            "A cell holds more than {MAX_XLSX_CELL_CHARS} characters, more than Excel allows. \
             Export the dataset as CSV instead."
        ),
        remedy: Some(Remedy::ExportCsv),
    })
}

/// Renders a chunk's rows into parts of the export's file as they come (CSV, or the sheet's
/// piece when `sheet`); how many rows, and the piece's summary. The `COPY` is read to its end
/// whatever happens, so that its connection goes back to the pool ready for the next query
/// (one dropped half-read would greet it with the rest).
pub async fn write_parts(
    messages: impl Stream<Item = sqlx::Result<Bytes>>,
    tx: &mut PgConnection,
    output: Uuid,
    chunk_no: i32,
    columns: &[Column],
    sheet: bool,
    stop: &CancellationToken,
) -> Result<(i64, Option<Summary>), TaskError> {
    let mut messages = std::pin::pin!(messages);
    let mut parts = Parts::of_chunk(chunk_no);
    let mut rendering = Rendering::new(columns, sheet);
    let mut copied = exports::CopiedRecords::default();
    let mut failed = None;
    while let Some(message) = messages.try_next().await? {
        if failed.is_some() {
            continue;
        }
        let mut render = || {
            for record in copied.of(&message) {
                rendering.push(record?)?;
            }
            Ok::<(), TaskError>(())
        };
        if let Err(err) = render() {
            failed = Some(err);
        } else if stop.is_cancelled() {
            failed = Some(TaskError::Stopped);
        } else {
            match rendering.ready_part().await {
                Ok(Some(part)) => {
                    if let Err(err) = parts.put(tx, output, part).await {
                        failed = Some(err);
                    }
                }
                Ok(None) => {}
                Err(err) => failed = Some(err),
            }
        }
        // Rendering runs on this task: let others run between messages that arrive at once.
        tokio::task::consume_budget().await;
    }
    if let Some(err) = failed {
        return Err(err);
    }
    let (rest, rows, piece) = rendering.end().await?;
    parts.put(tx, output, rest).await?;
    Ok((rows, piece))
}

/// The parts of the export's file a chunk writes: `(c + 1) << 12` and up for chunk `c`, as
/// many as its rows need (each about `uploads::PART_BYTES`), without knowing how many any other
/// chunk writes: the file is its parts in order.
struct Parts {
    next: i32,
    last: i32,
}

impl Parts {
    fn of_chunk(chunk_no: i32) -> Self {
        let first = (chunk_no + 1) * PARTS_PER_CHUNK;
        Parts {
            next: first,
            last: first + PARTS_PER_CHUNK - 1,
        }
    }

    async fn put(
        &mut self,
        conn: &mut PgConnection,
        output: Uuid,
        part: Vec<u8>,
    ) -> Result<(), TaskError> {
        if part.is_empty() {
            return Ok(());
        }
        if self.next > self.last {
            return Err(TaskError::refused(format!(
                "A part of the dataset holds more than {} GiB of rows. Export it with fewer \
                 rows per part (CONVEYOR_EXPORT_CHUNK_ROWS).",
                (PARTS_PER_CHUNK as usize * uploads::PART_BYTES) >> 30
            )));
        }
        uploads::put_output_part(conn, output, self.next, &part).await?;
        self.next += 1;
        Ok(())
    }
}

/// Writes what an XLSX export's file lacks once every chunk wrote its piece: part 0 (the zip's
/// header for the sheet, then the sheet's start with its header row) and [`TAIL_PART`].
pub async fn close_workbook(
    conn: &mut PgConnection,
    job_id: Uuid,
    output: Uuid,
    columns: &[Column],
    sheet_name: &str,
) -> Result<(), TaskError> {
    let Some(pieces) = exports::pieces(conn, job_id).await? else {
        return Err(
            std::io::Error::other("a chunk of the export recorded no piece of its sheet").into(),
        );
    };
    let mut start = Piece::default();
    start.write(&sheet_writer::sheet_start(columns));
    let (mut first, mut sheet) = start.end();
    for piece in pieces {
        sheet = sheet.then(piece);
    }
    let mut end = Piece::default();
    end.write(SHEET_END);
    let (mut last, end_summary) = end.end_last();
    let sheet = sheet.then(end_summary);

    let mut head = package::sheet_header(sheet);
    head.append(&mut first);
    uploads::put_output_part(conn, output, 0, &head).await?;
    last.extend_from_slice(&package::tail(sheet_name, sheet));
    uploads::put_output_part(conn, output, TAIL_PART, &last).await?;
    Ok(())
}
