//! CSV: planning scans the file once, streaming; a chunk parses its own byte range.
//! Quoted fields may hold delimiters, quotes and newlines, so chunk boundaries come from the
//! parser's record positions, never from searching for line breaks.

use std::{
    borrow::Cow,
    io::{self, BufRead, BufReader, Read},
};

use csv::{ByteRecord, ReaderBuilder};

use std::collections::HashSet;

use super::{
    ChunkSpan, FileError, MAX_CELL_BYTES, MAX_COLUMNS, Plan, RowError, delimiter,
    record::RecordWriter,
    schema::{self, Column},
    sniff,
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
/// wide rows cannot make one chunk (read whole into memory) huge.
const MAX_CHUNK_BYTES: u64 = 16 << 20;

/// Reads the header, counts the rows and cuts them into chunks of `chunk_rows` (or
/// [`MAX_CHUNK_BYTES`]).
pub fn scan(input: impl Read, chunk_rows: usize) -> Result<Plan, ScanError> {
    let mut chunks = Vec::new();
    let mut plan = scan_each(input, chunk_rows, |scanned| {
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
    /// A chunk and its bytes.
    Chunk { span: ChunkSpan, bytes: &'a [u8] },
}

/// [`scan`], handing over the header and then every chunk with its bytes as it is found, so
/// that a reader of a stream can start on the first rows while later ones are still arriving.
/// The plan it returns has no chunks (they were handed over).
pub fn scan_each(
    input: impl Read,
    chunk_rows: usize,
    mut each: impl FnMut(Scanned<'_>) -> Result<(), ScanError>,
) -> Result<Plan, ScanError> {
    let mut input = BufReader::with_capacity(64 * 1024, Recorder::new(input));
    let head = input.fill_buf()?;
    sniff(head)?;
    let delimiter = delimiter(head);
    let mut reader = reader(input, delimiter);
    let mut record = ByteRecord::new();
    if !read(&mut reader, &mut record)? {
        return Err(FileError::Empty.into());
    }
    let columns = header(&record)?;
    each(Scanned::Header {
        delimiter,
        columns: &columns,
    })?;

    let chunk_rows = chunk_rows.max(1);
    let mut current: Option<ChunkSpan> = None;
    let mut row_count = 0i64;
    let mut record_no = 0i64;
    let mut hand_over = |span: ChunkSpan, reader: &mut csv::Reader<BufReader<Recorder<_>>>| {
        let recorder = reader.get_mut().get_mut();
        let bytes = recorder.take(span.byte_start, span.byte_end);
        each(Scanned::Chunk { span, bytes })
    };
    while read(&mut reader, &mut record)? {
        record_no += 1;
        if is_blank(&record) {
            // A long run of empty records ends the chunk before it (so no chunk grows past
            // the limit on them), and outside a chunk their bytes are not kept.
            let at = reader.position().byte();
            if let Some(span) = current
                && at - span.byte_start >= MAX_CHUNK_BYTES
            {
                current = None;
                hand_over(span, &mut reader)?;
            }
            if current.is_none() {
                reader.get_mut().get_mut().forget_to(at);
            }
            continue;
        }
        row_count += 1;
        let end = reader.position().byte();
        let span = current.get_or_insert(ChunkSpan {
            first_row: record_no,
            row_count: 0,
            byte_start: record.position().map_or(0, |p| p.byte()),
            byte_end: end,
        });
        span.row_count += 1;
        span.byte_end = end;
        if (span.row_count as usize == chunk_rows
            || span.byte_end - span.byte_start >= MAX_CHUNK_BYTES)
            && let Some(span) = current.take()
        {
            hand_over(span, &mut reader)?;
        }
    }
    if let Some(span) = current.take() {
        hand_over(span, &mut reader)?;
    }
    if row_count == 0 {
        return Err(FileError::NoRows.into());
    }
    Ok(Plan {
        delimiter,
        header_row: 1,
        columns,
        row_count,
        chunks: Vec::new(),
    })
}

/// Keeps the bytes read through it until a chunk takes them, so that a chunk's bytes can be
/// handed over without reading the input twice.
struct Recorder<R> {
    inner: R,
    kept: Vec<u8>,
    /// The input offset of `kept[0]`.
    kept_from: u64,
}

impl<R> Recorder<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            kept: Vec::new(),
            kept_from: 0,
        }
    }

    /// Drops the bytes before input offset `end` (no chunk will want them), a megabyte or more
    /// at a time.
    fn forget_to(&mut self, end: u64) {
        if end - self.kept_from >= 1 << 20 {
            self.kept.drain(..(end - self.kept_from) as usize);
            self.kept_from = end;
        }
    }

    /// Bytes `start..end` of the input, dropping everything before `end`.
    fn take(&mut self, start: u64, end: u64) -> &[u8] {
        let from = (start - self.kept_from) as usize;
        let to = (end - self.kept_from) as usize;
        // The previous chunk's bytes go now: they were handed over last time.
        self.kept.drain(..from);
        self.kept_from = start;
        &self.kept[..to - from]
    }
}

impl<R: Read> Read for Recorder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.kept.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// A record whose every field is empty (`,,,`: a spreadsheet's empty row) is not a row.
fn is_blank(record: &ByteRecord) -> bool {
    record.iter().all(<[u8]>::is_empty)
}

/// The one way we configure the parser: no header handling (we read the header ourselves) and
/// rows of any length (a short or long row is a row error, not the end of the file).
fn reader<R: Read>(input: R, delimiter: u8) -> csv::Reader<R> {
    ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .from_reader(input)
}

fn read<R: Read>(reader: &mut csv::Reader<R>, record: &mut ByteRecord) -> Result<bool, ScanError> {
    reader.read_byte_record(record).map_err(|err| {
        if err.is_io_error() {
            match err.into_kind() {
                csv::ErrorKind::Io(io) => ScanError::Io(io),
                _ => unreachable!("is_io_error promised an Io kind"),
            }
        } else {
            FileError::NotCsv(format!("The file is not valid CSV: {err}")).into()
        }
    })
}

/// Column names from the header row: trimmed, a UTF-8 byte order mark dropped, blanks named
/// `column_N`; duplicates are refused because a dataset's columns are known by name.
fn header(record: &ByteRecord) -> Result<Vec<String>, FileError> {
    if record.len() > MAX_COLUMNS {
        return Err(FileError::TooWide {
            columns: record.len(),
        });
    }
    let mut columns: Vec<String> = Vec::with_capacity(record.len());
    let mut seen = HashSet::with_capacity(record.len());
    for (i, field) in record.iter().enumerate() {
        let name = std::str::from_utf8(field)
            .map_err(|_| FileError::BadHeader(format!("column {} is not UTF-8 text", i + 1)))?;
        let name = name.trim_start_matches('\u{feff}').trim();
        if name.contains('\0') {
            return Err(FileError::BadHeader(format!(
                "column {} contains a NUL character",
                i + 1
            )));
        }
        let name = if name.is_empty() {
            format!("column_{}", i + 1)
        } else {
            name.to_owned()
        };
        if !seen.insert(name.clone()) {
            return Err(FileError::BadHeader(format!(
                "the column name \"{name}\" appears twice"
            )));
        }
        columns.push(name);
    }
    Ok(columns)
}

/// How a chunk's rows are read: the file's delimiter, the dataset column of each header cell
/// (in file order) and its place among the dataset's `width` columns (`slots`), which of them,
/// if any, is the dataset's unique key, and the sheet row of the header (row numbers in errors
/// count from it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowFormat {
    pub delimiter: u8,
    pub columns: Vec<Column>,
    pub slots: Vec<usize>,
    pub width: usize,
    pub key: Option<usize>,
    #[serde(default = "first_row")]
    pub header_row: i64,
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

/// Parses the bytes of a chunk whose first data record is `first_row` (records count from 1
/// after the header; blank records are skipped but counted, so numbers match the sheet).
pub fn parse_chunk(bytes: &[u8], format: &RowFormat, first_row: i64) -> ChunkRows {
    let mut reader = reader(bytes, format.delimiter);
    let mut out = ChunkRows::default();
    let mut record = ByteRecord::new();
    let mut row_no = first_row;
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) if is_blank(&record) => {}
            Ok(true) => match to_cells(&record, format) {
                Ok((object, key)) => {
                    out.row_nos.push(row_no);
                    out.rows.push(object);
                    out.keys.push(key);
                }
                Err((column, message)) => {
                    let value = column.map(|i| preview(&record[i]));
                    out.errors.push(RowError {
                        row_no: row_no + format.header_row,
                        column: column.map(|i| format.columns[i].name.clone()),
                        value,
                        message,
                        fields: fields_of(&record),
                    });
                }
            },
            Err(err) => out.errors.push(RowError {
                row_no: row_no + format.header_row,
                column: None,
                value: None,
                message: format!("not valid CSV: {err}"),
                fields: Vec::new(),
            }),
        }
        row_no += 1;
    }
    out
}

/// A record's fields as text, for the error report (invalid UTF-8 shown as U+FFFD; a cell too
/// large to import shown by its start only).
fn fields_of(record: &ByteRecord) -> Vec<String> {
    record.iter().map(preview).collect()
}

/// NUL, which PostgreSQL text cannot hold, shows as U+FFFD too.
fn preview(field: &[u8]) -> String {
    const SHOWN: usize = 100;
    let text = if field.len() > MAX_CELL_BYTES {
        let start = String::from_utf8_lossy(&field[..SHOWN]);
        format!(
            "{}… ({} bytes)",
            start.trim_end_matches('\u{fffd}'),
            field.len()
        )
    } else {
        String::from_utf8_lossy(field).into_owned()
    };
    text.replace('\0', "\u{fffd}")
}

/// Why a row failed: the index of the column at fault, if one is, and a message.
type FieldError = (Option<usize>, String);

/// The record as a stored record of typed values in dataset column order, and its key value.
fn to_cells(
    record: &ByteRecord,
    format: &RowFormat,
) -> Result<(String, Option<String>), FieldError> {
    let columns = &format.columns;
    if record.len() != columns.len() {
        return Err((
            None,
            format!("expected {} fields, found {}", columns.len(), record.len()),
        ));
    }
    let mut values: Vec<Option<Cow<'_, str>>> = vec![None; format.width];
    let mut key = None;
    for (i, (field, column)) in record.iter().zip(columns).enumerate() {
        if field.len() > MAX_CELL_BYTES {
            return Err((
                Some(i),
                format!("{}: the value is larger than 1 MiB", column.name),
            ));
        }
        let text = std::str::from_utf8(field)
            .map_err(|_| (Some(i), format!("{}: not UTF-8 text", column.name)))?;
        if text.contains('\0') {
            // PostgreSQL text cannot hold NUL.
            return Err((
                Some(i),
                format!("{}: contains a NUL character", column.name),
            ));
        }
        let value = schema::typed(column, text).map_err(|message| (Some(i), message))?;
        if format.key == Some(i) {
            // Never empty: the key column is required (`schema::check_schema`).
            key = value.as_deref().map(str::to_owned);
        }
        values[format.slots[i]] = value;
    }
    let mut record = RecordWriter::with_capacity(record.as_slice().len() + 2 * format.width);
    for value in &values {
        record.push(value.as_deref());
    }
    Ok((record.finish(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str, chunk_rows: usize) -> Plan {
        scan(text.as_bytes(), chunk_rows).expect("scans")
    }

    /// Parses as a dataset without a schema would: every column text.
    fn parse(bytes: &[u8], delimiter: u8, names: &[String], first_row: i64) -> ChunkRows {
        let format = RowFormat {
            delimiter,
            columns: names.iter().map(|n| Column::text(n)).collect(),
            slots: (0..names.len()).collect(),
            width: names.len(),
            key: None,
            header_row: 1,
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
        let plan = scan_each(text.as_bytes(), 10, |scanned| {
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
        assert_eq!(spans, super::scan(text.as_bytes(), 10).unwrap().chunks);
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
        let plan = scan_each(text.as_bytes(), 10, |scanned| {
            if let Scanned::Chunk { bytes, .. } = scanned {
                largest = largest.max(bytes.len());
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(plan.row_count, 2);
        let spans = super::scan(text.as_bytes(), 10).unwrap().chunks;
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
    fn values_take_their_dataset_column_places() {
        let column = |name: &str, kind| Column {
            name: name.into(),
            kind,
            required: false,
        };
        // The file has "n,label"; the dataset is (label, extra, n).
        let format = RowFormat {
            delimiter: b',',
            columns: vec![
                column("n", schema::ColumnType::Integer),
                column("label", schema::ColumnType::Text),
            ],
            slots: vec![2, 0],
            width: 3,
            key: Some(0),
            header_row: 1,
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
        let err = |text: &[u8]| match scan(text, 10) {
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
            scan(wide.as_bytes(), 10),
            Err(ScanError::File(FileError::TooWide { columns: 20_000 }))
        ));

        let columns = ["id".to_owned(), "blob".to_owned()];
        let text = format!("1,{}\n2,small\n", "x".repeat(10 << 20));
        let parsed = parse(text.as_bytes(), b',', &columns, 1);
        assert_eq!(parsed.row_nos, [2]);
        let error = &parsed.errors[0];
        assert_eq!((error.row_no, error.column.as_deref()), (2, Some("blob")));
        assert_eq!(error.message, "blob: the value is larger than 1 MiB");
        assert!(
            error
                .value
                .as_ref()
                .unwrap()
                .ends_with("… (10485760 bytes)")
        );
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
    fn blank_header_cells_get_names() {
        assert_eq!(plan(" x ,,z\n1,2,3\n", 5).columns, ["x", "column_2", "z"]);
    }
}
