//! The preview of an upload: what an import would read, from the start of the file only, so it
//! answers at once for a 1 GB CSV. A CSV's first megabyte is read here; a workbook is read by
//! the converter child (`convert --head`: the same memory and time limits as an import, since
//! the file is as hostile here), which lists the sheets and sends the first rows of one.
//! The same reading checks a mapping before a job is queued ([`header`]).

use std::path::Path;

use app::preview::{DatasetFit, PreviewRow, UploadPreview};
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    TaskError,
    convert::{self, Conversion, Ended},
    error::Cause,
};
use crate::{
    spreadsheet::{
        FileError, csv,
        head::{Head, SAMPLE_ROWS, Sample},
        mapping::{self, Mapping},
        reading::{Reading, delimiter_word},
        schema::Column,
        workbook::{self, WorkbookHead},
    },
    store::{
        datasets, jobs,
        uploads::{self, Upload},
    },
};

/// The bytes of a CSV file the preview reads.
const CSV_HEAD_BYTES: u64 = 1 << 20;

/// Workbooks this process reads for previews at once.
static WORKBOOK_READS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// How long a workbook's head may take: a 256 MB workbook's head reads in a few seconds.
const WORKBOOK_READ_TIME: std::time::Duration = std::time::Duration::from_secs(60);

/// Why a preview could not be made (the file's own problems are part of the preview).
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("reading the workbook's head: {0}")]
    Converter(String),
    /// As many workbooks are being read for previews as may be.
    #[error("other workbooks are being read; try again in a moment")]
    Busy,
    /// The workbook's head took longer than a workbook's should.
    #[error("reading the workbook took too long")]
    TooSlow,
}

impl From<TaskError> for PreviewError {
    fn from(err: TaskError) -> Self {
        match err {
            TaskError::Retry(Cause::Database(err)) => PreviewError::Database(err),
            other => PreviewError::Converter(other.to_string()),
        }
    }
}

/// What to read an upload as.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadAs<'a> {
    pub sheet: Option<&'a str>,
    pub reading: Reading,
}

impl ReadAs<'_> {
    /// The first row a head is read from: a header asked for far down is shown with the rows
    /// just above it.
    fn first_row(&self) -> i64 {
        self.reading
            .header_row
            .map_or(1, |row| (row - SAMPLE_ROWS as i64).max(1))
    }
}

/// An upload's first rows as `ask` reads them: the workbook's sheets, the sheet read, its
/// delimiter and encoding (CSV), the rows.
struct Read {
    sheets: Vec<app::preview::SheetInfo>,
    sheet: Option<String>,
    delimiter: Option<u8>,
    encoding: Option<crate::spreadsheet::encoding::Encoding>,
    head: Head,
    problem: Option<String>,
}

async fn read(
    pool: &PgPool,
    converter: &Path,
    upload: &Upload,
    ask: ReadAs<'_>,
) -> Result<Read, PreviewError> {
    let first = uploads::read_range(pool, upload.id, 0, 8).await?;
    if workbook::Kind::of(&first).is_none() {
        let size = upload.size as u64;
        let bytes = uploads::read_range(pool, upload.id, 0, size.min(CSV_HEAD_BYTES)).await?;
        let read = csv::head(
            &bytes,
            size <= CSV_HEAD_BYTES,
            &ask.reading,
            ask.first_row(),
        );
        return Ok(match read {
            Ok(found) => Read {
                sheets: Vec::new(),
                sheet: None,
                delimiter: Some(found.delimiter),
                encoding: Some(found.encoding),
                head: found.head,
                problem: None,
            },
            Err(problem) => Read::refused(problem.to_string()),
        });
    }
    if let Some(problem) = convert::too_large(upload.size as u64) {
        return Ok(Read::refused(problem.to_string()));
    }
    // Each workbook read is a child process that may take 3 GB and minutes on a hostile file:
    // a few at a time per process, each for a bounded time (killed with its future).
    let _turn = WORKBOOK_READS
        .try_acquire()
        .map_err(|_| PreviewError::Busy)?;
    let head = convert::Ask::Head {
        sheet: ask.sheet,
        from_row: ask.first_row(),
    };
    let (conversion, out) = Conversion::start(converter, pool, upload.id, head)?;
    let read = async {
        let head = tokio::task::spawn_blocking(move || convert::read_head(out))
            .await
            .map_err(|err| PreviewError::Converter(err.to_string()))?
            .map_err(|err| PreviewError::Converter(err.to_string()));
        Ok::<_, PreviewError>((conversion.finish().await?, head))
    };
    let (ended, head) = tokio::time::timeout(WORKBOOK_READ_TIME, read)
        .await
        .map_err(|_| PreviewError::TooSlow)??;
    Ok(match (ended, head) {
        (
            Ended::Converted,
            Ok(Some(WorkbookHead {
                sheets,
                sheet,
                head,
                problem,
            })),
        ) => Read {
            sheets,
            sheet,
            delimiter: None,
            encoding: None,
            head,
            problem,
        },
        (Ended::Refused { reason, .. } | Ended::Died(reason), _) => Read::refused(reason),
        (Ended::Converted, Err(err)) => return Err(err),
        (Ended::Converted, Ok(None)) => {
            return Err(PreviewError::Converter("it wrote nothing".into()));
        }
    })
}

impl Read {
    fn refused(problem: String) -> Read {
        Read {
            sheets: Vec::new(),
            sheet: None,
            delimiter: None,
            encoding: None,
            head: Head::default(),
            problem: Some(problem),
        }
    }
}

/// The preview of one of `owner`'s uploads, and, with `dataset`, how its columns meet that
/// dataset of theirs.
pub async fn preview(
    pool: &PgPool,
    converter: &Path,
    owner: Uuid,
    upload: &Upload,
    ask: ReadAs<'_>,
    dataset: Option<&str>,
) -> Result<UploadPreview, PreviewError> {
    let read = read(pool, converter, upload, ask).await?;
    let sample = read.head.sample(ask.reading.header_row);
    let detected_header_row = read.head.detect_header();
    let Sample {
        header_row,
        columns,
        above,
        rows,
        types,
    } = sample;
    let (columns, column_problem) = match columns {
        _ if read.problem.is_some() => (Vec::new(), None),
        Ok(columns) => (columns, None),
        Err(problem) => (Vec::new(), Some(problem.to_string())),
    };
    let no_rows = read.problem.is_none() && column_problem.is_none() && rows.is_empty();
    let problem = read
        .problem
        .or(column_problem)
        .or(no_rows.then(|| FileError::NoRows.to_string()));
    let dataset = match dataset {
        Some(name) => Some(fit(pool, owner, name, &columns).await?),
        None => None,
    };
    let shown = |rows: Vec<(i64, Vec<String>)>| {
        rows.into_iter()
            .map(|(row, cells)| PreviewRow { row, cells })
            .collect()
    };
    Ok(UploadPreview {
        upload_id: upload.id,
        filename: upload.filename.clone(),
        sheets: read.sheets,
        sheet: read.sheet,
        delimiter: read.delimiter.map(delimiter_word),
        encoding: read.encoding.map(|e| e.word().to_owned()),
        header_row,
        detected_header_row,
        columns,
        rows: shown(rows),
        above: shown(above),
        suggested_types: types,
        problem,
        dataset,
    })
}

/// How a file's columns meet `owner`'s dataset `name`: the suggested mapping, and the required
/// columns it leaves empty.
async fn fit(
    pool: &PgPool,
    owner: Uuid,
    name: &str,
    header: &[String],
) -> Result<DatasetFit, PreviewError> {
    let mut conn = pool.acquire().await?;
    let Some(id) = datasets::id_of(&mut conn, owner, name).await? else {
        return Ok(DatasetFit {
            name: name.to_owned(),
            exists: false,
            columns: Vec::new(),
            mapping: header.iter().cloned().map(Some).collect(),
            missing_required: Vec::new(),
        });
    };
    let (columns, _) = datasets::schema(&mut conn, id).await?;
    drop(conn);
    let used = jobs::used_mappings(pool, id).await?;
    let mapping = if columns.is_empty() {
        header.iter().cloned().map(Some).collect()
    } else {
        mapping::suggest(header, &columns, &used)
    };
    let missing_required = columns
        .iter()
        .filter(|c| c.required && !mapping.contains(&Some(c.name.clone())))
        .map(|c| c.name.clone())
        .collect();
    Ok(DatasetFit {
        name: name.to_owned(),
        exists: true,
        columns,
        mapping,
        missing_required,
    })
}

/// The header an import of the upload would read, or why it would read none (a message for
/// the person): what a mapping is checked against before its job is queued.
pub async fn header(
    pool: &PgPool,
    converter: &Path,
    upload: &Upload,
    ask: ReadAs<'_>,
) -> Result<Result<Vec<String>, String>, PreviewError> {
    let read = read(pool, converter, upload, ask).await?;
    if let Some(problem) = read.problem {
        return Ok(Err(problem));
    }
    // An import without a header row asked for reads the first row (of a workbook, the first
    // with a value), not the one a preview finds.
    let header_row = ask
        .reading
        .header_row
        .or_else(|| read.head.rows.first().map(|(row, _)| *row));
    Ok(read
        .head
        .sample(header_row)
        .columns
        .map_err(|e| e.to_string()))
}

/// Checks a mapping against the file's header and the dataset's columns (none: it takes the
/// file's), as the import will.
pub fn check_mapping(
    header: &[String],
    mapping: &Mapping,
    columns: &[Column],
) -> Result<(), String> {
    mapping::check(mapping, columns)?;
    if columns.is_empty() {
        mapping::adopted(header, mapping).map(drop)
    } else {
        mapping::lay_out(header, mapping, columns).map(drop)
    }
}
