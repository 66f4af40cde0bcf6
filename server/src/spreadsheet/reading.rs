//! How a file is read when the person says so (`POST /api/jobs` and the preview take these):
//! the sheet row that holds the header (title rows above it are skipped), the CSV delimiter
//! and the text encoding. Each left out is told from the file, as before.

use super::{encoding::Encoding, sniff::DELIMITERS};

/// The sheet rows a header may be asked for at: a header further down is a mistake.
pub const MAX_HEADER_ROW: i64 = 1000;

/// The person's word on how to read a file; `None`: told from the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    /// The sheet row (1-based) of the header; rows above it are not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_row: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
}

impl Reading {
    /// From the words of a request: a header row of 1 to [`MAX_HEADER_ROW`], a delimiter of one
    /// of [`DELIMITERS`] (a tab also as `\t` or `tab`), an encoding `utf-8` or `windows-1252`
    /// (`latin1` and `iso-8859-1` read as Windows-1252, as browsers do).
    pub fn parse(
        header_row: Option<i64>,
        delimiter: Option<&str>,
        encoding: Option<&str>,
    ) -> Result<Reading, String> {
        if let Some(row) = header_row
            && !(1..=MAX_HEADER_ROW).contains(&row)
        {
            return Err(format!(
                "headerRow is a sheet row from 1 to {MAX_HEADER_ROW}."
            ));
        }
        let delimiter = delimiter
            .map(|word| match word {
                "\t" | "\\t" | "tab" => Ok(b'\t'),
                word if word.len() == 1 && DELIMITERS.contains(&word.as_bytes()[0]) => {
                    Ok(word.as_bytes()[0])
                }
                _ => Err(format!(
                    "Unknown delimiter \"{word}\": use \",\", \";\", \"|\" or \"\\t\"."
                )),
            })
            .transpose()?;
        let encoding = encoding
            .map(|word| {
                Encoding::parse(word).ok_or_else(|| {
                    format!("Unknown encoding \"{word}\": use \"utf-8\" or \"windows-1252\".")
                })
            })
            .transpose()?;
        Ok(Reading {
            header_row,
            delimiter,
            encoding,
        })
    }

    pub fn is_default(&self) -> bool {
        *self == Reading::default()
    }
}

/// A delimiter as a request writes it.
pub fn delimiter_word(delimiter: u8) -> String {
    char::from(delimiter).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_of_a_request_are_read_or_refused() {
        let reading = Reading::parse(Some(3), Some(";"), Some("latin1")).unwrap();
        assert_eq!(
            reading,
            Reading {
                header_row: Some(3),
                delimiter: Some(b';'),
                encoding: Some(Encoding::Windows1252)
            }
        );
        assert_eq!(
            Reading::parse(None, Some("tab"), None).unwrap().delimiter,
            Some(b'\t')
        );
        assert!(Reading::parse(Some(0), None, None).is_err());
        assert!(Reading::parse(None, Some("::"), None).is_err());
        assert!(Reading::parse(None, None, Some("ebcdic")).is_err());
        assert!(Reading::parse(None, None, None).unwrap().is_default());
    }
}
