//! A small streaming XML tokenizer, just enough for the parts of an XLSX file. A sheet is tens
//! of megabytes of XML made of a few tag names, and a general XML reader spent most of an
//! import's time there; this one hands out borrowed slices of one refilled buffer, leaves
//! decoding (entities, UTF-8) to the few values that need it, and takes a cell's commonest
//! shapes (`<v>42</v></c>`, `<is><t>text</t></is></c>`) in one step ([`XmlReader::simple_text`]).
//!
//! Measured against quick-xml 0.42 (calamine's reader) driving the same cell loop
//! (`super::measure`, `make bench ONLY=xml`) on `make bench`'s 200,000-row, 10-column workbook
//! (97.6 MB of sheet XML); three runs, each of medians of 7, on the 2-core development machine
//! with other builds going on (load average 6-7; 2026-11-23). From the zip, ours 256,000-270,000
//! rows/s (0.74-0.78 s) against quick-xml's 106,000-113,000 (1.77-1.88 s); from the XML already
//! unpacked, 230,000-319,000 against 92,000-128,000. quick-xml takes 2.3-2.6 times as long,
//! with or without its end-tag checks: it turns every tag, text and reference into an event and
//! checks each event's UTF-8, where a cell here is a few slices. So we keep ours, and fuzz it
//! (the property tests here and in `super::properties`, and `make fuzz`).
//!
//! It reads well-formed XML as spreadsheet programs write it: tags with quoted attributes,
//! text, CDATA, comments and processing instructions; line breaks in text as XML reads them
//! (`\r\n` and `\r` are `\n`). A DOCTYPE is refused (XLSX never has one, and entity
//! declarations are how XML bombs work); namespace prefixes are dropped, so `<x:c>` is `c`; no
//! token may outgrow the cap the reader is made with.

use std::io::{self, Read};

use memchr::{memchr, memmem};

/// How much the buffer reads at a time.
const READ_BYTES: usize = 64 << 10;

/// Why a part could not be read.
#[derive(Debug, thiserror::Error)]
pub enum XmlError {
    #[error("{0}")]
    Malformed(&'static str),
    #[error("a single XML token is larger than {} MB", .0 >> 20)]
    TooLarge(usize),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One step through the document. Slices borrow the reader's buffer until the next step.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// An opening tag; `empty` for `<tag/>`, which has no end event.
    Start(Tag<'a>),
    /// A closing tag's local name.
    End(&'a [u8]),
    /// Text between tags, still escaped (`&amp;`); never empty.
    Text(&'a [u8]),
    /// The content of a CDATA section, taken literally.
    CData(&'a [u8]),
    Eof,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Tag<'a> {
    /// The name without its namespace prefix.
    pub name: &'a [u8],
    /// Everything between the name and `>` (or `/>`).
    attrs: &'a [u8],
    pub empty: bool,
}

impl<'a> Tag<'a> {
    /// The attributes as (local name, raw value) pairs; parsing stops at anything malformed.
    pub fn attrs(&self) -> Attrs<'a> {
        Attrs(self.attrs)
    }

    /// The raw (still escaped) value of the attribute with this local name.
    pub fn attr(&self, wanted: &[u8]) -> Option<&'a [u8]> {
        self.attrs()
            .find_map(|(name, value)| (name == wanted).then_some(value))
    }

    /// An attribute's value, unescaped.
    pub fn attr_text(&self, wanted: &[u8]) -> Result<Option<String>, XmlError> {
        self.attr(wanted)
            .map(|raw| {
                let mut out = String::new();
                unescape(raw, &mut out)?;
                Ok(out)
            })
            .transpose()
    }
}

/// A tag's attributes, in order.
pub struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.0.trim_ascii_start();
        let eq = find(b'=', rest)?;
        let name = local(rest[..eq].trim_ascii_end());
        let after = rest[eq + 1..].trim_ascii_start();
        let quote = *after.first()?;
        if quote != b'"' && quote != b'\'' {
            return None;
        }
        let len = find(quote, &after[1..])?;
        self.0 = &after[len + 2..];
        Some((name, &after[1..1 + len]))
    }
}

/// The part of a qualified name after its prefix.
fn local(name: &[u8]) -> &[u8] {
    match find(b':', name) {
        Some(colon) => &name[colon + 1..],
        None => name,
    }
}

/// `memchr`, with a plain loop first: most of what is searched here is a few bytes long, where
/// `memchr`'s set-up costs more than the search.
#[inline]
pub fn find(byte: u8, haystack: &[u8]) -> Option<usize> {
    const SHORT: usize = 24;
    let head = &haystack[..haystack.len().min(SHORT)];
    match head.iter().position(|&b| b == byte) {
        Some(i) => Some(i),
        None if haystack.len() <= SHORT => None,
        None => memchr(byte, &haystack[SHORT..]).map(|i| i + SHORT),
    }
}

pub struct XmlReader<R> {
    src: R,
    /// Unread bytes are `buf[pos..end]`.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// The largest token (a tag, a run of text) the buffer may grow to hold.
    max_token: usize,
}

impl<R: Read> XmlReader<R> {
    pub fn new(src: R, max_token: usize) -> Self {
        Self {
            src,
            buf: vec![0; READ_BYTES],
            pos: 0,
            end: 0,
            eof: false,
            max_token,
        }
    }

    pub fn next(&mut self) -> Result<Event<'_>, XmlError> {
        loop {
            if self.pos == self.end && !self.fill()? {
                return Ok(Event::Eof);
            }
            if self.buf[self.pos] != b'<' {
                let len = match self.find_byte(0, b'<')? {
                    Some(len) => len,
                    None => self.end - self.pos,
                };
                let start = self.pos;
                self.pos += len;
                return Ok(Event::Text(&self.buf[start..start + len]));
            }
            self.need(2)?;
            match self.buf[self.pos + 1] {
                b'/' => {
                    let len = self.find_byte(2, b'>')?.ok_or(UNCLOSED)?;
                    let start = self.pos;
                    self.pos += len + 1;
                    let name = self.buf[start + 2..start + len].trim_ascii();
                    return Ok(Event::End(local(name)));
                }
                b'?' => {
                    let len = self.find_seq(2, b"?>")?.ok_or(UNCLOSED)?;
                    self.pos += len + 2;
                }
                b'!' => {
                    self.need(4)?;
                    if self.buf[self.pos..].starts_with(b"<!--") {
                        let len = self.find_seq(4, b"-->")?.ok_or(UNCLOSED)?;
                        self.pos += len + 3;
                        continue;
                    }
                    self.need(9)?;
                    if &self.buf[self.pos..self.pos + 9] == b"<![CDATA[" {
                        let len = self.find_seq(9, b"]]>")?.ok_or(UNCLOSED)?;
                        let start = self.pos;
                        self.pos += len + 3;
                        return Ok(Event::CData(&self.buf[start + 9..start + len]));
                    } else {
                        return Err(XmlError::Malformed("a DOCTYPE or other declaration"));
                    }
                }
                _ => {
                    let len = self.tag_len()?;
                    let start = self.pos;
                    self.pos += len + 1;
                    let inner = &self.buf[start + 1..start + len];
                    let (inner, empty) = match inner.strip_suffix(b"/") {
                        Some(inner) => (inner, true),
                        None => (inner, false),
                    };
                    let name_len = inner
                        .iter()
                        .position(|b| b.is_ascii_whitespace())
                        .unwrap_or(inner.len());
                    return Ok(Event::Start(Tag {
                        name: local(&inner[..name_len]),
                        attrs: &inner[name_len..],
                        empty,
                    }));
                }
            }
        }
    }

    /// The fast path for the commonest shapes (`<v>42</v></c>`): if the next bytes are `open`,
    /// text without markup, then `close`, consumes them all and returns the raw text; else
    /// consumes nothing.
    pub fn simple_text(&mut self, open: &[u8], close: &[u8]) -> Result<Option<&[u8]>, XmlError> {
        if !self.available(open.len())? || !self.buf[self.pos..self.end].starts_with(open) {
            return Ok(None);
        }
        let Some(lt) = self.find_byte(open.len(), b'<')? else {
            return Ok(None);
        };
        if !self.available(lt + close.len())?
            || !self.buf[self.pos + lt..self.end].starts_with(close)
        {
            return Ok(None);
        }
        let start = self.pos;
        self.pos += lt + close.len();
        Ok(Some(&self.buf[start + open.len()..start + lt]))
    }

    /// Skips to the end of the element whose start tag was just read (not an empty one).
    pub fn skip_element(&mut self) -> Result<(), XmlError> {
        let mut depth = 1usize;
        loop {
            match self.next()? {
                Event::Start(tag) if !tag.empty => depth += 1,
                Event::End(_) => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                Event::Eof => return Err(UNCLOSED),
                _ => {}
            }
        }
    }

    /// Appends the unescaped text up to the end of the current element (which holds only
    /// text) to `out`.
    pub fn read_text(&mut self, out: &mut String) -> Result<(), XmlError> {
        loop {
            match self.next()? {
                Event::Text(raw) => unescape(raw, out)?,
                Event::CData(raw) => push_lines(utf8(raw)?, out),
                Event::End(_) => return Ok(()),
                Event::Start(tag) if tag.empty => {}
                Event::Start(_) => self.skip_element()?,
                Event::Eof => return Err(UNCLOSED),
            }
        }
    }

    /// The length of the start tag at `pos` up to its `>`, which is not inside quotes.
    fn tag_len(&mut self) -> Result<usize, XmlError> {
        // Usually the first `>` ends the tag: it does when the double quotes before it pair up
        // and there is no single quote that could be hiding one.
        let gt = self.find_byte(1, b'>')?.ok_or(UNCLOSED)?;
        let tag = &self.buf[self.pos..self.pos + gt];
        let quotes = tag.iter().filter(|&&b| b == b'"').count();
        if quotes % 2 == 0 && !tag.contains(&b'\'') {
            return Ok(gt);
        }
        let mut at = 1;
        let mut quote = None;
        loop {
            if self.pos + at == self.end && !self.fill()? {
                return Err(UNCLOSED);
            }
            for (i, &b) in self.buf[self.pos + at..self.end].iter().enumerate() {
                match quote {
                    Some(q) if b == q => quote = None,
                    Some(_) => {}
                    None if b == b'"' || b == b'\'' => quote = Some(b),
                    None if b == b'>' => return Ok(at + i),
                    None => {}
                }
            }
            at = self.end - self.pos;
        }
    }

    /// Where `byte` is, counted from `pos`, searching from `pos + from`.
    fn find_byte(&mut self, from: usize, byte: u8) -> Result<Option<usize>, XmlError> {
        let mut at = from;
        loop {
            let start = at.min(self.end - self.pos);
            if let Some(i) = find(byte, &self.buf[self.pos + start..self.end]) {
                return Ok(Some(start + i));
            }
            at = at.max(self.end - self.pos);
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Where `needle` starts, counted from `pos`, searching from `pos + from`.
    fn find_seq(&mut self, from: usize, needle: &[u8]) -> Result<Option<usize>, XmlError> {
        let mut at = from;
        loop {
            let start = self.pos + at.min(self.end - self.pos);
            if let Some(i) = memmem::find(&self.buf[start..self.end], needle) {
                return Ok(Some(start - self.pos + i));
            }
            at = at.max((self.end - self.pos).saturating_sub(needle.len() - 1));
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Whether `n` bytes from `pos` are (or can be made) available.
    fn available(&mut self, n: usize) -> Result<bool, XmlError> {
        while self.end - self.pos < n {
            if !self.fill()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Makes at least `n` bytes from `pos` available, or fails: the document ended mid-token.
    fn need(&mut self, n: usize) -> Result<(), XmlError> {
        if self.available(n)? {
            Ok(())
        } else {
            Err(UNCLOSED)
        }
    }

    /// Reads more bytes after the unread ones; false at the end of the input.
    fn fill(&mut self) -> Result<bool, XmlError> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() - self.end < READ_BYTES / 2 {
            if self.buf.len() >= self.max_token {
                return Err(XmlError::TooLarge(self.max_token));
            }
            let grown = (self.buf.len() * 2).min(self.max_token);
            self.buf.resize(grown, 0);
        }
        let n = loop {
            match self.src.read(&mut self.buf[self.end..]) {
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        self.end += n;
        self.eof = n == 0;
        Ok(n > 0)
    }
}

const UNCLOSED: XmlError = XmlError::Malformed("the XML ends in the middle of an element");

fn utf8(raw: &[u8]) -> Result<&str, XmlError> {
    std::str::from_utf8(raw).map_err(|_| XmlError::Malformed("text that is not UTF-8"))
}

/// Appends text to `out` as XML reads it: a line break written `\r\n` or `\r` is `\n`
/// (XML 1.0 §2.11). A carriage return meant as one is written `&#13;` (or, in OOXML,
/// `_x000D_`).
fn push_lines(text: &str, out: &mut String) {
    let mut rest = text;
    while let Some(cr) = find(b'\r', rest.as_bytes()) {
        out.push_str(&rest[..cr]);
        out.push('\n');
        rest = &rest[cr + 1..];
        rest = rest.strip_prefix('\n').unwrap_or(rest);
    }
    out.push_str(rest);
}

/// Appends `raw` to `out` with its entity and character references replaced and its line
/// breaks read as XML reads them.
pub fn unescape(raw: &[u8], out: &mut String) -> Result<(), XmlError> {
    let mut rest = raw;
    while let Some(amp) = find(b'&', rest) {
        push_lines(utf8(&rest[..amp])?, out);
        let semi = find(b';', &rest[amp..]).ok_or(BAD_REFERENCE)?;
        let name = &rest[amp + 1..amp + semi];
        match name {
            b"lt" => out.push('<'),
            b"gt" => out.push('>'),
            b"amp" => out.push('&'),
            b"quot" => out.push('"'),
            b"apos" => out.push('\''),
            _ => {
                let code = match name {
                    [b'#', b'x' | b'X', hex @ ..] => u32::from_str_radix(utf8(hex)?, 16),
                    [b'#', dec @ ..] => utf8(dec)?.parse(),
                    _ => return Err(BAD_REFERENCE),
                };
                out.push(code.ok().and_then(char::from_u32).ok_or(BAD_REFERENCE)?);
            }
        }
        rest = &rest[amp + semi + 1..];
    }
    push_lines(utf8(rest)?, out);
    Ok(())
}

const BAD_REFERENCE: XmlError = XmlError::Malformed("an unknown or broken &reference;");

#[cfg(test)]
mod tests {
    use proptest::{collection::vec, prelude::*, sample::select};

    use super::*;
    use crate::spreadsheet::xlsx::properties::{PIECES, config, mutate, mutations, xml_seeds};

    /// Every event, owned, reading through a buffer of `max_token` bytes.
    fn events(xml: &str, max_token: usize) -> Result<Vec<String>, XmlError> {
        let mut reader = XmlReader::new(xml.as_bytes(), max_token);
        let mut out = Vec::new();
        loop {
            let event = match reader.next()? {
                Event::Start(tag) => format!(
                    "<{}{}{}>",
                    String::from_utf8_lossy(tag.name),
                    tag.attr(b"r")
                        .map(|r| format!(" r={}", String::from_utf8_lossy(r)))
                        .unwrap_or_default(),
                    if tag.empty { "/" } else { "" }
                ),
                Event::End(name) => format!("</{}>", String::from_utf8_lossy(name)),
                Event::Text(raw) => {
                    let mut text = String::new();
                    unescape(raw, &mut text)?;
                    format!("text {text}")
                }
                Event::CData(raw) => {
                    let mut text = String::new();
                    push_lines(&String::from_utf8_lossy(raw), &mut text);
                    format!("cdata {text}")
                }
                Event::Eof => return Ok(out),
            };
            out.push(event);
        }
    }

    #[test]
    fn tags_text_cdata_and_references_come_out_in_order() {
        let xml = "<?xml version=\"1.0\"?>\n<!-- a > comment --><x:row r='2' \
                   note=\"a > b\"><c r=\"B2\" t=\"s\"/><t>Tom &amp; Jerry &#233;&#x1F600;</t>\
                   <t><![CDATA[<raw> & ]]></t><t>a\r\nb\rc&#13;\n</t>\
                   <t><![CDATA[d\r\ne]]></t></x:row>";
        let expected = [
            "text \n",
            "<row r=2>",
            "<c r=B2/>",
            "<t>",
            "text Tom & Jerry é😀",
            "</t>",
            "<t>",
            "cdata <raw> & ",
            "</t>",
            "<t>",
            "text a\nb\nc\r\n",
            "</t>",
            "<t>",
            "cdata d\ne",
            "</t>",
            "</row>",
        ];
        // A buffer far smaller than a token grows; the events are the same.
        assert_eq!(events(xml, 1 << 20).unwrap(), expected);
        let mut small = XmlReader::new(xml.as_bytes(), 1 << 20);
        small.buf.truncate(3);
        let mut count = 0;
        while small.next().unwrap() != Event::Eof {
            count += 1;
        }
        assert_eq!(count, expected.len());
    }

    #[test]
    fn broken_documents_are_errors_not_panics() {
        for xml in [
            "<row",
            "<row r=\"1>",
            "<!DOCTYPE x [<!ENTITY a \"b\">]><x/>",
            "<t>&bogus;</t>",
            "<t>&#xD800;</t>",
            "<t>&amp</t>",
            "<!-- open",
            "<",
        ] {
            assert!(events(xml, 1 << 20).is_err(), "{xml}");
        }
        let long = format!("<t>{}</t>", "x".repeat(200_000));
        assert!(matches!(
            events(&long, 128 << 10),
            Err(XmlError::TooLarge(_))
        ));
    }

    /// Every event of `reader` as text, and the error that ended them if one did. Checks on
    /// every step that the buffer stays within its cap.
    fn read_all(mut reader: XmlReader<impl Read>) -> (Vec<String>, Option<String>) {
        let cap = reader.max_token.max(READ_BYTES);
        let mut out = Vec::new();
        loop {
            let event = match reader.next() {
                Ok(Event::Eof) => return (out, None),
                Ok(event) => format!("{event:?}"),
                Err(err) => return (out, Some(err.to_string())),
            };
            assert!(reader.buf.len() <= cap, "{} > {cap}", reader.buf.len());
            out.push(event);
        }
    }

    /// Hands out its bytes a few at a time, as an inflating zip entry may.
    struct Trickle<'a> {
        bytes: &'a [u8],
        sizes: Vec<usize>,
        reads: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let size = self.sizes[self.reads % self.sizes.len()];
            self.reads += 1;
            let n = size.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// Random bytes, the seeds mutated, or pieces of XML strung together.
    fn documents() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            vec(any::<u8>(), 0..512),
            (select(xml_seeds()), mutations()).prop_map(|(seed, changes)| mutate(seed, &changes)),
            vec(select(PIECES.to_vec()), 0..48).prop_map(|pieces| pieces.concat()),
        ]
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn events_are_the_same_however_the_bytes_arrive(
            xml in documents(),
            sizes in vec(1..9usize, 1..6),
        ) {
            let whole = read_all(XmlReader::new(&xml[..], 1 << 20));
            let mut trickled = XmlReader::new(Trickle { bytes: &xml, sizes, reads: 0 }, 1 << 20);
            trickled.buf.truncate(3);
            prop_assert_eq!(read_all(trickled), whole);
        }
    }

    proptest! {
        #![proptest_config(config(64))]

        #[test]
        fn a_token_longer_than_the_cap_is_refused(
            before in documents(),
            open in select(vec![&b"<c r=\""[..], b"<t>", b"<!--", b"<![CDATA[", b"<?pi ", b""]),
            filler in any::<u8>(),
            after in documents(),
        ) {
            // Whatever the run of one byte is, in whatever token, it cannot end a token often
            // enough: some token is longer than the cap. `read_all` checks the buffer on
            // every step.
            let cap = READ_BYTES + 1000;
            let xml = [&before[..], open, &vec![filler; 3 * cap], &after[..]].concat();
            let (_, err) = read_all(XmlReader::new(&xml[..], cap));
            prop_assert!(err.is_some());
        }
    }
}
