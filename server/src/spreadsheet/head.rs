//! The first rows of a sheet, as the preview shows them: where the header is (past title and
//! blank rows), the names it gives, the rows below it and a type that fits each column's
//! values. Read from the start of the file only ([`super::csv::head`], and the converter's
//! `--head` for a workbook), so a preview costs the same for a 1 GB file as for a small one.

use std::collections::HashMap;

use super::{
    FileError, MAX_COLUMNS,
    schema::{self, Column, ColumnType},
};

/// The rows read from the start of a sheet: enough for title rows, the header and a sample.
pub const HEAD_ROWS: usize = 80;

/// The rows below the header a preview shows.
pub const SAMPLE_ROWS: usize = 20;

/// The most characters of a cell a preview shows.
const CELL_CHARS: usize = 200;

/// The rows the header is looked for among.
const HEADER_SEARCH_ROWS: usize = 30;

/// A sheet's first rows, each with its sheet row number (1-based).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    /// In order: a CSV's blank records are rows of no cells; a workbook's blank rows are left
    /// out (their numbers skipped).
    pub rows: Vec<(i64, Vec<String>)>,
    /// A workbook's rows, laid out from its first column: an import reads the header's span
    /// (from its first value to its last), so the preview does too.
    pub spanned: bool,
}

/// What the head shows, read with a header row.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub header_row: i64,
    /// The header's names, or why they cannot name columns.
    pub columns: Result<Vec<String>, FileError>,
    pub above: Vec<(i64, Vec<String>)>,
    pub rows: Vec<(i64, Vec<String>)>,
    pub types: Vec<ColumnType>,
}

impl Head {
    /// The header's sheet row, found by looking past title and blank rows: the first row about
    /// as wide (in cells with a value: two thirds or more) as most rows near the top are. Title
    /// rows ("Sales 2024", "Exported on …") hold fewer values than the table under them; a
    /// header may have a blank name or two.
    pub fn detect_header(&self) -> i64 {
        let widths: Vec<(i64, usize)> = self
            .rows
            .iter()
            .map(|(row, cells)| (*row, cells.iter().filter(|c| !c.trim().is_empty()).count()))
            .filter(|(_, width)| *width > 0)
            .take(HEADER_SEARCH_ROWS)
            .collect();
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for (_, width) in &widths {
            *counts.entry(*width).or_default() += 1;
        }
        // The most common width; the wider on a tie.
        let usual = counts
            .into_iter()
            .max_by_key(|&(width, count)| (count, width))
            .map_or(1, |(width, _)| width);
        let wide_enough = usual - usual / 3;
        widths
            .iter()
            .find(|(_, width)| *width >= wide_enough)
            .map_or(1, |(row, _)| *row)
    }

    /// The head read with its header at the first row with a value at or below `header_row`
    /// (as an import reads it), or at the row found when `None`.
    pub fn sample(&self, header_row: Option<i64>) -> Sample {
        let wanted = header_row.unwrap_or_else(|| self.detect_header());
        let header = self
            .rows
            .iter()
            .find(|(row, cells)| *row >= wanted && cells.iter().any(|c| !c.is_empty()));
        let header_row = header.map_or(wanted, |(row, _)| *row);
        let span = match header {
            Some((_, cells)) if self.spanned => {
                let first = cells.iter().position(|c| !c.is_empty()).unwrap_or(0);
                let last = cells.iter().rposition(|c| !c.is_empty()).unwrap_or(0);
                first..last + 1
            }
            Some((_, cells)) => 0..cells.len(),
            None => 0..0,
        };
        let cut = |cells: &[String]| -> Vec<String> {
            let cells = if self.spanned {
                cells
                    .get(span.start..span.end.min(cells.len()))
                    .unwrap_or_default()
            } else {
                cells
            };
            cells.iter().map(|cell| shown(cell)).collect()
        };
        let columns = match header {
            Some((_, cells)) => column_names(cells[span.clone()].to_vec()),
            None => Err(FileError::BadHeader(format!(
                "no row at or below row {header_row} has a value"
            ))),
        };
        let above: Vec<_> = self
            .rows
            .iter()
            .filter(|(row, _)| *row < header_row)
            .map(|(row, cells)| (*row, cells.iter().map(|c| shown(c)).collect()))
            .collect();
        let above = above[above.len().saturating_sub(SAMPLE_ROWS)..].to_vec();
        let rows: Vec<(i64, Vec<String>)> = self
            .rows
            .iter()
            .filter(|(row, cells)| *row > header_row && cells.iter().any(|c| !c.is_empty()))
            .take(SAMPLE_ROWS)
            .map(|(row, cells)| (*row, cut(cells)))
            .collect();
        let width = columns.as_ref().map_or(0, Vec::len);
        let types = (0..width)
            .map(|i| fitting_type(rows.iter().filter_map(|(_, cells)| cells.get(i))))
            .collect();
        Sample {
            header_row,
            columns,
            above,
            rows,
            types,
        }
    }
}

/// Column names from a header row's cells: trimmed, a UTF-8 byte order mark dropped, blanks
/// named `column_N`; at most [`MAX_COLUMNS`]; duplicates refused (a dataset's columns are known
/// by name).
pub fn column_names(cells: Vec<String>) -> Result<Vec<String>, FileError> {
    if cells.len() > MAX_COLUMNS {
        return Err(FileError::TooWide {
            columns: cells.len(),
        });
    }
    let mut seen = std::collections::HashSet::with_capacity(cells.len());
    let mut columns = Vec::with_capacity(cells.len());
    for (i, cell) in cells.into_iter().enumerate() {
        let name = cell.trim_start_matches('\u{feff}').trim();
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

/// The narrowest type every value fits (text when there are none): whole numbers, decimals,
/// yes/no, dates, timestamps, email addresses.
fn fitting_type<'a>(values: impl Iterator<Item = &'a String> + Clone) -> ColumnType {
    let values = values.filter(|value| !value.trim().is_empty());
    if values.clone().next().is_none() {
        return ColumnType::Text;
    }
    // Text fits everything: the others first, narrowest first.
    ColumnType::ALL[1..]
        .iter()
        .copied()
        .find(|kind| {
            let column = Column {
                name: String::new(),
                kind: *kind,
                required: false,
            };
            values
                .clone()
                .all(|value| schema::typed(&column, value).is_ok())
        })
        .unwrap_or(ColumnType::Text)
}

/// A cell as a preview shows it: its first [`CELL_CHARS`] characters.
fn shown(cell: &str) -> String {
    match cell.char_indices().nth(CELL_CHARS) {
        Some((cut, _)) => format!("{}…", &cell[..cut]),
        None => cell.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(rows: &[(i64, &[&str])], spanned: bool) -> Head {
        Head {
            rows: rows
                .iter()
                .map(|(row, cells)| (*row, cells.iter().map(|c| c.to_string()).collect()))
                .collect(),
            spanned,
        }
    }

    #[test]
    fn the_header_is_found_below_title_and_blank_rows() {
        let file = head(
            &[
                (1, &["Contacts export"]),
                (2, &["Generated 2024-05-01", "", ""]),
                (3, &[]),
                (4, &["Name", "E-mail", "Signed up"]),
                (5, &["Ann", "ann@example.com", "2024-01-02"]),
                (6, &["Bob", "", "2024-01-03"]),
                (7, &["Cy", "cy@example.com", "2024-01-04"]),
            ],
            false,
        );
        assert_eq!(file.detect_header(), 4);
        let sample = file.sample(None);
        assert_eq!(sample.columns.unwrap(), ["Name", "E-mail", "Signed up"]);
        assert_eq!(sample.above.len(), 3);
        assert_eq!(sample.rows.len(), 3);
        assert_eq!(
            sample.types,
            [ColumnType::Text, ColumnType::Email, ColumnType::Date]
        );
        // A header asked for is used as it is; asked for at a blank row, the next row with a
        // value is, as an import reads it.
        assert_eq!(file.sample(Some(1)).columns.unwrap(), ["Contacts export"]);
        let blank = file.sample(Some(3));
        assert_eq!(blank.header_row, 4);
        assert_eq!(blank.columns.unwrap(), ["Name", "E-mail", "Signed up"]);
        assert!(file.sample(Some(9)).columns.is_err());
    }

    #[test]
    fn a_plain_file_has_its_header_first_and_workbooks_read_the_headers_span() {
        let plain = head(
            &[(1, &["id", "n"]), (2, &["1", "2.5"]), (3, &["2", "3"])],
            false,
        );
        assert_eq!(plain.detect_header(), 1);
        assert_eq!(
            plain.sample(None).types,
            [ColumnType::Integer, ColumnType::Decimal]
        );
        let sheet = head(
            &[
                (2, &["", "id", "", "name"]),
                (3, &["", "1", "x", "Ann"]),
                (4, &["", "2", "y", "Bob"]),
                (5, &["", "3", "z", "Cy", "extra"]),
            ],
            true,
        );
        let sample = sheet.sample(None);
        assert_eq!(sample.header_row, 2);
        assert_eq!(sample.columns.unwrap(), ["id", "column_2", "name"]);
        assert_eq!(sample.rows[0].1, ["1", "x", "Ann"]);
    }

    #[test]
    fn duplicate_names_are_refused() {
        assert!(column_names(vec!["a".into(), " a ".into()]).is_err());
    }
}
