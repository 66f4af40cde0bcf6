//! Bridges between blocking file code (CSV scanning, workbook reading and writing, which run on
//! blocking threads) and the async streams of parts stored in PostgreSQL. Both directions go
//! through a small bounded channel, so memory stays flat whichever side is slower.

use std::io::{self, Read, Write};

use futures::{Stream, StreamExt};
use tokio::{sync::mpsc, task::JoinError};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::error::stopped_io;
use crate::store::uploads::PART_BYTES;

/// A blocking `Read` over parts sent from async code.
pub struct PartReader {
    parts: mpsc::Receiver<io::Result<Vec<u8>>>,
    part: Vec<u8>,
    pos: usize,
}

impl PartReader {
    pub fn new(parts: mpsc::Receiver<io::Result<Vec<u8>>>) -> Self {
        Self {
            parts,
            part: Vec::new(),
            pos: 0,
        }
    }
}

impl Read for PartReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.part.len() {
            match self.parts.blocking_recv() {
                Some(part) => {
                    self.part = part?;
                    self.pos = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.part.len() - self.pos);
        buf[..n].copy_from_slice(&self.part[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// A blocking `Write` that sends what is written to async code in parts of [`PART_BYTES`].
/// The receiver sees an `Err` item if the writer is abandoned with [`PartWriter::abort`], so a
/// half-written file is never mistaken for a whole one.
pub struct PartWriter {
    parts: mpsc::Sender<io::Result<Vec<u8>>>,
    part: Vec<u8>,
}

impl PartWriter {
    pub fn new(parts: mpsc::Sender<io::Result<Vec<u8>>>) -> Self {
        Self {
            parts,
            part: Vec::with_capacity(PART_BYTES),
        }
    }

    /// Sends what is left; the receiver's stream then ends.
    pub fn finish(mut self) -> io::Result<()> {
        self.send_part()
    }

    /// Tells the receiver the file is incomplete (the writer's caller says why).
    pub fn abort(self) {
        let cut = io::Error::new(io::ErrorKind::UnexpectedEof, "the file was not finished");
        let _ = self.parts.blocking_send(Err(cut));
    }

    fn send_part(&mut self) -> io::Result<()> {
        if self.part.is_empty() {
            return Ok(());
        }
        let part = std::mem::replace(&mut self.part, Vec::with_capacity(PART_BYTES));
        self.parts
            .blocking_send(Ok(part))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the receiver stopped"))
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(PART_BYTES - self.part.len());
        self.part.extend_from_slice(&buf[..n]);
        if self.part.len() == PART_BYTES {
            self.send_part()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A stream of parts coming out of blocking code.
pub type Parts = ReceiverStream<io::Result<Vec<u8>>>;

/// A blocking conversion from one stream of parts to another: `input` is fed to `convert` as
/// a `Read`, and what it writes comes out of the returned stream. The returned future does the
/// work (feeding the input, then waiting for `convert`): join it with whatever consumes the
/// stream, or spawn it. If `convert` fails, the stream ends with an error item, so the output
/// is never taken for whole, and the future tells why (a panic as an `io::Error` holding the
/// `JoinError`).
pub fn convert<S, F, E>(input: S, convert: F) -> (Parts, impl Future<Output = Result<(), E>>)
where
    S: Stream<Item = io::Result<Vec<u8>>> + Unpin,
    F: FnOnce(PartReader, &mut PartWriter) -> Result<(), E> + Send + 'static,
    E: From<io::Error> + Send + 'static,
{
    let (out_tx, out_rx) = mpsc::channel(2);
    let work = read_with(input, move |input| {
        let mut out = PartWriter::new(out_tx);
        match convert(input, &mut out) {
            Ok(()) => Ok(out.finish()?),
            Err(err) => {
                out.abort();
                Err(err)
            }
        }
    });
    let work = async move {
        work.await
            .map_err(|panicked| E::from(io::Error::other(panicked)))
            .and_then(|ended| ended)
    };
    (ReceiverStream::new(out_rx), work)
}

/// Runs `consume` on a blocking thread with `input` (a stream of parts) as its `Read`, feeding
/// it from this task; what `consume` returns, or `Err` if its thread panicked.
pub async fn read_with<S, F, T>(input: S, consume: F) -> Result<T, JoinError>
where
    S: Stream<Item = io::Result<Vec<u8>>> + Unpin,
    F: FnOnce(PartReader) -> T + Send + 'static,
    T: Send + 'static,
{
    let (in_tx, in_rx) = mpsc::channel(2);
    let handle = tokio::task::spawn_blocking(move || consume(PartReader::new(in_rx)));
    let mut input = input;
    while let Some(part) = input.next().await {
        // A closed channel means `consume` stopped early; its result says why.
        if in_tx.send(part).await.is_err() {
            break;
        }
    }
    drop(in_tx);
    handle.await
}

/// `parts`, checked for `stop` between items: once it fires, the stream ends with an error, so
/// whoever reads it fails instead of taking a cut-off file for whole. (The check is between
/// items, never racing a read: a read dropped half-way would spoil its connection.)
pub fn until_stopped<S, T>(parts: S, stop: CancellationToken) -> impl Stream<Item = io::Result<T>>
where
    S: Stream<Item = io::Result<T>> + Unpin,
{
    futures::stream::unfold(Some((parts, stop)), |state| async move {
        let (mut parts, stop) = state?;
        if stop.is_cancelled() {
            return Some((Err(stopped_io()), None));
        }
        let item = parts.next().await?;
        Some((item, Some((parts, stop))))
    })
}
