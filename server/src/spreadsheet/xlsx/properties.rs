//! Property tests of the XLSX reader, which reads whatever people upload.
//!
//! - Generated workbooks (rust_xlsxwriter: numbers of every size, text with XML's and OOXML's
//!   special characters, whitespace, unicode and empty text, booleans, dates, times and
//!   elapsed times by number format, formulas with their cached results, rich text, sparse
//!   and far-away cells, several sheets, shared or inline strings) must read exactly as
//!   calamine, our oracle, reads them.
//! - Damaged workbooks, made by mutating the checked-in seeds (`tests/fixtures/xlsx-seeds/`):
//!   a mutated part inside a sound package, and a mutated package, must end in cells or in an
//!   error, never in a panic.
//!
//! `make test` runs a fixed number of cases from a fixed seed, quick and repeatable; explore
//! further with `PROPTEST_CASES=5000 PROPTEST_RNG_SEED=<any number> cargo test -p server --lib
//! xlsx::properties`. A failing case is saved under `server/proptest-regressions/` and
//! replayed first from then on: commit it with the fix.

use std::{
    collections::BTreeMap,
    io::{self, Cursor, Write},
    ops::ControlFlow,
};

use calamine::{Reader, Xlsx};
use proptest::{
    collection::{btree_map, vec},
    prelude::*,
    sample::{select, subsequence},
    test_runner::{Config, RngSeed},
};
use rust_xlsxwriter::{Format, Formula};
use zip::write::{SimpleFileOptions, ZipWriter};

use super::Workbook;
use crate::spreadsheet::{csv::ScanError, workbook};

/// A sheet's cells with a value: row, column, text.
pub(in crate::spreadsheet) type Cells = Vec<(u32, u32, String)>;

/// The cells of `sheet` as our reader reads them.
pub(in crate::spreadsheet) fn read_ours(bytes: &[u8], sheet: &str) -> Result<Cells, ScanError> {
    let mut cells = Vec::new();
    Workbook::open(bytes.to_vec())?.cells(sheet, |cell| {
        cells.push((cell.row, cell.col, cell.text.to_owned()));
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(cells)
}

/// The cells of `sheet` as calamine reads them, written as the text the converter writes for
/// the XLS and ODS sheets calamine reads.
pub(in crate::spreadsheet) fn read_calamine(bytes: &[u8], sheet: &str) -> Cells {
    let mut book: Xlsx<_> = Xlsx::new(Cursor::new(bytes)).unwrap();
    let mut reader = book.worksheet_cells_reader(sheet).unwrap();
    let mut cells = Vec::new();
    while let Some(cell) = reader.next_cell().unwrap() {
        let mut text = String::new();
        workbook::write_text(cell.get_value(), &mut text);
        if !text.is_empty() {
            let (row, col) = cell.get_position();
            cells.push((row, col, text));
        }
    }
    cells
}

/// `cases` cases from a fixed seed, unless `PROPTEST_CASES` or `PROPTEST_RNG_SEED` say
/// otherwise.
pub(super) fn config(cases: u32) -> Config {
    let from_env = Config::default();
    let set = |name| std::env::var_os(name).is_some();
    Config {
        cases: if set("PROPTEST_CASES") {
            from_env.cases
        } else {
            cases
        },
        rng_seed: if set("PROPTEST_RNG_SEED") {
            from_env.rng_seed
        } else {
            RngSeed::Fixed(11)
        },
        ..from_env
    }
}

/// One cell's value as it is written.
#[derive(Debug, Clone)]
enum Value {
    Number(f64),
    Text(String),
    Bool(bool),
    /// A number shown through a number format: a date, a time, an elapsed time, or not.
    Formatted(f64, &'static str),
    /// A formula, with the result it had when the workbook was saved.
    Formula(String),
    /// Rich text: runs of text, bold or not.
    Rich(Vec<(bool, String)>),
}

#[derive(Debug)]
struct Sheet {
    name: &'static str,
    /// Written in rust_xlsxwriter's constant-memory mode, which writes strings into the cells
    /// (`<is>`) instead of the shared strings (as our exports do).
    inline_strings: bool,
    cells: BTreeMap<(u32, u16), Value>,
}

/// Names that need escaping in `workbook.xml`, or that are plain.
const SHEET_NAMES: [&str; 5] = [
    "Data",
    "Tom & Jerry",
    "<sheet>",
    "it's \"quoted\"",
    "日本語",
];

const NUMBER_FORMATS: [&str; 12] = [
    "yyyy-mm-dd",
    "dd/mm/yyyy hh:mm:ss",
    "h:mm AM/PM",
    "[h]:mm:ss",
    "mm:ss.0",
    "d-mmm",
    "0.00",
    "#,##0 \"kg\"",
    "[Red]0.00",
    "0%",
    "General",
    "@",
];

fn text() -> impl Strategy<Value = String> {
    let character = prop_oneof![
        3 => any::<char>(),
        4 => select(vec!['<', '>', '&', '"', '\'', ';', '#', ' ', '\t', '\n', '\r', '_', 'x', '0', 'D']),
        2 => select(vec!['a', 'Z', 'é', '日', '😀', '\u{a0}', '\u{feff}', '\u{2028}']),
    ];
    vec(character, 0..16).prop_map(String::from_iter)
}

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<i32>().prop_map(f64::from),
        -1e6..1e6f64,
        any::<f64>().prop_filter("a spreadsheet number", |n| n.is_finite()),
        select(vec![-0.0, 0.1 + 0.2, 1e15, 1e-7, 123_456_789_012_345_678.0]),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let result = prop_oneof![
        select(vec![
            "42", "-1.5", "1e3", " 7 ", "", "TRUE", "FALSE", "#DIV/0!", "#N/A"
        ])
        .prop_map(String::from),
        text(),
    ];
    let run = (
        any::<bool>(),
        text().prop_filter("a run has text", |t| !t.is_empty()),
    );
    prop_oneof![
        3 => number().prop_map(Value::Number),
        4 => text().prop_map(Value::Text),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => (-100.0..100_000.0f64, select(NUMBER_FORMATS.to_vec()))
            .prop_map(|(n, format)| Value::Formatted(n, format)),
        1 => result.prop_map(Value::Formula),
        1 => vec(run, 1..4).prop_map(Value::Rich),
    ]
}

/// Mostly near the top left, sometimes far off (rows not too far: rust_xlsxwriter walks
/// every row up to the last, slowly in a debug build).
fn place() -> impl Strategy<Value = (u32, u16)> {
    let row = prop_oneof![9 => 0u32..60, 1 => 0u32..5_000];
    let col = prop_oneof![9 => 0u16..12, 1 => 0u16..16_384];
    (row, col)
}

fn sheets() -> impl Strategy<Value = Vec<Sheet>> {
    subsequence(SHEET_NAMES.to_vec(), 1..=3).prop_flat_map(|names| {
        let sheet = (any::<bool>(), btree_map(place(), value(), 0..40));
        let count = names.len();
        (Just(names), vec(sheet, count)).prop_map(|(names, sheets)| {
            names
                .into_iter()
                .zip(sheets)
                .map(|(name, (inline_strings, cells))| Sheet {
                    name,
                    inline_strings,
                    cells,
                })
                .collect()
        })
    })
}

fn save(sheets: &[Sheet]) -> Vec<u8> {
    let mut book = rust_xlsxwriter::Workbook::new();
    let (bold, plain) = (Format::new().set_bold(), Format::new());
    for sheet in sheets {
        let out = if sheet.inline_strings {
            book.add_worksheet_with_constant_memory().unwrap()
        } else {
            book.add_worksheet()
        };
        out.set_name(sheet.name).unwrap();
        // In row order, as constant memory needs: a row is written out when the next begins.
        for (&(row, col), value) in &sheet.cells {
            match value {
                Value::Number(n) => out.write_number(row, col, *n),
                Value::Text(text) => out.write_string(row, col, text),
                Value::Bool(b) => out.write_boolean(row, col, *b),
                Value::Formatted(n, code) => {
                    out.write_number_with_format(row, col, *n, &Format::new().set_num_format(*code))
                }
                Value::Formula(result) => {
                    out.write_formula(row, col, Formula::new("=A1").set_result(result))
                }
                Value::Rich(runs) => {
                    let runs: Vec<_> = runs
                        .iter()
                        .map(|(b, text)| (if *b { &bold } else { &plain }, text.as_str()))
                        .collect();
                    out.write_rich_string(row, col, &runs)
                }
            }
            .unwrap();
        }
    }
    book.save_to_buffer().unwrap()
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn generated_workbooks_read_as_calamine_reads_them(sheets in sheets()) {
        let bytes = save(&sheets);
        let names = Workbook::open(bytes.clone()).unwrap().sheet_names();
        let written: Vec<_> = sheets.iter().map(|sheet| sheet.name).collect();
        prop_assert_eq!(&names, &written);
        for name in &names {
            let ours = read_ours(&bytes, name).unwrap_or_else(|err| panic!("{name}: {err:?}"));
            prop_assert_eq!(ours, read_calamine(&bytes, name), "sheet {}", name);
        }
    }
}

/// A seed from `tests/fixtures/xlsx-seeds/`.
pub(super) fn seed(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/xlsx-seeds/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// Every seed (each an XML part).
pub(super) fn xml_seeds() -> Vec<Vec<u8>> {
    let dir = format!("{}/tests/fixtures/xlsx-seeds", env!("CARGO_MANIFEST_DIR"));
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{dir}: {err}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "xml" || ext == "rels")
        })
        .collect();
    seeds.sort();
    seeds
        .into_iter()
        .map(|path| std::fs::read(path).unwrap())
        .collect()
}

/// The seed parts by where they go in a package: the two sheets are the seed sheets.
pub(super) const PARTS: [(&str, &str); 8] = [
    ("[Content_Types].xml", "content-types.xml"),
    ("_rels/.rels", "package.rels"),
    ("xl/workbook.xml", "workbook.xml"),
    ("xl/_rels/workbook.xml.rels", "workbook.xml.rels"),
    ("xl/styles.xml", "styles.xml"),
    ("xl/sharedStrings.xml", "sharedStrings.xml"),
    ("xl/worksheets/sheet1.xml", "sheet-excel.xml"),
    ("xl/worksheets/sheet2.xml", "sheet-inline.xml"),
];

/// Where the second sheet is in [`PARTS`].
const SECOND_SHEET: usize = 7;

/// The seeds zipped into a workbook, with the part at `replaced` (an index into [`PARTS`])
/// replaced by `part`, and the third seed sheet standing in for the second if `prefixed`.
fn package(replaced: Option<(usize, &[u8])>, prefixed: bool) -> Vec<u8> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    for (i, (path, name)) in PARTS.into_iter().enumerate() {
        let name = if prefixed && i == SECOND_SHEET {
            "sheet-prefixed.xml"
        } else {
            name
        };
        let bytes = match replaced {
            Some((at, part)) if at == i => part.to_vec(),
            _ => seed(name),
        };
        zip.start_file(path, SimpleFileOptions::default()).unwrap();
        zip.write_all(&bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// One change to a file's bytes; positions are taken modulo its length.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    /// A byte replaced.
    Set(usize, u8),
    /// Up to this many bytes removed.
    Remove(usize, usize),
    /// A piece of XML (or a number, or a zip signature) put in.
    Insert(usize, &'static [u8]),
    /// Up to this many bytes from somewhere else repeated here.
    Copy(usize, usize, usize),
}

/// What is likelier to reach deep into a reader than random bytes.
pub(super) const PIECES: [&[u8]; 24] = [
    b"<",
    b">",
    b"/>",
    b"</c>",
    b"</row>",
    b"<c r=\"B2\" t=\"s\"><v>1</v></c>",
    b"<row r=\"1048577\">",
    b" r=\"XFE1\"",
    b" s=\"4294967296\"",
    b" t=\"inlineStr\"",
    b"<is><t>",
    b"<v>99999999999</v>",
    b"&",
    b"&#x0;",
    b"&amp;",
    b"&#55296;",
    b"<![CDATA[",
    b"]]>",
    b"<!--",
    b"<!DOCTYPE x [<!ENTITY a \"b\">]>",
    b"<?",
    b"\"",
    b"_x000D_",
    b"PK\x03\x04",
];

pub(super) fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let mutation = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set(at, byte)),
        (any::<usize>(), 1..64usize).prop_map(|(at, len)| Mutation::Remove(at, len)),
        (any::<usize>(), select(PIECES.to_vec()))
            .prop_map(|(at, piece)| Mutation::Insert(at, piece)),
        (any::<usize>(), any::<usize>(), 1..256usize)
            .prop_map(|(from, to, len)| Mutation::Copy(from, to, len)),
    ];
    vec(mutation, 1..8)
}

pub(super) fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        let at = |i: usize, bytes: &Vec<u8>| i % (bytes.len() + 1);
        match *mutation {
            Mutation::Set(i, byte) => {
                if !bytes.is_empty() {
                    let i = i % bytes.len();
                    bytes[i] = byte;
                }
            }
            Mutation::Remove(i, len) => {
                let i = at(i, &bytes);
                bytes.drain(i..(i + len).min(bytes.len()));
            }
            Mutation::Insert(i, piece) => {
                let i = at(i, &bytes);
                bytes.splice(i..i, piece.iter().copied());
            }
            Mutation::Copy(from, to, len) => {
                let from = at(from, &bytes);
                let piece = bytes[from..(from + len).min(bytes.len())].to_vec();
                let to = at(to, &bytes);
                bytes.splice(to..to, piece);
            }
        }
    }
    bytes
}

/// Reads a workbook every way the converter does: the whole conversion, then every sheet.
/// Errors are fine; a panic fails the test.
fn read_every_way(bytes: Vec<u8>) {
    let _ = workbook::to_csv(bytes.clone(), None, None, true, io::sink());
    if let Ok(mut book) = Workbook::open(bytes) {
        for name in book.sheet_names() {
            let _ = book.declared_last_row(&name);
            let _ = book.cells(&name, |_| Ok(ControlFlow::Continue(())));
        }
    }
}

/// The seeds as they are: read as calamine reads them, except the hand-written sheet, which
/// has what calamine does not read (`<v> 1 </v>` as a shared string index, `true` as a
/// boolean, `<v>` in an inline string cell).
#[test]
fn the_seed_package_reads() {
    for prefixed in [false, true] {
        let bytes = package(None, prefixed);
        let names = Workbook::open(bytes.clone()).unwrap().sheet_names();
        assert_eq!(names, ["Data & more", "Second"]);
        for name in names {
            let ours = read_ours(&bytes, &name).unwrap();
            assert!(ours.len() > 5, "{name}");
            if !prefixed {
                assert_eq!(ours, read_calamine(&bytes, &name), "{name}");
            }
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn a_mutated_part_is_read_or_refused(
        part in 0..PARTS.len(),
        prefixed in any::<bool>(),
        mutations in mutations(),
    ) {
        let name = if prefixed && part == SECOND_SHEET { "sheet-prefixed.xml" } else { PARTS[part].1 };
        read_every_way(package(Some((part, &mutate(seed(name), &mutations))), prefixed));
    }

    #[test]
    fn a_mutated_package_is_read_or_refused(
        prefixed in any::<bool>(),
        mutations in mutations(),
    ) {
        read_every_way(mutate(package(None, prefixed), &mutations));
    }
}
