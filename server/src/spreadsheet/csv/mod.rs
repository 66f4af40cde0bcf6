//! CSV: planning scans the file once, streaming; a chunk parses its own byte range.
//! Quoted fields may hold delimiters, quotes and newlines, so chunk boundaries come from the
//! parser's record positions, never from searching for line breaks.

mod records;

use std::{
    borrow::Cow,
    io::{self, BufRead, BufReader, Read},
};

pub use records::MAX_ROW_BYTES;
use records::{Record, Records};

use super::{
    ChunkSpan, FileError, MAX_CELL_BYTES, MAX_COLUMNS, Plan, Problem, RowError, delimiter,
    encoding::Encoding,
    head::{self, HEAD_ROWS, Head},
    reading::Reading,
    record::RecordWriter,
    report,
    schema::{self, Column},
    sniff::{check_text, sniff},
};

/// Why a scan stopped.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    File(#[from] FileError),
    /// Reading the bytes failed (the database went away): worth another try.
    #[error("reading the file failed: {0}")]
    Io(#[from] io::Error),
}

/// A chunk ends after this many bytes even when it has fewer than `chunk_rows` rows, so that
/// wide rows cannot make one chunk (read whole into memory) huge. With rows of at most
/// [`MAX_ROW_BYTES`], no chunk holds more than the two together.
const MAX_CHUNK_BYTES: u64 = 16 << 20;

/// How many fields each of the first `most` records of `sample` has, read as an import reads
/// them (the delimiter's guess, `sniff::delimiter`, asks this of every delimiter it knows).
pub fn field_counts(sample: &[u8], delimiter: u8, most: usize) -> Vec<usize> {
    let mut records = Records::new(sample, delimiter);
    let mut record = Record::default();
    let mut counts = Vec::with_capacity(most);
    // Bytes in memory: reading them cannot fail.
    while counts.len() < most && records.read(&mut record).unwrap_or(false) {
        counts.push(record.len());
    }
    counts
}

/// Reads the header, counts the rows and cuts them into chunks of `chunk_rows` (or
/// [`MAX_CHUNK_BYTES`]).
pub fn scan(input: impl Read, reading: &Reading, chunk_rows: usize) -> Result<Plan, ScanError> {
    let mut chunks = Vec::new();
    let mut plan = scan_each(input, reading, chunk_rows, |scanned| {
        if let Scanned::Chunk { span, .. } = scanned {
            chunks.push(span);
        }
        Ok(())
    })?;
    plan.chunks = chunks;
    Ok(plan)
}

/// What [`scan_each`] found, as soon as it found it.
pub enum Scanned<'a> {
    /// The header: the file's delimiter and its column names.
    Header {
        delimiter: u8,
        columns: &'a [String],
    },
    /// A chunk and its bytes (none for a row too large to read: see [`rows_of`]).
    Chunk { span: ChunkSpan, bytes: &'a [u8] },
}

/// [`scan`], handing over the header and then every chunk with its bytes as it is found, so
/// that a reader of a stream can start on the first rows while later ones are still arriving.
/// The plan it returns has no chunks (they were handed over).
///
/// Memory stays within a chunk's bytes and one row's, whatever the file holds: a row longer
/// than [`MAX_ROW_BYTES`] is a chunk of its own, handed over without its bytes.
pub fn scan_each(
    input: impl Read,
    reading: &Reading,
    chunk_rows: usize,
    mut each: impl FnMut(Scanned<'_>) -> Result<(), ScanError>,
) -> Result<Plan, ScanError> {
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let head = input.fill_buf()?;
    let (mut encoding, settled) = match reading.encoding {
        Some(encoding) => (check_text(head).map(|()| Some(encoding))?, true),
        None => (sniff(head)?, false),
    };
    let delimiter = reading.delimiter.unwrap_or_else(|| delimiter(head));
    let mut records = Records::new(input, delimiter).keeping();
    let mut record = Record::default();
    // The header is the first row with a value at or below the one asked for (rows count
    // empty lines, as a spreadsheet shows them); rows above it are not kept.
    let header_row = header_at(&mut records, &mut record, reading.header_row.unwrap_or(1))?;
    if header_row > 1 {
        records.restart_at(record.end());
    }
    if !settled {
        settle(&mut encoding, &record)?;
    }
    let columns = header(&record, encoding.unwrap_or_default())?;
    each(Scanned::Header {
        delimiter,
        columns: &columns,
    })?;

    let chunk_rows = chunk_rows.max(1);
    let mut current: Option<ChunkSpan> = None;
    let mut row_count = 0i64;
    let mut record_no = 0i64;
    let mut hand_over = |span: ChunkSpan, records: &mut Records<_>| {
        let bytes = if is_one_row_too_large(&span) {
            records.restart_at(span.byte_end);
            &[][..]
        } else {
            records.take(span.byte_start, span.byte_end)
        };
        each(Scanned::Chunk { span, bytes })
    };
    while records.read(&mut record)? {
        record_no += record.rows();
        if record.is_too_large() {
            // It ends the chunk before it and is a chunk of its own, without bytes.
            if let Some(span) = current.take() {
                hand_over(span, &mut records)?;
            }
            row_count += 1;
            let span = ChunkSpan {
                first_row: record_no,
                row_count: 1,
                byte_start: record.start(),
                byte_end: record.end(),
            };
            hand_over(span, &mut records)?;
            continue;
        }
        if record.is_blank() {
            // A long run of empty records ends the chunk before it (so no chunk grows past
            // the limit on them), and outside a chunk their bytes are not kept.
            let at = record.end();
            if let Some(span) = current
                && at - span.byte_start >= MAX_CHUNK_BYTES
            {
                current = None;
                hand_over(span, &mut records)?;
            }
            if current.is_none() {
                records.forget_to(at);
            }
            continue;
        }
        if !settled {
            settle(&mut encoding, &record)?;
        }
        row_count += 1;
        let span = current.get_or_insert(ChunkSpan {
            first_row: record_no,
            row_count: 0,
            byte_start: record.start(),
            byte_end: record.end(),
        });
        span.row_count += 1;
        span.byte_end = record.end();
        if (span.row_count as usize == chunk_rows
            || span.byte_end - span.byte_start >= MAX_CHUNK_BYTES)
            && let Some(span) = current.take()
        {
            hand_over(span, &mut records)?;
        }
    }
    if let Some(span) = current.take() {
        hand_over(span, &mut records)?;
    }
    if row_count == 0 {
        return Err(FileError::NoRows.into());
    }
    Ok(Plan {
        delimiter,
        encoding: encoding.unwrap_or_default(),
        header_row,
        columns,
        row_count,
        chunks: Vec::new(),
    })
}

/// Reads up to the header: the first record with a value at or below sheet row `wanted`; its
/// sheet row.
fn header_at<R: BufRead>(
    records: &mut Records<R>,
    record: &mut Record,
    wanted: i64,
) -> Result<i64, ScanError> {
    let mut row = 0;
    loop {
        if !records.read(record)? {
            return Err(FileError::Empty.into());
        }
        row += record.rows();
        // A blank record too wide or too large to be a row is the header that is refused.
        let blank = record.is_blank() && record.len() <= MAX_COLUMNS && !record.is_too_large();
        if row >= wanted && !blank {
            return Ok(row);
        }
    }
}

/// Tells the file's encoding from one more record: UTF-8 is settled once seen; Windows-1252
/// holds only until a record shows UTF-8 (a damaged UTF-8 file must not read as Windows-1252),
/// and every record that is not ASCII is checked for bytes it leaves undefined.
fn settle(encoding: &mut Option<Encoding>, record: &Record) -> Result<(), FileError> {
    if *encoding != Some(Encoding::Utf8) && !record.field_bytes().is_ascii() {
        *encoding = Some(Encoding::of(record.field_bytes())?);
    }
    Ok(())
}

/// Column names from the header row (see [`head::column_names`]).
fn header(record: &Record, encoding: Encoding) -> Result<Vec<String>, FileError> {
    if record.is_too_large() {
        return Err(FileError::BadHeader(format!(
            "it is larger than {} MiB",
            MAX_ROW_BYTES >> 20
        )));
    }
    if record.len() > MAX_COLUMNS {
        return Err(FileError::TooWide {
            columns: record.len(),
        });
    }
    let cells = record
        .iter()
        .enumerate()
        .map(|(i, field)| {
            encoding.decode(field).map(Cow::into_owned).ok_or_else(|| {
                FileError::BadHeader(format!("column {} is not {} text", i + 1, encoding.label()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    head::column_names(cells)
}

/// What the first bytes of a CSV file show ([`head`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CsvHead {
    pub delimiter: u8,
    pub encoding: Encoding,
    pub head: Head,
}

/// The first [`HEAD_ROWS`] rows of a CSV file from the row `from` on (a few above a header
/// asked for far down), from its first bytes (`whole`: all of it), read as `reading` says or
/// as found; a record the bytes cut off is left out, and the delimiter is told from the first
/// 64 KiB, as an import tells it.
pub fn head(bytes: &[u8], whole: bool, reading: &Reading, from: i64) -> Result<CsvHead, FileError> {
    // A character cut by the end must not decide the encoding.
    let lines = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) if !whole => &bytes[..=end],
        _ => bytes,
    };
    let encoding = match reading.encoding {
        Some(encoding) => {
            check_text(lines)?;
            encoding
        }
        None => match sniff(lines)? {
            Some(encoding) => encoding,
            None if lines.is_ascii() => Encoding::Utf8,
            None => Encoding::of(lines)?,
        },
    };
    let sample = &bytes[..bytes.len().min(64 << 10)];
    let delimiter = reading.delimiter.unwrap_or_else(|| delimiter(sample));
    let mut records = Records::new(bytes, delimiter);
    let mut record = Record::default();
    let mut rows = Vec::new();
    let mut row = 0;
    // Reading a byte slice cannot fail.
    while rows.len() < HEAD_ROWS && records.read(&mut record).unwrap_or(false) {
        if !whole && record.end() == bytes.len() as u64 {
            // It reaches the end of what was read: it may go on past it.
            break;
        }
        row += record.rows();
        if row < from {
            continue;
        }
        let cells = if record.is_blank() {
            Vec::new()
        } else {
            fields_of(&record, encoding)
        };
        rows.push((row, cells));
    }
    if rows.is_empty() {
        return Err(FileError::Empty);
    }
    Ok(CsvHead {
        delimiter,
        encoding,
        head: Head {
            rows,
            spanned: false,
        },
    })
}

/// How a chunk's rows are read: the file's delimiter and encoding, its header as it was
/// (for the error report), the dataset column of each header cell (in file order) and its
/// place among the dataset's `width` columns (`slots`; `None`: a column the mapping ignores),
/// which of them, if any, is the dataset's unique key, and the sheet row of the header (row
/// numbers in errors count from it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowFormat {
    pub delimiter: u8,
    /// Formats stored before encodings were told apart are UTF-8.
    #[serde(default)]
    pub encoding: Encoding,
    /// The file's column names (formats stored before mappings: the columns' names).
    #[serde(default)]
    pub header: Vec<String>,
    pub columns: Vec<Column>,
    pub slots: Vec<Option<usize>>,
    pub width: usize,
    pub key: Option<usize>,
    #[serde(default = "first_row")]
    pub header_row: i64,
    /// The file is one of our error reports, fixed: a value we wrote as `'=…` (so a
    /// spreadsheet would not run it) is read as `=…` again.
    #[serde(default)]
    pub from_report: bool,
}

fn first_row() -> i64 {
    1
}

/// One chunk's rows, parsed: good rows as stored records (`record`) holding the typed values in
/// the dataset's column order (written straight from the fields: this is the import's hot
/// loop), with their key values; bad rows as errors.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkRows {
    pub row_nos: Vec<i64>,
    pub rows: Vec<String>,
    /// The key value of each row, when the dataset has a key.
    pub keys: Vec<Option<String>>,
    pub errors: Vec<RowError>,
}

/// A chunk's rows: `bytes` parsed, or, for a chunk holding one row too large to read (see
/// [`scan_each`]), that row's error, without its bytes (callers need not read them).
pub fn rows_of(span: &ChunkSpan, bytes: &[u8], format: &RowFormat) -> ChunkRows {
    if is_one_row_too_large(span) {
        let mut rows = ChunkRows::default();
        rows.errors.push(RowError {
            row_no: span.first_row + format.header_row,
            column: None,
            value: None,
            message: too_large(span.byte_end - span.byte_start),
            problems: Vec::new(),
            fields: Vec::new(),
        });
        return rows;
    }
    parse_chunk(bytes, format, span.first_row)
}

/// Whether a chunk is one row too large to read: the only way a one-row chunk is longer than a
/// row may be.
pub fn is_one_row_too_large(span: &ChunkSpan) -> bool {
    span.row_count == 1 && span.byte_end - span.byte_start > MAX_ROW_BYTES
}

fn too_large(bytes: u64) -> String {
    format!(
        "the row is {bytes} bytes long; at most {} MiB is read per row",
        MAX_ROW_BYTES >> 20
    )
}

/// Parses the bytes of a chunk whose first data record is `first_row` (rows count from 1
/// after the header; blank records and empty lines are skipped but counted, so numbers match
/// the sheet).
fn parse_chunk(bytes: &[u8], format: &RowFormat, first_row: i64) -> ChunkRows {
    let mut records = Records::new(bytes, format.delimiter);
    let mut out = ChunkRows::default();
    let mut record = Record::default();
    // The chunk starts at its first record: no empty line comes before it.
    let mut row_no = first_row - 1;
    // Reading a byte slice cannot fail.
    while records.read(&mut record).unwrap_or(false) {
        row_no += record.rows();
        if !record.is_blank() {
            match to_cells(&record, format) {
                Ok((object, key)) => {
                    out.row_nos.push(row_no);
                    out.rows.push(object);
                    out.keys.push(key);
                }
                Err(faults) => {
                    let mut problems: Vec<Problem> = faults
                        .into_iter()
                        .map(|(column, message)| Problem {
                            column: column.map(|i| format.columns[i].name.clone()),
                            value: column
                                .and_then(|i| record.get(i))
                                .map(|field| preview(field, format.encoding)),
                            message,
                        })
                        .collect();
                    let first = problems[0].clone();
                    let message = if problems.len() == 1 {
                        problems.clear();
                        first.message
                    } else {
                        let all: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
                        all.join("; ")
                    };
                    out.errors.push(RowError {
                        row_no: row_no + format.header_row,
                        column: first.column,
                        value: first.value,
                        message,
                        problems,
                        fields: fields_of(&record, format.encoding),
                    });
                }
            }
        }
    }
    out
}

/// A record's fields as text, for the error report (what is not text in the file's encoding
/// shown as U+FFFD; a cell too large to import shown by its start only).
fn fields_of(record: &Record, encoding: Encoding) -> Vec<String> {
    record
        .iter()
        .map(|field| preview(field, encoding))
        .collect()
}

/// A field's typed value in canonical text, or what is wrong with it.
fn cell<'a>(
    field: &'a [u8],
    column: &Column,
    format: &RowFormat,
) -> Result<Option<Cow<'a, str>>, String> {
    if field.len() > MAX_CELL_BYTES {
        return Err(format!("{}: the value is larger than 1 MiB", column.name));
    }
    let text = format
        .encoding
        .decode(field)
        .ok_or_else(|| format!("{}: not {} text", column.name, format.encoding.label()))?;
    if text.contains('\0') {
        // PostgreSQL text cannot hold NUL.
        return Err(format!("{}: contains a NUL character", column.name));
    }
    let from_report = format.from_report;
    match text {
        Cow::Borrowed(text) => schema::typed(column, report::restored(text, from_report)),
        // Decoded into a new string: the value must outlive it.
        Cow::Owned(text) => schema::typed(column, report::restored(&text, from_report))
            .map(|value| value.map(|value| Cow::Owned(value.into_owned()))),
    }
}

/// NUL, which PostgreSQL text cannot hold, shows as U+FFFD too.
fn preview(field: &[u8], encoding: Encoding) -> String {
    const SHOWN: usize = 100;
    let text = if field.len() > MAX_CELL_BYTES {
        let start = encoding.decode_lossy(&field[..SHOWN]);
        format!(
            "{}… ({} bytes)",
            start.trim_end_matches('\u{fffd}'),
            field.len()
        )
    } else {
        encoding.decode_lossy(field).into_owned()
    };
    text.replace('\0', "\u{fffd}")
}

/// Why a row failed: the index of the column at fault, if one is, and a message.
type FieldError = (Option<usize>, String);

/// The record as a stored record of typed values in dataset column order, and its key value;
/// or every reason it cannot be (each bad value, not only the first).
fn to_cells(
    record: &Record,
    format: &RowFormat,
) -> Result<(String, Option<String>), Vec<FieldError>> {
    let columns = &format.columns;
    if record.is_too_large() {
        return Err(vec![(None, too_large(record.end() - record.start()))]);
    }
    if record.len() != columns.len() {
        return Err(vec![(
            None,
            format!("expected {} fields, found {}", columns.len(), record.len()),
        )]);
    }
    let mut faults = Vec::new();
    let mut values: Vec<Option<Cow<'_, str>>> = vec![None; format.width];
    let mut key = None;
    for (i, (field, column)) in record.iter().zip(columns).enumerate() {
        let Some(slot) = format.slots[i] else {
            // A column the mapping ignores.
            continue;
        };
        let value = match cell(field, column, format) {
            Ok(value) => value,
            Err(message) => {
                faults.push((Some(i), message));
                continue;
            }
        };
        if format.key == Some(i) {
            // Never empty: the key column is required (`schema::check_schema`).
            key = value.as_deref().map(str::to_owned);
        }
        values[slot] = value;
    }
    if !faults.is_empty() {
        return Err(faults);
    }
    let mut record = RecordWriter::with_capacity(record.field_bytes().len() + 2 * format.width);
    for value in &values {
        record.push(value.as_deref());
    }
    Ok((record.finish(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str, chunk_rows: usize) -> Plan {
        scan(text.as_bytes(), &Reading::default(), chunk_rows).expect("scans")
    }

    /// Parses as a dataset without a schema would: every column text.
    fn parse(bytes: &[u8], delimiter: u8, names: &[String], first_row: i64) -> ChunkRows {
        let format = RowFormat {
            delimiter,
            encoding: Encoding::Utf8,
            header: names.to_vec(),
            columns: names.iter().map(|n| Column::text(n)).collect(),
            slots: (0..names.len()).map(Some).collect(),
            width: names.len(),
            key: None,
            header_row: 1,
            from_report: false,
        };
        parse_chunk(bytes, &format, first_row)
    }

    /// Row `i`'s values, read back from its stored record.
    fn row(parsed: &ChunkRows, i: usize) -> Vec<Option<String>> {
        crate::spreadsheet::record::decode(&parsed.rows[i])
    }

    fn some(value: &str) -> Option<String> {
        Some(value.to_owned())
    }

    #[test]
    fn chunks_handed_over_while_scanning_carry_their_own_bytes() {
        let mut text = String::from("id,note\n");
        for i in 1..=25 {
            text.push_str(&format!("{i},\"line {i}\nwith, a break\"\n"));
            if i % 7 == 0 {
                text.push_str(",\n");
            }
        }
        let mut seen = Vec::new();
        let plan = scan_each(text.as_bytes(), &Reading::default(), 10, |scanned| {
            match scanned {
                Scanned::Header { delimiter, columns } => {
                    assert_eq!(
                        (delimiter, columns),
                        (b',', &["id".to_owned(), "note".to_owned()][..])
                    );
                }
                Scanned::Chunk { span, bytes } => seen.push((span, bytes.to_vec())),
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(plan.row_count, 25);
        let spans: Vec<_> = seen.iter().map(|(span, _)| *span).collect();
        assert_eq!(
            spans,
            super::scan(text.as_bytes(), &Reading::default(), 10)
                .unwrap()
                .chunks
        );
        for (span, bytes) in &seen {
            assert_eq!(
                bytes[..],
                text.as_bytes()[span.byte_start as usize..span.byte_end as usize]
            );
        }
    }

    #[test]
    fn long_runs_of_empty_records_do_not_grow_a_chunk() {
        let mut text = String::from("a,b\n1,x\n");
        let blanks = (MAX_CHUNK_BYTES as usize) / 3 + 10;
        text.push_str(&"\"\"\n".repeat(blanks));
        text.push_str("2,y\n");
        let mut largest = 0;
        let plan = scan_each(text.as_bytes(), &Reading::default(), 10, |scanned| {
            if let Scanned::Chunk { bytes, .. } = scanned {
                largest = largest.max(bytes.len());
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(plan.row_count, 2);
        let spans = super::scan(text.as_bytes(), &Reading::default(), 10)
            .unwrap()
            .chunks;
        assert_eq!(
            spans.len(),
            2,
            "the run of empty records ends the first chunk"
        );
        assert_eq!(spans[1].first_row, 2 + blanks as i64);
        assert!(
            largest < 1 << 10,
            "chunks hold only their rows: {largest} bytes"
        );
    }

    #[test]
    fn rows_keep_their_text_whatever_it_holds() {
        let columns = ["a \"quoted\" name".to_owned(), "b".to_owned()];
        let parsed = parse(
            "\"x\\y\ttab\u{1f}\",\"line\nbreak \u{1} \"\"é\"\n".as_bytes(),
            b',',
            &columns,
            1,
        );
        assert_eq!(
            row(&parsed, 0),
            [some("x\\y\ttab\u{1f}"), some("line\nbreak \u{1} \"é")]
        );
    }

    #[test]
    fn a_windows_1252_file_imports_its_text_and_reports_it_as_it_was() {
        let bytes = b"nom;montant\nJos\xe9;12\nM\xfcller;\x80\n";
        let plan = scan(&bytes[..], &Reading::default(), 10).unwrap();
        assert_eq!(
            (plan.encoding, plan.delimiter),
            (Encoding::Windows1252, b';')
        );
        assert_eq!(plan.columns, ["nom", "montant"]);
        let format = RowFormat {
            delimiter: plan.delimiter,
            encoding: plan.encoding,
            header: Vec::new(),
            columns: vec![
                Column::text("nom"),
                Column {
                    name: "montant".into(),
                    kind: schema::ColumnType::Integer,
                    required: false,
                },
            ],
            slots: vec![Some(0), Some(1)],
            width: 2,
            key: None,
            header_row: 1,
            from_report: false,
        };
        let span = plan.chunks[0];
        let parsed = rows_of(
            &span,
            &bytes[span.byte_start as usize..span.byte_end as usize],
            &format,
        );
        assert_eq!(row(&parsed, 0), [some("José"), some("12")]);
        assert_eq!(parsed.errors.len(), 1);
        let error = &parsed.errors[0];
        assert_eq!(
            (error.value.as_deref(), error.fields.clone()),
            (Some("€"), vec!["Müller".to_owned(), "€".to_owned()])
        );
    }

    #[test]
    fn the_first_row_that_is_not_ascii_tells_the_encoding_past_the_head() {
        let mut bytes = b"nom;n\n".to_vec();
        for i in 0..20_000 {
            bytes.extend(format!("plain{i};{i}\n").as_bytes());
        }
        bytes.extend(b"Jos\xe9;1\n");
        assert!(bytes.len() > 64 * 1024, "past the sniffed head");
        assert_eq!(
            scan(&bytes[..], &Reading::default(), 1000)
                .unwrap()
                .encoding,
            Encoding::Windows1252
        );
        let utf8 = [&bytes[..bytes.len() - 7], "José;1\n".as_bytes()].concat();
        assert_eq!(
            scan(&utf8[..], &Reading::default(), 1000).unwrap().encoding,
            Encoding::Utf8
        );
        assert_eq!(
            scan(&b"a\n1\n"[..], &Reading::default(), 10)
                .unwrap()
                .encoding,
            Encoding::Utf8
        );
        // A damaged byte, then real UTF-8: UTF-8, the damaged row an error of its own.
        let damaged = [
            &bytes[..bytes.len() - 7],
            b"Caf\xc3;1\n",
            "José;2\n".as_bytes(),
        ]
        .concat();
        assert_eq!(
            scan(&damaged[..], &Reading::default(), 1000)
                .unwrap()
                .encoding,
            Encoding::Utf8
        );
        // Windows-1252 text with a byte it leaves undefined further on: refused.
        let mac = [&bytes[..], b"fa\x8dade;3\n"].concat();
        assert!(matches!(
            scan(&mac[..], &Reading::default(), 1000),
            Err(ScanError::File(FileError::NotCsv(_)))
        ));
    }

    #[test]
    fn values_take_their_dataset_column_places() {
        let column = |name: &str, kind| Column {
            name: name.into(),
            kind,
            required: false,
        };
        // The file has "n,label"; the dataset is (label, extra, n).
        let format = RowFormat {
            delimiter: b',',
            encoding: Encoding::Utf8,
            header: Vec::new(),
            columns: vec![
                column("n", schema::ColumnType::Integer),
                column("label", schema::ColumnType::Text),
            ],
            slots: vec![Some(2), Some(0)],
            width: 3,
            key: Some(0),
            header_row: 1,
            from_report: false,
        };
        let parsed = parse_chunk(b" 007,seven\n", &format, 1);
        assert_eq!(row(&parsed, 0), [some("seven"), None, some("7")]);
        assert_eq!(parsed.keys, [some("7")]);
    }

    #[test]
    fn blank_records_are_skipped_but_keep_row_numbers() {
        let text = "a,b\n1,2\n,\n,\n3\n";
        let plan = plan(text, 10);
        assert_eq!(plan.row_count, 2);
        assert_eq!(plan.chunks[0].row_count, 2);
        let parsed = parse(text.as_bytes()[4..].as_ref(), b',', &plan.columns, 1);
        assert_eq!(parsed.row_nos, [1]);
        // "3" is record 4 after the header: sheet row 5.
        assert_eq!(parsed.errors[0].row_no, 5);
    }

    #[test]
    fn chunks_cover_every_row_once_even_with_quoted_newlines() {
        let text = "\u{feff}id,note\r\n1,plain\r\n2,\"two\nlines, and \"\"quotes\"\"\"\r\n3,x\r\n4,y\r\n5,z";
        let plan = plan(text, 2);
        assert_eq!(plan.columns, ["id", "note"]);
        assert_eq!(plan.row_count, 5);
        assert_eq!(plan.chunks.len(), 3);
        let mut ids = Vec::new();
        for span in &plan.chunks {
            let bytes = &text.as_bytes()[span.byte_start as usize..span.byte_end as usize];
            let parsed = parse(bytes, plan.delimiter, &plan.columns, span.first_row);
            assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
            assert_eq!(parsed.rows.len(), span.row_count as usize);
            ids.extend((0..parsed.rows.len()).map(|i| row(&parsed, i)[0].clone().unwrap()));
        }
        assert_eq!(ids, ["1", "2", "3", "4", "5"]);
        let second = parse(
            &text.as_bytes()[plan.chunks[0].byte_start as usize..plan.chunks[0].byte_end as usize],
            b',',
            &plan.columns,
            1,
        );
        assert_eq!(row(&second, 1)[1], some("two\nlines, and \"quotes\""));
        assert_eq!(second.row_nos, [1, 2]);
    }

    #[test]
    fn rows_with_the_wrong_field_count_become_row_errors() {
        let text = "a,b\n1,2\n3\n4,5,6\n7,8\n";
        let plan = plan(text, 10);
        let span = plan.chunks[0];
        let parsed = parse(
            &text.as_bytes()[span.byte_start as usize..span.byte_end as usize],
            b',',
            &plan.columns,
            span.first_row,
        );
        assert_eq!(parsed.row_nos, [1, 4]);
        assert_eq!(
            parsed
                .errors
                .iter()
                .map(|e| (e.row_no, e.message.as_str()))
                .collect::<Vec<_>>(),
            [
                (3, "expected 2 fields, found 1"),
                (4, "expected 2 fields, found 3")
            ]
        );
        assert_eq!(parsed.errors[1].fields, ["4", "5", "6"]);
    }

    #[test]
    fn unusable_files_are_file_errors() {
        let err = |text: &[u8]| match scan(text, &Reading::default(), 10) {
            Err(ScanError::File(err)) => err,
            other => panic!("expected a file error, got {other:?}"),
        };
        assert_eq!(err(b""), FileError::Empty);
        assert_eq!(err(b"a,b\n"), FileError::NoRows);
        assert!(
            matches!(err(b"a,a\n1,2\n"), FileError::BadHeader(m) if m.contains("\"a\" appears twice"))
        );
        assert!(matches!(err(b"PK\x03\x04\x14\0"), FileError::NotCsv(_)));
    }

    #[test]
    fn tab_separated_files_are_read_as_such() {
        let text = "id\tnote\n1\ta, b\n2\t\"quoted\ttab\"\n";
        let plan = plan(text, 10);
        assert_eq!(plan.delimiter, b'\t');
        let span = plan.chunks[0];
        let parsed = parse(
            &text.as_bytes()[span.byte_start as usize..span.byte_end as usize],
            plan.delimiter,
            &plan.columns,
            span.first_row,
        );
        assert_eq!(row(&parsed, 0)[1], some("a, b"));
        assert_eq!(row(&parsed, 1)[1], some("quoted\ttab"));
    }

    #[test]
    fn too_wide_files_and_huge_cells_are_refused_clearly() {
        let wide = format!(
            "{}\n{}\n",
            vec!["c"; 20_000].join(","),
            vec!["1"; 20_000].join(",")
        );
        assert!(matches!(
            scan(wide.as_bytes(), &Reading::default(), 10),
            Err(ScanError::File(FileError::TooWide { columns: 20_000 }))
        ));

        let columns = ["id".to_owned(), "blob".to_owned()];
        let text = format!("1,{}\n2,small\n", "x".repeat(2 << 20));
        let parsed = parse(text.as_bytes(), b',', &columns, 1);
        assert_eq!(parsed.row_nos, [2]);
        let error = &parsed.errors[0];
        assert_eq!((error.row_no, error.column.as_deref()), (2, Some("blob")));
        assert_eq!(error.message, "blob: the value is larger than 1 MiB");
        assert!(error.value.as_ref().unwrap().ends_with("… (2097152 bytes)"));
        assert_eq!(error.fields[0], "1");
        assert!(error.fields[1].len() < 200);
    }

    #[test]
    fn nul_characters_are_row_errors_and_never_reach_the_database() {
        let columns = ["a".to_owned(), "b".to_owned()];
        let parsed = parse(b"x\0y,ok\n", b',', &columns, 1);
        assert!(parsed.rows.is_empty());
        let error = &parsed.errors[0];
        assert_eq!(error.message, "a: contains a NUL character");
        assert_eq!(error.value.as_deref(), Some("x\u{fffd}y"));
        assert_eq!(error.fields, ["x\u{fffd}y", "ok"]);
    }

    #[test]
    fn wide_rows_make_smaller_chunks() {
        let cell = "x".repeat(1 << 20);
        let text = format!("a\n{}", format!("{cell}\n").repeat(40));
        let plan = plan(&text, 1000);
        assert_eq!(plan.row_count, 40);
        assert!(plan.chunks.len() >= 2, "{:?}", plan.chunks);
        assert!(
            plan.chunks
                .iter()
                .all(|c| c.byte_end - c.byte_start <= MAX_CHUNK_BYTES + (1 << 20) + 1)
        );
    }

    #[test]
    fn a_row_too_large_is_a_chunk_of_its_own_handed_over_without_its_bytes() {
        let huge = format!("\"{}\"", "y\n,".repeat(3 << 20));
        let text = format!("a,b\n1,x\n\n2,{huge}\n3,z\n");
        let mut seen = Vec::new();
        let plan = scan_each(text.as_bytes(), &Reading::default(), 10, |scanned| {
            if let Scanned::Chunk { span, bytes } = scanned {
                seen.push((span, bytes.to_vec()));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(plan.row_count, 3);
        let spans: Vec<_> = seen.iter().map(|(span, _)| *span).collect();
        let huge_start = text.find("2,").unwrap() as u64;
        let huge_end = text.find("3,z").unwrap() as u64;
        assert_eq!(
            spans,
            [
                ChunkSpan {
                    first_row: 1,
                    row_count: 1,
                    byte_start: 4,
                    byte_end: 8
                },
                // The empty line before it is a sheet row too.
                ChunkSpan {
                    first_row: 3,
                    row_count: 1,
                    byte_start: huge_start,
                    byte_end: huge_end
                },
                ChunkSpan {
                    first_row: 4,
                    row_count: 1,
                    byte_start: huge_end,
                    byte_end: text.len() as u64
                },
            ]
        );
        assert_eq!(seen[0].1, b"1,x\n");
        assert!(seen[1].1.is_empty(), "the huge row's bytes are not kept");
        assert_eq!(seen[2].1, b"3,z\n");

        let format = RowFormat {
            delimiter: b',',
            encoding: Encoding::Utf8,
            header: Vec::new(),
            columns: vec![Column::text("a"), Column::text("b")],
            slots: vec![Some(0), Some(1)],
            width: 2,
            key: None,
            header_row: 1,
            from_report: false,
        };
        let rows = rows_of(&spans[1], &[], &format);
        assert!(rows.rows.is_empty());
        assert_eq!(rows.errors[0].row_no, 4);
        assert_eq!(
            rows.errors[0].message,
            format!(
                "the row is {} bytes long; at most 8 MiB is read per row",
                huge_end - huge_start
            )
        );
        // Read from its bytes after all (the file is not the one planned), it is the same error.
        let parsed = parse_chunk(&text.as_bytes()[huge_start as usize..], &format, 3);
        assert_eq!(parsed.errors[0].message, rows.errors[0].message);
        assert_eq!(parsed.row_nos, [4]);
    }

    #[test]
    fn empty_lines_count_as_sheet_rows_and_a_header_row_skips_titles() {
        // Row 1 a title, row 2 empty (a bare CRLF), the header on row 3; an empty line (a lone
        // LF) makes "Rui" sheet row 6.
        let text = b"Report\r\n\r\nname,n\r\nAna,1\r\n\nRui,x\r\n";
        let reading = Reading {
            header_row: Some(3),
            ..Reading::default()
        };
        let plan = scan(&text[..], &reading, 10).unwrap();
        assert_eq!(
            (plan.header_row, plan.columns.clone()),
            (3, vec!["name".into(), "n".into()])
        );
        assert_eq!(plan.row_count, 2);
        let format = RowFormat {
            delimiter: b',',
            encoding: Encoding::Utf8,
            header: plan.columns.clone(),
            columns: vec![
                Column::text("name"),
                Column {
                    kind: schema::ColumnType::Integer,
                    ..Column::text("n")
                },
            ],
            slots: vec![Some(0), Some(1)],
            width: 2,
            key: None,
            header_row: plan.header_row,
            from_report: false,
        };
        let span = plan.chunks[0];
        let parsed = rows_of(
            &span,
            &text[span.byte_start as usize..span.byte_end as usize],
            &format,
        );
        assert_eq!(parsed.row_nos, [1]);
        assert_eq!(parsed.errors[0].row_no, 6, "the sheet row of Rui");
        // Asked for at the empty row 2, the header is the next row with a value.
        let at_blank = Reading {
            header_row: Some(2),
            ..Reading::default()
        };
        assert_eq!(scan(&text[..], &at_blank, 10).unwrap().header_row, 3);
        // The preview numbers rows the same way.
        let head = head(&text[..], true, &Reading::default(), 1).unwrap().head;
        let numbers: Vec<i64> = head.rows.iter().map(|(row, _)| *row).collect();
        assert_eq!(numbers, [1, 3, 4, 6]);
        assert_eq!(head.detect_header(), 3);
    }

    #[test]
    fn headers_too_large_or_too_wide_are_refused_while_read() {
        let cell = "h".repeat(9 << 20);
        assert!(matches!(
            scan(format!("{cell}\n1\n").as_bytes(), &Reading::default(), 10),
            Err(ScanError::File(FileError::BadHeader(m))) if m == "it is larger than 8 MiB"
        ));
        let wide = format!("{}\n1\n", ",".repeat(3_000_000));
        assert!(matches!(
            scan(wide.as_bytes(), &Reading::default(), 10),
            Err(ScanError::File(FileError::TooWide { columns: 3_000_001 }))
        ));
    }

    #[test]
    fn rows_of_millions_of_fields_keep_only_their_start() {
        let columns = ["a".to_owned(), "b".to_owned()];
        let text = format!("{}\n1,2\n", "1,".repeat(2_000_000));
        let parsed = parse(text.as_bytes(), b',', &columns, 1);
        assert_eq!(parsed.row_nos, [2]);
        assert_eq!(parsed.errors[0].message, "expected 2 fields, found 2000001");
        assert_eq!(parsed.errors[0].fields.len(), records::MAX_FIELDS_KEPT);
    }

    #[test]
    fn blank_header_cells_get_names() {
        assert_eq!(plan(" x ,,z\n1,2,3\n", 5).columns, ["x", "column_2", "z"]);
    }
}
