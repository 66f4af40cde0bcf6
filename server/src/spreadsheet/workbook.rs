//! Workbooks (XLSX, XLS, ODS): planning converts the chosen sheet to CSV once, and from then on
//! the import is the CSV import, byte-range chunks and all. Converting costs one pass over the
//! sheet, but it means one chunk reader, one error report and one set of limits for every
//! format, and a chunk never has to open the workbook again.
//!
//! Workbooks are zip (XLSX, ODS) or OLE (XLS) containers that must be read with random access,
//! so the file is held in memory ([`MAX_WORKBOOK_BYTES`]). XLSX sheets are streamed cell by
//! cell; XLS and ODS sheets are read whole by calamine. Before calamine sees a zip, every entry
//! is decompressed once through a counting sink with a byte budget, so a zip bomb fails the job
//! instead of exhausting memory. What calamine allocates for an XLS or ODS sheet that *declares*
//! huge dimensions is not bounded here: workers run this in a memory-limited child process
//! (`jobs::convert`).

use std::{
    borrow::Cow,
    io::{self, Cursor, Read, Write},
};

use calamine::{
    Data, DataType, Ods, Range, Reader, Xls, XlsError, Xlsx, XlsxError, open_workbook_from_rs,
};

use super::{FileError, MAX_COLUMNS, csv::ScanError};

/// The largest workbook file we open (it is held in memory while the sheet is converted).
pub const MAX_WORKBOOK_BYTES: u64 = 256 << 20;

/// The most bytes of XML a workbook may unpack to in all.
const MAX_UNPACKED_BYTES: u64 = 1 << 30;

/// The most bytes any one zip entry may unpack to. Whatever its name says, an entry may be one
/// that calamine reads whole into memory (shared strings, styles, ODS content).
const MAX_PART_BYTES: u64 = 512 << 20;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    pub sheet: String,
    /// The sheet row (1-based) that holds the header: rows above it were empty.
    pub header_row: i64,
}

/// Writes the sheet named `sheet` (the first one with a value when `None`) to `out` as
/// comma-separated CSV whose first record is the sheet's first non-empty row.
pub fn to_csv(
    bytes: Vec<u8>,
    sheet: Option<&str>,
    out: impl Write,
) -> Result<Converted, ScanError> {
    let kind = Kind::of(&bytes).ok_or_else(|| FileError::NotCsv("Not a workbook.".into()))?;
    let mut out = SheetWriter::new(LimitedWriter::new(out, MAX_SHEET_CSV_BYTES));
    let chosen = match kind {
        Kind::Zip if is_ods(&bytes) => {
            check_unpacked_size(&bytes)?;
            let mut book: Ods<_> = open_workbook_from_rs(Cursor::new(bytes)).map_err(unreadable)?;
            let name = choose_range_sheet(&mut book, sheet)?;
            let range = book.worksheet_range(&name).map_err(unreadable)?;
            write_range(&range, &mut out)?;
            name
        }
        Kind::Zip => {
            check_unpacked_size(&bytes)?;
            let mut book: Xlsx<_> = Xlsx::new(Cursor::new(bytes)).map_err(xlsx_error)?;
            let name = choose_xlsx_sheet(&mut book, sheet)?;
            let mut cells = book.worksheet_cells_reader(&name).map_err(xlsx_error)?;
            while let Some(cell) = cells.next_cell().map_err(xlsx_error)? {
                let (row, col) = cell.get_position();
                out.cell(row, col, text_of(cell.get_value()))?;
            }
            name
        }
        Kind::Ole => {
            let mut book: Xls<_> = match Xls::new(Cursor::new(&bytes[..])) {
                Ok(book) => book,
                Err(XlsError::Password) => return Err(password_protected()),
                // An encrypted XLSX is an OLE file too; its error says so.
                Err(err) => match Xlsx::new(Cursor::new(&bytes[..])) {
                    Err(XlsxError::Password) => return Err(password_protected()),
                    _ => return Err(unreadable(err)),
                },
            };
            let name = choose_range_sheet(&mut book, sheet)?;
            let range = book.worksheet_range(&name).map_err(unreadable)?;
            write_range(&range, &mut out)?;
            name
        }
    };
    let header_row = out.finish()?;
    Ok(Converted {
        sheet: chosen,
        header_row,
    })
}

/// An ODS zip starts with an uncompressed `mimetype` entry naming the format.
fn is_ods(bytes: &[u8]) -> bool {
    const MIME: &[u8] = b"application/vnd.oasis.opendocument.spreadsheet";
    bytes.get(30..38) == Some(b"mimetype") && bytes[38..].starts_with(MIME)
}

/// Unpacks every entry once, counting, so that no later read can unpack more than the limits.
fn check_unpacked_size(bytes: &[u8]) -> Result<(), ScanError> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(unreadable)?;
    let mut budget = MAX_UNPACKED_BYTES;
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(unreadable)?;
        let limit = budget.min(MAX_PART_BYTES);
        let unpacked = io::copy(&mut entry.take(limit + 1), &mut io::sink()).map_err(unreadable)?;
        if unpacked > limit {
            return Err(FileError::NotCsv(
                "The workbook unpacks to far more data than a spreadsheet holds (a zip bomb?), \
                 so it was not opened."
                    .into(),
            )
            .into());
        }
        budget -= unpacked;
    }
    Ok(())
}

fn choose_xlsx_sheet(
    book: &mut Xlsx<Cursor<Vec<u8>>>,
    wanted: Option<&str>,
) -> Result<String, ScanError> {
    let names = book.sheet_names();
    if let Some(wanted) = wanted {
        return named(&names, wanted);
    }
    for name in &names {
        let mut cells = book.worksheet_cells_reader(name).map_err(xlsx_error)?;
        while let Some(cell) = cells.next_cell().map_err(xlsx_error)? {
            if !text_of(cell.get_value()).is_empty() {
                return Ok(name.clone());
            }
        }
    }
    Err(FileError::Empty.into())
}

fn choose_range_sheet<R: Reader<Cursor<B>>, B>(
    book: &mut R,
    wanted: Option<&str>,
) -> Result<String, ScanError>
where
    Cursor<B>: Read + io::Seek,
    R::Error: std::fmt::Display,
{
    let names = book.sheet_names();
    if let Some(wanted) = wanted {
        return named(&names, wanted);
    }
    for name in names {
        let range = book.worksheet_range(&name).map_err(unreadable)?;
        if range
            .used_cells()
            .any(|(_, _, value)| !text_of(value).is_empty())
        {
            return Ok(name);
        }
    }
    Err(FileError::Empty.into())
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
            FileError::NotCsv(format!(
                "The workbook has no sheet named \"{wanted}\". Its sheets: {}.",
                names.join(", ")
            ))
            .into()
        })
}

fn write_range<W: Write>(range: &Range<Data>, out: &mut SheetWriter<W>) -> Result<(), ScanError> {
    let (row0, col0) = range.start().unwrap_or_default();
    for (row, col, value) in range.used_cells() {
        out.cell(row0 + row as u32, col0 + col as u32, text_of(value))?;
    }
    Ok(())
}

/// A cell as the text the CSV import reads: dates as ISO dates (a time only when there is one),
/// whole numbers without a decimal point, formulas as their cached values, errors as shown
/// (`#DIV/0!`), empty as empty.
fn text_of<T: DataType>(value: &T) -> Cow<'_, str> {
    if let Some(text) = value.get_string() {
        return Cow::Borrowed(text);
    }
    if let Some(int) = value.get_int() {
        return Cow::Owned(int.to_string());
    }
    if let Some(float) = value.get_float() {
        return Cow::Owned(float_text(float));
    }
    if let Some(bool) = value.get_bool() {
        return Cow::Borrowed(if bool { "true" } else { "false" });
    }
    if let Some(when) = value.get_datetime() {
        return Cow::Owned(match when.as_datetime() {
            Some(at) if !when.is_duration() && at.time() == chrono::NaiveTime::MIN => {
                at.format("%Y-%m-%d").to_string()
            }
            Some(at) if !when.is_duration() => at.format("%Y-%m-%d %H:%M:%S").to_string(),
            _ => float_text(when.as_f64()),
        });
    }
    if let Some(iso) = value
        .get_datetime_iso()
        .or_else(|| value.get_duration_iso())
    {
        return Cow::Borrowed(iso);
    }
    if let Some(error) = value.get_error() {
        return Cow::Owned(error.to_string());
    }
    Cow::Borrowed("")
}

/// Spreadsheets store every number as a float: 42 is written back as `42`, not `42.0`.
fn float_text(float: f64) -> String {
    if float.fract() == 0.0 && float.abs() < 1e15 {
        (float as i64).to_string()
    } else {
        float.to_string()
    }
}

/// Turns cells, arriving in row order, into CSV records. The first row with a value is the
/// header and sets the columns; every later sheet row becomes one record (an empty one for an
/// empty row, which the import skips, so record numbers stay sheet row numbers). Values outside
/// the header's columns lengthen their record, which makes that row an error, not lost data.
struct SheetWriter<W: Write> {
    csv: csv::Writer<W>,
    header: Option<Header>,
    /// The sheet row being gathered (0-based).
    row: u32,
    /// Its values: by column once the header is known, else the header's values…
    fields: Vec<String>,
    /// …and, for the header, their columns.
    header_cols: Vec<u32>,
    /// Values outside the header's columns.
    extra: Vec<String>,
}

#[derive(Clone, Copy)]
struct Header {
    row: u32,
    first_col: u32,
    width: usize,
}

impl<W: Write> SheetWriter<W> {
    fn new(out: W) -> Self {
        Self {
            csv: csv::WriterBuilder::new().flexible(true).from_writer(out),
            header: None,
            row: 0,
            fields: Vec::new(),
            header_cols: Vec::new(),
            extra: Vec::new(),
        }
    }

    fn cell(&mut self, row: u32, col: u32, text: Cow<'_, str>) -> Result<(), ScanError> {
        if row != self.row {
            self.end_row()?;
            self.skip_to(row)?;
        }
        if text.is_empty() {
            return Ok(());
        }
        match self.header {
            None if self.fields.len() >= MAX_COLUMNS => {
                return Err(FileError::TooWide {
                    columns: self.fields.len() + 1,
                }
                .into());
            }
            None => {
                self.header_cols.push(col);
                self.fields.push(text.into_owned());
            }
            Some(header) => match col.checked_sub(header.first_col).map(|i| i as usize) {
                Some(i) if i < header.width => self.fields[i] = text.into_owned(),
                _ => self.extra.push(text.into_owned()),
            },
        }
        Ok(())
    }

    /// Writes the empty records for the rows between the last one and `row`.
    fn skip_to(&mut self, row: u32) -> Result<(), ScanError> {
        if let Some(header) = self.header {
            let empty = vec![""; header.width];
            for _ in self.row + 1..row {
                self.csv.write_record(&empty).map_err(write_error)?;
            }
            self.fields = vec![String::new(); header.width];
        }
        self.row = row;
        Ok(())
    }

    fn end_row(&mut self) -> Result<(), ScanError> {
        match self.header {
            Some(_) => {
                self.fields.append(&mut self.extra);
                self.csv.write_record(&self.fields).map_err(write_error)?;
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
        self.csv.write_record(&names).map_err(write_error)?;
        self.header = Some(Header {
            row: self.row,
            first_col,
            width,
        });
        Ok(())
    }

    /// Ends the last row; the header's sheet row number (1-based).
    fn finish(mut self) -> Result<i64, ScanError> {
        self.end_row()?;
        self.csv.flush().map_err(write_error_io)?;
        match self.header {
            Some(header) => Ok(header.row as i64 + 1),
            None => Err(FileError::Empty.into()),
        }
    }
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

fn xlsx_error(err: XlsxError) -> ScanError {
    match err {
        XlsxError::Password => password_protected(),
        other => unreadable(other),
    }
}

/// A workbook calamine cannot read: damaged, truncated, or not a spreadsheet at all.
fn unreadable(err: impl std::fmt::Display) -> ScanError {
    FileError::NotCsv(format!(
        "The workbook could not be read; it may be damaged or incomplete ({err})."
    ))
    .into()
}

#[cfg(test)]
mod tests {
    use rust_xlsxwriter::{ExcelDateTime, Format, Formula, Workbook};

    use super::*;

    fn convert(bytes: &[u8], sheet: Option<&str>) -> Result<(Converted, String), ScanError> {
        let mut out = Vec::new();
        let converted = to_csv(bytes.to_vec(), sheet, &mut out)?;
        Ok((converted, String::from_utf8(out).unwrap()))
    }

    fn message(err: ScanError) -> String {
        match err {
            ScanError::File(reason) => reason.to_string(),
            ScanError::Io(err) => panic!("an I/O error, not the file's fault: {err}"),
        }
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
        assert_eq!(converted.sheet, "People");
        assert_eq!(converted.header_row, 3);
        assert_eq!(
            csv,
            "name,age,joined,active\n\
             Ana,31,2024-01-15,true\n\
             ,,,\n\
             Rui,42.5,2023-06-01 12:30:00,false,a note\n"
        );
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
        assert_eq!(csv, "name,score,on\n,,\nAna,9.5,2024-02-29\n");
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
}
