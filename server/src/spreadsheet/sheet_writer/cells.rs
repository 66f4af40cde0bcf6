//! Dataset rows as the XML of an XLSX sheet's rows, typed by their columns as
//! [`super::super::output::csv_to_xlsx`] types a CSV's cells: integers and decimals that a
//! spreadsheet holds exactly as numbers (decimals shown with the places they were written
//! with), booleans, dates and timestamps as dates, anything else as text (neutralised when it
//! would start a formula, escaped as Excel escapes it).
//!
//! Rows and cells carry no reference (`r`): a chunk renders its rows without knowing how many
//! rows come before it, so each row follows the last and each cell the one before it, and an
//! empty value is an empty cell (`<c/>`) that keeps its place. Readers take a missing
//! reference as the next place (ECMA-376 makes it optional).

use std::fmt::Write as _;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};

use crate::spreadsheet::{
    output::{MAX_XLSX_CELL_CHARS, exact_number, excel_date, excel_timestamp},
    record,
    report::starts_formula,
    schema::{Column, ColumnType},
};

/// The cell formats (`cellXfs`) the sheet's styles define, by index: see
/// [`super::package`]'s `styles.xml`.
pub mod style {
    pub const BOLD: u32 = 1;
    pub const DATE: u32 = 2;
    pub const TIMESTAMP: u32 = 3;
    /// A decimal with `places` places (1 to `output::MAX_PLACES`, as many as a number Excel
    /// holds exactly may have) is shown with `0.00…`: style `DECIMAL_BASE + places`.
    pub const DECIMAL_BASE: u32 = 3;
}

/// A cell held more text than Excel allows in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a cell holds more than {MAX_XLSX_CELL_CHARS} characters")]
pub struct TooLong;

/// The sheet's XML before its rows: the worksheet, its data, and the header row in bold.
pub fn sheet_start(columns: &[Column]) -> Vec<u8> {
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<worksheet \
         xmlns=\"http://schemas.openxmlformats.org/spreadsheetml/2006/main\" \
         xmlns:r=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships\">\
         <sheetData><row>",
    );
    for column in columns {
        push_text(
            &mut out,
            &crate::spreadsheet::report::neutralize(&column.name),
            style::BOLD,
        );
    }
    out.push_str("</row>");
    out.into_bytes()
}

/// The sheet's XML after its rows.
pub const SHEET_END: &[u8] = b"</sheetData></worksheet>";

/// Rows rendered as sheet XML, a batch at a time.
pub struct SheetRows<'c> {
    columns: &'c [Column],
    out: String,
    rows: i64,
}

impl<'c> SheetRows<'c> {
    pub fn with_capacity(columns: &'c [Column], bytes: usize) -> Self {
        SheetRows {
            columns,
            out: String::with_capacity(bytes),
            rows: 0,
        }
    }

    /// Renders one stored record (see [`record`]) as a row.
    pub fn push(&mut self, stored: &[u8]) -> Result<(), TooLong> {
        let out = &mut self.out;
        out.push_str("<row>");
        let mut values = record::values(stored);
        // Empty cells at the end of a row are left out; those before a value keep its place.
        let mut empty = 0;
        for column in self.columns {
            let value = values.next().flatten();
            let text = value
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            if text.is_empty() {
                empty += 1;
                continue;
            }
            for _ in 0..std::mem::take(&mut empty) {
                out.push_str("<c/>");
            }
            push_typed(out, column.kind, &text)?;
        }
        out.push_str("</row>");
        self.rows += 1;
        Ok(())
    }

    /// The bytes rendered since the last [`SheetRows::take`].
    pub fn bytes(&self) -> usize {
        self.out.len()
    }

    /// The rows rendered in all.
    pub fn rows(&self) -> i64 {
        self.rows
    }

    /// The XML rendered since the last time, leaving room for as much again.
    pub fn take(&mut self) -> Vec<u8> {
        let capacity = self.out.capacity();
        std::mem::replace(&mut self.out, String::with_capacity(capacity)).into_bytes()
    }
}

/// A value as its column's type, or as text when it does not read as one.
fn push_typed(out: &mut String, kind: ColumnType, text: &str) -> Result<(), TooLong> {
    match kind {
        ColumnType::Integer | ColumnType::Decimal => {
            if let Some(number) = exact_number(text) {
                let places = match kind {
                    ColumnType::Decimal => text.split_once('.').map_or(0, |(_, frac)| frac.len()),
                    _ => 0,
                };
                let style = match places {
                    0 => 0,
                    places => style::DECIMAL_BASE + places as u32,
                };
                push_number(out, number, style);
                return Ok(());
            }
        }
        ColumnType::Boolean if matches!(text, "true" | "false") => {
            let bit = if text == "true" { '1' } else { '0' };
            let _ = write!(out, "<c t=\"b\"><v>{bit}</v></c>");
            return Ok(());
        }
        ColumnType::Date => {
            if let Some(day) = excel_date(text) {
                push_number(out, serial_day(day), style::DATE);
                return Ok(());
            }
        }
        ColumnType::Timestamp => {
            if let Some(at) = excel_timestamp(text) {
                push_number(out, serial_time(at), style::TIMESTAMP);
                return Ok(());
            }
        }
        ColumnType::Boolean | ColumnType::Text | ColumnType::Email => {}
    }
    let neutralise =
        matches!(kind, ColumnType::Text | ColumnType::Email) && starts_formula(text.as_bytes());
    // The cell holds the `'` that neutralises it too.
    if text
        .chars()
        .nth(MAX_XLSX_CELL_CHARS - usize::from(neutralise))
        .is_some()
    {
        return Err(TooLong);
    }
    if neutralise {
        push_text(out, &format!("'{text}"), 0);
    } else {
        push_text(out, text, 0);
    }
    Ok(())
}

fn push_number(out: &mut String, number: f64, style: u32) {
    if style == 0 {
        let _ = write!(out, "<c><v>{number}</v></c>");
    } else {
        let _ = write!(out, "<c s=\"{style}\"><v>{number}</v></c>");
    }
}

/// An inline string cell, escaped as Excel escapes text: `&`, `<` and `>` as entities,
/// control characters (and U+FFFE, U+FFFF) as `_xHHHH_`, and so a literal `_xHHHH_` as
/// `_x005F_xHHHH_`; spaces at either end kept.
fn push_text(out: &mut String, text: &str, style: u32) {
    out.push_str("<c");
    if style != 0 {
        let _ = write!(out, " s=\"{style}\"");
    }
    out.push_str(" t=\"inlineStr\"><is><t");
    if text.starts_with(['\t', '\n', ' ']) || text.ends_with(['\t', '\n', ' ']) {
        out.push_str(" xml:space=\"preserve\"");
    }
    out.push('>');
    for (i, ch) in text.char_indices() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' | '\n' => out.push(ch),
            '\0'..='\x1f' | '\u{FFFE}' | '\u{FFFF}' => {
                let _ = write!(out, "_x{:04X}_", ch as u32);
            }
            '_' if is_escape(&text[i..]) => out.push_str("_x005F_"),
            _ => out.push(ch),
        }
    }
    out.push_str("</t></is></c>");
}

/// Whether `text` starts with what a reader would take for an escape: `_x`, four hex digits, `_`.
fn is_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 7
        && bytes[1] == b'x'
        && bytes[2..6].iter().all(u8::is_ascii_hexdigit)
        && bytes[6] == b'_'
}

/// Excel's serial number of a day: days since 1899-12-31, one more from March 1900 on (Excel
/// counts a 29 February 1900 that never was).
fn serial_day(day: NaiveDate) -> f64 {
    let epoch = NaiveDate::from_ymd_opt(1899, 12, 31).expect("a valid date");
    let days = (day - epoch).num_days() as f64;
    if days > 59.0 { days + 1.0 } else { days }
}

/// Excel's serial number of a moment: its day's, and the part of the day gone by (to the
/// millisecond).
fn serial_time(at: NaiveDateTime) -> f64 {
    let since_midnight = at.time() - NaiveTime::MIN;
    serial_day(at.date()) + since_midnight.num_milliseconds() as f64 / 86_400_000.0
}
