//! Writing the error report as CSV: the sheet row (`_row`) and what is wrong with it
//! (`_error`), then the original row exactly as it was (a row with a field too many keeps it),
//! so a person can fix the rows in their spreadsheet and import just those again: an import
//! ignores the `_row` and `_error` columns ([`is_added`]).
//!
//! Cells that a spreadsheet would run as a formula (starting with `=`, `+`, `-`, `@`, tab or
//! carriage return) get a leading `'` (OWASP's CSV injection advice): a report of someone
//! else's bad file must not run code in yours. A fixed report imported again has the `'`
//! taken off ([`restored`]).

use std::borrow::Cow;

/// The columns a report puts before the row's own.
pub const ADDED: [&str; 2] = ["_row", "_error"];

/// The most fields of a row a report line holds (a sheet holds 16,384 columns).
const MAX_FIELDS: usize = 16_000;

/// Whether a header cell is one of the columns a report adds.
pub fn is_added(name: &str) -> bool {
    ADDED.contains(&name)
}

/// The header line: `_row`, `_error`, then the file's columns.
pub fn header(columns: &[String]) -> Vec<u8> {
    line(ADDED.into_iter().chain(columns.iter().map(String::as_str)))
}

/// One report line: the row's sheet row and message, then its original fields.
pub fn row(row_no: i64, fields: &[String], message: &str) -> Vec<u8> {
    let row_no = row_no.to_string();
    let fields = fields.iter().take(MAX_FIELDS).map(String::as_str);
    line([row_no.as_str(), message].into_iter().chain(fields))
}

fn line<'a>(cells: impl Iterator<Item = &'a str>) -> Vec<u8> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let record: Vec<Cow<'a, str>> = cells.map(neutralize).collect();
    // Writing to a Vec cannot fail.
    let _ = writer.write_record(record.iter().map(|c| c.as_bytes()));
    writer.into_inner().unwrap_or_default()
}

/// Whether a spreadsheet would take the cell for a formula.
pub fn starts_formula(cell: &[u8]) -> bool {
    matches!(
        cell.first(),
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r')
    )
}

/// The cell, made inert for spreadsheets when it would start a formula.
pub fn neutralize(cell: &str) -> Cow<'_, str> {
    if starts_formula(cell.as_bytes()) {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}

/// A cell of a fixed report as it was before [`neutralize`] (`from_report`), else as it is.
pub fn restored(cell: &str, from_report: bool) -> &str {
    match cell.strip_prefix('\'') {
        Some(rest) if from_report && starts_formula(rest.as_bytes()) => rest,
        _ => cell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_the_row_as_it_was_and_quote_as_needed() {
        let columns = vec!["id".to_owned(), "note".to_owned()];
        assert_eq!(header(&columns), b"_row,_error,id,note\n");
        assert_eq!(
            row(2, &["7".into()], "expected 2 fields, found 1"),
            b"2,\"expected 2 fields, found 1\",7\n"
        );
        assert_eq!(
            row(9, &["1".into(), "a\"b".into(), "50".into()], "too many"),
            b"9,too many,1,\"a\"\"b\",50\n"
        );
    }

    #[test]
    fn formulas_are_neutralised() {
        for cell in ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(neutralize(cell), format!("'{cell}"));
        }
        assert_eq!(neutralize("plain"), "plain");
        assert_eq!(neutralize("a=b"), "a=b");
        assert_eq!(restored("'-2", true), "-2");
        assert_eq!(restored("'-2", false), "'-2");
        assert_eq!(restored("'quoted'", true), "'quoted'");
    }
}
