//! Workbooks (XLSX, XLS, ODS): planning converts the chosen sheet to CSV once, and from then on
//! the import is the CSV import, byte-range chunks and all. Converting costs one pass over the
//! sheet, but it means one chunk reader, one error report and one set of limits for every
//! format, and a chunk never has to open the workbook again.
//!
//! Workbooks are zip (XLSX, ODS) or OLE (XLS) containers that must be read with random access,
//! so the file is held in memory ([`MAX_WORKBOOK_BYTES`]). XLSX sheets are streamed cell by
//! cell by our own reader ([`super::xlsx`]); XLS and ODS sheets are read whole by calamine.
//! Every zip entry is unpacked through a byte budget ([`super::unzip`]), so a zip bomb fails
//! the job instead of exhausting memory. What calamine allocates for an XLS or ODS sheet that
//! *declares* huge dimensions is not bounded here: workers run this in a memory-limited child
//! process (`jobs::convert`).

use std::{
    io::{self, Cursor, Read, Write},
    ops::ControlFlow,
};

use calamine::{
    Data, DataType, Ods, Range, Reader, SheetVisible, Xls, XlsError, Xlsx, XlsxError,
    open_workbook_from_rs,
};

use app::preview::SheetInfo;
use bytes::Bytes;

use super::{
    FileError, MAX_CELL_BYTES, MAX_COLUMNS, cell_text,
    csv::{MAX_ROW_BYTES, ScanError},
    head::{HEAD_ROWS, Head},
    unzip,
    xlsx::{self, ReadError},
};

/// The largest workbook file we open (it is held in memory while the sheet is converted).
pub const MAX_WORKBOOK_BYTES: u64 = 256 << 20;

/// The largest CSV a sheet may become.
const MAX_SHEET_CSV_BYTES: u64 = 2 << 30;

/// The container formats we read; told apart by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A zip: XLSX, or ODS when its first entry is an OpenDocument `mimetype`.
    Zip,
    /// An OLE compound file: XLS, or an encrypted (password-protected) XLSX.
    Ole,
}

impl Kind {
    pub fn of(head: &[u8]) -> Option<Kind> {
        if head.starts_with(b"PK\x03\x04") {
            Some(Kind::Zip)
        } else if head.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]) {
            Some(Kind::Ole)
        } else {
            None
        }
    }
}

/// What converting a sheet produced, besides the CSV.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Converted {
    pub sheet: String,
    /// The sheet row (1-based) that holds the header: rows above it were empty.
    pub header_row: i64,
    /// How many rows below the header the sheet says it has (an estimate until they are
    /// read: an XLSX sheet's declared dimension may be missing or wrong).
    #[serde(default)]
    pub declared_rows: Option<i64>,
}

/// Where a chosen sheet's cells come from, and the last row (0-based) it says it has.
enum Cells {
    /// Read whole by calamine (XLS, ODS).
    Range(Range<Data>),
    /// Streamed by our reader.
    Xlsx(xlsx::Workbook),
}

/// Writes the sheet named `sheet` (by default the one [`first_table`] picks: not a cover sheet,
/// nor a hidden one) to `out` as comma-separated CSV whose first record is the sheet's first
/// non-empty row at or below `header_row` (rows above it, titles, are skipped). With
/// `announce`, a line of JSON (a [`Converted`]) comes first, as soon as the header is found: a
/// reader of the stream then knows the sheet's row numbers before its first row arrives.
pub fn to_csv(
    bytes: Vec<u8>,
    sheet: Option<&str>,
    header_row: Option<i64>,
    announce: bool,
    out: impl Write,
) -> Result<Converted, ScanError> {
    let (name, mut cells) = match Book::open(bytes)? {
        Book::Ods(mut book) => {
            let name = choose_range_sheet(&mut book, sheet)?;
            let range = book.worksheet_range(&name).map_err(unreadable)?;
            (name, Cells::Range(range))
        }
        Book::Xls(mut book) => {
            let name = choose_range_sheet(&mut book, sheet)?;
            let range = book.worksheet_range(&name).map_err(unreadable)?;
            (name, Cells::Range(range))
        }
        Book::Xlsx(mut book) => {
            let name = choose_xlsx_sheet(&mut book, sheet)?;
            (name, Cells::Xlsx(book))
        }
    };
    let last_row = match &mut cells {
        Cells::Range(range) => range.end().map(|(row, _)| row),
        Cells::Xlsx(book) => book.declared_last_row(&name)?,
    };
    let mut out = SheetWriter::new(
        LimitedWriter::new(out, MAX_SHEET_CSV_BYTES),
        announce.then(|| (name.clone(), last_row)),
        first_row(header_row),
    );
    match cells {
        Cells::Range(range) => write_range(&range, &mut out)?,
        Cells::Xlsx(mut book) => book.cells(&name, |cell| {
            out.cell(cell.row, cell.col, cell.text)?;
            Ok(ControlFlow::Continue(()))
        })?,
    }
    let header_row = out.finish()?;
    Ok(Converted {
        sheet: name,
        header_row,
        declared_rows: rows_below(last_row, header_row as u32 - 1),
    })
}

/// A header row asked for as the first sheet row read (0-based).
fn first_row(header_row: Option<i64>) -> u32 {
    header_row.map_or(0, |row| u32::try_from(row - 1).unwrap_or(0))
}

/// A workbook opened, by format.
enum Book {
    Ods(Ods<Cursor<Vec<u8>>>),
    Xls(Xls<Cursor<Bytes>>),
    Xlsx(xlsx::Workbook),
}

impl Book {
    /// Opens a workbook told by its first bytes; a zip's entries are checked against the
    /// unpacking budget first, a password named as the reason it cannot be read.
    fn open(bytes: Vec<u8>) -> Result<Book, ScanError> {
        let kind = Kind::of(&bytes).ok_or_else(|| FileError::NotCsv("Not a workbook.".into()))?;
        Ok(match kind {
            Kind::Zip if is_ods(&bytes) => {
                let mut zip = zip::ZipArchive::new(Cursor::new(&bytes[..])).map_err(unreadable)?;
                unzip::check_all(&mut zip).map_err(ReadError::from)?;
                Book::Ods(open_workbook_from_rs(Cursor::new(bytes)).map_err(unreadable)?)
            }
            Kind::Zip => Book::Xlsx(xlsx::Workbook::open(bytes)?),
            Kind::Ole => {
                // Shared without a copy, so that an encrypted XLSX can be told by its error.
                let bytes = Bytes::from(bytes);
                match Xls::new(Cursor::new(bytes.clone())) {
                    Ok(book) => Book::Xls(book),
                    Err(XlsError::Password) => return Err(password_protected()),
                    // An encrypted XLSX is an OLE file too; its error says so.
                    Err(err) => match Xlsx::new(Cursor::new(bytes)) {
                        Err(XlsxError::Password) => return Err(password_protected()),
                        _ => return Err(unreadable(err)),
                    },
                }
            }
        })
    }
}

/// A workbook's sheets, and the first rows ([`HEAD_ROWS`] with values) of the one asked for or
/// picked by default, laid out from column A; what stops that sheet from being read, if
/// something does (an empty workbook, a sheet that is not there).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkbookHead {
    pub sheets: Vec<SheetInfo>,
    pub sheet: Option<String>,
    pub head: Head,
    pub problem: Option<String>,
}

/// [`WorkbookHead`] of a workbook, its rows from sheet row `from_row` on: what the preview
/// shows (read in the converter). A sheet that cannot be read has no size; only the chosen
/// one must be read.
pub fn head(bytes: Vec<u8>, sheet: Option<&str>, from_row: i64) -> Result<WorkbookHead, ScanError> {
    let mut rows = HeadRows {
        from: first_row(Some(from_row)),
        ..HeadRows::default()
    };
    let (sheets, chosen) = match Book::open(bytes)? {
        Book::Ods(mut book) => range_head(&mut book, sheet, &mut rows)?,
        Book::Xls(mut book) => range_head(&mut book, sheet, &mut rows)?,
        Book::Xlsx(mut book) => {
            let mut sheets = Vec::new();
            let (_, hidden) = book.sheet_names_shown_and_hidden();
            for name in book.sheet_names() {
                let rows = book
                    .declared_last_row(&name)?
                    .map(|last| i64::from(last) + 1);
                let hidden = hidden.contains(&name);
                sheets.push(SheetInfo { name, hidden, rows });
            }
            let chosen = match choose_xlsx_sheet(&mut book, sheet) {
                Ok(name) => {
                    book.cells(&name, |cell| Ok(rows.cell(cell.row, cell.col, cell.text)))?;
                    Ok(name)
                }
                Err(err) => Err(err),
            };
            (sheets, chosen)
        }
    };
    let (sheet, problem) = match chosen {
        Ok(name) => (Some(name), None),
        Err(ScanError::File(FileError::Empty)) => (
            None,
            Some("The workbook has no sheet with a value.".to_owned()),
        ),
        Err(ScanError::File(reason)) => (None, Some(reason.to_string())),
        Err(err) => return Err(err),
    };
    Ok(WorkbookHead {
        sheets,
        sheet,
        head: rows.finish(),
        problem,
    })
}

/// [`head`] of an XLS or ODS workbook: calamine knows each sheet's size once it read it.
fn range_head<R: Reader<Cursor<B>>, B>(
    book: &mut R,
    wanted: Option<&str>,
    rows: &mut HeadRows,
) -> Result<(Vec<SheetInfo>, Result<String, ScanError>), ScanError>
where
    Cursor<B>: Read + io::Seek,
    R::Error: std::fmt::Display,
{
    let listed: Vec<(String, bool)> = book
        .sheets_metadata()
        .iter()
        .map(|sheet| (sheet.name.clone(), sheet.visible != SheetVisible::Visible))
        .collect();
    let mut sheets = Vec::with_capacity(listed.len());
    for (name, hidden) in listed {
        let range = book.worksheet_range(&name).ok();
        let rows = range
            .and_then(|range| range.end())
            .map(|(row, _)| i64::from(row) + 1);
        sheets.push(SheetInfo { name, hidden, rows });
    }
    let chosen = choose_range_sheet(book, wanted);
    if let Ok(name) = &chosen {
        let range = book.worksheet_range(name).map_err(unreadable)?;
        let (row0, col0) = range.start().unwrap_or_default();
        let mut text = String::new();
        for (row, col, value) in range.used_cells() {
            text.clear();
            write_text(value, &mut text);
            if rows
                .cell(row0 + row as u32, col0 + col as u32, &text)
                .is_break()
            {
                break;
            }
        }
    }
    Ok((sheets, chosen))
}

/// The most text a head gathers: rows of huge cells end it early.
const HEAD_TEXT_BYTES: usize = 8 << 20;

/// Gathers a sheet's first rows with values from its cells, in row order.
#[derive(Default)]
struct HeadRows {
    rows: Vec<(i64, Vec<String>)>,
    /// The sheet row (0-based) of the last row.
    last: Option<u32>,
    /// The text gathered.
    bytes: usize,
    /// The first sheet row (0-based) gathered.
    from: u32,
}

impl HeadRows {
    /// Takes a cell; breaks once [`HEAD_ROWS`] rows are complete, or [`HEAD_TEXT_BYTES`] taken.
    fn cell(&mut self, row: u32, col: u32, text: &str) -> ControlFlow<()> {
        if text.is_empty() || col as usize > MAX_COLUMNS || row < self.from {
            return ControlFlow::Continue(());
        }
        if self.bytes > HEAD_TEXT_BYTES {
            return ControlFlow::Break(());
        }
        self.bytes += text.len().min(MAX_CELL_BYTES) + 8;
        if self.last != Some(row) {
            if self.rows.len() == HEAD_ROWS {
                return ControlFlow::Break(());
            }
            self.last = Some(row);
            self.rows.push((i64::from(row) + 1, Vec::new()));
        }
        let cells = &mut self.rows.last_mut().expect("a row was pushed").1;
        if cells.len() <= col as usize {
            cells.resize(col as usize + 1, String::new());
        }
        cells[col as usize] = cut_to_cell_cap(text).to_owned();
        ControlFlow::Continue(())
    }

    fn finish(self) -> Head {
        Head {
            rows: self.rows,
            spanned: true,
        }
    }
}

/// The rows a sheet says it has below its header (0-based rows).
fn rows_below(last_row: Option<u32>, header_row: u32) -> Option<i64> {
    last_row
        .and_then(|last| last.checked_sub(header_row))
        .map(i64::from)
}

/// An ODS zip starts with an uncompressed `mimetype` entry naming the format.
fn is_ods(bytes: &[u8]) -> bool {
    const MIME: &[u8] = b"application/vnd.oasis.opendocument.spreadsheet";
    bytes.get(30..38) == Some(b"mimetype") && bytes[38..].starts_with(MIME)
}

fn choose_xlsx_sheet(book: &mut xlsx::Workbook, wanted: Option<&str>) -> Result<String, ScanError> {
    if let Some(wanted) = wanted {
        return named(&book.sheet_names(), wanted);
    }
    let (shown, hidden) = book.sheet_names_shown_and_hidden();
    first_table([shown, hidden], |name| {
        let mut seen = TableSeen::default();
        book.cells(name, |cell| {
            Ok(if seen.cell(cell.row, cell.text) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })?;
        Ok(seen)
    })
}

fn choose_range_sheet<R: Reader<Cursor<B>>, B>(
    book: &mut R,
    wanted: Option<&str>,
) -> Result<String, ScanError>
where
    Cursor<B>: Read + io::Seek,
    R::Error: std::fmt::Display,
{
    if let Some(wanted) = wanted {
        return named(&book.sheet_names(), wanted);
    }
    let (shown, hidden): (Vec<_>, Vec<_>) = book
        .sheets_metadata()
        .iter()
        .partition(|sheet| sheet.visible == SheetVisible::Visible);
    let names = |sheets: Vec<&calamine::Sheet>| sheets.iter().map(|s| s.name.clone()).collect();
    first_table([names(shown), names(hidden)], |name| {
        let range = book.worksheet_range(name).map_err(unreadable)?;
        let (row0, _) = range.start().unwrap_or_default();
        let mut seen = TableSeen::default();
        let mut text = String::new();
        for (row, _, value) in range.used_cells() {
            text.clear();
            write_text(value, &mut text);
            if seen.cell(row0 + row as u32, &text) {
                break;
            }
        }
        Ok(seen)
    })
}

/// The sheet imported when none is named, among those shown as tabs (a hidden one holds
/// drop-down lists or lookups; hidden sheets are looked at only when no shown one has a value):
/// the first that holds a table at least two columns wide (a header of two or more values, and
/// a later row with a value), so a cover sheet ("Read me": a title, a few lines of notes, one
/// value a row) is passed over; failing that, the first that holds any table; failing that, the
/// first with a value (whose import then says it has no data rows).
fn first_table(
    [shown, hidden]: [Vec<String>; 2],
    mut scan: impl FnMut(&str) -> Result<TableSeen, ScanError>,
) -> Result<String, ScanError> {
    for names in [shown, hidden] {
        let (mut narrow, mut with_value) = (None, None);
        for name in names {
            let seen = scan(&name)?;
            if seen.data && seen.header_width >= 2 {
                return Ok(name);
            }
            if seen.data && narrow.is_none() {
                narrow = Some(name);
            } else if seen.header_row.is_some() && with_value.is_none() {
                with_value = Some(name);
            }
        }
        if let Some(name) = narrow.or(with_value) {
            return Ok(name);
        }
    }
    Err(FileError::Empty.into())
}

/// What a sheet's cells, seen in row order, show of a table.
#[derive(Debug, Default)]
struct TableSeen {
    /// The first row with a value: the header…
    header_row: Option<u32>,
    /// …and how many values it holds.
    header_width: usize,
    /// A later row has a value too.
    data: bool,
}

impl TableSeen {
    /// Sees one cell; whether the sheet is now known to hold a table (its header complete).
    fn cell(&mut self, row: u32, text: &str) -> bool {
        if !text.is_empty() {
            match self.header_row {
                None => {
                    self.header_row = Some(row);
                    self.header_width = 1;
                }
                Some(header) if row == header => self.header_width += 1,
                Some(header) if row > header => self.data = true,
                Some(_) => {}
            }
        }
        self.data
    }
}

/// The sheet the person named: exactly, or else ignoring case and surrounding spaces.
fn named(names: &[String], wanted: &str) -> Result<String, ScanError> {
    let wanted_loose = wanted.trim().to_lowercase();
    names
        .iter()
        .find(|name| *name == wanted)
        .or_else(|| {
            names
                .iter()
                .find(|name| name.trim().to_lowercase() == wanted_loose)
        })
        .cloned()
        .ok_or_else(|| {
            FileError::NoSuchSheet {
                wanted: wanted.to_owned(),
                sheets: names.to_vec(),
            }
            .into()
        })
}

fn write_range<W: Write>(range: &Range<Data>, out: &mut SheetWriter<W>) -> Result<(), ScanError> {
    let (row0, col0) = range.start().unwrap_or_default();
    let mut text = String::new();
    for (row, col, value) in range.used_cells() {
        text.clear();
        write_text(value, &mut text);
        out.cell(row0 + row as u32, col0 + col as u32, &text)?;
    }
    Ok(())
}

/// A cell calamine read as the text the CSV import reads ([`cell_text`]): formulas as their
/// cached values, errors as shown (`#DIV/0!`), empty as empty.
pub(super) fn write_text<T: DataType>(value: &T, out: &mut String) {
    if let Some(text) = value.get_string() {
        out.push_str(text);
    } else if let Some(int) = value.get_int() {
        out.push_str(&int.to_string());
    } else if let Some(float) = value.get_float() {
        cell_text::number(float, out);
    } else if let Some(bool) = value.get_bool() {
        out.push_str(if bool { "true" } else { "false" });
    } else if let Some(when) = value.get_datetime() {
        cell_text::date_time(when, out);
    } else if let Some(iso) = value
        .get_datetime_iso()
        .or_else(|| value.get_duration_iso())
    {
        out.push_str(iso);
    } else if let Some(error) = value.get_error() {
        out.push_str(&error.to_string());
    }
}

/// Turns cells, arriving in row order, into CSV records. The first row with a value is the
/// header and sets the columns; every later sheet row becomes one record (an empty one for an
/// empty row, which the import skips, so record numbers stay sheet row numbers). Values outside
/// the header's columns lengthen their record, which makes that row an error, not lost data.
struct SheetWriter<W: Write> {
    /// The output until the header is found (nothing is written before it)…
    out: Option<W>,
    /// …and then.
    started: Option<Started<W>>,
    /// The sheet's name and declared last row, to announce with the header row before the
    /// header (see [`to_csv`]).
    announce: Option<(String, Option<u32>)>,
    /// The sheet row being gathered (0-based).
    row: u32,
    /// Its values: by column once the header is known (the buffers are reused row after
    /// row), else the header's values…
    fields: Vec<String>,
    /// …and, for the header, their columns.
    header_cols: Vec<u32>,
    /// The text bytes the row holds so far: past [`MAX_ROW_BYTES`] the rest is dropped (the
    /// row is already too large to import, and the import says so).
    row_bytes: usize,
    /// Values outside the header's columns.
    extra: Vec<String>,
    /// The first sheet row (0-based) read: rows above the header asked for are skipped.
    first_row: u32,
}

/// An empty sheet row: one empty field (`""`), which the import skips but counts, whatever the
/// sheet's width, so that a sheet of mostly empty rows stays small as CSV.
const EMPTY_ROW: &[&str] = &[""];

struct Started<W: Write> {
    csv: csv::Writer<W>,
    /// The header's sheet row (0-based), first column and width.
    header_row: u32,
    first_col: u32,
    width: usize,
}

impl<W: Write> SheetWriter<W> {
    fn new(out: W, announce: Option<(String, Option<u32>)>, first_row: u32) -> Self {
        Self {
            first_row,
            out: Some(out),
            started: None,
            announce,
            row: 0,
            fields: Vec::new(),
            header_cols: Vec::new(),
            row_bytes: 0,
            extra: Vec::new(),
        }
    }

    fn cell(&mut self, row: u32, col: u32, text: &str) -> Result<(), ScanError> {
        if row < self.first_row {
            return Ok(());
        }
        if row != self.row {
            if row < self.row {
                return Err(FileError::NotCsv(
                    "The sheet's rows are out of order. Open it in a spreadsheet program, save \
                     it again and upload that."
                        .into(),
                )
                .into());
            }
            self.end_row()?;
            self.skip_to(row)?;
            self.row_bytes = 0;
        }
        if text.is_empty() || self.row_bytes > MAX_ROW_BYTES as usize {
            return Ok(());
        }
        let text = cut_to_cell_cap(text);
        self.row_bytes += text.len();
        match &self.started {
            None if self.fields.len() >= MAX_COLUMNS => {
                return Err(FileError::TooWide {
                    columns: self.fields.len() + 1,
                }
                .into());
            }
            None => {
                self.header_cols.push(col);
                self.fields.push(text.to_owned());
            }
            Some(started) => match col.checked_sub(started.first_col).map(|i| i as usize) {
                Some(i) if i < started.width => {
                    self.fields[i].clear();
                    self.fields[i].push_str(text);
                }
                // A row this wide is an error already: its count need not be exact.
                _ if self.extra.len() >= MAX_COLUMNS => {}
                _ => self.extra.push(text.to_owned()),
            },
        }
        Ok(())
    }

    /// Writes the empty records for the rows between the last one and `row`.
    fn skip_to(&mut self, row: u32) -> Result<(), ScanError> {
        if let Some(started) = &mut self.started {
            for _ in self.row + 1..row {
                started.csv.write_record(EMPTY_ROW).map_err(write_error)?;
            }
            self.fields.truncate(started.width);
            self.fields.iter_mut().for_each(String::clear);
        }
        self.row = row;
        Ok(())
    }

    fn end_row(&mut self) -> Result<(), ScanError> {
        let empty = self.extra.is_empty() && self.fields.iter().all(String::is_empty);
        match &mut self.started {
            Some(started) if empty => {
                started.csv.write_record(EMPTY_ROW).map_err(write_error)?;
            }
            Some(started) if self.extra.is_empty() => {
                started
                    .csv
                    .write_record(&self.fields)
                    .map_err(write_error)?;
            }
            Some(started) => {
                started
                    .csv
                    .write_record(self.fields.iter().chain(&self.extra))
                    .map_err(write_error)?;
                self.extra.clear();
            }
            None if !self.fields.is_empty() => self.write_header()?,
            None => {}
        }
        Ok(())
    }

    /// Lays the header's values out from the first to the last column that has one.
    fn write_header(&mut self) -> Result<(), ScanError> {
        let first_col = self.header_cols.iter().copied().min().unwrap_or(0);
        let last_col = self.header_cols.iter().copied().max().unwrap_or(0);
        let width = (last_col - first_col) as usize + 1;
        if width > MAX_COLUMNS {
            return Err(FileError::TooWide { columns: width }.into());
        }
        let mut names = vec![String::new(); width];
        for (col, name) in self.header_cols.drain(..).zip(self.fields.drain(..)) {
            names[(col - first_col) as usize] = name;
        }
        let Some(mut out) = self.out.take() else {
            return Ok(());
        };
        if let Some((sheet, last_row)) = self.announce.take() {
            let converted = Converted {
                sheet,
                header_row: self.row as i64 + 1,
                declared_rows: rows_below(last_row, self.row),
            };
            serde_json::to_writer(&mut out, &converted).map_err(io::Error::from)?;
            out.write_all(b"\n").map_err(write_error_io)?;
        }
        let mut csv = csv::WriterBuilder::new().flexible(true).from_writer(out);
        csv.write_record(&names).map_err(write_error)?;
        self.fields = names;
        self.started = Some(Started {
            csv,
            header_row: self.row,
            first_col,
            width,
        });
        Ok(())
    }

    /// Ends the last row; the header's sheet row number (1-based).
    fn finish(mut self) -> Result<i64, ScanError> {
        self.end_row()?;
        match self.started {
            Some(mut started) => {
                started.csv.flush().map_err(write_error_io)?;
                Ok(started.header_row as i64 + 1)
            }
            None => Err(FileError::Empty.into()),
        }
    }
}

/// A cell's text as far as the import can tell it is too large: one byte (one character) past
/// [`MAX_CELL_BYTES`], so that a 64 MiB string shared by many cells costs a row little more
/// than the cap, and the row still fails for its too-large value.
fn cut_to_cell_cap(text: &str) -> &str {
    if text.len() <= MAX_CELL_BYTES {
        return text;
    }
    let mut end = MAX_CELL_BYTES + 1;
    while !text.is_char_boundary(end) {
        end += 1;
    }
    &text[..end]
}

/// Caps what a sheet may write, so a sheet of a million very wide rows cannot fill the disk.
struct LimitedWriter<W> {
    inner: W,
    left: u64,
}

impl<W: Write> LimitedWriter<W> {
    fn new(inner: W, limit: u64) -> Self {
        Self { inner, left: limit }
    }
}

impl<W: Write> Write for LimitedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.left {
            return Err(io::ErrorKind::FileTooLarge.into());
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_error(err: csv::Error) -> ScanError {
    match err.into_kind() {
        csv::ErrorKind::Io(io) => write_error_io(io),
        other => ScanError::Io(io::Error::other(format!("{other:?}"))),
    }
}

fn write_error_io(err: io::Error) -> ScanError {
    if err.kind() == io::ErrorKind::FileTooLarge {
        FileError::NotCsv(format!(
            "The sheet is too large: as CSV it would exceed {} GB.",
            MAX_SHEET_CSV_BYTES >> 30
        ))
        .into()
    } else {
        ScanError::Io(err)
    }
}

fn password_protected() -> ScanError {
    FileError::NotCsv(
        "The workbook is password-protected. Remove the password (or save the sheet as CSV) \
         and upload it again."
            .into(),
    )
    .into()
}

/// A workbook calamine cannot read: damaged, truncated, or not a spreadsheet at all.
fn unreadable(err: impl std::fmt::Display) -> ScanError {
    ReadError::Damaged(err.to_string()).into()
}

#[cfg(test)]
mod tests {
    use rust_xlsxwriter::{ExcelDateTime, Format, Formula, Workbook};

    use super::*;

    fn convert(bytes: &[u8], sheet: Option<&str>) -> Result<(Converted, String), ScanError> {
        let mut out = Vec::new();
        let converted = to_csv(bytes.to_vec(), sheet, None, false, &mut out)?;
        Ok((converted, String::from_utf8(out).unwrap()))
    }

    fn message(err: ScanError) -> String {
        match err {
            ScanError::File(reason) => reason.to_string(),
            ScanError::Io(err) => panic!("an I/O error, not the file's fault: {err}"),
        }
    }

    #[test]
    fn huge_and_many_cells_cost_a_row_little_more_than_the_caps() {
        let mut out = Vec::new();
        let mut sheet = SheetWriter::new(&mut out, None, 0);
        sheet.cell(0, 0, "a").unwrap();
        sheet.cell(0, 1, "b").unwrap();
        // One 3 MiB string (say a shared one) in 30 cells, then 100 000 cells past the header.
        let huge = "é".repeat(3 << 19);
        for col in 0..30 {
            sheet.cell(1, col, &huge).unwrap();
        }
        for col in 30..100_030 {
            sheet.cell(1, col, "x").unwrap();
        }
        assert!(sheet.row_bytes <= MAX_ROW_BYTES as usize + MAX_CELL_BYTES + 4);
        sheet.cell(2, 0, "1").unwrap();
        sheet.cell(2, 200_000, "far").unwrap();
        assert_eq!(sheet.extra.len(), 1);
        sheet.finish().unwrap();

        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.split_terminator('\n').collect();
        assert_eq!(rows.len(), 3, "the header, the huge row, the next");
        assert!(
            rows[1].len() as u64 > MAX_ROW_BYTES,
            "still too large to import"
        );
        assert!(rows[1].len() < 2 * MAX_ROW_BYTES as usize);
        assert_eq!(rows[2], "1,,far");
    }

    /// A workbook whose first sheet is empty and whose second starts at B3, with an empty row
    /// among the data, a date, a date-time, a formula and a value outside the header.
    fn people_xlsx() -> Vec<u8> {
        let mut book = Workbook::new();
        book.add_worksheet().set_name("Notes").unwrap();
        let sheet = book.add_worksheet().set_name("People").unwrap();
        let date = Format::new().set_num_format("yyyy-mm-dd");
        let when = Format::new().set_num_format("yyyy-mm-dd hh:mm");
        for (col, name) in ["name", "age", "joined", "active"].into_iter().enumerate() {
            sheet.write_string(2, 1 + col as u16, name).unwrap();
        }
        sheet.write_string(3, 1, "Ana").unwrap();
        sheet.write_number(3, 2, 31).unwrap();
        let joined = ExcelDateTime::from_ymd(2024, 1, 15).unwrap();
        sheet
            .write_datetime_with_format(3, 3, &joined, &date)
            .unwrap();
        sheet.write_boolean(3, 4, true).unwrap();
        sheet.write_string(5, 1, "Rui").unwrap();
        sheet
            .write_formula(5, 2, Formula::new("=40+2.5").set_result("42.5"))
            .unwrap();
        let at = ExcelDateTime::from_ymd(2023, 6, 1)
            .unwrap()
            .and_hms(12, 30, 0)
            .unwrap();
        sheet.write_datetime_with_format(5, 3, &at, &when).unwrap();
        sheet.write_boolean(5, 4, false).unwrap();
        sheet.write_string(5, 6, "a note").unwrap();
        book.save_to_buffer().unwrap()
    }

    #[test]
    fn an_xlsx_sheet_becomes_csv_with_iso_dates_and_cached_values() {
        let (converted, csv) = convert(&people_xlsx(), None).unwrap();
        let expected = Converted {
            sheet: "People".into(),
            header_row: 3,
            declared_rows: Some(3),
        };
        assert_eq!(converted, expected);
        assert_eq!(
            csv,
            "name,age,joined,active\n\
             Ana,31,2024-01-15,true\n\
             \"\"\n\
             Rui,42.5,2023-06-01 12:30:00,false,a note\n"
        );

        // For a reader of the stream, the same comes first, as a line of JSON.
        let mut announced = Vec::new();
        to_csv(people_xlsx(), None, None, true, &mut announced).unwrap();
        let (line, rest) =
            announced.split_at(announced.iter().position(|&b| b == b'\n').unwrap() + 1);
        assert_eq!(serde_json::from_slice::<Converted>(line).unwrap(), expected);
        assert_eq!(rest, csv.as_bytes());
    }

    #[test]
    fn sheets_are_chosen_by_name_loosely_and_unknown_names_list_the_sheets() {
        let (converted, _) = convert(&people_xlsx(), Some(" people")).unwrap();
        assert_eq!(converted.sheet, "People");
        let err = message(convert(&people_xlsx(), Some("Orders")).unwrap_err());
        assert!(err.contains("no sheet named \"Orders\""), "{err}");
        assert!(err.contains("Notes, People"), "{err}");
        let err = message(convert(&people_xlsx(), Some("Notes")).unwrap_err());
        assert_eq!(err, FileError::Empty.to_string());
    }

    #[test]
    fn by_default_the_first_sheet_holding_a_table_is_imported_not_a_cover_sheet() {
        let mut book = Workbook::new();
        let cover = book.add_worksheet().set_name("Read me").unwrap();
        cover
            .write_string(
                0,
                0,
                "Contacts exported on Monday. The data is on the next sheet.",
            )
            .unwrap();
        cover.write_string(0, 3, "v2").unwrap();
        let contacts = book.add_worksheet().set_name("Contacts").unwrap();
        contacts.write_string(1, 0, "email").unwrap();
        contacts.write_string(2, 0, "ada@example.com").unwrap();
        let (converted, csv) = convert(&book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(
            (converted.sheet.as_str(), csv.as_str()),
            ("Contacts", "email\nada@example.com\n")
        );

        // A cover of a title and notes, a value a row, then a table two columns wide.
        let mut book = Workbook::new();
        let cover = book.add_worksheet().set_name("Read me").unwrap();
        for (row, line) in ["Contacts", "", "Exported on Monday.", "Owner: sales"]
            .iter()
            .enumerate()
        {
            cover.write_string(row as u32, 0, *line).unwrap();
        }
        let contacts = book.add_worksheet().set_name("Contacts").unwrap();
        for (col, value) in ["email", "name"].iter().enumerate() {
            contacts.write_string(0, col as u16, *value).unwrap();
            contacts.write_string(1, col as u16, "x").unwrap();
        }
        let (converted, _) = convert(&book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(converted.sheet, "Contacts");

        // A hidden sheet (drop-down lists) is never taken by default: here the header-only
        // sheet is, and its import will say it has no rows. Named, a hidden sheet is read.
        let mut book = Workbook::new();
        book.add_worksheet()
            .set_name("Data")
            .unwrap()
            .write_string(0, 0, "email")
            .unwrap();
        let lists = book.add_worksheet().set_name("Lists").unwrap();
        lists.write_string(0, 0, "country").unwrap();
        lists.write_string(0, 1, "code").unwrap();
        lists.write_string(1, 0, "Portugal").unwrap();
        lists.set_hidden(true);
        let bytes = book.save_to_buffer().unwrap();
        let (converted, _) = convert(&bytes, None).unwrap();
        assert_eq!(converted.sheet, "Data");
        let (converted, _) = convert(&bytes, Some("Lists")).unwrap();
        assert_eq!(converted.sheet, "Lists");
        // When only hidden sheets hold anything, they are looked at.
        let mut book = Workbook::new();
        book.add_worksheet().set_name("Blank").unwrap();
        let data = book.add_worksheet().set_name("Data").unwrap();
        data.write_string(0, 0, "email").unwrap();
        data.write_string(1, 0, "ada@example.com").unwrap();
        data.set_hidden(true);
        let (converted, _) = convert(&book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(converted.sheet, "Data");

        // No sheet holds a table: the first with a value, whose import says what is missing.
        let mut book = Workbook::new();
        book.add_worksheet().set_name("Blank").unwrap();
        book.add_worksheet()
            .set_name("Header")
            .unwrap()
            .write_string(0, 0, "email")
            .unwrap();
        book.add_worksheet()
            .set_name("Other")
            .unwrap()
            .write_string(0, 0, "name")
            .unwrap();
        let (converted, csv) = convert(&book.save_to_buffer().unwrap(), None).unwrap();
        assert_eq!(
            (converted.sheet.as_str(), csv.as_str()),
            ("Header", "email\n")
        );
    }

    #[test]
    fn xls_and_ods_sheets_convert_too() {
        let xls = include_bytes!("../../tests/fixtures/people.xls");
        let (converted, csv) = convert(xls, None).unwrap();
        assert_eq!(converted.sheet, "People");
        assert_eq!(
            csv,
            "name,age,joined\nAna,31,2024-01-15\nRui,42,2023-06-01\n"
        );

        let ods = include_bytes!("../../tests/fixtures/scores.ods");
        let (converted, csv) = convert(ods, None).unwrap();
        assert_eq!(
            (converted.sheet.as_str(), converted.header_row),
            ("Scores", 1)
        );
        assert_eq!(csv, "name,score,on\n\"\"\nAna,9.5,2024-02-29\n");
    }

    #[test]
    fn damaged_protected_and_bomb_workbooks_are_refused_with_reasons() {
        let book = people_xlsx();
        let err = message(convert(&book[..book.len() / 2], None).unwrap_err());
        assert!(err.contains("could not be read"), "{err}");

        let protected = include_bytes!("../../tests/fixtures/password.xlsx");
        let err = message(convert(protected, None).unwrap_err());
        assert!(err.contains("password-protected"), "{err}");

        let bomb = include_bytes!("../../tests/fixtures/bomb.xlsx");
        let err = message(convert(bomb, None).unwrap_err());
        assert!(err.contains("zip bomb"), "{err}");
    }

    #[test]
    fn too_wide_sheets_are_refused() {
        let mut book = Workbook::new();
        let sheet = book.add_worksheet();
        sheet.write_string(0, 0, "first").unwrap();
        sheet.write_string(0, 5000, "far away").unwrap();
        sheet.write_string(1, 0, "x").unwrap();
        let err = message(convert(&book.save_to_buffer().unwrap(), None).unwrap_err());
        assert_eq!(err, FileError::TooWide { columns: 5001 }.to_string());
    }

    /// Every kind of cell, in a shared-strings workbook and in a constant-memory one (inline
    /// strings): our XLSX reader and calamine's must agree cell for cell (and on generated
    /// workbooks: `xlsx::properties`).
    #[test]
    fn our_xlsx_reader_agrees_with_calamine() {
        fn sheet(book: &mut Workbook, constant_memory: bool) {
            let sheet = if constant_memory {
                book.add_worksheet_with_constant_memory().unwrap()
            } else {
                book.add_worksheet()
            };
            let date = Format::new().set_num_format("dd/mm/yyyy");
            let when = Format::new().set_num_format("yyyy-mm-dd hh:mm:ss");
            let clock = Format::new().set_num_format("h:mm AM/PM");
            let elapsed = Format::new().set_num_format("[h]:mm");
            let money = Format::new().set_num_format("#,##0.00 \"€\"");
            let bold = Format::new().set_bold();
            let texts = [
                "Tom & Jerry <3",
                "  padded  ",
                "line\nbreak\r\n",
                "é ü 日本 😀",
                "=1+1",
                "_x000D_",
            ];
            let numbers = [
                0.0,
                -0.0,
                42.0,
                -17.0,
                0.1 + 0.2,
                1e15,
                123456789012345678.0,
                1e-7,
                -2.5,
            ];
            let at = ExcelDateTime::from_ymd(2024, 2, 29)
                .unwrap()
                .and_hms(23, 59, 59)
                .unwrap();
            // Row by row: a constant-memory sheet writes each row out when the next begins.
            for row in 0..numbers.len() as u32 {
                if let Some(text) = texts.get(row as usize) {
                    sheet.write_string(row, 0, *text).unwrap();
                }
                sheet.write_number(row, 1, numbers[row as usize]).unwrap();
                match row {
                    0 => sheet.write_datetime_with_format(row, 2, &at, &date),
                    1 => sheet.write_datetime_with_format(row, 2, &at, &when),
                    2 => sheet.write_datetime_with_format(row, 2, &at, &clock),
                    3 => sheet.write_number_with_format(row, 2, 1.75, &elapsed),
                    4 => sheet.write_number_with_format(row, 2, 1234.5, &money),
                    _ => sheet.write_number_with_format(row, 2, 59.0, &date),
                }
                .unwrap();
                match row {
                    0 => sheet.write_boolean(row, 3, true),
                    1 => sheet.write_boolean(row, 3, false),
                    2 => sheet.write_formula(row, 3, Formula::new("=1/0").set_result("#DIV/0!")),
                    3 => sheet.write_formula(row, 3, Formula::new("=\"a\"&\"b\"").set_result("ab")),
                    4 => sheet.write_formula(row, 3, Formula::new("=2*3").set_result("6")),
                    5 => sheet.write_formula(row, 3, Formula::new("=TRUE()").set_result("TRUE")),
                    _ => sheet.write_rich_string(
                        row,
                        3,
                        &[(&bold, "rich "), (&Format::new(), "text")],
                    ),
                }
                .unwrap();
            }
            sheet.write_string(9999, 7, "far down").unwrap();
        }
        for constant_memory in [false, true] {
            let mut book = Workbook::new();
            sheet(&mut book, constant_memory);
            let bytes = book.save_to_buffer().unwrap();
            let ours = xlsx::properties::read_ours(&bytes, "Sheet1").unwrap();
            let theirs = xlsx::properties::read_calamine(&bytes, "Sheet1");
            assert!(ours.len() > 25, "{ours:?}");
            assert_eq!(ours, theirs, "constant memory: {constant_memory}");
        }
    }
}
