//! Tells CSV text from other files by their first bytes, not by their name, so a person who
//! uploads an image gets told so instead of a page of garbage rows; and finds the delimiter, so
//! TSV and the semicolon CSVs of European spreadsheets import as they are. (Workbooks never get
//! here: planning recognises them first, see `workbook::Kind`.)

use super::{FileError, csv, encoding::Encoding};

/// Delimiters we recognise, most common first (the first wins a tie).
pub const DELIMITERS: [u8; 4] = [b',', b'\t', b';', b'|'];

/// Lines of the sample the delimiter must split consistently.
const SAMPLE_RECORDS: usize = 20;

/// The delimiter that splits the sample's records into the same number of fields, the most
/// fields winning; failing that, the one that does so past the fewest title rows at the top;
/// a comma when none does. Quotes are honoured: it asks the CSV parser. (A one-column file
/// whose values all hold one `|` reads as a table under a title: the preview shows it, and
/// the delimiter can be named.) The preview and the import ask this same question.
pub fn delimiter(head: &[u8]) -> u8 {
    // The sample may end mid-record: judge only the complete lines before its last line break.
    let complete = match head.iter().rposition(|&b| b == b'\n') {
        Some(end) => &head[..=end],
        None => head,
    };
    DELIMITERS
        .into_iter()
        .filter_map(|delimiter| {
            consistent_fields(complete, delimiter)
                .map(|(titles, fields)| ((titles, std::cmp::Reverse(fields)), delimiter))
        })
        // The first of equals wins: `min_by_key` keeps the first minimum.
        .min_by_key(|(rank, _)| *rank)
        .map_or(b',', |(_, delimiter)| delimiter)
}

/// Records at the top of a file that may disagree with the rest: title rows above the header.
const TITLE_RECORDS: usize = 5;

/// How many title rows the sample has at the top with this delimiter, and how many fields every
/// record after them has (two or more of them must agree, unless there are no title rows);
/// `None` when they disagree or when the delimiter does not split them at all.
fn consistent_fields(sample: &[u8], delimiter: u8) -> Option<(usize, usize)> {
    let counts = csv::field_counts(sample, delimiter, SAMPLE_RECORDS);
    let &fields = counts.last()?;
    let agreeing = counts.iter().rev().take_while(|&&n| n == fields).count();
    let titles = counts.len() - agreeing;
    let agreed = titles == 0 || (titles <= TITLE_RECORDS && agreeing >= 2);
    (agreed && fields > 1).then_some((titles, fields))
}

/// Checks the start of a file, and tells how its text is encoded as far as it shows: `None`
/// while all it holds is ASCII (which reads the same in both; a character cut off at the
/// sample's end does not decide either). Planning settles the rest (`csv::scan_each`).
pub fn sniff(head: &[u8]) -> Result<Option<Encoding>, FileError> {
    check_text(head)?;
    match std::str::from_utf8(head) {
        Err(err) if err.error_len().is_none() && head[..err.valid_up_to()].is_ascii() => Ok(None),
        Ok(text) if text.is_ascii() => Ok(None),
        _ => Encoding::of(head).map(Some),
    }
}

/// Refuses what is not text at all (NUL bytes: an image, a PDF, an archive).
pub fn check_text(head: &[u8]) -> Result<(), FileError> {
    if head.contains(&0) {
        return Err(FileError::NotCsv(
            "This is neither a spreadsheet nor text: only CSV, TSV, XLSX, XLS and ODS files \
             can be imported."
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_passes_and_tells_its_encoding_once_it_can() {
        assert_eq!(sniff(b"a,b\n1,2\n"), Ok(None));
        assert_eq!(sniff("name\nZoë\n".as_bytes()), Ok(Some(Encoding::Utf8)));
        // "é" cut in half by the sample's end, after other UTF-8
        assert_eq!(sniff(&"Zoë café".as_bytes()[..9]), Ok(Some(Encoding::Utf8)));
        // A lead byte at the very end after ASCII decides nothing: it may be Windows-1252.
        assert_eq!(sniff(b"id;nom\r\n1;Jos\xe9"), Ok(None));
        // Latin-1 / Windows-1252, as European Excel saves CSV.
        assert_eq!(
            sniff(b"nom;ville\nJos\xe9;K\xf6ln\n"),
            Ok(Some(Encoding::Windows1252))
        );
        // UTF-8 with a damaged byte later stays UTF-8.
        let damaged: Vec<u8> = "Zoë\n".bytes().chain(*b"\xff\n").collect();
        assert_eq!(sniff(&damaged), Ok(Some(Encoding::Utf8)));
    }

    #[test]
    fn delimiters_are_found_by_consistency() {
        assert_eq!(delimiter(b"a,b,c\n1,2,3\n"), b',');
        assert_eq!(delimiter(b"a\tb\tc\n1\t2,5\t3\n"), b'\t');
        assert_eq!(delimiter(b"name;amount\nAna;1,5\nRui;2,75\n"), b';');
        assert_eq!(delimiter(b"a|b\n1|2\n"), b'|');
        // Title rows above the header do not hide it.
        assert_eq!(
            delimiter(b"Contacts\n\nname;mail;n\nAna;a@x.pt;1,5\nRui;r@x.pt;2\n"),
            b';'
        );
        // A one-column file whose values split unevenly stays one column.
        assert_eq!(delimiter(b"address\nRua A; 3\nRua B\nRua C; 4\n"), b',');
        // Commas inside quotes do not count.
        assert_eq!(delimiter(b"a;b\n\"x, y\";2\n\"p, q, r\";3\n"), b';');
        // A single column, or nothing consistent: comma.
        assert_eq!(delimiter(b"name\nAna\n"), b',');
        // The last, cut-off line of the sample is ignored.
        assert_eq!(delimiter(b"a\tb\n1\t2\n3"), b'\t');
    }

    #[test]
    fn binaries_are_refused() {
        assert!(
            matches!(sniff(b"\x89PNG\r\n\x1a\n\0\0"), Err(FileError::NotCsv(m)) if m.contains("neither"))
        );
        // UTF-16 holds a NUL in every ASCII character.
        assert!(matches!(
            sniff(b"\xff\xfea\0,\0b\0"),
            Err(FileError::NotCsv(_))
        ));
        // Mac Roman's "ç" is a byte Windows-1252 leaves undefined.
        assert!(
            matches!(sniff(b"nom\nfa\x8dade\n"), Err(FileError::NotCsv(m)) if m.contains("UTF-8"))
        );
    }
}
