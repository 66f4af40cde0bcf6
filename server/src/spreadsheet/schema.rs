//! Dataset schemas: the column types a dataset declares, how a file's header must match them,
//! how each cell's text becomes a typed value in canonical text (or a message for the person),
//! and how a stored value becomes JSON again.

pub use app::model::{Column, ColumnType};
use std::borrow::Cow;

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};
use serde_json::Value;

use super::MAX_COLUMNS;

/// Digits a decimal may have (PostgreSQL's numeric allows more, but not without limit).
const MAX_DECIMAL_DIGITS: usize = 1000;

/// Checks a dataset name: 1–64 letters, digits, `-` or `_`, so it reads well in URLs.
pub fn check_dataset_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err("A dataset name is 1 to 64 letters, digits, '-' or '_'.".into())
    }
}

/// The longest sheet name accepted (ODS allows longer names than Excel's 31).
const MAX_SHEET_CHARS: usize = 255;

/// Checks a sheet name asked for: a workbook's sheet names are short, and none looks like a
/// command-line flag (the converter takes it as an argument).
pub fn check_sheet_name(sheet: &str) -> Result<(), String> {
    if sheet.chars().count() > MAX_SHEET_CHARS
        || sheet.starts_with("--")
        || sheet.chars().any(char::is_control)
    {
        return Err(format!(
            "\"sheet\" must be a sheet's name: at most {MAX_SHEET_CHARS} characters, no control \
             characters, not starting with \"--\"."
        ));
    }
    Ok(())
}

/// A dataset's columns and key as someone declared them, checked ([`check_schema`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub columns: Vec<Column>,
    pub key: Option<String>,
}

impl Declared {
    pub fn check(columns: Vec<Column>, key: Option<&str>) -> Result<Self, String> {
        let key = key.map(str::trim);
        Ok(Declared {
            columns: check_schema(columns, key)?,
            key: key.map(str::to_owned),
        })
    }
}

/// Checks a declared schema: at least one column, names non-empty and distinct, at most
/// [`MAX_COLUMNS`], a key that is one of the columns. The key column becomes required, since
/// a row without a key value cannot be matched.
pub fn check_schema(mut columns: Vec<Column>, key: Option<&str>) -> Result<Vec<Column>, String> {
    if columns.is_empty() {
        return Err("A dataset needs at least one column.".into());
    }
    if columns.len() > MAX_COLUMNS {
        return Err(format!("A dataset has at most {MAX_COLUMNS} columns."));
    }
    let mut seen = std::collections::HashSet::new();
    for column in &mut columns {
        column.name = column.name.trim().to_owned();
        if column.name.is_empty() || column.name.len() > 256 {
            return Err("Column names are 1 to 256 characters.".into());
        }
        if !seen.insert(column.name.clone()) {
            return Err(format!(
                "The column name \"{}\" appears twice.",
                column.name
            ));
        }
    }
    if let Some(key) = key {
        let column = columns
            .iter_mut()
            .find(|c| c.name == key)
            .ok_or_else(|| format!("The key \"{key}\" is not one of the columns."))?;
        column.required = true;
    }
    Ok(columns)
}

/// Lines up a file's header with a dataset's columns: the column of each header cell, in file
/// order. Fails, naming the columns at fault and listing both the file's and the dataset's,
/// when a required column is missing or the file has columns the dataset does not know.
pub fn align(header: &[String], columns: &[Column]) -> Result<Vec<Column>, String> {
    let unknown: Vec<&str> = header
        .iter()
        .filter(|name| !columns.iter().any(|c| &c.name == *name))
        .map(String::as_str)
        .collect();
    let missing: Vec<&str> = columns
        .iter()
        .filter(|c| c.required && !header.contains(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "missing required columns: {}",
            listed(missing.into_iter())
        ));
    }
    if !unknown.is_empty() {
        problems.push(format!(
            "columns the dataset does not have: {}",
            listed(unknown.into_iter())
        ));
    }
    if !problems.is_empty() {
        let dataset: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        return Err(format!(
            "The header does not match the dataset ({}). The file's columns: {}. The dataset's: {}.",
            problems.join("; "),
            listed(header.iter().map(String::as_str)),
            listed(dataset.into_iter()),
        ));
    }
    Ok(header
        .iter()
        .filter_map(|name| columns.iter().find(|c| &c.name == name).cloned())
        .collect())
}

/// Names for a message: the first [`LISTED`], each cut to 40 characters, then how many more.
pub fn listed<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let more = names.len().saturating_sub(LISTED);
    let mut text = names
        .take(LISTED)
        .map(|name| match name.char_indices().nth(40) {
            Some((cut, _)) => format!("{}…", &name[..cut]),
            None => name.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

/// How many column names a message lists.
const LISTED: usize = 30;

/// A cell's value in its canonical text form (`None` for an empty optional cell): integers and
/// decimals without signs or zeros that add nothing, booleans as `true`/`false`, dates as
/// `2024-12-31`, timestamps in RFC 3339 UTC. Rows are stored as these texts; [`to_json`] gives
/// them their JSON type back.
pub fn typed<'a>(column: &Column, cell: &'a str) -> Result<Option<Cow<'a, str>>, String> {
    let cell = if column.kind == ColumnType::Text {
        cell
    } else {
        cell.trim()
    };
    if cell.is_empty() {
        if column.required {
            return Err(format!("{}: a value is required", column.name));
        }
        return Ok(None);
    }
    let bad = |what: &str| format!("{}: \"{}\" is not {what}", column.name, shorten(cell));
    let value = match column.kind {
        ColumnType::Text => Cow::Borrowed(cell),
        ColumnType::Integer => {
            let n: i64 = cell.parse().map_err(|_| bad("a whole number"))?;
            Cow::Owned(n.to_string())
        }
        ColumnType::Decimal => {
            let number = cell.strip_prefix('+').unwrap_or(cell);
            let digits = number.strip_prefix('-').unwrap_or(number);
            let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
            let ok = !(int.is_empty() && frac.is_empty())
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit());
            if !ok {
                return Err(bad("a decimal number like 1234.56"));
            }
            if digits.len() > MAX_DECIMAL_DIGITS {
                return Err(format!(
                    "{}: a number with more than {MAX_DECIMAL_DIGITS} digits",
                    column.name
                ));
            }
            // No leading zeros, no bare dot, no sign on zero; every digit written (`10.50`
            // keeps its scale) and kept exactly.
            let int = int.trim_start_matches('0');
            let zero = int.is_empty() && frac.bytes().all(|b| b == b'0');
            let mut out = String::with_capacity(digits.len() + 2);
            out.push_str(if number.starts_with('-') && !zero {
                "-"
            } else {
                ""
            });
            out.push_str(if int.is_empty() { "0" } else { int });
            if !frac.is_empty() {
                out.push('.');
                out.push_str(frac);
            }
            Cow::Owned(out)
        }
        ColumnType::Boolean => Cow::Borrowed(match cell.to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "1" => "true",
            "false" | "no" | "n" | "0" => "false",
            _ => return Err(bad("true or false")),
        }),
        ColumnType::Date => {
            let date = NaiveDate::parse_from_str(cell, "%Y-%m-%d")
                .or_else(|_| NaiveDate::parse_from_str(cell, "%Y/%m/%d"))
                .map_err(|_| bad("a date like 2024-12-31"))?;
            Cow::Owned(date.format("%Y-%m-%d").to_string())
        }
        ColumnType::Timestamp => {
            let at = DateTime::parse_from_rfc3339(cell)
                .map(|t| t.with_timezone(&Utc))
                .or_else(|_| {
                    ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
                        .iter()
                        .find_map(|f| NaiveDateTime::parse_from_str(cell, f).ok())
                        .map(|t| t.and_utc())
                        .ok_or(())
                })
                .map_err(|_| bad("a timestamp like 2024-12-31 23:59:00"))?;
            Cow::Owned(at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
        }
        ColumnType::Email => {
            let valid = cell.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty()
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
                    && !domain.contains('@')
            }) && !cell.chars().any(char::is_whitespace);
            if !valid {
                return Err(bad("an email address"));
            }
            Cow::Borrowed(cell)
        }
    };
    Ok(Some(value))
}

/// A stored value (from [`typed`]) as JSON: integers and booleans as such, the rest as strings.
/// Decimals are strings (`"10.50"`): a JSON number is read as a binary float by most clients
/// (and by `serde_json` itself), which would drop the scale and round past 17 digits.
pub fn to_json(kind: ColumnType, value: Option<&str>) -> Value {
    let Some(text) = value else {
        return Value::Null;
    };
    match kind {
        ColumnType::Integer => text
            .parse::<i64>()
            .map_or_else(|_| Value::String(text.to_owned()), Value::from),
        ColumnType::Boolean => Value::Bool(text == "true"),
        _ => Value::String(text.to_owned()),
    }
}

fn shorten(cell: &str) -> String {
    match cell.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &cell[..at]),
        None => cell.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(kind: ColumnType, required: bool) -> Column {
        Column {
            name: "c".into(),
            kind,
            required,
        }
    }

    fn json(kind: ColumnType, cell: &str) -> Result<String, String> {
        let value = typed(&col(kind, false), cell)?;
        Ok(to_json(kind, value.as_deref()).to_string())
    }

    #[test]
    fn cells_become_typed_values() {
        use ColumnType::*;
        assert_eq!(json(Text, " a \"b\" ").unwrap(), "\" a \\\"b\\\" \"");
        assert_eq!(json(Text, "").unwrap(), "null");
        assert_eq!(json(Integer, " -42 ").unwrap(), "-42");
        // Decimals are stored and shown with every digit.
        let stored = |cell| typed(&col(Decimal, false), cell).unwrap().unwrap();
        assert_eq!(stored("0012.50"), "12.50");
        assert_eq!(stored("-.5"), "-0.5");
        assert_eq!(stored("+3"), "3");
        assert_eq!(stored("-0.00"), "0.00");
        assert_eq!(stored("-000"), "0");
        assert_eq!(json(Decimal, "-0.5").unwrap(), "\"-0.5\"");
        let long = "123456789012345678901234567890.000000000000000000000000000001";
        assert_eq!(json(Decimal, long).unwrap(), format!("\"{long}\""));
        assert_eq!(json(Boolean, "Yes").unwrap(), "true");
        assert_eq!(json(Boolean, "0").unwrap(), "false");
        assert_eq!(json(Date, "2024/02/29").unwrap(), "\"2024-02-29\"");
        assert_eq!(
            json(Timestamp, "2024-02-29 13:05").unwrap(),
            "\"2024-02-29T13:05:00Z\""
        );
        assert_eq!(
            json(Timestamp, "2024-02-29T13:05:00+02:00").unwrap(),
            "\"2024-02-29T11:05:00Z\""
        );
        assert_eq!(
            json(Email, "ana@example.com").unwrap(),
            "\"ana@example.com\""
        );
        assert!(
            json(Decimal, &"9".repeat(1001))
                .unwrap_err()
                .contains("more than 1000 digits")
        );
        for number in ["1,5", "1.2.3", ".", "1e5", "abc"] {
            assert!(json(Decimal, number).is_err(), "{number}");
        }
    }

    #[test]
    fn bad_cells_say_what_was_expected() {
        use ColumnType::*;
        assert_eq!(
            json(Integer, "12.5").unwrap_err(),
            "c: \"12.5\" is not a whole number"
        );
        assert_eq!(
            json(Date, "2023-02-29").unwrap_err(),
            "c: \"2023-02-29\" is not a date like 2024-12-31"
        );
        assert!(json(Email, "ana@localhost").is_err());
        assert!(json(Email, "a b@example.com").is_err());
        assert!(json(Boolean, "maybe").is_err());
        assert_eq!(
            typed(&col(Text, true), "").unwrap_err(),
            "c: a value is required"
        );
    }

    #[test]
    fn dataset_names() {
        assert!(check_dataset_name("customers_2024-q1").is_ok());
        for bad in ["", "a b", "../etc", &"x".repeat(65)] {
            assert!(check_dataset_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schemas_are_checked_and_keys_become_required() {
        let columns = vec![Column::text(" id "), Column::text("name")];
        let checked = check_schema(columns.clone(), Some("id")).unwrap();
        assert_eq!(
            (checked[0].name.as_str(), checked[0].required),
            ("id", true)
        );
        assert!(
            check_schema(columns.clone(), Some("nope"))
                .unwrap_err()
                .contains("\"nope\"")
        );
        assert!(
            check_schema(vec![Column::text("a"), Column::text("a")], None)
                .unwrap_err()
                .contains("twice")
        );
        assert!(check_schema(Vec::new(), None).is_err());
    }

    #[test]
    fn headers_must_match_the_schema() {
        let columns = vec![
            Column {
                name: "id".into(),
                kind: ColumnType::Integer,
                required: true,
            },
            Column::text("note"),
            Column::text("extra"),
        ];
        let header = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let aligned = align(&header(&["note", "id"]), &columns).unwrap();
        assert_eq!(
            aligned.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["note", "id"]
        );
        assert_eq!(
            align(&header(&["note", "colour", "size"]), &columns).unwrap_err(),
            "The header does not match the dataset (missing required columns: id; columns the \
             dataset does not have: colour, size). The file's columns: note, colour, size. The \
             dataset's: id, note, extra."
        );
        let wide: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
        let err = align(&wide, &columns).unwrap_err();
        assert!(err.contains("have: c0, c1, "), "{err}");
        assert!(err.contains("c29 and 10 more). The file's"), "{err}");
        assert!(err.contains("c29 and 10 more. The dataset's"), "{err}");
    }
}
