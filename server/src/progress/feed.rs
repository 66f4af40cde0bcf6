//! A stream of job states for one SSE client: the current state first (its own read, once),
//! then every change its reader may see from the process's shared reader ([`Views`]), which
//! reads and serializes once for every stream. It subscribes before its first read, so no
//! change falls between the two. Behind (a lagged channel) or told to resync, it reads again
//! what it shows.
//!
//! The stream is polled by its connection, with no task of its own. Each time it is polled it
//! takes every view waiting for it in the shared channel and keeps only the newest of each job
//! ([`Pending`]): a client that reads more slowly than jobs change gets the latest state, not every
//! state in turn (with ten thousand streams, the pushes of one view take longer than the next
//! change; sending each view in turn made the streams fall further behind with every change).
//! A client that stops reading leaves views in the channel until it lags, then reads the
//! latest state. What a stream keeps is its place in that channel, the versions it sent and,
//! until it has sent them, the newest states it took. At the reader's keep-alive tick, a stream
//! that sent no state since the tick before sends a comment ([`Push::KeepAlive`]), so an idle
//! stream sends something at least every two ticks: also while its own reads fail (it still
//! takes the ticks between tries), and after it lagged (the views it missed count as a tick).

use std::{collections::HashMap, sync::Arc, time::Duration};

use app::{job_list::JobFilter, model::JobView};
use futures::Stream;
use indexmap::{IndexMap, map::Entry};
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

/// What a stream sends next.
#[derive(Debug, Clone)]
pub enum Push {
    /// A job's state.
    Job(Arc<Shown>),
    /// Nothing was sent since the last keep-alive tick: a comment, to keep the stream open.
    KeepAlive,
}

/// Job states for `scope`, of the jobs `sees` covers, starting after `last_version` (the SSE
/// `Last-Event-ID`) when given.
pub fn follow(
    pool: PgPool,
    views: &Views,
    scope: Scope,
    sees: Sees,
    last_version: Option<i64>,
) -> impl Stream<Item = Push> + use<> {
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
) -> impl Stream<Item = Push> + use<> {
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
        sent_since_tick: false,
        comment_due: false,
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
    /// It sent a state since the last keep-alive tick.
    sent_since_tick: bool,
    /// It sent nothing between the last two ticks: a comment goes next, unless a state does.
    comment_due: bool,
}

impl Feed {
    /// What to send next; `None` once the shared reader is gone.
    async fn next(&mut self) -> Option<Push> {
        loop {
            if let Some(shown) = self.pending.pop() {
                if self.is_new(&shown) {
                    self.sent_since_tick = true;
                    self.comment_due = false;
                    return Some(Push::Job(shown));
                }
                continue;
            }
            if std::mem::take(&mut self.comment_due) {
                return Some(Push::KeepAlive);
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
                        // Meanwhile the keep-alive ticks still count (and newer states go).
                        if self.take_waiting() {
                            return None;
                        }
                    }
                }
                continue;
            }
            let first = self.seen.recv().await;
            // And whatever else is waiting, so that only the newest of each job is sent.
            if self.take(first) || self.take_waiting() {
                return None;
            }
        }
    }

    /// Takes whatever the channel holds now; `true` once it is closed.
    fn take_waiting(&mut self) -> bool {
        loop {
            let next = match self.seen.try_recv() {
                Ok(seen) => Ok(seen),
                Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => Err(RecvError::Closed),
                Err(TryRecvError::Empty) => return false,
            };
            if self.take(next) {
                return true;
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
            Ok(Seen::KeepAlive) => self.tick(),
            // What it holds still goes first: the list's read finds only the newest jobs.
            Ok(Seen::Resync) => self.must_read = true,
            // The views it missed may have held a tick: taken as one.
            Err(RecvError::Lagged(_)) => {
                self.must_read = true;
                self.tick();
            }
            Err(RecvError::Closed) => return true,
        }
        false
    }

    /// A keep-alive tick: a comment is due if nothing was sent since the last one.
    fn tick(&mut self) {
        self.comment_due = !std::mem::take(&mut self.sent_since_tick);
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

/// States still to send, one per job, in the order their jobs first came: a newer state of a
/// job replaces the one waiting, in its place. Holds at most the jobs the shared channel holds
/// views of (one for a job's stream; for the list's, as many jobs as changed in a burst). It
/// is filled only once emptied (the feed takes more only when it has sent all it held), and
/// sent from a cursor.
#[derive(Default)]
struct Pending {
    states: IndexMap<Uuid, Arc<Shown>>,
    /// How many of `states` were sent.
    sent: usize,
}

impl Pending {
    /// Past this many jobs held at once, the map gives its room back when it empties.
    const KEPT_ROOM: usize = 16;

    fn push(&mut self, shown: Arc<Shown>) {
        debug_assert_eq!(self.sent, 0, "filled only once emptied");
        match self.states.entry(shown.view.id) {
            Entry::Occupied(mut waiting) => {
                if waiting.get().view.version < shown.view.version {
                    waiting.insert(shown);
                }
            }
            Entry::Vacant(place) => {
                place.insert(shown);
            }
        }
    }

    fn pop(&mut self) -> Option<Arc<Shown>> {
        if let Some((_, shown)) = self.states.get_index(self.sent) {
            self.sent += 1;
            return Some(shown.clone());
        }
        self.sent = 0;
        if self.states.capacity() > Self::KEPT_ROOM {
            // An idle stream keeps little: a list's resync may have queued a hundred states.
            self.states = IndexMap::new();
        } else {
            self.states.clear();
        }
        None
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
