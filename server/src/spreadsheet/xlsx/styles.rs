//! Which cells hold dates. An XLSX date is a number of days; only its cell's number format
//! (`styles.xml`: the cell's `s` indexes `cellXfs`, whose `numFmtId` is built in or defined in
//! `numFmts`) says it is a date, a time, or an elapsed duration.

use std::{collections::HashMap, io::Read};

use super::xml::{Event, XmlError, XmlReader};

/// What a number in a cell of some style means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NumberKind {
    #[default]
    Plain,
    /// A date, a time of day, or both.
    DateTime,
    /// Elapsed time (`[h]:mm`): written as the number of days it is.
    Duration,
}

/// The number kind of every cell style, by index.
#[derive(Debug, Default)]
pub struct Styles(Vec<NumberKind>);

impl Styles {
    pub fn read(xml: &mut XmlReader<impl Read>) -> Result<Styles, XmlError> {
        let mut custom = HashMap::new();
        let mut format_ids = Vec::new();
        // Both only where they define the cells' formats (`dxfs`, for conditional formats,
        // holds `numFmt`s and `xf`-like entries of its own).
        let (mut in_num_fmts, mut in_cell_xfs) = (false, false);
        loop {
            match xml.next()? {
                Event::Start(tag) if tag.name == b"numFmts" => in_num_fmts = !tag.empty,
                Event::End(b"numFmts") => in_num_fmts = false,
                Event::Start(tag) if in_num_fmts && tag.name == b"numFmt" => {
                    if let (Some(id), Some(code)) =
                        (tag.attr(b"numFmtId"), tag.attr_text(b"formatCode")?)
                    {
                        custom.insert(id.to_vec(), kind_of_code(&code));
                    }
                }
                Event::Start(tag) if tag.name == b"cellXfs" => in_cell_xfs = !tag.empty,
                Event::End(b"cellXfs") => in_cell_xfs = false,
                Event::Start(tag) if in_cell_xfs && tag.name == b"xf" => {
                    format_ids.push(tag.attr(b"numFmtId").unwrap_or(b"0").to_vec());
                }
                Event::Eof => break,
                _ => {}
            }
        }
        let kinds = format_ids
            .iter()
            .map(|id| custom.get(id).copied().unwrap_or_else(|| built_in(id)))
            .collect();
        Ok(Styles(kinds))
    }

    /// The kind of numbers in cells of style `index` (plain for an unknown style).
    pub fn kind(&self, index: usize) -> NumberKind {
        self.0.get(index).copied().unwrap_or_default()
    }
}

/// The built-in formats (ECMA-376 §18.8.30), including the East Asian date formats.
fn built_in(id: &[u8]) -> NumberKind {
    match std::str::from_utf8(id)
        .ok()
        .and_then(|id| id.parse::<u32>().ok())
    {
        Some(14..=22 | 27..=36 | 45 | 47 | 50..=58) => NumberKind::DateTime,
        Some(46) => NumberKind::Duration,
        _ => NumberKind::Plain,
    }
}

/// Reads a custom format code such as `yyyy-mm-dd`, `[h]:mm:ss` or `#,##0.00 "kg"`. Only the
/// first section (for positive numbers) counts. Quoted text, escaped or padding characters
/// and bracketed colours, locales and conditions are not format letters; a bracketed `[h]`,
/// `[mm]` or `[ss]` makes elapsed time.
fn kind_of_code(code: &str) -> NumberKind {
    let mut chars = code.chars();
    let mut date = false;
    while let Some(c) = chars.next() {
        match c {
            ';' => break,
            '"' => {
                chars.by_ref().find(|&c| c == '"');
            }
            '\\' | '_' | '*' => {
                chars.next();
            }
            '[' => {
                let inner: String = chars.by_ref().take_while(|&c| c != ']').collect();
                let elapsed = !inner.is_empty()
                    && inner
                        .chars()
                        .all(|c| matches!(c.to_ascii_lowercase(), 'h' | 'm' | 's'));
                if elapsed {
                    return NumberKind::Duration;
                }
            }
            _ if matches!(c.to_ascii_lowercase(), 'd' | 'm' | 'y' | 'h' | 's') => date = true,
            _ => {}
        }
    }
    if date {
        NumberKind::DateTime
    } else {
        NumberKind::Plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_codes_are_told_apart() {
        for code in [
            "yyyy-mm-dd",
            "DD/MM/YY",
            "h:mm AM/PM",
            "[$-409]mmm d, yyyy",
            "m\"M\"d",
        ] {
            assert_eq!(kind_of_code(code), NumberKind::DateTime, "{code}");
        }
        for code in ["[h]:mm:ss", "[mm]:ss", "[SS]"] {
            assert_eq!(kind_of_code(code), NumberKind::Duration, "{code}");
        }
        for code in [
            "General",
            "0.00E+00",
            "#,##0.00 \"kg\"",
            "[Red]0.00",
            "0\\d",
            "_(* #,##0_)",
            "0;[Red]yyyy",
        ] {
            assert_eq!(kind_of_code(code), NumberKind::Plain, "{code}");
        }
    }

    #[test]
    fn cell_styles_take_custom_formats_over_built_in_ones() {
        let xml = r#"<styleSheet><numFmts count="2"><numFmt numFmtId="164" formatCode="yyyy&quot;-&quot;mm"/>
            <numFmt numFmtId="14" formatCode="0.00"/></numFmts>
            <cellStyleXfs><xf numFmtId="22"/></cellStyleXfs>
            <dxfs><dxf><numFmt numFmtId="164" formatCode="0.00"/></dxf></dxfs>
            <cellXfs count="5"><xf numFmtId="0"/><xf numFmtId="164"/><xf numFmtId="14"/>
            <xf numFmtId="22" applyNumberFormat="1"/><xf numFmtId="46"/></cellXfs></styleSheet>"#;
        let styles = Styles::read(&mut XmlReader::new(xml.as_bytes(), 1 << 20)).unwrap();
        let kinds: Vec<_> = (0..6).map(|i| styles.kind(i)).collect();
        use NumberKind::*;
        assert_eq!(kinds, [Plain, DateTime, Plain, DateTime, Duration, Plain]);
    }
}
