//! The text encodings CSV files come in: UTF-8 (with or without a byte order mark), and
//! Windows-1252, what Excel on Western European Windows saves as plain "CSV" (Latin-1's
//! printable characters and a few more: `€`, curly quotes). Told apart by the text that is not
//! ASCII ([`Encoding::of`]): the file's first bytes ([`super::sniff`]) settle it when they hold
//! UTF-8; otherwise planning, which reads the whole file, looks at every record that is not
//! ASCII until one shows UTF-8. Decoding is `encoding_rs`'s. Either way the delimiters, quotes and
//! line breaks are the ASCII bytes the CSV parser looks for, so chunks are cut from the raw
//! bytes as before and only field values are decoded.

use std::borrow::Cow;

use super::FileError;

/// How a file's text is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    #[default]
    Utf8,
    Windows1252,
}

/// Bytes Windows-1252 leaves undefined: text holding them is in another encoding (Mac Roman,
/// Windows-1251, …), which reading as Windows-1252 would garble.
const UNDEFINED_IN_1252: [u8; 5] = [0x81, 0x8D, 0x8F, 0x90, 0x9D];

impl Encoding {
    /// The encoding of text that is not all ASCII: UTF-8 when it holds valid multi-byte UTF-8
    /// anywhere (a damaged UTF-8 file, whose bad rows then say so, must not read as
    /// Windows-1252), else Windows-1252, unless it holds a byte Windows-1252 does not define.
    pub fn of(text: &[u8]) -> Result<Encoding, FileError> {
        let utf8 = text.utf8_chunks().any(|chunk| !chunk.valid().is_ascii());
        if utf8 {
            Ok(Self::Utf8)
        } else if text.iter().any(|b| UNDEFINED_IN_1252.contains(b)) {
            Err(FileError::NotCsv(
                "The file's text is neither UTF-8 nor Windows-1252. Save it as CSV UTF-8.".into(),
            ))
        } else {
            Ok(Self::Windows1252)
        }
    }

    /// A field's text; `None` when it is not text in this encoding (only UTF-8 can refuse:
    /// every byte is a character of Windows-1252).
    pub fn decode(self, bytes: &[u8]) -> Option<Cow<'_, str>> {
        match self {
            Self::Utf8 => std::str::from_utf8(bytes).ok().map(Cow::Borrowed),
            Self::Windows1252 => Some(
                encoding_rs::WINDOWS_1252
                    .decode_without_bom_handling(bytes)
                    .0,
            ),
        }
    }

    /// A field's text, with what cannot be decoded shown as U+FFFD (for error reports).
    pub fn decode_lossy(self, bytes: &[u8]) -> Cow<'_, str> {
        match self {
            Self::Utf8 => String::from_utf8_lossy(bytes),
            Self::Windows1252 => self.decode(bytes).unwrap_or_default(),
        }
    }

    /// From a request's word for it (as the WHATWG encoding standard labels them, so
    /// `latin1` and `iso-8859-1` are Windows-1252, as in every browser).
    pub fn parse(word: &str) -> Option<Encoding> {
        match encoding_rs::Encoding::for_label(word.trim().as_bytes()) {
            Some(found) if found == encoding_rs::UTF_8 => Some(Self::Utf8),
            Some(found) if found == encoding_rs::WINDOWS_1252 => Some(Self::Windows1252),
            _ => None,
        }
    }

    /// Its name in the API (`utf-8`, `windows-1252`).
    pub fn word(self) -> &'static str {
        match self {
            Self::Utf8 => "utf-8",
            Self::Windows1252 => "windows-1252",
        }
    }

    /// What people call it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Utf8 => "UTF-8",
            Self::Windows1252 => "Windows-1252",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_1252_decodes_latin_letters_and_the_euro() {
        let bytes = b"Jos\xe9 M\xfcller \x80 12,50";
        assert_eq!(
            Encoding::Windows1252.decode(bytes).unwrap(),
            "José Müller € 12,50"
        );
        assert_eq!(Encoding::Utf8.decode(bytes), None);
        assert_eq!(Encoding::Utf8.decode_lossy(b"Jos\xe9"), "Jos\u{fffd}");
        // ASCII costs no copy.
        assert!(matches!(
            Encoding::Windows1252.decode(b"plain"),
            Some(Cow::Borrowed(_))
        ));
    }
}
