//! Fuzzes the XLSX reader's XML tokenizer (`server/src/spreadsheet/xlsx/xml.rs`) with whatever
//! libFuzzer makes of the seeds in `server/tests/fixtures/xlsx-seeds/`, driven as the reader
//! drives it: every event, every attribute unescaped, cells' fast paths (`simple_text`), text
//! read to the end of its element, unknown elements skipped. It must never panic, never hang,
//! and never allocate past its token cap: `make fuzz` runs it with libFuzzer's malloc limit
//! set just above the cap.
//!
//! The tokenizer's source file is compiled in here rather than reached through the `server`
//! crate: it depends only on `memchr` and `thiserror`, while `server` would bring hundreds of
//! crates (axum, sqlx, leptos, …) into every instrumented build. The rest of the reader (zip,
//! parts, cells) is fuzzed by the property tests in `spreadsheet::xlsx::properties`.
#![no_main]

#[path = "../../src/spreadsheet/xlsx/xml.rs"]
#[allow(dead_code)]
mod xml;

use libfuzzer_sys::fuzz_target;
use xml::{Event, XmlReader, unescape};

/// The largest token the reader may hold here (the server's is 64 MB).
const MAX_TOKEN: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let mut xml = XmlReader::new(data, MAX_TOKEN);
    let mut text = String::new();
    loop {
        text.clear();
        let (name, empty) = match xml.next() {
            Ok(Event::Eof) | Err(_) => return,
            Ok(Event::Start(tag)) => {
                for (_, value) in tag.attrs() {
                    let _ = unescape(value, &mut text);
                }
                (tag.name.first().copied(), tag.empty)
            }
            Ok(Event::Text(raw)) => {
                let _ = unescape(raw, &mut text);
                continue;
            }
            Ok(_) => continue,
        };
        if empty {
            continue;
        }
        // What the reader does next depends on the element; here, on its name's first letter.
        let step = match name {
            Some(b'c') => match xml.simple_text(b"<v>", b"</v></c>") {
                Ok(Some(raw)) => unescape(raw, &mut text),
                other => other.map(drop),
            },
            Some(b'v' | b't') => xml.read_text(&mut text),
            Some(b'x') => xml.skip_element(),
            _ => Ok(()),
        };
        if step.is_err() {
            return;
        }
    }
});
