//! Unpacking workbook zips (XLSX, ODS) without trusting them. A zip says how large each entry
//! unpacks to, and a zip bomb lies or tells the truth about an absurd size: both are refused,
//! the first by counting every byte actually unpacked against a budget, the second before
//! anything is unpacked.

use std::io::{self, Read, Seek};

use zip::{ZipArchive, read::ZipFile};

/// The most bytes a workbook may unpack to in all.
pub const MAX_UNPACKED_BYTES: u64 = 1 << 30;

/// The most bytes any one entry may unpack to. Whatever its name says, an entry may be one
/// that is read whole into memory (shared strings, styles, ODS content).
pub const MAX_PART_BYTES: u64 = 512 << 20;

/// The most entries a workbook may have: a spreadsheet has a few per sheet (and its pictures).
pub const MAX_ENTRIES: usize = 10_000;

/// The workbook unpacks to more than a spreadsheet holds.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "The workbook unpacks to far more data, or holds far more parts, than a spreadsheet does \
     (a zip bomb?), so it was not opened."
)]
pub struct Bomb;

impl Bomb {
    /// Whether an I/O error is an [`Entry`] going over its budget.
    pub fn caused(err: &io::Error) -> bool {
        err.get_ref().is_some_and(|inner| inner.is::<Bomb>())
    }
}

/// What is left to unpack of one workbook.
pub struct Budget(u64);

impl Budget {
    /// Refuses a zip whose entries declare more than the limits allow.
    pub fn for_zip<R: Read + Seek>(zip: &mut ZipArchive<R>) -> Result<Budget, ZipOrBomb> {
        if zip.len() > MAX_ENTRIES {
            return Err(ZipOrBomb::Bomb(Bomb));
        }
        let mut total = 0u64;
        for i in 0..zip.len() {
            let size = zip.by_index_raw(i)?.size();
            total = total.saturating_add(size);
            if size > MAX_PART_BYTES || total > MAX_UNPACKED_BYTES {
                return Err(ZipOrBomb::Bomb(Bomb));
            }
        }
        Ok(Budget(MAX_UNPACKED_BYTES))
    }

    /// Reads `entry`, failing with a [`Bomb`] I/O error past the limits.
    pub fn entry<'a, R: Read>(&'a mut self, entry: ZipFile<'a, R>) -> Entry<'a, R> {
        Entry {
            inner: entry,
            budget: &mut self.0,
            part_left: MAX_PART_BYTES,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ZipOrBomb {
    #[error(transparent)]
    Zip(#[from] zip::result::ZipError),
    #[error(transparent)]
    Bomb(#[from] Bomb),
}

pub struct Entry<'a, R: Read> {
    inner: ZipFile<'a, R>,
    budget: &'a mut u64,
    part_left: u64,
}

impl<R: Read> Read for Entry<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)? as u64;
        if n > self.part_left || n > *self.budget {
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, Bomb));
        }
        self.part_left -= n;
        *self.budget -= n;
        Ok(n as usize)
    }
}

/// Unpacks every entry once, counting, so that nothing calamine reads later can unpack more
/// than the limits (for ODS, which calamine reads itself).
pub fn check_all<R: Read + Seek>(zip: &mut ZipArchive<R>) -> Result<(), ZipOrBomb> {
    let mut budget = Budget::for_zip(zip)?;
    for i in 0..zip.len() {
        let entry = zip.by_index(i)?;
        if let Err(err) = io::copy(&mut budget.entry(entry), &mut io::sink()) {
            return Err(if Bomb::caused(&err) {
                Bomb.into()
            } else {
                zip::result::ZipError::Io(err).into()
            });
        }
    }
    Ok(())
}
