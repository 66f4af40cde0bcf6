//! How a dataset row is stored: its values, in dataset column order, as one `text`.
//!
//! One text costs PostgreSQL far less to take in than a `text[]` (no array parsing or
//! building): with it, COPY of a million rows into `dataset_rows` takes about 0.64× the time.
//! Values are joined by U+001F (unit separator). Inside a value, U+001E is written `\x1e1` and
//! U+001F `\x1e2`; a null value is `\x1e0` alone. So a raw U+001F only ever separates values,
//! and in SQL `string_to_array(record, E'\x1f', E'\x1e0')` gives the values (with those two
//! rare characters still escaped).

const SEPARATOR: char = '\u{1f}';
const ESCAPE: char = '\u{1e}';
const NULL: &str = "\u{1e}0";

/// Builds a record value by value.
#[derive(Debug, Default)]
pub struct RecordWriter {
    record: String,
    values: usize,
}

impl RecordWriter {
    pub fn with_capacity(bytes: usize) -> Self {
        RecordWriter {
            record: String::with_capacity(bytes),
            values: 0,
        }
    }

    pub fn push(&mut self, value: Option<&str>) {
        if self.values > 0 {
            self.record.push(SEPARATOR);
        }
        self.values += 1;
        match value {
            None => self.record.push_str(NULL),
            Some(text) if !text.contains([SEPARATOR, ESCAPE]) => self.record.push_str(text),
            Some(text) => {
                for c in text.chars() {
                    match c {
                        ESCAPE => self.record.push_str("\u{1e}1"),
                        SEPARATOR => self.record.push_str("\u{1e}2"),
                        c => self.record.push(c),
                    }
                }
            }
        }
    }

    pub fn finish(self) -> String {
        self.record
    }
}

/// The values of a stored record.
pub fn decode(record: &str) -> Vec<Option<String>> {
    record.split(SEPARATOR).map(decode_value).collect()
}

fn decode_value(value: &str) -> Option<String> {
    if value == NULL {
        return None;
    }
    if !value.contains(ESCAPE) {
        return Some(value.to_owned());
    }
    let mut text = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != ESCAPE {
            text.push(c);
        } else if chars.next() == Some('2') {
            text.push(SEPARATOR);
        } else {
            // `\x1e1`, or whatever a hand-edited row holds.
            text.push(ESCAPE);
        }
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(values: &[Option<&str>]) -> String {
        let mut writer = RecordWriter::default();
        for value in values {
            writer.push(*value);
        }
        writer.finish()
    }

    #[test]
    fn values_round_trip_whatever_they_hold() {
        let values = [
            Some("plain"),
            None,
            Some(""),
            Some("\u{1f}"),
            Some("\u{1e}"),
            Some("\u{1e}0"),
            Some("a\u{1e}2b\u{1f}c"),
            Some("tab\tnew\nline \\ \"quoted\""),
            None,
        ];
        let record = encode(&values);
        let expected: Vec<Option<String>> = values.iter().map(|v| v.map(str::to_owned)).collect();
        assert_eq!(decode(&record), expected);
    }

    #[test]
    fn plain_values_are_stored_as_they_are() {
        assert_eq!(
            encode(&[Some("1"), Some("Ana"), None]),
            "1\u{1f}Ana\u{1f}\u{1e}0"
        );
        assert_eq!(decode(""), vec![Some(String::new())]);
    }
}
