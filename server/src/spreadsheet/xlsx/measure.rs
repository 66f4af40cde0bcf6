//! Is our own XML tokenizer ([`super::xml`]) worth keeping? This measures it against
//! `quick-xml` (the reader calamine uses) driving the same cell loop over the same sheet:
//! rows, cells with their `r`/`t`/`s` attributes, `<v>` values, inline strings, shared string
//! indices and dates by style all go through the same code ([`Position`], [`CellTag`],
//! [`Values::text`]); only the tokenizing differs, and both must hand out the same cells.
//!
//! The workbook is the one `make bench` imports: our own XLSX export of its 10-column dataset
//! (`XLSX_ROWS` rows, default 200,000), made here with the same function the export uses. Or
//! any workbook: `XML_BENCH_FILE=path.xlsx` (its first sheet). Each reader reads the sheet
//! `XML_BENCH_RUNS` times (default 7), the readers alternating, since this machine's speed
//! drifts; the median is printed with the fastest and slowest run. Two figures each: reading
//! the sheet from the zip (what an import pays: unpacking included) and from its XML already
//! unpacked in memory (the tokenizer and the cell loop alone).
//!
//! Run it in release: `make bench ONLY=xml`, or
//! `cargo test --release -p server --lib spreadsheet::xlsx::measure -- --ignored --nocapture`.

use std::{
    hint::black_box,
    io::{BufRead, BufReader, Read},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use quick_xml::{
    escape::resolve_predefined_entity,
    events::{BytesStart, Event as QuickEvent},
    name::QName,
};

use super::{
    CellTag, MAX_TOKEN_BYTES, Position, ReadError, Values, Workbook, damaged, package::sheet_part,
    text::push_text, xml::XmlReader,
};
use crate::spreadsheet::{
    csv::ScanError,
    output::{LongText, csv_to_xlsx},
    schema::{Column, ColumnType},
};

/// What both readers must agree on: how many cells, how many bytes of text, and a hash of
/// every cell's place and text (FNV-1a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digest {
    cells: u64,
    bytes: u64,
    hash: u64,
}

impl Digest {
    fn new() -> Digest {
        Digest {
            cells: 0,
            bytes: 0,
            hash: 0xcbf2_9ce4_8422_2325,
        }
    }

    fn add(&mut self, row: u32, col: u32, text: &str) {
        self.cells += 1;
        self.bytes += text.len() as u64;
        let place = (u64::from(row) << 16 | u64::from(col)).to_le_bytes();
        for &b in place.iter().chain(text.as_bytes()) {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tokenizer {
    Ours,
    /// `quick-xml` as configured by default (it checks that end tags match start tags).
    QuickXml,
    /// `quick-xml` not checking end tags, as ours does not.
    QuickXmlUnchecked,
}

impl Tokenizer {
    const ALL: [Tokenizer; 3] = [
        Tokenizer::Ours,
        Tokenizer::QuickXml,
        Tokenizer::QuickXmlUnchecked,
    ];

    fn label(self) -> &'static str {
        match self {
            Tokenizer::Ours => "ours (xlsx::xml)",
            Tokenizer::QuickXml => "quick-xml 0.42",
            Tokenizer::QuickXmlUnchecked => "quick-xml 0.42, end tags unchecked",
        }
    }

    /// Reads the sheet `xml` with this tokenizer and the cell loop.
    fn read(self, values: &Values, xml: impl Read) -> Result<Digest, ScanError> {
        let mut digest = Digest::new();
        let each = |cell: super::Cell<'_>| {
            digest.add(cell.row, cell.col, cell.text);
            Ok(ControlFlow::Continue(()))
        };
        match self {
            Tokenizer::Ours => {
                values.read_sheet(&mut XmlReader::new(xml, MAX_TOKEN_BYTES), each)?;
            }
            Tokenizer::QuickXml | Tokenizer::QuickXmlUnchecked => {
                let check = self == Tokenizer::QuickXml;
                read_sheet_quick(values, BufReader::with_capacity(64 << 10, xml), check, each)?;
            }
        }
        Ok(digest)
    }
}

#[test]
#[ignore = "a measurement, to run in release: make bench ONLY=xml"]
fn our_tokenizer_against_quick_xml() {
    let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let runs: usize = env("XML_BENCH_RUNS").map_or(7, |runs| runs.parse().unwrap());
    let (bytes, what) = match env("XML_BENCH_FILE") {
        Some(path) => (std::fs::read(&path).unwrap(), path),
        None => {
            let rows = env("XLSX_ROWS").map_or(200_000, |rows| rows.parse().unwrap());
            let bytes = bench_workbook(rows);
            (
                bytes,
                format!("make bench's workbook, {rows} rows x 10 columns"),
            )
        }
    };
    let sheet = Workbook::open(bytes.clone()).unwrap().sheet_names()[0].clone();
    let sheet_xml = {
        let mut book = Workbook::open(bytes.clone()).unwrap();
        let mut xml = Vec::new();
        sheet_part(&mut book.zip, &mut book.budget, &book.sheets, &sheet)
            .unwrap()
            .read_to_end(&mut xml)
            .unwrap();
        xml
    };
    println!(
        "\nXLSX sheet reading: our XML tokenizer against quick-xml, the same cell loop\n  {what}: \
         {:.1} MB workbook, the sheet {:.1} MB of XML; median of {runs} runs (fastest-slowest), \
         readers alternating",
        bytes.len() as f64 / 1e6,
        sheet_xml.len() as f64 / 1e6,
    );

    let mut expected = None;
    for in_memory in [false, true] {
        let mut times = [const { Vec::new() }; Tokenizer::ALL.len()];
        for _ in 0..runs {
            for (i, tokenizer) in Tokenizer::ALL.into_iter().enumerate() {
                // A fresh workbook each time: its unpacking budget counts every read.
                let mut book = Workbook::open(bytes.clone()).unwrap();
                let start = Instant::now();
                let digest = if in_memory {
                    tokenizer.read(&book.values, &sheet_xml[..])
                } else {
                    let xml =
                        sheet_part(&mut book.zip, &mut book.budget, &book.sheets, &sheet).unwrap();
                    tokenizer.read(&book.values, xml)
                };
                let digest = black_box(digest.unwrap_or_else(|err| panic!("{err:?}")));
                times[i].push(start.elapsed());
                assert_eq!(
                    *expected.get_or_insert(digest),
                    digest,
                    "{} read other cells",
                    tokenizer.label()
                );
            }
        }
        let rows = workbook_rows(&bytes, &sheet);
        println!(
            "  {}",
            if in_memory {
                "the sheet's XML already unpacked (tokenizer and cell loop alone):"
            } else {
                "from the zip, unpacking included (what an import pays):"
            }
        );
        let medians: Vec<Duration> = times.iter_mut().map(|t| median(t)).collect();
        for (tokenizer, times) in Tokenizer::ALL.iter().zip(&times) {
            let median = median(&mut times.clone());
            println!(
                "    {:<36} {:>10.0} rows/s  {:.3} s ({:.3}-{:.3})",
                tokenizer.label(),
                rows as f64 / median.as_secs_f64(),
                median.as_secs_f64(),
                times[0].as_secs_f64(),
                times[times.len() - 1].as_secs_f64(),
            );
        }
        println!(
            "    quick-xml's time / ours: {:.2} (default), {:.2} (end tags unchecked)",
            medians[1].as_secs_f64() / medians[0].as_secs_f64(),
            medians[2].as_secs_f64() / medians[0].as_secs_f64(),
        );
    }
}

/// Sorts `times` and returns the middle one.
fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The sheet's rows, counted by our reader (the header included).
fn workbook_rows(bytes: &[u8], sheet: &str) -> u64 {
    let mut rows = 0;
    let mut last = None;
    let mut book = Workbook::open(bytes.to_vec()).unwrap();
    book.cells(sheet, |cell| {
        if last != Some(cell.row) {
            rows += 1;
            last = Some(cell.row);
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    rows
}

/// The workbook `make bench` imports (`server/benches/import.py`): its generated 10-column
/// CSV, exported by our XLSX export (constant-memory rust_xlsxwriter: inline strings, dates by
/// style, booleans, decimals with their places).
fn bench_workbook(rows: u32) -> Vec<u8> {
    use ColumnType::*;
    let columns: Vec<Column> = [
        ("id", Integer),
        ("name", Text),
        ("email", Email),
        ("amount", Decimal),
        ("born", Date),
        ("active", Boolean),
        ("city", Text),
        ("country", Text),
        ("score", Integer),
        ("note", Text),
    ]
    .into_iter()
    .map(|(name, kind)| Column {
        name: name.into(),
        kind,
        required: false,
    })
    .collect();
    let cities = [
        "Lisbon", "Oslo", "Quito", "Osaka", "Lagos", "Perth", "Lyon", "Cork",
    ];
    // A fixed xorshift: the same file every time, no dependency.
    let mut state = 42u64;
    let mut random = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let mut csv = String::from("id,name,email,amount,born,active,city,country,score,note\n");
    for i in 1..=rows {
        let (amount, cents) = (random(100_000), random(100));
        let (year, month, day) = (50 + random(50), 1 + random(12), 1 + random(28));
        let active = if i % 3 == 0 { "false" } else { "true" };
        let (city, score) = (cities[random(8) as usize], random(1001));
        csv.push_str(&format!(
            "{i},Person {i},person{i}@example.com,{amount}.{cents:02},19{year}-{month:02}-{day:02},\
             {active},{city},PT,{score},\"note {i}, ok\"\n"
        ));
    }
    let mut out = Vec::new();
    csv_to_xlsx(
        &columns,
        "bench",
        LongText::Refuse,
        csv.as_bytes(),
        &mut out,
    )
    .unwrap();
    out
}

/// [`Values::read_sheet`] with quick-xml as the tokenizer: the same steps, event for event.
fn read_sheet_quick(
    values: &Values,
    src: impl BufRead,
    check_end_names: bool,
    mut each: impl FnMut(super::Cell<'_>) -> Result<ControlFlow<()>, ScanError>,
) -> Result<(), ScanError> {
    let mut xml = quick_xml::Reader::from_reader(src);
    xml.config_mut().check_end_names = check_end_names;
    let mut buf = Vec::new();
    let mut in_data = false;
    let mut at = Position::default();
    let (mut value, mut inline, mut scratch, mut text) =
        (String::new(), String::new(), String::new(), String::new());
    loop {
        buf.clear();
        let (tag, empty) = match xml.read_event_into(&mut buf).map_err(broken)? {
            QuickEvent::Start(tag) => (tag, false),
            QuickEvent::Empty(tag) => (tag, true),
            QuickEvent::End(end) if end.local_name().as_ref() == "sheetData" => {
                in_data = false;
                continue;
            }
            QuickEvent::DocType(_) => return Err(damaged("a DOCTYPE").into()),
            QuickEvent::Eof => return Ok(()),
            _ => continue,
        };
        match tag.local_name().as_ref() {
            "sheetData" => in_data = !empty,
            "row" if in_data => at.row(attr(&tag, "r")?.as_deref().map(str::as_bytes))?,
            "c" if in_data => {
                let mut cell = CellTag::default();
                for found in tag.attributes().with_checks(false) {
                    let found = found.map_err(broken)?;
                    cell.attr(
                        found.key.local_name().as_ref().as_bytes(),
                        found.value.as_bytes(),
                    )?;
                }
                let (row, col) = at.cell(cell.at);
                value.clear();
                inline.clear();
                if !empty {
                    read_cell_quick(&mut xml, &mut buf, &mut value, &mut inline, &mut scratch)?;
                }
                let shown = values.text(&cell, &value, &inline, &mut text)?;
                if !shown.is_empty()
                    && each(super::Cell {
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

fn broken(err: impl std::fmt::Display) -> ReadError {
    ReadError::Damaged(err.to_string())
}

/// The raw value of the attribute with this local name.
fn attr(tag: &BytesStart<'_>, wanted: &str) -> Result<Option<String>, ReadError> {
    for found in tag.attributes().with_checks(false) {
        let found = found.map_err(broken)?;
        if found.key.local_name().as_ref() == wanted {
            return Ok(Some(found.value.into_owned()));
        }
    }
    Ok(None)
}

/// [`super::read_cell`] with quick-xml.
fn read_cell_quick(
    xml: &mut quick_xml::Reader<impl BufRead>,
    buf: &mut Vec<u8>,
    value: &mut String,
    inline: &mut String,
    scratch: &mut String,
) -> Result<(), ReadError> {
    loop {
        buf.clear();
        match xml.read_event_into(buf).map_err(broken)? {
            QuickEvent::Start(tag) if tag.local_name().as_ref() == "v" => {
                read_text_quick(xml, buf, value)?
            }
            QuickEvent::Start(tag) if tag.local_name().as_ref() == "is" => {
                read_string_item_quick(xml, buf, inline, scratch)?
            }
            QuickEvent::Start(tag) => {
                let name = tag.name().as_ref().to_owned();
                xml.read_to_end_into(QName(&name), &mut Vec::new())
                    .map_err(broken)?;
            }
            QuickEvent::End(_) => return Ok(()),
            QuickEvent::Eof => return Err(damaged("a sheet ends inside a cell")),
            _ => {}
        }
    }
}

/// [`super::text::read_string_item`] with quick-xml.
fn read_string_item_quick(
    xml: &mut quick_xml::Reader<impl BufRead>,
    buf: &mut Vec<u8>,
    out: &mut String,
    scratch: &mut String,
) -> Result<(), ReadError> {
    let (mut depth, mut phonetic) = (1usize, 0usize);
    loop {
        buf.clear();
        match xml.read_event_into(buf).map_err(broken)? {
            QuickEvent::Start(tag) if tag.local_name().as_ref() == "t" && phonetic == 0 => {
                let preserve = attr(&tag, "space")?.as_deref() == Some("preserve");
                scratch.clear();
                read_text_quick(xml, buf, scratch)?;
                push_text(scratch, preserve, out);
            }
            QuickEvent::Start(tag) => {
                depth += 1;
                phonetic += usize::from(tag.local_name().as_ref() == "rPh");
            }
            QuickEvent::End(end) => {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
                phonetic -= usize::from(end.local_name().as_ref() == "rPh" && phonetic > 0);
            }
            QuickEvent::Eof => return Err(damaged("a string ends early")),
            _ => {}
        }
    }
}

/// The unescaped text up to the end of the current element, appended to `out`. quick-xml
/// hands out references (`&amp;`) as events of their own.
fn read_text_quick(
    xml: &mut quick_xml::Reader<impl BufRead>,
    buf: &mut Vec<u8>,
    out: &mut String,
) -> Result<(), ReadError> {
    loop {
        buf.clear();
        match xml.read_event_into(buf).map_err(broken)? {
            QuickEvent::Text(text) => out.push_str(&text.xml10_content()),
            QuickEvent::CData(text) => out.push_str(&text.xml10_content()),
            QuickEvent::GeneralRef(reference) => match reference.resolve_char_ref() {
                Ok(Some(c)) => out.push(c),
                Ok(None) => out.push_str(
                    resolve_predefined_entity(&reference)
                        .ok_or_else(|| damaged("an unknown or broken &reference;"))?,
                ),
                Err(err) => return Err(broken(err)),
            },
            QuickEvent::End(_) => return Ok(()),
            QuickEvent::Start(tag) => {
                let name = tag.name().as_ref().to_owned();
                xml.read_to_end_into(QName(&name), &mut Vec::new())
                    .map_err(broken)?;
            }
            QuickEvent::Eof => return Err(damaged("the XML ends in the middle of an element")),
            _ => {}
        }
    }
}
