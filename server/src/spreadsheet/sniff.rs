//! Tells a CSV from other files by their first bytes, not by their name, so a person who
//! uploads a workbook or an image gets told so instead of a page of garbage rows.

use super::FileError;

/// Checks the start of a file; `Ok` when it can be CSV text.
pub fn sniff(head: &[u8]) -> Result<(), FileError> {
    if head.starts_with(b"PK\x03\x04") {
        return Err(FileError::NotCsv(
            "This looks like an Excel or OpenDocument workbook. Only CSV files can be imported \
             for now: save the sheet as CSV and upload that."
                .into(),
        ));
    }
    if head.starts_with(&[0xD0, 0xCF, 0x11, 0xE0]) {
        return Err(FileError::NotCsv(
            "This looks like an old Excel (.xls) workbook. Only CSV files can be imported for \
             now: save the sheet as CSV and upload that."
                .into(),
        ));
    }
    if head.contains(&0) {
        return Err(FileError::NotCsv(
            "This is not a text file, so it cannot be CSV.".into(),
        ));
    }
    match std::str::from_utf8(head) {
        Ok(_) => Ok(()),
        // A character cut off at the end of the sample is fine.
        Err(err) if err.error_len().is_none() => Ok(()),
        Err(err) => Err(FileError::NotCsv(format!(
            "The file is not UTF-8 text (invalid byte at position {}). Save it as CSV UTF-8.",
            err.valid_up_to()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_passes() {
        assert_eq!(sniff(b"a,b\n1,2\n"), Ok(()));
        assert_eq!(sniff("name\nZoë\n".as_bytes()), Ok(()));
        // "é" cut in half by the sample's end
        assert_eq!(sniff(&"café".as_bytes()[..4]), Ok(()));
    }

    #[test]
    fn workbooks_and_binaries_are_refused() {
        assert!(
            matches!(sniff(b"PK\x03\x04rest"), Err(FileError::NotCsv(m)) if m.contains("workbook"))
        );
        assert!(
            matches!(sniff(&[0xD0, 0xCF, 0x11, 0xE0, 1]), Err(FileError::NotCsv(m)) if m.contains(".xls"))
        );
        assert!(
            matches!(sniff(b"\x89PNG\r\n\x1a\n\0\0"), Err(FileError::NotCsv(m)) if m.contains("not a text"))
        );
        assert!(
            matches!(sniff(b"a,b\n\xff\xfe,1\n"), Err(FileError::NotCsv(m)) if m.contains("UTF-8"))
        );
    }
}
