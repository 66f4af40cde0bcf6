//! A stream of job states for one SSE client: the current state first (its own read, once),
//! then every change its reader may see from the process's shared reader ([`Views`]), which
//! reads and serializes once for every stream. It subscribes before its first read, so no
//! change falls between the two. Behind (a lagged channel) or told to resync, it reads again
//! what it shows.
//!
//! The stream is polled by its connection, with no task or queue of its own. Each time it is
//! polled it takes every view waiting for it in the shared channel and sends only the newest of
//! each job: a client that reads more slowly than jobs change gets the latest state, not every
//! state in turn (with ten thousand streams, the pushes of one view take longer than the next
//! change; sending each view in turn made the streams fall further behind with every change).
//! A client that stops reading leaves views in the channel until it lags, then reads the
//! latest state. What a stream keeps is its place in that channel and the versions it sent.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use app::{job_list::JobFilter, model::JobView};
use futures::Stream;
use sqlx::PgPool;
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};
use uuid::Uuid;

use super::views::{Seen, Shown, Views};
use crate::{
    auth::Sees,
    store::{
        job_list::{self, Owners},
        jobs,
    },
};

/// The wait before reading again after a failed read.
const RETRY: Duration = Duration::from_secs(1);

/// Jobs a resync of the list re-reads.
const LIST_RESYNC: i64 = 100;

/// Versions a stream remembers having sent (past this it forgets them all: the browser drops
/// a state older than one it has, so forgetting costs at most a repeated push).
const REMEMBERED: usize = 1_000;

/// Which jobs a stream follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    One(Uuid),
    All,
}

impl Scope {
    fn covers(self, id: Uuid) -> bool {
        match self {
            Scope::One(one) => one == id,
            Scope::All => true,
        }
    }
}

/// Job states for `scope`, of the jobs `sees` covers, starting after `last_version` (the SSE
/// `Last-Event-ID`) when given.
pub fn follow(
    pool: PgPool,
    views: &Views,
    scope: Scope,
    sees: Sees,
    last_version: Option<i64>,
) -> impl Stream<Item = Arc<Shown>> + use<> {
    follow_seen(pool, views.subscribe(), scope, sees, last_version)
}

/// [`follow`], with the views from `seen` (subscribed before the call). Tests drive it
/// through a channel of their own.
pub fn follow_seen(
    pool: PgPool,
    seen: broadcast::Receiver<Seen>,
    scope: Scope,
    sees: Sees,
    last_version: Option<i64>,
) -> impl Stream<Item = Arc<Shown>> + use<> {
    let mut sent = HashMap::new();
    if let (Scope::One(id), Some(version)) = (scope, last_version) {
        sent.insert(id, version);
    }
    let feed = Feed {
        pool,
        seen,
        scope,
        sees,
        sent,
        pending: Pending::default(),
        must_read: true,
    };
    futures::stream::unfold(feed, |mut feed| async move {
        let next = feed.next().await?;
        Some((next, feed))
    })
}

/// One stream's state.
struct Feed {
    pool: PgPool,
    seen: broadcast::Receiver<Seen>,
    scope: Scope,
    sees: Sees,
    /// The version sent of each job.
    sent: HashMap<Uuid, i64>,
    /// What its own last read found, or the channel held, still to send.
    pending: Pending,
    /// It must read what it shows for itself: at first, and after missing views.
    must_read: bool,
}

impl Feed {
    /// The next state to send; `None` once the shared reader is gone.
    async fn next(&mut self) -> Option<Arc<Shown>> {
        loop {
            if let Some(shown) = self.pending.pop() {
                if self.is_new(&shown) {
                    return Some(shown);
                }
                continue;
            }
            if self.must_read {
                // Boxed: the read's state lives only while it runs, not in every idle stream.
                match Box::pin(read(&self.pool, self.scope, self.sees)).await {
                    Ok(views) => {
                        for view in views {
                            self.pending.push(Arc::new(Shown::new(view)));
                        }
                        self.must_read = false;
                    }
                    Err(err) => {
                        // Try again shortly: the job may never change again to wake us.
                        tracing::warn!("live feed cannot read jobs, retrying: {err}");
                        tokio::time::sleep(RETRY).await;
                    }
                }
                continue;
            }
            let first = self.seen.recv().await;
            if self.take(first) {
                return None;
            }
            // And whatever else is waiting, so that only the newest of each job is sent.
            loop {
                let next = match self.seen.try_recv() {
                    Ok(seen) => Ok(seen),
                    Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                    Err(TryRecvError::Closed) => Err(RecvError::Closed),
                    Err(TryRecvError::Empty) => break,
                };
                if self.take(next) {
                    return None;
                }
            }
        }
    }

    /// Keeps what the channel gave, if this stream shows it; `true` once the channel is closed.
    fn take(&mut self, seen: Result<Seen, RecvError>) -> bool {
        match seen {
            Ok(Seen::Job(shown))
                if self.scope.covers(shown.view.id) && self.sees.covers(shown.view.owner) =>
            {
                self.pending.push(shown);
            }
            Ok(Seen::Job(_)) => {}
            Ok(Seen::Resync) | Err(RecvError::Lagged(_)) => {
                // Its read finds the latest of everything it shows.
                self.pending.clear();
                self.must_read = true;
            }
            Err(RecvError::Closed) => return true,
        }
        false
    }

    /// Whether `shown` is newer than what was sent of its job (noting it as sent if so).
    fn is_new(&mut self, shown: &Shown) -> bool {
        let view = &shown.view;
        if self.sent.get(&view.id).is_some_and(|&v| view.version <= v) {
            return false;
        }
        if self.sent.len() >= REMEMBERED {
            self.sent.clear();
        }
        self.sent.insert(view.id, view.version);
        true
    }
}

/// States still to send, in the order they came, each job's only in its newest version: an
/// older one is skipped when it comes to be sent.
#[derive(Default)]
struct Pending {
    queue: VecDeque<Arc<Shown>>,
    /// The newest version of each job in `queue`.
    newest: HashMap<Uuid, i64>,
}

impl Pending {
    /// Past this many states held at once, the queue gives its room back when it empties.
    const KEPT_ROOM: usize = 16;

    fn push(&mut self, shown: Arc<Shown>) {
        let view = &shown.view;
        let newest = self.newest.entry(view.id).or_insert(view.version);
        *newest = (*newest).max(view.version);
        self.queue.push_back(shown);
    }

    /// The oldest state still to send that no newer one of its job follows.
    fn pop(&mut self) -> Option<Arc<Shown>> {
        while let Some(shown) = self.queue.pop_front() {
            let view = &shown.view;
            if self.newest.get(&view.id) == Some(&view.version) {
                self.newest.remove(&view.id);
                self.give_room_back();
                return Some(shown);
            }
        }
        self.give_room_back();
        None
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.newest.clear();
        self.give_room_back();
    }

    /// An idle stream keeps little: a list's resync may have queued a hundred states.
    fn give_room_back(&mut self) {
        if self.queue.is_empty() && self.queue.capacity() > Self::KEPT_ROOM {
            self.queue = VecDeque::new();
            self.newest = HashMap::new();
        }
    }
}

/// Everything the stream shows: its job, or the newest jobs, oldest first.
async fn read(pool: &PgPool, scope: Scope, sees: Sees) -> sqlx::Result<Vec<JobView>> {
    crate::telemetry::progress_read(crate::telemetry::ReadBy::Stream);
    match scope {
        Scope::One(id) => Ok(jobs::find(pool, id, sees).await?.into_iter().collect()),
        Scope::All => {
            let owners = Owners::resolve(pool, sees, None).await?;
            let mut views =
                job_list::newest(pool, owners, &JobFilter::default(), LIST_RESYNC).await?;
            views.reverse();
            Ok(views)
        }
    }
}
