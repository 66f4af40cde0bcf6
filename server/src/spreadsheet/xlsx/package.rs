//! The package around the sheets: which parts an XLSX zip holds (its relationships), which
//! sheets the workbook lists, and reading a part through the unpacking budget.

use std::{
    collections::HashMap,
    io::{Cursor, Read},
};

use zip::ZipArchive;

use super::{
    MAX_TOKEN_BYTES, ReadError, damaged,
    xml::{Event, XmlError, XmlReader},
};
use crate::spreadsheet::unzip::{Budget, ZipOrBomb};

/// The workbook's relationships: which part each id names.
pub(super) struct Relationships(HashMap<String, (String, String)>);

impl Relationships {
    pub(super) fn read(xml: &mut XmlReader<impl Read>) -> Result<Relationships, XmlError> {
        let mut rels = HashMap::new();
        loop {
            match xml.next()? {
                Event::Start(tag) if tag.name == b"Relationship" => {
                    if tag.attr(b"TargetMode") == Some(b"External") {
                        continue;
                    }
                    if let (Some(id), Some(target)) =
                        (tag.attr_text(b"Id")?, tag.attr_text(b"Target")?)
                    {
                        let kind = tag.attr_text(b"Type")?.unwrap_or_default();
                        rels.insert(id, (kind, part_path(&target)));
                    }
                }
                Event::Eof => return Ok(Relationships(rels)),
                _ => {}
            }
        }
    }

    fn path(&self, id: &str) -> Option<&str> {
        self.0.get(id).map(|(_, path)| path.as_str())
    }

    /// The part of the relationship type ending in `type_suffix`, or else the usual name.
    pub(super) fn path_of_type(&self, type_suffix: &str, usual: &str) -> String {
        self.0
            .values()
            .find(|(kind, _)| kind.ends_with(type_suffix))
            .map(|(_, path)| path.clone())
            .unwrap_or_else(|| format!("xl/{usual}"))
    }
}

/// A relationship target as a zip entry name: relative to `xl/` unless it starts with `/`.
fn part_path(target: &str) -> String {
    let target = target.replace('\\', "/");
    let joined = match target.strip_prefix('/') {
        Some(absolute) => absolute.to_owned(),
        None => format!("xl/{target}"),
    };
    let mut parts: Vec<&str> = Vec::new();
    for segment in joined.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            segment => parts.push(segment),
        }
    }
    parts.join("/")
}

/// A sheet the workbook lists.
pub(super) struct SheetEntry {
    pub name: String,
    /// Its part in the package.
    pub path: String,
    /// Hidden or very hidden: not among Excel's tabs (drop-down lists, lookups).
    pub hidden: bool,
}

/// The sheets, in order, and whether dates count from 1904.
pub(super) fn read_workbook(
    xml: &mut XmlReader<impl Read>,
    rels: &Relationships,
) -> Result<(Vec<SheetEntry>, bool), ReadError> {
    let mut sheets = Vec::new();
    let mut date_1904 = false;
    loop {
        match xml.next()? {
            Event::Start(tag) if tag.name == b"workbookPr" => {
                date_1904 = matches!(tag.attr(b"date1904"), Some(b"1" | b"true"));
            }
            Event::Start(tag) if tag.name == b"sheet" => {
                let name = tag
                    .attr_text(b"name")?
                    .ok_or_else(|| damaged("a sheet has no name"))?;
                let id = tag.attr_text(b"id")?.unwrap_or_default();
                let path = rels
                    .path(&id)
                    .ok_or_else(|| damaged("a sheet's part is not named"))?;
                let hidden = matches!(tag.attr(b"state"), Some(b"hidden" | b"veryHidden"));
                sheets.push(SheetEntry {
                    name,
                    path: path.to_owned(),
                    hidden,
                });
            }
            Event::Eof => return Ok((sheets, date_1904)),
            _ => {}
        }
    }
}

/// The bytes of the sheet named `sheet`, unpacked as they are read.
pub(super) fn sheet_part<'a>(
    zip: &'a mut ZipArchive<Cursor<Vec<u8>>>,
    budget: &'a mut Budget,
    sheets: &[SheetEntry],
    sheet: &str,
) -> Result<impl Read + 'a, ReadError> {
    let path = &sheets
        .iter()
        .find(|entry| entry.name == sheet)
        .ok_or_else(|| damaged("a sheet is listed but missing"))?
        .path;
    entry(zip, budget, path)?.ok_or_else(|| damaged("a sheet's part is missing"))
}

/// The part at `path`, ready to read as XML; `None` if there is no such part.
pub(super) fn part<'a>(
    zip: &'a mut ZipArchive<Cursor<Vec<u8>>>,
    budget: &'a mut Budget,
    path: &str,
) -> Result<Option<XmlReader<impl Read + 'a>>, ReadError> {
    Ok(entry(zip, budget, path)?.map(|bytes| XmlReader::new(bytes, MAX_TOKEN_BYTES)))
}

/// The zip entry at `path` (matched without regard to case, as some writers differ), unpacked
/// through the budget as it is read; `None` if there is no such entry.
fn entry<'a>(
    zip: &'a mut ZipArchive<Cursor<Vec<u8>>>,
    budget: &'a mut Budget,
    path: &str,
) -> Result<Option<impl Read + 'a>, ReadError> {
    let index = zip.index_for_name(path).or_else(|| {
        zip.file_names()
            .position(|name| name.is_ok_and(|name| name.eq_ignore_ascii_case(path)))
    });
    let Some(index) = index else {
        return Ok(None);
    };
    let entry = zip.by_index(index).map_err(ZipOrBomb::from)?;
    Ok(Some(budget.entry(entry)))
}
