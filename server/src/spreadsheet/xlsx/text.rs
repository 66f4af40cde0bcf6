//! Text in an XLSX file: string items (a shared string, or a cell's own text), which may be
//! rich text in runs and carry phonetic guides, and OOXML's escapes for characters XML cannot
//! hold.

use std::io::Read;

use super::xml::{self, Event, XmlError, XmlReader};

/// Appends the text of a string item (`<si>` in the shared strings, `<is>` in a cell) to `out`:
/// its `<t>` elements, plain or in rich-text runs, but not phonetic guides (`<rPh>`). Text is
/// trimmed unless it keeps its spaces (`xml:space="preserve"`), and `_x000D_` escapes are
/// decoded.
pub(super) fn read_string_item(
    xml: &mut XmlReader<impl Read>,
    out: &mut String,
    scratch: &mut String,
) -> Result<(), XmlError> {
    let (mut depth, mut phonetic) = (1usize, 0usize);
    loop {
        match xml.next()? {
            Event::Start(tag) if tag.empty => {}
            Event::Start(tag) if tag.name == b"t" && phonetic == 0 => {
                let preserve = tag.attr(b"space") == Some(b"preserve");
                scratch.clear();
                xml.read_text(scratch)?;
                push_text(scratch, preserve, out);
            }
            Event::Start(tag) => {
                depth += 1;
                phonetic += usize::from(tag.name == b"rPh");
            }
            Event::End(name) => {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
                phonetic -= usize::from(name == b"rPh" && phonetic > 0);
            }
            Event::Eof => return Err(XmlError::Malformed("a string ends early")),
            Event::Text(_) | Event::CData(_) => {}
        }
    }
}

/// Appends the text of one `<t>`: trimmed unless it keeps its spaces, escapes decoded.
pub(super) fn push_text(text: &str, preserve: bool, out: &mut String) {
    let text = if preserve {
        text
    } else {
        text.trim_matches([' ', '\t', '\r', '\n'])
    };
    unescape_ooxml(text, out);
}

/// Decodes OOXML's escapes for characters XML cannot hold (`_x000D_` is a carriage return);
/// a UTF-16 surrogate that is not part of a pair becomes U+FFFD.
pub(super) fn unescape_ooxml(text: &str, out: &mut String) {
    let mut rest = text;
    let mut pending_high: Option<u16> = None;
    while let Some(at) = next_escape(rest) {
        let unit = rest
            .get(at + 2..at + 7)
            .filter(|escape| escape.ends_with('_'))
            .and_then(|escape| u16::from_str_radix(&escape[..4], 16).ok());
        let Some(unit) = unit else {
            flush_surrogate(&mut pending_high, out);
            out.push_str(&rest[..at + 2]);
            rest = &rest[at + 2..];
            continue;
        };
        if at > 0 {
            flush_surrogate(&mut pending_high, out);
        }
        out.push_str(&rest[..at]);
        match (pending_high.take(), unit) {
            (Some(high), 0xDC00..=0xDFFF) => {
                let code =
                    0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            (high, 0xD800..=0xDBFF) => {
                if high.is_some() {
                    out.push(char::REPLACEMENT_CHARACTER);
                }
                pending_high = Some(unit);
            }
            (high, unit) => {
                if high.is_some() {
                    out.push(char::REPLACEMENT_CHARACTER);
                }
                out.push(char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
        }
        rest = &rest[at + 7..];
    }
    flush_surrogate(&mut pending_high, out);
    out.push_str(rest);
}

/// Where the next `_x` is.
fn next_escape(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = xml::find(b'_', &bytes[from..]) {
        if bytes.get(from + i + 1) == Some(&b'x') {
            return Some(from + i);
        }
        from += i + 1;
    }
    None
}

fn flush_surrogate(pending_high: &mut Option<u16>, out: &mut String) {
    if pending_high.take().is_some() {
        out.push(char::REPLACEMENT_CHARACTER);
    }
}

/// The shared strings, in one buffer.
#[derive(Default)]
pub(super) struct SharedStrings {
    text: String,
    ends: Vec<usize>,
}

impl SharedStrings {
    pub(super) fn read(xml: &mut XmlReader<impl Read>) -> Result<SharedStrings, XmlError> {
        let mut strings = SharedStrings::default();
        let mut scratch = String::new();
        loop {
            match xml.next()? {
                Event::Start(tag) if tag.name == b"si" => {
                    if !tag.empty {
                        read_string_item(xml, &mut strings.text, &mut scratch)?;
                    }
                    strings.ends.push(strings.text.len());
                }
                Event::Eof => return Ok(strings),
                _ => {}
            }
        }
    }

    pub(super) fn get(&self, index: usize) -> Option<&str> {
        let end = *self.ends.get(index)?;
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        Some(&self.text[start..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ooxml_escapes_decode_and_broken_ones_stay() {
        let mut out = String::new();
        unescape_ooxml(
            "a_x000D_b _x00e9_ _xD83D__xDE00_ _xD83D_ _x12_ _x",
            &mut out,
        );
        assert_eq!(out, "a\rb é 😀 \u{FFFD} _x12_ _x");
    }
}
