//! A piece of the sheet's deflated XML: a raw deflate stream of its own that ends on a byte
//! boundary without a final block (a sync flush), so pieces compressed apart, on different
//! workers, laid one after the other and closed by a last piece that does end with a final
//! block, are one valid deflate stream. Each piece keeps the CRC-32 and length of its XML, and
//! CRC-32s combine, so the zip's entry is described without reading the pieces again.

use flate2::{Compress, Compression, FlushCompress, Status};

/// How hard pieces are compressed: zlib's level 2 (measured on an export's sheet XML, 1,000,000
/// rows × 10 columns: see `make bench ONLY=export`).
const LEVEL: u32 = 2;

/// What a finished piece holds: its XML's CRC-32 and length, and its deflated length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub crc32: u32,
    pub bytes: u64,
    pub deflated: u64,
}

impl Summary {
    /// The summary of `self` followed by `next`.
    pub fn then(self, next: Summary) -> Summary {
        let mut crc = crc32fast::Hasher::new_with_initial_len(self.crc32, self.bytes);
        crc.combine(&crc32fast::Hasher::new_with_initial_len(
            next.crc32, next.bytes,
        ));
        Summary {
            crc32: crc.finalize(),
            bytes: self.bytes + next.bytes,
            deflated: self.deflated + next.deflated,
        }
    }
}

pub struct Piece {
    deflate: Compress,
    crc: crc32fast::Hasher,
    out: Vec<u8>,
}

impl Default for Piece {
    fn default() -> Self {
        Piece {
            deflate: Compress::new(Compression::new(LEVEL), false),
            crc: crc32fast::Hasher::new(),
            out: Vec::new(),
        }
    }
}

impl Piece {
    /// Deflates `xml` onto what [`Piece::take`] hands out.
    pub fn write(&mut self, xml: &[u8]) {
        self.crc.update(xml);
        self.run(xml, FlushCompress::None);
    }

    /// The deflated bytes not taken yet.
    pub fn deflated(&self) -> usize {
        self.out.len()
    }

    /// The deflated bytes not taken yet, taken.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Ends a piece another follows: the rest of its bytes, and what it held.
    pub fn end(self) -> (Vec<u8>, Summary) {
        self.close(FlushCompress::Sync)
    }

    /// Ends the last piece, with the stream's final block.
    pub fn end_last(self) -> (Vec<u8>, Summary) {
        self.close(FlushCompress::Finish)
    }

    fn close(mut self, flush: FlushCompress) -> (Vec<u8>, Summary) {
        self.run(&[], flush);
        let summary = Summary {
            crc32: self.crc.finalize(),
            bytes: self.deflate.total_in(),
            deflated: self.deflate.total_out(),
        };
        (self.out, summary)
    }

    /// Feeds `input` through the compressor; with a flush, until it is flushed whole.
    fn run(&mut self, mut input: &[u8], flush: FlushCompress) {
        loop {
            self.out.reserve((input.len() / 2).max(64 << 10));
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(input, &mut self.out, flush)
                .expect("deflate takes any input");
            input = &input[(self.deflate.total_in() - before) as usize..];
            let room_left = self.out.len() < self.out.capacity();
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                // Everything taken in, and room left over: nothing is pending in the compressor.
                _ => input.is_empty() && room_left,
            };
            if done {
                return;
            }
        }
    }
}
