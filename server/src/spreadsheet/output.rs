//! Writing spreadsheets: dataset rows as CSV records, and CSV as a typed XLSX workbook.
//!
//! Exports render each chunk's rows as CSV records; the finished file is either those records
//! after a header (CSV) or the same records poured into one XLSX sheet with real cell types
//! (numbers, booleans, dates) by the column types. Error reports become XLSX the same way, all
//! text. Text cells that a spreadsheet would run as a formula are neutralised in both formats
//! ([`super::report::neutralize`]); numbers, booleans and dates never start with one.

use std::io::{Read, Write};

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use rust_xlsxwriter::{Format, Workbook, XlsxError};

use super::{
    record,
    report::{neutralize, starts_formula},
    schema::{Column, ColumnType},
};

/// The most data rows one XLSX sheet holds (shared with the pages, which offer no XLSX export
/// of more).
pub use app::model::MAX_XLSX_ROWS;

/// The most characters an Excel cell holds.
pub const MAX_XLSX_CELL_CHARS: usize = 32_767;

/// What to do with text longer than an Excel cell holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongText {
    /// Fail (`XlsxError::MaxStringLengthExceeded`): an export must not lose data.
    Refuse,
    /// Cut it, ending with `…`: a report only has to show the value.
    Cut,
}

/// The header record.
pub fn header_csv(columns: &[Column]) -> Vec<u8> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record(columns.iter().map(|c| neutralize(&c.name).into_owned()));
    writer.into_inner().unwrap_or_default()
}

/// Dataset rows as CSV records, rendered from their stored records (see [`super::record`]):
/// a value per column, null and missing values empty, text neutralised; quoted as the `csv`
/// crate quotes (a field holding `,` `"` CR or LF, and a record that would otherwise be an
/// empty line).
///
/// Written by hand rather than through `csv::Writer`: exports render every row here, and the
/// writer's per-field state machine took about a quarter of an export's CPU time in the server
/// (perf, 1,000,000 rows × 10 columns); this loop takes a third of that.
pub struct CsvRows<'c> {
    columns: &'c [Column],
    out: Vec<u8>,
    rows: i64,
}

impl<'c> CsvRows<'c> {
    pub fn with_capacity(columns: &'c [Column], bytes: usize) -> Self {
        CsvRows {
            columns,
            out: Vec::with_capacity(bytes),
            rows: 0,
        }
    }

    pub fn push(&mut self, record: &[u8]) {
        let start = self.out.len();
        let mut values = record::values(record);
        for (i, column) in self.columns.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            let value = values.next().flatten();
            let value = value.as_deref().unwrap_or_default();
            let text = matches!(column.kind, ColumnType::Text | ColumnType::Email);
            push_field(&mut self.out, value, text && starts_formula(value));
        }
        if self.out.len() == start {
            // An empty line would read back as no record at all.
            self.out.extend_from_slice(b"\"\"");
        }
        self.out.push(b'\n');
        self.rows += 1;
    }

    /// The bytes rendered since the last [`CsvRows::take`].
    pub fn bytes(&self) -> usize {
        self.out.len()
    }

    /// The rows rendered in all.
    pub fn rows(&self) -> i64 {
        self.rows
    }

    /// The bytes rendered since the last time, leaving room for as many again.
    pub fn take(&mut self) -> Vec<u8> {
        let capacity = self.out.capacity();
        std::mem::replace(&mut self.out, Vec::with_capacity(capacity))
    }
}

/// One field: after a `'` that keeps a formula inert when `neutralise`, and in quotes (with
/// quotes inside doubled) when it holds a delimiter, a quote or a line break.
fn push_field(out: &mut Vec<u8>, value: &[u8], neutralise: bool) {
    let quoted = value
        .iter()
        .any(|&byte| matches!(byte, b',' | b'"' | b'\r' | b'\n'));
    if quoted {
        out.push(b'"');
    }
    if neutralise {
        out.push(b'\'');
    }
    if quoted {
        let mut pieces = value.split(|&byte| byte == b'"');
        if let Some(first) = pieces.next() {
            out.extend_from_slice(first);
        }
        for piece in pieces {
            out.extend_from_slice(b"\"\"");
            out.extend_from_slice(piece);
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(value);
    }
}

/// Reads CSV (a header, then records) and writes it as an XLSX workbook with one sheet, typing
/// each cell by its column; a value that does not parse as its type is written as text. Uses
/// rust_xlsxwriter's constant-memory mode: rows go to a temporary file as they come, so a
/// million rows cost no more memory than ten. Returns the number of data rows.
pub fn csv_to_xlsx(
    columns: &[Column],
    sheet_name: &str,
    long_text: LongText,
    input: impl Read,
    out: impl Write + Send,
) -> Result<u64, XlsxError> {
    let mut book = Workbook::new();
    let sheet = book.add_worksheet_with_constant_memory()?;
    sheet.set_name(sheet_name)?;
    let bold = Format::new().set_bold();
    let date = Format::new().set_num_format("yyyy-mm-dd");
    let timestamp = Format::new().set_num_format("yyyy-mm-dd hh:mm:ss");
    let mut decimals = DecimalFormats::default();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(input);
    let mut record = csv::StringRecord::new();
    let mut row = 0u32;
    while reader
        .read_record(&mut record)
        .map_err(|err| match err.into_kind() {
            csv::ErrorKind::Io(io) => XlsxError::IoError(io),
            other => XlsxError::ParameterError(format!("reading rows: {other:?}")),
        })?
    {
        for (col, text) in record.iter().enumerate() {
            let col = col as u16;
            if text.is_empty() {
                continue;
            }
            let kind = columns.get(col as usize).map(|c| c.kind);
            if row == 0 {
                sheet.write_string_with_format(row, col, text, &bold)?;
                continue;
            }
            match kind {
                Some(ColumnType::Integer) => match exact_number(text) {
                    Some(number) => sheet.write_number(row, col, number)?,
                    None => sheet.write_string(row, col, text)?,
                },
                Some(ColumnType::Decimal) => match exact_number(text) {
                    Some(number) => match decimals.of(text) {
                        Some(format) => sheet.write_number_with_format(row, col, number, format)?,
                        None => sheet.write_number(row, col, number)?,
                    },
                    None => sheet.write_string(row, col, text)?,
                },
                Some(ColumnType::Boolean) => match text {
                    "true" => sheet.write_boolean(row, col, true)?,
                    "false" => sheet.write_boolean(row, col, false)?,
                    _ => sheet.write_string(row, col, text)?,
                },
                Some(ColumnType::Date) => match excel_date(text) {
                    Some(day) => sheet.write_datetime_with_format(row, col, day, &date)?,
                    None => sheet.write_string(row, col, text)?,
                },
                Some(ColumnType::Timestamp) => match excel_timestamp(text) {
                    Some(at) => sheet.write_datetime_with_format(row, col, at, &timestamp)?,
                    None => sheet.write_string(row, col, text)?,
                },
                _ => match long_text {
                    LongText::Cut if text.chars().nth(MAX_XLSX_CELL_CHARS).is_some() => {
                        let cut: String = text.chars().take(MAX_XLSX_CELL_CHARS - 1).collect();
                        sheet.write_string(row, col, cut + "…")?
                    }
                    _ => sheet.write_string(row, col, text)?,
                },
            };
        }
        row += 1;
        if row as i64 > MAX_XLSX_ROWS + 1 {
            return Err(XlsxError::RowColumnLimitError);
        }
    }
    book.save_to_writer(out)?;
    Ok(u64::from(row.saturating_sub(1)))
}

/// The number, if a spreadsheet can hold it exactly: Excel keeps 15 significant digits and
/// shows at most 30 decimal places, so any other number is written as text rather than silently
/// rounded (30 places also keep every number far from a double's underflow).
pub(crate) fn exact_number(text: &str) -> Option<f64> {
    let digits = text.trim_start_matches(['-', '+']).replace('.', "");
    let significant = digits.trim_start_matches('0').len();
    let places = text.split_once('.').map_or(0, |(_, frac)| frac.len());
    (significant <= 15 && places <= MAX_PLACES)
        .then(|| text.parse().ok())
        .flatten()
}

/// The most decimal places an Excel number format shows.
pub(crate) const MAX_PLACES: usize = 30;

/// Number formats that show a decimal with as many places as it was written with (`10.50`, not
/// Excel's `10.5`), made once per scale.
#[derive(Default)]
struct DecimalFormats(Vec<Option<Format>>);

impl DecimalFormats {
    /// The format for a decimal's text, `None` for a whole number (General shows it as is).
    fn of(&mut self, text: &str) -> Option<&Format> {
        let places = text.split_once('.').map_or(0, |(_, frac)| frac.len());
        if places == 0 {
            return None;
        }
        if self.0.len() <= places {
            self.0.resize(places + 1, None);
        }
        let format = self.0[places].get_or_insert_with(|| {
            Format::new().set_num_format(format!("0.{}", "0".repeat(places)))
        });
        Some(format)
    }
}

pub(crate) fn excel_date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

/// Timestamps are stored in UTC (RFC 3339); Excel has no time zones, so the sheet shows UTC.
pub(crate) fn excel_timestamp(text: &str) -> Option<NaiveDateTime> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|at| at.naive_utc())
}

#[cfg(test)]
mod tests {
    use calamine::{Data, DataType, Reader, Xlsx};

    use super::*;

    fn columns() -> Vec<Column> {
        [
            ("name", ColumnType::Text),
            ("n", ColumnType::Integer),
            ("amount", ColumnType::Decimal),
            ("ok", ColumnType::Boolean),
            ("day", ColumnType::Date),
            ("at", ColumnType::Timestamp),
        ]
        .into_iter()
        .map(|(name, kind)| Column {
            name: name.into(),
            kind,
            required: false,
        })
        .collect()
    }

    #[test]
    fn rows_become_csv_with_text_neutralised_and_numbers_exact() {
        let record = |values: &[Option<&str>]| {
            let mut record = record::RecordWriter::default();
            values.iter().for_each(|value| record.push(*value));
            record.finish()
        };
        let rows = [
            record(&[
                Some("=HYPERLINK(\"x\")"),
                Some("-5"),
                Some("12345678901234567890.25"),
                Some("true"),
                Some("2024-01-15"),
                Some("2024-01-15T10:30:00Z"),
            ]),
            record(&[Some("plain, with comma"), None]),
        ];
        let columns = columns();
        let mut csv = CsvRows::with_capacity(&columns, 0);
        rows.iter().for_each(|row| csv.push(row.as_bytes()));
        assert_eq!(csv.rows(), 2);
        let csv = String::from_utf8(csv.take()).unwrap();
        assert_eq!(
            csv,
            "\"'=HYPERLINK(\"\"x\"\")\",-5,12345678901234567890.25,true,2024-01-15,2024-01-15T10:30:00Z\n\
             \"plain, with comma\",,,,,\n"
        );
        assert_eq!(header_csv(&columns), b"name,n,amount,ok,day,at\n");
    }

    #[test]
    fn rows_are_quoted_as_the_csv_crate_quotes_them() {
        let values = [
            Some("plain"),
            None,
            Some(""),
            Some("a,b"),
            Some("say \"hi\""),
            Some("\"\""),
            Some("line\nbreak"),
            Some("cr\ronly"),
            Some("=1+1"),
            Some("-3, \"x\""),
            Some("\u{1f}\u{1e}"),
            Some("ünïcødé €"),
        ];
        let text = |name: &str| Column {
            name: name.into(),
            kind: ColumnType::Text,
            required: false,
        };
        for (a, b) in values
            .iter()
            .flat_map(|a| values.iter().map(move |b| (a, b)))
        {
            for columns in [vec![text("a")], vec![text("a"), text("b")]] {
                let mut stored = record::RecordWriter::default();
                stored.push(*a);
                stored.push(*b);
                let stored = stored.finish();
                let mut ours = CsvRows::with_capacity(&columns, 0);
                ours.push(stored.as_bytes());
                let mut theirs = csv::Writer::from_writer(Vec::new());
                let cells = [a, b].map(|value| neutralize(value.unwrap_or_default()).into_owned());
                theirs.write_record(&cells[..columns.len()]).unwrap();
                assert_eq!(
                    String::from_utf8(ours.take()).unwrap(),
                    String::from_utf8(theirs.into_inner().unwrap()).unwrap(),
                    "{a:?}, {b:?} in {} columns",
                    columns.len()
                );
            }
        }
    }

    #[test]
    fn csv_becomes_a_typed_workbook() {
        let csv = "name,n,amount,ok,day,at\n\
                   '=1+1,-5,2.5,true,2024-01-15,2024-01-15T10:30:00Z\n\
                   Rui,x,,false,,\n";
        let mut out = Vec::new();
        let rows = csv_to_xlsx(
            &columns(),
            "people",
            LongText::Refuse,
            csv.as_bytes(),
            &mut out,
        )
        .unwrap();
        assert_eq!(rows, 2);
        let mut book = Xlsx::new(std::io::Cursor::new(out)).unwrap();
        let range = book.worksheet_range("people").unwrap();
        let first: Vec<&Data> = (0..6).map(|c| range.get((1, c)).unwrap()).collect();
        assert_eq!(first[0], &Data::String("'=1+1".into()));
        assert_eq!(first[1], &Data::Float(-5.0));
        assert_eq!(first[2], &Data::Float(2.5));
        assert_eq!(first[3], &Data::Bool(true));
        let day = first[4].as_datetime().unwrap();
        assert_eq!(day.to_string(), "2024-01-15 00:00:00");
        let at = first[5].as_datetime().unwrap();
        assert_eq!(at.to_string(), "2024-01-15 10:30:00");
        // Not a number in a number column: kept as text, not lost.
        assert_eq!(range.get((2, 1)), Some(&Data::String("x".into())));
    }

    #[test]
    fn numbers_excel_would_round_and_text_it_cannot_hold() {
        assert_eq!(exact_number("-0.5"), Some(-0.5));
        assert_eq!(exact_number("123456789012345"), Some(123456789012345.0));
        assert_eq!(
            exact_number("0.000123456789012345"),
            Some(0.000123456789012345)
        );
        assert_eq!(exact_number("12345678901234567890.25"), None);
        assert_eq!(exact_number(&format!("0.{}1", "0".repeat(30))), None);
        assert_eq!(exact_number(&format!("0.{}1", "0".repeat(29))), Some(1e-30));
        assert_eq!(exact_number("0"), Some(0.0));

        let long = "y".repeat(MAX_XLSX_CELL_CHARS + 10);
        let csv = format!("name\n{long}\n");
        let text = [columns()[0].clone()];
        let err = csv_to_xlsx(&text, "s", LongText::Refuse, csv.as_bytes(), Vec::new());
        assert!(matches!(err, Err(XlsxError::MaxStringLengthExceeded)));
        let mut out = Vec::new();
        csv_to_xlsx(&text, "s", LongText::Cut, csv.as_bytes(), &mut out).unwrap();
        let mut book = Xlsx::new(std::io::Cursor::new(out)).unwrap();
        let cell = book.worksheet_range("s").unwrap().get((1, 0)).cloned();
        let Some(Data::String(cut)) = cell else {
            panic!("a text cell, not {cell:?}")
        };
        assert_eq!(cut.chars().count(), MAX_XLSX_CELL_CHARS);
        assert!(cut.ends_with('…'));
    }
}
