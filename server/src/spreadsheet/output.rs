//! Writing spreadsheets: dataset rows as CSV records, and CSV as a typed XLSX workbook.
//!
//! Exports render each chunk's rows as CSV records; the finished file is either those records
//! after a header (CSV) or the same records poured into one XLSX sheet with real cell types
//! (numbers, booleans, dates) by the column types. Error reports become XLSX the same way, all
//! text. Text cells that a spreadsheet would run as a formula are neutralised in both formats
//! ([`super::report::neutralize`]); numbers, booleans and dates never start with one.

use std::{
    borrow::Cow,
    io::{Read, Write},
};

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use rust_xlsxwriter::{Format, Workbook, XlsxError};

use super::{
    report::neutralize,
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

/// Dataset rows (values in column order, as stored) as CSV records: null as empty, text
/// neutralised.
pub fn rows_csv(columns: &[Column], rows: &[Vec<Option<String>>]) -> Vec<u8> {
    let mut writer = csv::Writer::from_writer(Vec::with_capacity(rows.len() * 64));
    for row in rows {
        let record = columns.iter().enumerate().map(|(i, column)| {
            let value = row.get(i).and_then(Option::as_deref).unwrap_or("");
            match column.kind {
                ColumnType::Text | ColumnType::Email => neutralize(value),
                _ => Cow::Borrowed(value),
            }
        });
        // Writing to a Vec cannot fail.
        let _ = writer.write_record(record.map(|cell| cell.into_owned()));
    }
    writer.into_inner().unwrap_or_default()
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
fn exact_number(text: &str) -> Option<f64> {
    let digits = text.trim_start_matches(['-', '+']).replace('.', "");
    let significant = digits.trim_start_matches('0').len();
    let places = text.split_once('.').map_or(0, |(_, frac)| frac.len());
    (significant <= 15 && places <= MAX_PLACES)
        .then(|| text.parse().ok())
        .flatten()
}

/// The most decimal places an Excel number format shows.
const MAX_PLACES: usize = 30;

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

fn excel_date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

/// Timestamps are stored in UTC (RFC 3339); Excel has no time zones, so the sheet shows UTC.
fn excel_timestamp(text: &str) -> Option<NaiveDateTime> {
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
        let cells = |values: &[Option<&str>]| values.iter().map(|v| v.map(str::to_owned)).collect();
        let rows = [
            cells(&[
                Some("=HYPERLINK(\"x\")"),
                Some("-5"),
                Some("12345678901234567890.25"),
                Some("true"),
                Some("2024-01-15"),
                Some("2024-01-15T10:30:00Z"),
            ]),
            cells(&[Some("plain, with comma"), None]),
        ];
        let csv = String::from_utf8(rows_csv(&columns(), &rows)).unwrap();
        assert_eq!(
            csv,
            "\"'=HYPERLINK(\"\"x\"\")\",-5,12345678901234567890.25,true,2024-01-15,2024-01-15T10:30:00Z\n\
             \"plain, with comma\",,,,,\n"
        );
        assert_eq!(header_csv(&columns()), b"name,n,amount,ok,day,at\n");
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
