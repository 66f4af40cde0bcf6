//! The process's one reader of changed jobs: it reads every job the hub reports changed once
//! (as one query for a whole burst), serializes each view once, and hands them to every stream
//! of the process, each of which keeps those its reader may see. A change watched by ten
//! thousand browsers costs one read and one serialization, not ten thousand; a burst of changes
//! to many jobs costs one read too. With nobody watching, it reads nothing.
//!
//! The first change after a quiet spell is read at once; while changes keep coming, reads are
//! at least [`COALESCE`] apart, each taking whatever arrived since the last. So a lone change
//! reaches browsers within a read's time, and a running import costs at most one read per
//! window however fast it changes. A read does not wait for every stream to have taken the
//! last one's views: a stream still behind takes both and sends only the newer
//! (`feed::Pending`). With ten thousand streams a round of pushes takes longer than the
//! window, and waiting for the round to end (up to 100 ms, as reads did until 2026-11-28)
//! left a change that came during one round for the round after next: `make bench
//! ONLY=fanout`, 10,000 watchers, NOTIFY -> SSE p99 471 ms waiting, 324-335 ms not, same
//! build. It waits (as long) only while streams have a [`BACKLOG`] of views still to take: a
//! burst of many jobs' changes over many reads then fills the channel no faster than streams
//! take from it, rather than overrun it and have every stream that fell behind read for
//! itself.
//!
//! A task of its own ticks every [`KEEP_ALIVE`] for every stream at once ([`Seen::KeepAlive`]):
//! a stream that sent nothing since the tick before sends a comment, so that proxies and
//! browsers keep it open. One process-wide tick, rather than a timer per stream polled again
//! after each of its pushes (about a tenth of the server's own user time per push with ten
//! thousand streams, in perf).
//!
//! A stream that falls behind its channel (a slow client) misses views; it is told so (a
//! lagged receiver) and reads again what it shows, so it ends on the latest state rather than
//! on a queue that grows. So does every stream after [`Seen::Resync`]: the hub reconnected and
//! notifications may have been lost, or a read failed.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use app::model::JobView;
use bytes::Bytes;
use sqlx::PgPool;
use tokio::{
    sync::broadcast::{
        self,
        error::{RecvError, TryRecvError},
    },
    time::{Instant, MissedTickBehavior},
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Change, Hub};
use crate::{auth::Sees, store::jobs};

/// The least time between two reads: at most 40 pushes a second per job.
pub const COALESCE: Duration = Duration::from_millis(25);

/// The longest a read waits for streams to take the views before it (when they have a
/// [`BACKLOG`]): a stream that stopped reading (its client stalled) keeps the channel full
/// until it reads again (and finds it lagged) or leaves, and slows reads to one per this
/// meanwhile, no more.
const MAX_BEHIND: Duration = Duration::from_millis(100);

/// Views not yet taken by every stream past which the next read waits for them.
const BACKLOG: usize = CHANNEL / 4;

/// How often streams are told to keep alive: one that sent nothing since the tick before sends
/// a comment, so an idle stream sends something at least every two of these.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Views a stream may fall behind by before it reads again for itself.
const CHANNEL: usize = 4096;

/// Jobs read per query of a burst.
const READ_AT_ONCE: usize = 1000;

/// A job's state as streams send it: the view, and its server-sent event made once for all of
/// them (`event: job`, `id: <version>`, `data: <JobView JSON>`), which `json` is a slice of.
/// Each stream sends the same bytes, with no copy or allocation of its own.
#[derive(Debug)]
pub struct Shown {
    pub view: JobView,
    /// The whole event, its blank line included.
    pub event: Bytes,
    /// The view as JSON (within `event`: one line, as serde_json escapes newlines).
    pub json: Bytes,
}

impl Shown {
    pub fn new(view: JobView) -> Self {
        let mut event = format!("event: job\nid: {}\ndata: ", view.version).into_bytes();
        let start = event.len();
        if let Err(err) = serde_json::to_writer(&mut event, &view) {
            // A `JobView` is plain data: this would be a bug, sent as an empty state.
            tracing::error!(job = %view.id, "cannot serialize a job's view: {err}");
            event.truncate(start);
        }
        let end = event.len();
        event.extend_from_slice(b"\n\n");
        let event = Bytes::from(event);
        let json = event.slice(start..end);
        Self { view, event, json }
    }
}

/// What the reader hands to streams.
#[derive(Debug, Clone)]
pub enum Seen {
    /// A job as it is now.
    Job(Arc<Shown>),
    /// Changes may have been missed: read again what you show.
    Resync,
    /// Send a comment if you sent nothing since the last of these.
    KeepAlive,
}

#[derive(Clone)]
pub struct Views {
    seen: broadcast::Sender<Seen>,
    reads: Arc<AtomicU64>,
}

impl Views {
    /// Starts reading what the hub reports; stops on `shutdown`.
    pub fn start(pool: PgPool, hub: &Hub, shutdown: CancellationToken) -> Self {
        Self::start_with(pool, hub.subscribe(), KEEP_ALIVE, shutdown)
    }

    /// [`Self::start`] over changes from `changes`, ticking every `keep_alive` (tests drive it
    /// through a channel of their own, and tick sooner).
    pub fn start_with(
        pool: PgPool,
        changes: broadcast::Receiver<Change>,
        keep_alive: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let (seen, _) = broadcast::channel(CHANNEL);
        let views = Self {
            seen,
            reads: Arc::default(),
        };
        tokio::spawn(views.clone().tick(keep_alive, shutdown.clone()));
        tokio::spawn(views.clone().run(pool, changes, shutdown));
        views
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Seen> {
        self.seen.subscribe()
    }

    /// Queries made so far (one per burst, or per thousand jobs of one).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    async fn run(
        self,
        pool: PgPool,
        mut changes: broadcast::Receiver<Change>,
        shutdown: CancellationToken,
    ) {
        // Long enough ago that the first change is read at once.
        let mut last_read = Instant::now() - COALESCE;
        loop {
            let mut ids: HashSet<Uuid> = HashSet::new();
            let mut resync = false;
            // The first change of a burst…
            tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(change) => gather(change, &mut ids, &mut resync),
                    Err(RecvError::Lagged(_)) => resync = true,
                    Err(RecvError::Closed) => return,
                },
            }
            // …and whatever else arrives until the window since the last read is over (and
            // streams have taken enough of what reads before it sent).
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.settled(last_read) => {}
            }
            loop {
                match changes.try_recv() {
                    Ok(change) => gather(change, &mut ids, &mut resync),
                    Err(TryRecvError::Lagged(_)) => resync = true,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Closed) => return,
                }
            }
            last_read = Instant::now();
            if resync {
                let _ = self.seen.send(Seen::Resync);
            }
            if ids.is_empty() || self.seen.receiver_count() == 0 {
                continue;
            }
            let ids: Vec<Uuid> = ids.into_iter().collect();
            for some in ids.chunks(READ_AT_ONCE) {
                self.reads.fetch_add(1, Ordering::Relaxed);
                crate::telemetry::progress_read(crate::telemetry::ReadBy::Views);
                match jobs::find_many(&pool, some, Sees::Everything).await {
                    Ok(views) => {
                        for view in views {
                            let _ = self.seen.send(Seen::Job(Arc::new(Shown::new(view))));
                        }
                    }
                    Err(err) => {
                        // Each stream reads again for itself (and retries until it can).
                        tracing::warn!("cannot read changed jobs; streams will re-read: {err}");
                        let _ = self.seen.send(Seen::Resync);
                    }
                }
            }
        }
    }

    /// Sends [`Seen::KeepAlive`] every `every`, in a task of its own: a read that waits on the
    /// database does not hold it up.
    async fn tick(self, every: Duration, shutdown: CancellationToken) {
        let mut keep_alive = tokio::time::interval_at(Instant::now() + every, every);
        keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
        while shutdown
            .run_until_cancelled(keep_alive.tick())
            .await
            .is_some()
        {
            let _ = self.seen.send(Seen::KeepAlive);
        }
    }

    /// Once [`COALESCE`] has passed since `last_read` and streams have no more than a
    /// [`BACKLOG`] of views to take (or [`MAX_BEHIND`] has passed).
    async fn settled(&self, last_read: Instant) {
        tokio::time::sleep_until(last_read + COALESCE).await;
        let give_up = last_read + MAX_BEHIND;
        while self.seen.len() > BACKLOG && Instant::now() < give_up {
            // The channel tells nobody when it empties: looked at while streams take views.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn gather(change: Change, ids: &mut HashSet<Uuid>, resync: &mut bool) {
    match change {
        Change::Job(job) => {
            ids.insert(job.id);
        }
        Change::Account(_) => {}
        Change::Resync => *resync = true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_stream_hears_the_keep_alive_tick_and_no_read_is_made_for_it() {
        // Never connected: a tick reads nothing.
        let pool = PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").unwrap();
        let (_changes, receiver) = broadcast::channel(1);
        let every = Duration::from_millis(20);
        let views = Views::start_with(pool, receiver, every, CancellationToken::new());
        let (mut one, mut other) = (views.subscribe(), views.subscribe());
        let started = Instant::now();
        let patience = Duration::from_secs(10);
        for seen in [&mut one, &mut other] {
            let heard = tokio::time::timeout(patience, seen.recv()).await;
            assert!(matches!(heard, Ok(Ok(Seen::KeepAlive))));
        }
        assert!(started.elapsed() >= every);
        let heard = tokio::time::timeout(patience, one.recv()).await;
        assert!(matches!(heard, Ok(Ok(Seen::KeepAlive))));
        assert!(started.elapsed() >= 2 * every);
        assert_eq!(views.reads(), 0);
    }
}
