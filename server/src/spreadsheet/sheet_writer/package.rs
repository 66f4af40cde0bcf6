//! The zip around the sheet. The sheet is the zip's first entry, so the file is: the sheet's
//! local header (which names its CRC-32 and sizes, known once every piece is written), the
//! pieces in order, then [`tail`]: the workbook's other parts (small, stored as they are) and
//! the central directory. Past 4 GiB the sizes and offsets go in zip64 fields, as the format
//! says.

use super::piece::Summary;
use crate::spreadsheet::output::MAX_PLACES;

use super::cells::style;

const SHEET_PATH: &str = "xl/worksheets/sheet1.xml";
const DEFLATED: u16 = 8;
const STORED: u16 = 0;
/// 1980-01-01 00:00, the first moment a zip can name: the parts carry no time of their own.
const DOS_DATE: u16 = (1 << 5) | 1;
const ZIP64_MARK: u32 = u32::MAX;

/// The start of the file: the sheet's local header, before its first piece.
pub fn sheet_header(sheet: Summary) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    Entry::sheet(sheet).write_local(&mut out);
    out
}

/// The end of the file, after the sheet's last piece: the other parts of a workbook whose one
/// sheet is named `sheet_name`, and the central directory that lists them all.
pub fn tail(sheet_name: &str, sheet: Summary) -> Vec<u8> {
    let mut offset = sheet_header(sheet).len() as u64 + sheet.deflated;
    let mut out = Vec::new();
    let mut entries = vec![Entry::sheet(sheet)];
    for (path, body) in other_parts(sheet_name) {
        let entry = Entry {
            path,
            method: STORED,
            crc32: crc32fast::hash(body.as_bytes()),
            size: body.len() as u64,
            deflated: body.len() as u64,
            offset,
        };
        let start = out.len();
        entry.write_local(&mut out);
        out.extend_from_slice(body.as_bytes());
        offset += (out.len() - start) as u64;
        entries.push(entry);
    }
    let directory_start = offset;
    let start = out.len();
    for entry in &entries {
        entry.write_central(&mut out);
    }
    let directory_len = (out.len() - start) as u64;
    write_end(
        &mut out,
        entries.len() as u64,
        directory_start,
        directory_len,
    );
    out
}

/// One file in the zip.
struct Entry {
    path: &'static str,
    method: u16,
    crc32: u32,
    size: u64,
    deflated: u64,
    /// Where its local header starts.
    offset: u64,
}

impl Entry {
    /// The sheet: the first entry, its pieces deflated.
    fn sheet(sheet: Summary) -> Entry {
        Entry {
            path: SHEET_PATH,
            method: DEFLATED,
            crc32: sheet.crc32,
            size: sheet.bytes,
            deflated: sheet.deflated,
            offset: 0,
        }
    }

    fn sizes_need_zip64(&self) -> bool {
        self.size >= u64::from(ZIP64_MARK) || self.deflated >= u64::from(ZIP64_MARK)
    }

    fn version(&self, zip64: bool) -> u16 {
        if zip64 { 45 } else { 20 }
    }

    fn write_local(&self, out: &mut Vec<u8>) {
        let zip64 = self.sizes_need_zip64();
        put32(out, 0x0403_4b50);
        put16(out, self.version(zip64));
        put16(out, 0); // flags
        put16(out, self.method);
        put16(out, 0); // time
        put16(out, DOS_DATE);
        put32(out, self.crc32);
        let extra_len = if zip64 { 20 } else { 0 };
        if zip64 {
            put32(out, ZIP64_MARK);
            put32(out, ZIP64_MARK);
        } else {
            put32(out, self.deflated as u32);
            put32(out, self.size as u32);
        }
        put16(out, self.path.len() as u16);
        put16(out, extra_len);
        out.extend_from_slice(self.path.as_bytes());
        if zip64 {
            put16(out, 0x0001);
            put16(out, 16);
            put64(out, self.size);
            put64(out, self.deflated);
        }
    }

    fn write_central(&self, out: &mut Vec<u8>) {
        let sizes64 = self.sizes_need_zip64();
        let offset64 = self.offset >= u64::from(ZIP64_MARK);
        let mut extra = Vec::new();
        if sizes64 {
            put64(&mut extra, self.size);
            put64(&mut extra, self.deflated);
        }
        if offset64 {
            put64(&mut extra, self.offset);
        }
        let zip64 = !extra.is_empty();
        put32(out, 0x0201_4b50);
        put16(out, self.version(zip64)); // made by
        put16(out, self.version(zip64)); // needed
        put16(out, 0); // flags
        put16(out, self.method);
        put16(out, 0); // time
        put16(out, DOS_DATE);
        put32(out, self.crc32);
        put32(
            out,
            if sizes64 {
                ZIP64_MARK
            } else {
                self.deflated as u32
            },
        );
        put32(
            out,
            if sizes64 {
                ZIP64_MARK
            } else {
                self.size as u32
            },
        );
        put16(out, self.path.len() as u16);
        put16(out, if zip64 { extra.len() as u16 + 4 } else { 0 });
        put16(out, 0); // comment
        put16(out, 0); // disk
        put16(out, 0); // internal attributes
        put32(out, 0); // external attributes
        put32(
            out,
            if offset64 {
                ZIP64_MARK
            } else {
                self.offset as u32
            },
        );
        out.extend_from_slice(self.path.as_bytes());
        if zip64 {
            put16(out, 0x0001);
            put16(out, extra.len() as u16);
            out.extend_from_slice(&extra);
        }
    }
}

/// The end of central directory record, after zip64's record and locator when the directory
/// starts past 4 GiB.
fn write_end(out: &mut Vec<u8>, entries: u64, directory_start: u64, directory_len: u64) {
    if directory_start >= u64::from(ZIP64_MARK) {
        let record_start = directory_start + directory_len;
        put32(out, 0x0606_4b50);
        put64(out, 44); // the record's size after this field
        put16(out, 45);
        put16(out, 45);
        put32(out, 0);
        put32(out, 0);
        put64(out, entries);
        put64(out, entries);
        put64(out, directory_len);
        put64(out, directory_start);
        put32(out, 0x0706_4b50);
        put32(out, 0);
        put64(out, record_start);
        put32(out, 1);
    }
    put32(out, 0x0605_4b50);
    put16(out, 0);
    put16(out, 0);
    put16(out, entries as u16);
    put16(out, entries as u16);
    put32(out, directory_len as u32);
    put32(out, directory_start.min(u64::from(ZIP64_MARK)) as u32);
    put16(out, 0);
}

fn put16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// The workbook's parts besides its sheet: content types, relationships, the workbook naming
/// its one sheet, and the styles the cells use ([`style`]).
fn other_parts(sheet_name: &str) -> [(&'static str, String); 5] {
    const MAIN: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
    const RELS: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
    const DOC_RELS: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
    const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n";
    let types = format!(
        "{HEAD}<Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">\
         <Default Extension=\"rels\" \
         ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/>\
         <Default Extension=\"xml\" ContentType=\"application/xml\"/>\
         <Override PartName=\"/xl/workbook.xml\" \
         ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml\"/>\
         <Override PartName=\"/{SHEET_PATH}\" \
         ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml\"/>\
         <Override PartName=\"/xl/styles.xml\" \
         ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml\"/>\
         </Types>"
    );
    let rels = format!(
        "{HEAD}<Relationships xmlns=\"{RELS}\"><Relationship Id=\"rId1\" \
         Type=\"{DOC_RELS}/officeDocument\" Target=\"xl/workbook.xml\"/></Relationships>"
    );
    let workbook = format!(
        "{HEAD}<workbook xmlns=\"{MAIN}\" xmlns:r=\"{DOC_RELS}\"><sheets>\
         <sheet name=\"{}\" sheetId=\"1\" r:id=\"rId1\"/></sheets></workbook>",
        attribute(sheet_name)
    );
    let workbook_rels = format!(
        "{HEAD}<Relationships xmlns=\"{RELS}\">\
         <Relationship Id=\"rId1\" Type=\"{DOC_RELS}/worksheet\" Target=\"worksheets/sheet1.xml\"/>\
         <Relationship Id=\"rId2\" Type=\"{DOC_RELS}/styles\" Target=\"styles.xml\"/>\
         </Relationships>"
    );
    [
        ("[Content_Types].xml", types),
        ("_rels/.rels", rels),
        ("xl/workbook.xml", workbook),
        ("xl/_rels/workbook.xml.rels", workbook_rels),
        ("xl/styles.xml", styles()),
    ]
}

/// Cell formats by [`style`]'s indexes: plain, bold, a date, a timestamp, then a decimal with
/// 1 to [`MAX_PLACES`] places.
fn styles() -> String {
    let decimals = (1..=MAX_PLACES).map(|places| {
        let id = 165 + places;
        let code = format!("0.{}", "0".repeat(places));
        (id, code)
    });
    let formats: Vec<(usize, String)> = [
        (164, "yyyy-mm-dd".to_owned()),
        (165, "yyyy-mm-dd hh:mm:ss".to_owned()),
    ]
    .into_iter()
    .chain(decimals)
    .collect();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n\
         <styleSheet xmlns=\"http://schemas.openxmlformats.org/spreadsheetml/2006/main\">\
         <numFmts count=\"{}\">",
        formats.len()
    );
    for (id, code) in &formats {
        out.push_str(&format!(
            "<numFmt numFmtId=\"{id}\" formatCode=\"{code}\"/>"
        ));
    }
    out.push_str(
        "</numFmts><fonts count=\"2\"><font><sz val=\"11\"/><name val=\"Calibri\"/></font>\
         <font><b/><sz val=\"11\"/><name val=\"Calibri\"/></font></fonts>\
         <fills count=\"2\"><fill><patternFill patternType=\"none\"/></fill>\
         <fill><patternFill patternType=\"gray125\"/></fill></fills>\
         <borders count=\"1\"><border><left/><right/><top/><bottom/><diagonal/></border></borders>\
         <cellStyleXfs count=\"1\"><xf numFmtId=\"0\" fontId=\"0\" fillId=\"0\" borderId=\"0\"/>\
         </cellStyleXfs>",
    );
    let xfs = formats.len() + 2;
    out.push_str(&format!(
        "<cellXfs count=\"{xfs}\"><xf numFmtId=\"0\" fontId=\"0\" fillId=\"0\" borderId=\"0\" \
         xfId=\"0\"/><xf numFmtId=\"0\" fontId=\"1\" fillId=\"0\" borderId=\"0\" xfId=\"0\" \
         applyFont=\"1\"/>"
    ));
    for (id, _) in &formats {
        out.push_str(&format!(
            "<xf numFmtId=\"{id}\" fontId=\"0\" fillId=\"0\" borderId=\"0\" xfId=\"0\" \
             applyNumberFormat=\"1\"/>"
        ));
    }
    out.push_str(
        "</cellXfs><cellStyles count=\"1\"><cellStyle name=\"Normal\" xfId=\"0\" \
         builtinId=\"0\"/></cellStyles></styleSheet>",
    );
    debug_assert_eq!(style::DECIMAL_BASE as usize + MAX_PLACES + 1, xfs);
    out
}

/// Text for an XML attribute's quotes.
fn attribute(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
