//! The process's one reader of changed jobs: it gathers the hub's notifications for
//! [`COALESCE`], reads every changed job once (as one query for the whole burst), and hands the
//! views to every stream of the process, each of which keeps those its reader may see. A change
//! watched by ten thousand browsers costs one read, not ten thousand; a burst of changes to many
//! jobs costs one read too. With nobody watching, it reads nothing.
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
use sqlx::PgPool;
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Change, Hub};
use crate::{auth::Sees, store::jobs};

/// How long changes are gathered before they are read: at most ~10 pushes a second per job.
pub const COALESCE: Duration = Duration::from_millis(100);

/// Views a stream may fall behind by before it reads again for itself.
const CHANNEL: usize = 4096;

/// Jobs read per query of a burst.
const READ_AT_ONCE: usize = 1000;

/// What the reader hands to streams.
#[derive(Debug, Clone)]
pub enum Seen {
    /// A job as it is now.
    Job(Arc<JobView>),
    /// Changes may have been missed: read again what you show.
    Resync,
}

#[derive(Clone)]
pub struct Views {
    seen: broadcast::Sender<Seen>,
    reads: Arc<AtomicU64>,
}

impl Views {
    /// Starts reading what the hub reports; stops on `shutdown`.
    pub fn start(pool: PgPool, hub: &Hub, shutdown: CancellationToken) -> Self {
        Self::start_with(pool, hub.subscribe(), shutdown)
    }

    /// [`Self::start`] over changes from `changes` (tests drive it through a channel of their own).
    pub fn start_with(
        pool: PgPool,
        changes: broadcast::Receiver<Change>,
        shutdown: CancellationToken,
    ) -> Self {
        let (seen, _) = broadcast::channel(CHANNEL);
        let views = Self {
            seen,
            reads: Arc::default(),
        };
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
            // …and whatever else arrives within the window.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(COALESCE) => {}
            }
            loop {
                match changes.try_recv() {
                    Ok(change) => gather(change, &mut ids, &mut resync),
                    Err(TryRecvError::Lagged(_)) => resync = true,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Closed) => return,
                }
            }
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
                            let _ = self.seen.send(Seen::Job(Arc::new(view)));
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
