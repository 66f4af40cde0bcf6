//! Reading spreadsheets. Planning streams the whole file once to find the header and cut the
//! rows into chunks by byte range; each chunk later parses just its own bytes. A workbook is
//! first turned into CSV (`workbook`), so everything after that is one code path. Nothing here
//! touches the database: it works on `Read`ers, `Write`rs and byte slices, so it is tested on
//! its own.

mod cell_text;
pub mod csv;
pub mod encoding;
pub mod head;
pub mod mapping;
pub mod output;
pub mod reading;
pub mod record;
pub mod report;
pub mod schema;
pub mod sheet_writer;
mod sniff;
mod unzip;
pub mod workbook;
mod xlsx;

pub use sniff::{delimiter, sniff};

/// The most columns a file may have: wider files are almost always a mistake (or an attack)
/// and would make every row a very large object.
pub const MAX_COLUMNS: usize = 1000;

/// The largest cell we import; a larger one makes its row an error.
pub const MAX_CELL_BYTES: usize = 1 << 20;

/// A run of data rows and where they lie in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    /// The first data row (1 = the row after the header).
    pub first_row: i64,
    pub row_count: i32,
    pub byte_start: u64,
    pub byte_end: u64,
}

/// What planning learns about a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The field delimiter the whole file uses (`,`, tab, `;` or `|`).
    pub delimiter: u8,
    /// How its text is encoded.
    pub encoding: encoding::Encoding,
    /// The sheet row of the header: 1, unless a workbook sheet starts lower.
    pub header_row: i64,
    pub columns: Vec<String>,
    pub row_count: i64,
    pub chunks: Vec<ChunkSpan>,
}

/// A row that could not be imported: one line of the error report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// The row as the person sees it in the sheet (the header is row 1).
    pub row_no: i64,
    /// The first value at fault, and its column…
    pub column: Option<String>,
    pub value: Option<String>,
    /// …and every problem of the row, in one line (`email: …; signed_up: …`).
    pub message: String,
    /// Each problem, when the row has more than one (so a bad email does not hide a bad date).
    pub problems: Vec<Problem>,
    /// The row's original fields, so the report can show the row as it was.
    pub fields: Vec<String>,
}

/// One of several problems of a row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Problem {
    pub column: Option<String>,
    pub value: Option<String>,
    pub message: String,
}

/// Why a file cannot be imported at all. These are the person's problem, not ours: the job
/// fails with the message and is never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("The file is empty.")]
    Empty,
    #[error("The file has a header row but no data rows.")]
    NoRows,
    #[error("{0}")]
    NotCsv(String),
    #[error("The header row is not usable: {0}")]
    BadHeader(String),
    #[error("The file has {columns} columns; at most {MAX_COLUMNS} are supported.")]
    TooWide { columns: usize },
    #[error("The workbook has no sheet named \"{wanted}\". Its sheets: {}.", sheets.join(", "))]
    NoSuchSheet { wanted: String, sheets: Vec<String> },
}
