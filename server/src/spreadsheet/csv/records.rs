//! CSV records read with every buffer capped while the record is read, not after.
//!
//! The `csv` crate's reader builds a whole record before handing it over, so one 1 GiB quoted
//! field, or a row of ten million fields, costs that much memory before any cap of ours can
//! look at it. This reader drives `csv_core` (the same parser) itself: a record's field bytes
//! stop being kept at [`MAX_ROW_BYTES`] and its field ends at [`MAX_FIELDS_KEPT`]; the rest of
//! such a record is read through a small scratch buffer and only counted. A record longer than
//! [`MAX_ROW_BYTES`] in the file is [`Record::is_too_large`]: planning gives it a chunk of its
//! own, which becomes a row error without its bytes ever being read again.
//!
//! It can also keep the raw bytes it reads (for planning, which hands each chunk's bytes over
//! as it finds them), never those of a record that is too large.

use std::{
    cell::RefCell,
    io::{self, BufRead},
};

use super::super::MAX_COLUMNS;

/// The longest record (in the file, with its quotes and line end) we read into memory. A
/// longer one is a row error. Every cell is at most `MAX_CELL_BYTES` anyway; this caps what a
/// row of many large cells, or one enormous cell, can cost while it is read.
pub const MAX_ROW_BYTES: u64 = 8 << 20;

/// The most fields of a record that are kept: one more than a file may have columns, so that a
/// too-wide header or row is still seen as such, and shown by its start.
pub const MAX_FIELDS_KEPT: usize = MAX_COLUMNS + 1;

/// One record: the fields kept, how many it had, and where it lies in the input.
#[derive(Debug, Default)]
pub struct Record {
    /// Field bytes in `bytes[..used]`; the rest is room (kept from record to record).
    bytes: Vec<u8>,
    used: usize,
    /// The end of each kept field in `bytes`, in `ends[..kept]`.
    ends: Vec<usize>,
    kept: usize,
    /// How many fields the record had (kept or not).
    fields: usize,
    /// How many field bytes the record had (kept or not).
    field_bytes: u64,
    start: u64,
    end: u64,
    too_large: bool,
    /// Empty lines between the previous record and this one.
    lines_before: u64,
}

impl Record {
    /// The sheet rows this record moves on by: itself and the empty lines before it (which a
    /// spreadsheet shows as rows, so row numbers count them).
    pub fn rows(&self) -> i64 {
        1 + self.lines_before as i64
    }

    /// How many fields the record had, including any beyond [`MAX_FIELDS_KEPT`].
    pub fn len(&self) -> usize {
        self.fields
    }

    /// The fields kept (all of them, unless the record was too wide or too large).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.kept).map(|i| self.field(i))
    }

    /// Field `i`, if it was kept.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (i < self.kept).then(|| self.field(i))
    }

    fn field(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// The bytes of all kept fields, one after another.
    pub fn field_bytes(&self) -> &[u8] {
        &self.bytes[..if self.kept == 0 {
            0
        } else {
            self.ends[self.kept - 1]
        }]
    }

    /// Every field is empty (`,,,`: a spreadsheet's empty row).
    pub fn is_blank(&self) -> bool {
        self.field_bytes == 0
    }

    /// The record was longer than [`MAX_ROW_BYTES`] in the file: only its start was kept.
    pub fn is_too_large(&self) -> bool {
        self.too_large
    }

    /// Where the record starts in the input (after any empty lines before it).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Where the record ends in the input.
    pub fn end(&self) -> u64 {
        self.end
    }

    fn clear(&mut self, start: u64, lines_before: u64) {
        self.lines_before = lines_before;
        self.used = 0;
        self.kept = 0;
        self.fields = 0;
        self.field_bytes = 0;
        self.start = start;
        self.end = start;
        self.too_large = false;
    }
}

/// The one way we configure the parser: the file's delimiter, and otherwise RFC 4180 with any
/// line end. Rows of any length are read (a short or long row is a row error, not the end of
/// the file).
pub struct Records<R> {
    input: R,
    /// Given back to this thread's spares when the reader ends (always there until then).
    core: Option<csv_core::Reader>,
    delimiter: u8,
    /// The input offset of the next byte to read.
    offset: u64,
    /// Where a record's fields go once it stopped being kept (made when first needed).
    scratch: Vec<u8>,
    scratch_ends: Vec<usize>,
    kept: Option<Kept>,
    /// The last byte read was a carriage return: a line feed next ends the same line.
    after_cr: bool,
}

/// The raw input bytes read since the start of the chunk being gathered.
#[derive(Debug, Default)]
struct Kept {
    bytes: Vec<u8>,
    /// The input offset of `bytes[0]`.
    from: u64,
    /// Off while a record that is too large is read.
    on: bool,
}

impl<R: BufRead> Records<R> {
    pub fn new(input: R, delimiter: u8) -> Self {
        Records {
            input,
            core: Some(parser(delimiter)),
            delimiter,
            offset: 0,
            scratch: Vec::new(),
            scratch_ends: Vec::new(),
            kept: None,
            after_cr: false,
        }
    }

    /// Also keeps the raw bytes read, for [`Records::take`].
    pub fn keeping(mut self) -> Self {
        self.kept = Some(Kept::default());
        self
    }

    /// Reads the next record into `record`; `false` at the end of the input.
    pub fn read(&mut self, record: &mut Record) -> io::Result<bool> {
        use csv_core::ReadRecordResult as Read;
        let lines_before = self.skip_empty_lines()?;
        record.clear(self.offset, lines_before);
        if let Some(kept) = &mut self.kept {
            kept.on = true;
        }
        // Whether fields go to `record` (not once it is too large or too wide).
        let mut keeping_fields = true;
        loop {
            let input = self.input.fill_buf()?;
            let (result, read, written, ended) = if keeping_fields {
                grow(
                    &mut record.bytes,
                    record.used,
                    4 << 10,
                    MAX_ROW_BYTES as usize,
                );
                grow(&mut record.ends, record.kept, 16, MAX_FIELDS_KEPT);
                let core = self.core.as_mut().expect("a reader's parser");
                let out = core.read_record(
                    input,
                    &mut record.bytes[record.used..],
                    &mut record.ends[record.kept..],
                );
                record.used += out.2;
                record.kept += out.3;
                out
            } else {
                if self.scratch.is_empty() {
                    self.scratch = vec![0; 64 << 10];
                    self.scratch_ends = vec![0; 1024];
                }
                let core = self.core.as_mut().expect("a reader's parser");
                core.read_record(input, &mut self.scratch, &mut self.scratch_ends)
            };
            if let Some(kept) = &mut self.kept
                && kept.on
            {
                kept.bytes.extend_from_slice(&input[..read]);
            }
            if read > 0 {
                self.after_cr = input[read - 1] == b'\r';
            }
            self.input.consume(read);
            self.offset += read as u64;
            record.field_bytes += written as u64;
            record.fields += ended;

            if !record.too_large && self.offset - record.start > MAX_ROW_BYTES {
                record.too_large = true;
                keeping_fields = false;
                if let Some(kept) = &mut self.kept {
                    // Its bytes are never handed over: the chunk before it ends at its start.
                    kept.bytes.truncate((record.start - kept.from) as usize);
                    kept.on = false;
                }
            }
            match result {
                Read::Record => {
                    record.end = self.offset;
                    return Ok(true);
                }
                Read::End => return Ok(false),
                Read::InputEmpty => {}
                // Room runs out only at a cap: the rest of the record is counted, not kept.
                Read::OutputFull if record.bytes.len() >= MAX_ROW_BYTES as usize => {
                    keeping_fields = false
                }
                Read::OutputEndsFull if record.ends.len() >= MAX_FIELDS_KEPT => {
                    keeping_fields = false
                }
                // Room is made on the next turn.
                Read::OutputFull | Read::OutputEndsFull => {}
            }
        }
    }

    /// Empty lines before a record are not part of it (`csv_core` would skip them inside the
    /// record's read), so that a record's size and start are its own; how many there were
    /// (`\n`, `\r\n` and a lone `\r` end one line each; the previous record's line end is
    /// not one).
    fn skip_empty_lines(&mut self) -> io::Result<u64> {
        let mut lines = 0;
        loop {
            let input = self.input.fill_buf()?;
            let empty = input
                .iter()
                .take_while(|&&b| b == b'\n' || b == b'\r')
                .count();
            if empty == 0 {
                return Ok(lines);
            }
            for &b in &input[..empty] {
                if !(b == b'\n' && self.after_cr) {
                    lines += 1;
                }
                self.after_cr = b == b'\r';
            }
            if let Some(kept) = &mut self.kept {
                kept.bytes.extend_from_slice(&input[..empty]);
            }
            self.input.consume(empty);
            self.offset += empty as u64;
        }
    }

    /// The kept bytes `start..end` of the input, dropping everything before `start` (the
    /// previous chunk's bytes: they were handed over last time).
    pub fn take(&mut self, start: u64, end: u64) -> &[u8] {
        let kept = self.kept.as_mut().expect("a reader keeping its bytes");
        let from = (start - kept.from) as usize;
        let to = (end - kept.from) as usize;
        kept.bytes.drain(..from);
        kept.from = start;
        &kept.bytes[..to - from]
    }

    /// Drops the kept bytes before `end` (no chunk will want them), a megabyte or more at a
    /// time.
    pub fn forget_to(&mut self, end: u64) {
        let kept = self.kept.as_mut().expect("a reader keeping its bytes");
        if end - kept.from >= 1 << 20 {
            kept.bytes.drain(..(end - kept.from) as usize);
            kept.from = end;
        }
    }

    /// Drops every kept byte: the next one kept is the one at `offset` (the end of a record too
    /// large to keep, once the chunk before it was taken).
    pub fn restart_at(&mut self, offset: u64) {
        let kept = self.kept.as_mut().expect("a reader keeping its bytes");
        kept.bytes.clear();
        kept.from = offset;
    }
}

thread_local! {
    /// Parsers that readers of this thread gave back as they ended, by delimiter, reset, at most
    /// [`SPARES`]: building a parser (its transition table) took 3% of the machine's time in `make
    /// bench ONLY=small`, where a small file is read by up to seven readers (the delimiter's guess
    /// tries four). Reused rather than copied: `csv_core`'s `Clone` of a parser keeps only part of
    /// its table.
    static SPARE: RefCell<Vec<(u8, csv_core::Reader)>> = const { RefCell::new(Vec::new()) };
}

const SPARES: usize = 8;

/// A parser for `delimiter`: a spare one, or a new one.
fn parser(delimiter: u8) -> csv_core::Reader {
    let spare = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        let at = spare.iter().position(|&(d, _)| d == delimiter)?;
        Some(spare.swap_remove(at).1)
    });
    let spare = spare.ok().flatten();
    spare.unwrap_or_else(|| csv_core::ReaderBuilder::new().delimiter(delimiter).build())
}

impl<R> Drop for Records<R> {
    fn drop(&mut self) {
        let Some(mut core) = self.core.take() else {
            return;
        };
        core.reset();
        // Not while the thread's own spares are being dropped (it is ending).
        let _ending = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARES {
                spare.push((self.delimiter, core));
            }
        });
    }
}

/// Makes room in `buf` when `used` fills it: twice the room (at least `least`), up to `cap`.
fn grow<T: Default + Clone>(buf: &mut Vec<T>, used: usize, least: usize, cap: usize) {
    if used == buf.len() && buf.len() < cap {
        buf.resize((buf.len() * 2).clamp(least, cap), T::default());
    }
}
