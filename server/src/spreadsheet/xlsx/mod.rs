//! XLSX sheets, read cell by cell. calamine reads XLS and ODS (and tells us an XLSX is
//! password-protected); XLSX, the format most workbooks arrive in, is read here because
//! converting a sheet was most of a workbook import's time, and nearly all of that was general
//! XML parsing: this reader streams the sheet through [`xml::XmlReader`] and handles only what
//! a sheet holds (a 200,000-row sheet: 0.38 s instead of 1.0 s with calamine; our tokenizer
//! against quick-xml in the same cell loop: see [`xml`] and `measure`). calamine stays its
//! oracle: the tests, and the property tests over generated workbooks (`properties`), check
//! that both read the same workbooks the same way.
//!
//! An XLSX file is a zip of XML parts: `xl/workbook.xml` lists the sheets, its relationships
//! file says which part each one is, `sharedStrings.xml` holds the text most cells point to,
//! and `styles.xml` says which numbers are dates. Every part is unpacked through a
//! [`Budget`], so a zip bomb fails instead of filling memory.

#[cfg(test)]
mod measure;
mod package;
#[cfg(test)]
pub(super) mod properties;
mod styles;
mod text;
mod xml;

use std::{
    io::{Cursor, Read},
    ops::ControlFlow,
};

use calamine::{ExcelDateTime, ExcelDateTimeType};
use zip::ZipArchive;

use self::{
    package::{Relationships, SheetEntry, part, read_workbook, sheet_part},
    styles::{NumberKind, Styles},
    text::{SharedStrings, push_text, read_string_item, unescape_ooxml},
    xml::{Event, XmlError, XmlReader},
};
use super::{
    FileError, cell_text,
    csv::ScanError,
    unzip::{Bomb, Budget, ZipOrBomb},
};

/// The largest XML token (a tag, or a cell's text) a part may hold; Excel allows 32,767
/// characters in a cell.
const MAX_TOKEN_BYTES: usize = 64 << 20;

/// Why a workbook could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("The workbook could not be read; it may be damaged or incomplete ({0}).")]
    Damaged(String),
    #[error(transparent)]
    Bomb(#[from] Bomb),
}

impl From<ReadError> for ScanError {
    fn from(err: ReadError) -> Self {
        FileError::NotCsv(err.to_string()).into()
    }
}

impl From<XmlError> for ReadError {
    fn from(err: XmlError) -> Self {
        match err {
            XmlError::Io(io) if Bomb::caused(&io) => Bomb.into(),
            other => ReadError::Damaged(other.to_string()),
        }
    }
}

impl From<ZipOrBomb> for ReadError {
    fn from(err: ZipOrBomb) -> Self {
        match err {
            ZipOrBomb::Bomb(bomb) => bomb.into(),
            ZipOrBomb::Zip(zip) => ReadError::Damaged(zip.to_string()),
        }
    }
}

fn damaged(what: &str) -> ReadError {
    ReadError::Damaged(what.to_owned())
}

/// One cell with a value; rows and columns count from 0.
pub struct Cell<'a> {
    pub row: u32,
    pub col: u32,
    pub text: &'a str,
}

pub struct Workbook {
    zip: ZipArchive<Cursor<Vec<u8>>>,
    budget: Budget,
    /// In the workbook's order.
    sheets: Vec<SheetEntry>,
    values: Values,
}

impl Workbook {
    pub fn open(bytes: Vec<u8>) -> Result<Workbook, ReadError> {
        let mut zip = ZipArchive::new(Cursor::new(bytes)).map_err(ZipOrBomb::from)?;
        let mut budget = Budget::for_zip(&mut zip)?;
        let rels = {
            let mut xml = part(&mut zip, &mut budget, "xl/_rels/workbook.xml.rels")?
                .ok_or_else(|| damaged("it has no workbook relationships part"))?;
            Relationships::read(&mut xml)?
        };
        let (sheets, date_1904) = {
            let mut xml = part(&mut zip, &mut budget, "xl/workbook.xml")?
                .ok_or_else(|| damaged("it has no workbook part"))?;
            read_workbook(&mut xml, &rels)?
        };
        let styles = match part(
            &mut zip,
            &mut budget,
            &rels.path_of_type("/styles", "styles.xml"),
        )? {
            Some(mut xml) => Styles::read(&mut xml)?,
            None => Styles::default(),
        };
        let strings_path = rels.path_of_type("/sharedStrings", "sharedStrings.xml");
        let strings = match part(&mut zip, &mut budget, &strings_path)? {
            Some(mut xml) => SharedStrings::read(&mut xml)?,
            None => SharedStrings::default(),
        };
        Ok(Workbook {
            zip,
            budget,
            sheets,
            values: Values {
                styles,
                strings,
                date_1904,
            },
        })
    }

    pub fn sheet_names(&self) -> Vec<String> {
        self.sheets.iter().map(|entry| entry.name.clone()).collect()
    }

    /// The sheets among Excel's tabs, and the hidden ones, each in order.
    pub fn sheet_names_shown_and_hidden(&self) -> (Vec<String>, Vec<String>) {
        let (hidden, shown): (Vec<_>, Vec<_>) = self.sheets.iter().partition(|entry| entry.hidden);
        let names = |entries: Vec<&SheetEntry>| entries.iter().map(|e| e.name.clone()).collect();
        (names(shown), names(hidden))
    }

    /// The last row (0-based) the sheet says it uses (its `<dimension>`, which writers may
    /// leave out or get wrong): read from the start of the sheet only.
    pub fn declared_last_row(&mut self, sheet: &str) -> Result<Option<u32>, ReadError> {
        let mut xml = XmlReader::new(
            sheet_part(&mut self.zip, &mut self.budget, &self.sheets, sheet)?,
            MAX_TOKEN_BYTES,
        );
        loop {
            match xml.next()? {
                Event::Start(tag) if tag.name == b"dimension" => {
                    let reference = tag.attr(b"ref").unwrap_or_default();
                    let last = reference.rsplit(|&b| b == b':').next().unwrap_or_default();
                    return Ok(cell_ref(last).ok().map(|(row, _)| row));
                }
                Event::Start(tag) if tag.name == b"sheetData" => return Ok(None),
                Event::Eof => return Ok(None),
                _ => {}
            }
        }
    }

    /// Calls `each` with every cell that has a value, in row order, until it breaks.
    pub fn cells(
        &mut self,
        sheet: &str,
        each: impl FnMut(Cell<'_>) -> Result<ControlFlow<()>, ScanError>,
    ) -> Result<(), ScanError> {
        let sheet = sheet_part(&mut self.zip, &mut self.budget, &self.sheets, sheet)?;
        self.values
            .read_sheet(&mut XmlReader::new(sheet, MAX_TOKEN_BYTES), each)
    }
}

/// What the rest of the workbook says about a sheet's cells: which styles are dates, the
/// shared strings, and the date system.
struct Values {
    styles: Styles,
    strings: SharedStrings,
    date_1904: bool,
}

impl Values {
    /// The cell loop: calls `each` with every cell of the sheet `xml` that has a value.
    fn read_sheet(
        &self,
        xml: &mut XmlReader<impl Read>,
        mut each: impl FnMut(Cell<'_>) -> Result<ControlFlow<()>, ScanError>,
    ) -> Result<(), ScanError> {
        let mut in_data = false;
        let mut at = Position::default();
        let (mut value, mut inline, mut scratch, mut text) =
            (String::new(), String::new(), String::new(), String::new());
        loop {
            let tag = match xml.next().map_err(ReadError::from)? {
                Event::Start(tag) => tag,
                Event::End(b"sheetData") => {
                    in_data = false;
                    continue;
                }
                Event::Eof => return Ok(()),
                _ => continue,
            };
            match tag.name {
                b"sheetData" => in_data = !tag.empty,
                b"row" if in_data => at.row(tag.attr(b"r"))?,
                b"c" if in_data => {
                    let mut cell = CellTag::default();
                    for (name, value) in tag.attrs() {
                        cell.attr(name, value)?;
                    }
                    let (row, col) = at.cell(cell.at);
                    value.clear();
                    inline.clear();
                    if !tag.empty {
                        read_cell(xml, &mut value, &mut inline, &mut scratch)
                            .map_err(ReadError::from)?;
                    }
                    let shown = self.text(&cell, &value, &inline, &mut text)?;
                    if !shown.is_empty()
                        && each(Cell {
                            row,
                            col,
                            text: shown,
                        })?
                        .is_break()
                    {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
    }

    /// A cell's text, from its raw value (`<v>`) or inline text (`<is>`); `out` holds it when
    /// it has to be made (a number written back, a date, escapes decoded).
    fn text<'a>(
        &'a self,
        cell: &CellTag,
        value: &'a str,
        inline: &'a str,
        out: &'a mut String,
    ) -> Result<&'a str, ReadError> {
        Ok(match cell.kind {
            // Text in the cell itself is its value, whatever its `t` says.
            _ if !inline.is_empty() => inline,
            CellType::Number => {
                out.clear();
                number_text(value, self.styles.kind(cell.style), self.date_1904, out);
                out
            }
            CellType::Shared if value.is_empty() => "",
            CellType::Shared => self
                .strings
                .get(number(value.as_bytes())? as usize)
                .ok_or_else(|| damaged("a cell refers to a missing shared string"))?,
            CellType::Bool => match value.trim() {
                "1" | "true" => "true",
                "0" | "false" => "false",
                other => other,
            },
            // Text in `<v>` has OOXML's escapes as much as text in `<t>` (a formula's result
            // of "\r" is `_x000D_`); most has none, and needs no copy.
            CellType::Inline | CellType::Text if !value.contains("_x") => value,
            CellType::Inline | CellType::Text => {
                out.clear();
                unescape_ooxml(value, out);
                out
            }
        })
    }
}

/// Where the reader is in the sheet: a row or cell without a reference (`r`) follows the one
/// before it.
#[derive(Default)]
struct Position {
    row: u32,
    next_row: u32,
    next_col: u32,
}

impl Position {
    /// A `<row>` starts, with its `r` if it has one.
    fn row(&mut self, reference: Option<&[u8]>) -> Result<(), ReadError> {
        self.row = match reference {
            Some(r) => match number(r)? {
                0 => return Err(damaged("a row is numbered 0")),
                r if r > LAST_ROW => {
                    return Err(damaged("a row lies past the last a sheet can have"));
                }
                r => r - 1,
            },
            None => self.next_row,
        };
        self.next_row = self.row.saturating_add(1);
        self.next_col = 0;
        Ok(())
    }

    /// A `<c>` starts, at the place its reference names, if any: its row and column.
    fn cell(&mut self, at: Option<(u32, u32)>) -> (u32, u32) {
        let col = match at {
            Some((row, col)) => {
                self.row = row;
                col
            }
            None => self.next_col,
        };
        self.next_col = col.saturating_add(1);
        (self.row, col)
    }
}

/// What a cell's start tag says.
#[derive(Default)]
struct CellTag {
    /// Its row and column, if it names them (`r`).
    at: Option<(u32, u32)>,
    kind: CellType,
    style: usize,
}

impl CellTag {
    /// Takes one attribute of the tag (its local name and raw value).
    fn attr(&mut self, name: &[u8], value: &[u8]) -> Result<(), ReadError> {
        match name {
            b"r" => self.at = Some(cell_ref(value)?),
            b"t" => self.kind = CellType::of(value),
            b"s" => self.style = number(value)? as usize,
            _ => {}
        }
        Ok(())
    }
}

/// A cell's `t` attribute.
#[derive(Clone, Copy, Default)]
enum CellType {
    /// A number, which its style may make a date (no `t`, or `n`).
    #[default]
    Number,
    /// An index into the shared strings.
    Shared,
    /// Text in the cell itself (`<is>`; some writers put it in `<v>`).
    Inline,
    Bool,
    /// Text in `<v>`: a formula's text result (`str`), an error such as `#DIV/0!` (`e`), an
    /// ISO 8601 date (`d`).
    Text,
}

impl CellType {
    fn of(t: &[u8]) -> CellType {
        match t {
            b"n" => CellType::Number,
            b"s" => CellType::Shared,
            b"inlineStr" => CellType::Inline,
            b"b" => CellType::Bool,
            _ => CellType::Text,
        }
    }
}

/// Reads a cell's content up to its `</c>`: the value (`<v>`) or inline text (`<is>`); its
/// formula (`<f>`) is skipped, as the import takes the value it last had.
fn read_cell(
    xml: &mut XmlReader<impl Read>,
    value: &mut String,
    inline: &mut String,
    scratch: &mut String,
) -> Result<(), XmlError> {
    if let Some(raw) = xml.simple_text(b"<v>", b"</v></c>")? {
        return xml::unescape(raw, value);
    }
    if let Some(raw) = xml.simple_text(b"<is><t>", b"</t></is></c>")? {
        scratch.clear();
        xml::unescape(raw, scratch)?;
        push_text(scratch, false, inline);
        return Ok(());
    }
    loop {
        match xml.next()? {
            Event::Start(tag) if tag.empty => {}
            Event::Start(tag) if tag.name == b"v" => xml.read_text(value)?,
            Event::Start(tag) if tag.name == b"is" => read_string_item(xml, inline, scratch)?,
            Event::Start(_) => xml.skip_element()?,
            Event::End(_) => return Ok(()),
            Event::Eof => return Err(XmlError::Malformed("a sheet ends inside a cell")),
            Event::Text(_) | Event::CData(_) => {}
        }
    }
}

/// A number cell's text: as stored when it is a plain whole number (most are), else through
/// the float it is, as a date when its style says so. A value that is not a number at all is
/// passed on as it is, for the import to report.
fn number_text(value: &str, kind: NumberKind, date_1904: bool, out: &mut String) {
    if value.is_empty() {
        return;
    }
    if kind == NumberKind::Plain && is_canonical_number(value) {
        out.push_str(value);
        return;
    }
    let Ok(float) = value.trim().parse::<f64>() else {
        out.push_str(value);
        return;
    };
    match kind {
        NumberKind::Plain => cell_text::number(float, out),
        NumberKind::DateTime | NumberKind::Duration => {
            let kind = if kind == NumberKind::DateTime {
                ExcelDateTimeType::DateTime
            } else {
                ExcelDateTimeType::TimeDelta
            };
            cell_text::date_time(ExcelDateTime::new(float, kind, date_1904), out);
        }
    }
}

/// A number as [`cell_text::number`] would write it back: an optional minus sign, a whole
/// part without leading zeros, an optional fraction without trailing zeros, at most 15
/// significant digits (so the float it stands for prints as exactly these digits), not zero
/// with a sign.
fn is_canonical_number(value: &str) -> bool {
    let unsigned = value.strip_prefix('-').unwrap_or(value);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || whole.len() > 1 && whole.starts_with('0') {
        return false;
    }
    let significant = match fraction {
        None => whole.len(),
        Some(fraction) if !digits(fraction) || fraction.ends_with('0') => return false,
        Some(fraction) if whole == "0" => fraction.trim_start_matches('0').len(),
        Some(fraction) => whole.len() + fraction.len(),
    };
    significant <= 15 && (unsigned != "0" || unsigned.len() == value.len())
}

/// An unsigned decimal attribute or value.
fn number(digits: &[u8]) -> Result<u32, ReadError> {
    let digits = digits.trim_ascii();
    (!digits.is_empty())
        .then_some(())
        .and_then(|()| {
            digits.iter().try_fold(0u32, |n, &b| {
                b.is_ascii_digit()
                    .then(|| n.checked_mul(10)?.checked_add(u32::from(b - b'0')))
                    .flatten()
            })
        })
        .ok_or_else(|| damaged("a number in the sheet's structure is not a number"))
}

/// `B3` as (row 2, column 1).
fn cell_ref(reference: &[u8]) -> Result<(u32, u32), ReadError> {
    let bad = || damaged("a cell has a malformed reference");
    let (mut col, mut letters) = (0u32, 0);
    for &b in reference {
        if !b.is_ascii_alphabetic() {
            break;
        }
        if letters == 3 {
            // Past XFD, the last column there is.
            return Err(bad());
        }
        col = col * 26 + u32::from(b.to_ascii_uppercase() - b'A' + 1);
        letters += 1;
    }
    if letters == 0 {
        return Err(bad());
    }
    let row = number(&reference[letters..]).map_err(|_| bad())?;
    if col > LAST_COLUMN || row > LAST_ROW {
        return Err(damaged(
            "a cell lies past the last row or column a sheet can have",
        ));
    }
    Ok((row.checked_sub(1).ok_or_else(bad)?, col - 1))
}

/// A sheet's last row and column (XFD), 1-based.
const LAST_ROW: u32 = 1 << 20;
const LAST_COLUMN: u32 = 1 << 14;

#[cfg(test)]
mod tests {
    use std::io::Write;

    use zip::write::{SimpleFileOptions, ZipWriter};

    use super::*;

    const RELS: &str = r#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
        <Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="/xl/worksheets/first.xml"/>
        <Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/../worksheets/second.xml"/>
        <Relationship Id="rId3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="strings.xml"/>
        <Relationship Id="rId4" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/>
        <Relationship Id="rId9" Type="http://x/hyperlink" Target="http://example.com/" TargetMode="External"/>
    </Relationships>"#;

    /// A workbook of hand-written parts, as other programs than Excel write them: namespace
    /// prefixes, cells without references, 1904 dates, rich and phonetic text, CDATA.
    fn workbook(first_sheet: &str) -> Vec<u8> {
        let parts = [
            ("xl/_rels/workbook.xml.rels", RELS),
            (
                "xl/workbook.xml",
                r#"<x:workbook xmlns:x="main" xmlns:r="rels"><x:workbookPr date1904="1"/><x:sheets>
                   <x:sheet name="First &amp; only" sheetId="1" r:id="rId1"/>
                   <x:sheet name="Second" sheetId="2" r:id="rId2"/></x:sheets></x:workbook>"#,
            ),
            (
                "xl/Strings.xml",
                r#"<sst><si><t>plain</t></si><si><r><rPr><b/></rPr><t xml:space="preserve">rich </t></r>
                   <r><t>text</t></r><rPh sb="0" eb="1"><t>ruby</t></rPh></si>
                   <si><t>  trimmed  </t></si><si/><si><t>line_x000D_break &lt;3</t></si></sst>"#,
            ),
            (
                "xl/styles.xml",
                r#"<styleSheet><numFmts><numFmt numFmtId="164" formatCode="d/m/yyyy h:mm"/></numFmts>
                   <cellXfs><xf numFmtId="0"/><xf numFmtId="14"/><xf numFmtId="164"/><xf numFmtId="46"/>
                   </cellXfs></styleSheet>"#,
            ),
            ("xl/worksheets/first.xml", first_sheet),
            (
                "xl/worksheets/second.xml",
                "<worksheet><sheetData><row r=\"1\"><c r=\"A1\" t=\"s\"><v>0</v></c></row></sheetData></worksheet>",
            ),
        ];
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        for (name, text) in parts {
            zip.start_file(name, SimpleFileOptions::default()).unwrap();
            zip.write_all(text.as_bytes()).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    fn cells(bytes: Vec<u8>, sheet: &str) -> Result<Vec<(u32, u32, String)>, ScanError> {
        let mut book = Workbook::open(bytes)?;
        let mut out = Vec::new();
        book.cells(sheet, |cell| {
            out.push((cell.row, cell.col, cell.text.to_owned()));
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(out)
    }

    fn message(err: ScanError) -> String {
        match err {
            ScanError::File(reason) => reason.to_string(),
            ScanError::Io(err) => panic!("an I/O error, not the file's fault: {err}"),
        }
    }

    #[test]
    fn cells_are_read_whatever_the_writer() {
        let sheet = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
            <x:worksheet xmlns:x="main"><x:cols><x:col min="1" max="3"/></x:cols><x:sheetData>
            <x:row r="2"><x:c t="s"><x:v>0</x:v></x:c><x:c t="s"><x:v>1</x:v></x:c><x:c/><x:c t="s"><x:v>2</x:v></x:c></x:row>
            <x:row><x:c r="B3" t="s"><x:v>4</x:v></x:c><x:c r="D3" t="s"><x:v>3</x:v></x:c></x:row>
            <row r="5"><c r="A5" s="1"><v>45306</v></c><c r="B5" s="2"><v>45306.5208333333</v></c>
              <c r="C5" s="3"><v>1.5</v></c><c r="D5"><v>-0.25</v></c><c r="E5"><v>007</v></c></row>
            <row r="6"><c r="A6" t="b"><v>1</v></c><c r="B6" t="b"><v>0</v></c>
              <c r="C6" t="e"><f>1/0</f><v>#DIV/0!</v></c><c r="D6" t="str"><f>"a"&amp;"b"</f><v>ab</v></c>
              <c r="E6" t="inlineStr"><is><t><![CDATA[<b>&</b>]]></t></is></c><c r="F6" t="d"><v>2024-02-29</v></c>
              <c r="G6"><f>1+1</f></c><c r="H6"><is><t>no type</t></is></c>
              <c r="I6" s="1"><v>1e9</v></c></row>
            </x:sheetData><x:mergeCells><x:mergeCell ref="A1:B1"/></x:mergeCells></x:worksheet>"#;
        let got = cells(workbook(sheet), "First & only").unwrap();
        let expected = [
            (1, 0, "plain"),
            (1, 1, "rich text"),
            (1, 3, "trimmed"),
            (2, 1, "line\rbreak <3"),
            // 1904 dates: day 45306 is 2028-01-16.
            (4, 0, "2028-01-16"),
            (4, 1, "2028-01-16 12:30:00"),
            (4, 2, "1.5"),
            (4, 3, "-0.25"),
            (4, 4, "7"),
            (5, 0, "true"),
            (5, 1, "false"),
            (5, 2, "#DIV/0!"),
            (5, 3, "ab"),
            (5, 4, "<b>&</b>"),
            (5, 5, "2024-02-29"),
            (5, 7, "no type"),
            // A "date" no calendar has: its number.
            (5, 8, "1000000000"),
        ];
        let expected: Vec<_> = expected
            .into_iter()
            .map(|(row, col, text)| (row, col, text.to_owned()))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(
            cells(workbook(sheet), "Second").unwrap(),
            [(0, 0, "plain".to_owned())]
        );
    }

    #[test]
    fn canonical_numbers_pass_through_as_the_float_would_print() {
        for value in [
            "0",
            "7",
            "-17",
            "83810.14",
            "0.000001",
            "-0.25",
            "123456789012345",
        ] {
            assert!(is_canonical_number(value), "{value}");
            let mut printed = String::new();
            cell_text::number(value.parse().unwrap(), &mut printed);
            assert_eq!(printed, value);
        }
        for value in [
            "-0",
            "007",
            "1.50",
            "1e5",
            "1234567890123456",
            "0.1234567890123456",
            ".5",
            "5.",
            "",
        ] {
            assert!(!is_canonical_number(value), "{value}");
        }
    }

    #[test]
    fn damaged_sheets_say_what_is_wrong() {
        for (sheet, expected) in [
            (
                "<worksheet><sheetData><row><c r=\"1A\"><v>1</v></c></row></sheetData></worksheet>",
                "malformed reference",
            ),
            (
                "<worksheet><sheetData><row><c r=\"AAAAAAAAA1\"><v>1</v></c></row></sheetData></worksheet>",
                "malformed reference",
            ),
            (
                "<worksheet><sheetData><row><c t=\"s\"><v>99</v></c></row></sheetData></worksheet>",
                "missing shared string",
            ),
            (
                "<worksheet><sheetData><row><c><v>1</v>",
                "ends inside a cell",
            ),
            (
                "<worksheet><sheetData><row r=\"x\"/></sheetData></worksheet>",
                "not a number",
            ),
        ] {
            let err = message(cells(workbook(sheet), "First & only").unwrap_err());
            assert!(
                err.contains("could not be read") && err.contains(expected),
                "{err}"
            );
        }
    }
}
