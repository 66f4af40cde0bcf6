//! Writing the error report as CSV: the original row plus an `_error` column, so a person can
//! fix the rows in their spreadsheet and import just those again.
//!
//! Cells that a spreadsheet would run as a formula (starting with `=`, `+`, `-`, `@`, tab or
//! carriage return) get a leading `'` (OWASP's CSV injection advice): a report of someone
//! else's bad file must not run code in yours.

use std::borrow::Cow;

/// The header line: the file's columns, then `_error`.
pub fn header(columns: &[String]) -> Vec<u8> {
    line(columns.iter().map(String::as_str).chain(["_error"]))
}

/// One report line: the row's original fields (padded or cut to the header's width, so every
/// line has the same columns), then the message.
pub fn row(width: usize, fields: &[String], message: &str) -> Vec<u8> {
    let cells = (0..width).map(|i| fields.get(i).map_or("", String::as_str));
    line(cells.chain([message]))
}

fn line<'a>(cells: impl Iterator<Item = &'a str>) -> Vec<u8> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let record: Vec<Cow<'a, str>> = cells.map(neutralize).collect();
    // Writing to a Vec cannot fail.
    let _ = writer.write_record(record.iter().map(|c| c.as_bytes()));
    writer.into_inner().unwrap_or_default()
}

/// The cell, made inert for spreadsheets when it would start a formula.
pub fn neutralize(cell: &str) -> Cow<'_, str> {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_the_header_width_and_quote_as_needed() {
        let columns = vec!["id".to_owned(), "note".to_owned()];
        assert_eq!(header(&columns), b"id,note,_error\n");
        assert_eq!(
            row(2, &["7".into()], "expected 2 fields, found 1"),
            b"7,,\"expected 2 fields, found 1\"\n"
        );
        assert_eq!(
            row(2, &["1".into(), "a\"b".into(), "extra".into()], "too many"),
            b"1,\"a\"\"b\",too many\n"
        );
    }

    #[test]
    fn formulas_are_neutralised() {
        for cell in ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(neutralize(cell), format!("'{cell}"));
        }
        assert_eq!(neutralize("plain"), "plain");
        assert_eq!(neutralize("a=b"), "a=b");
    }
}
