//! What a process remembers of what it read, kept true by the notifications it hears: a
//! `GET /api/jobs/{id}` (and the identity behind an API token) answered from memory costs no
//! query. `make bench ONLY=reads`: two queries per request made `GET /api/jobs/{id}` 0.15 of
//! `/healthz`; remembered, it is well past 0.3.
//!
//! Entries are forgotten when a notification says their source changed, all of them when
//! notifications may have been missed (the hub resynced, or its channel lagged), and in any case
//! after the time they were remembered for. Nothing is served while the hub is not listening.
//! A lookup takes a [`Ticket`] before it reads the database and remembers what it read only if
//! nothing was forgotten since: a read that raced a change is used once, never kept.
//!
//! A key can also be held: a change this process is about to commit holds its key from before
//! the commit until the change's own notification comes back, so that whoever made it reads it
//! back at once (from the database), never the state before it. A hold lasts [`HOLD`] at most:
//! one whose transaction rolled back gets no notification.

use std::{
    borrow::Borrow,
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::{Duration, Instant},
};

use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

use super::{Change, Hub};

/// The longest a key stays held without its notification.
pub const HOLD: Duration = Duration::from_secs(5);

pub struct Remembered<K, V> {
    hub: Hub,
    capacity: usize,
    state: Mutex<State<K, V>>,
}

struct State<K, V> {
    entries: HashMap<K, (V, Instant)>,
    held: Holds<K>,
    /// Counts forgettings: a lookup remembers only if none happened since its ticket.
    epoch: u64,
}

/// When a lookup began: in forgettings (see [`Remembered::ticket`]), and in time (what it
/// reads may be kept from then on).
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64, Instant);

impl<K: Eq + Hash + Clone, V: Clone> Remembered<K, V> {
    /// Remembers at most `capacity` entries.
    pub fn new(hub: Hub, capacity: usize) -> Self {
        Self {
            hub,
            capacity,
            state: Mutex::new(State {
                entries: HashMap::new(),
                held: Holds::new(capacity),
                epoch: 0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<K, V>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is remembered of `key`, unless it may be out of date.
    pub fn get<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        if !self.hub.is_listening() {
            return None;
        }
        let state = self.state();
        match state.entries.get(key) {
            Some((value, until)) if *until > Instant::now() && !state.held.holds(key) => {
                Some(value.clone())
            }
            _ => None,
        }
    }

    /// Taken before reading what [`Self::remember`] may keep.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.state().epoch, Instant::now())
    }

    /// Keeps `value` for `key` for up to `lasting`, if nothing was forgotten since `ticket` and
    /// the key is not held.
    pub fn remember(&self, ticket: Ticket, key: K, value: V, lasting: Duration) {
        let mut state = self.state();
        if state.epoch != ticket.0 || state.held.holds(&key) || !self.hub.is_listening() {
            return;
        }
        if state.entries.len() >= self.capacity {
            let now = Instant::now();
            state.entries.retain(|_, (_, until)| *until > now);
            if state.entries.len() >= self.capacity {
                state.entries.clear();
            }
        }
        state.entries.insert(key, (value, ticket.1 + lasting));
    }

    /// Forgets `key`; a hold on it ends if `mark` reaches the hold's.
    pub fn forget(&self, key: &K, mark: i64) {
        let mut state = self.state();
        state.epoch += 1;
        state.entries.remove(key);
        state.held.release(key, mark);
    }

    /// Forgets the entries `gone` picks.
    pub fn forget_where(&self, gone: impl Fn(&K, &V) -> bool) {
        let mut state = self.state();
        state.epoch += 1;
        state.entries.retain(|key, (value, _)| !gone(key, value));
    }

    /// Forgets everything, holds too (the notifications that would end them may be lost).
    pub fn forget_all(&self) {
        let mut state = self.state();
        state.epoch += 1;
        state.entries.clear();
        state.held.clear();
    }

    /// Forgets `key` and holds it until [`Self::forget`] brings a `mark` at least this far.
    pub fn hold(&self, key: K, mark: i64) {
        let mut state = self.state();
        state.epoch += 1;
        state.entries.remove(&key);
        state.held.hold(key, mark);
    }
}

/// Keys held until a notification at least as far along as their mark, or for [`HOLD`] at
/// most (see the module docs).
pub struct Holds<K> {
    held: HashMap<K, (i64, Instant)>,
    /// Past this many, holds older than [`HOLD`] are dropped.
    capacity: usize,
}

impl<K: Eq + Hash> Holds<K> {
    pub fn new(capacity: usize) -> Self {
        Self {
            held: HashMap::new(),
            capacity,
        }
    }

    pub fn hold(&mut self, key: K, mark: i64) {
        let now = Instant::now();
        let held = self.held.entry(key).or_insert((mark, now));
        *held = (held.0.max(mark), now);
        if self.held.len() > self.capacity {
            self.held
                .retain(|_, (_, since)| now.duration_since(*since) < HOLD);
        }
    }

    pub fn holds<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.held
            .get(key)
            .is_some_and(|(_, since)| since.elapsed() < HOLD)
    }

    /// Ends the hold on `key` if `mark` reaches its mark.
    pub fn release<Q: Eq + Hash + ?Sized>(&mut self, key: &Q, mark: i64)
    where
        K: Borrow<Q>,
    {
        if self.held.get(key).is_some_and(|&(held, _)| mark >= held) {
            self.held.remove(key);
        }
    }

    pub fn clear(&mut self) {
        self.held.clear();
    }
}

/// The live instances of a memory in this process (one per server; tests run several), for
/// the code that changes what they remember, deep in the store, which holds no handle on them.
pub struct Live<T>(Mutex<Vec<Weak<T>>>);

impl<T> Default for Live<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Live<T> {
    pub const fn new() -> Self {
        Self(Mutex::new(Vec::new()))
    }

    fn list(&self) -> MutexGuard<'_, Vec<Weak<T>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn add(&self, one: &Arc<T>) {
        let mut list = self.list();
        list.retain(|one| one.strong_count() > 0);
        list.push(Arc::downgrade(one));
    }

    pub fn each(&self, mut f: impl FnMut(&T)) {
        for one in self.list().iter().filter_map(Weak::upgrade) {
            f(&one);
        }
    }
}

/// Hands `memory` every change `changes` brings (a lagged channel as [`Change::Resync`]: changes
/// were missed), on a task of its own, while `memory` lives and until `shutdown`.
pub fn follow<T: Send + Sync + 'static>(
    memory: &Arc<T>,
    mut changes: broadcast::Receiver<Change>,
    shutdown: CancellationToken,
    on_change: impl Fn(&T, Change) + Send + 'static,
) {
    let memory = Arc::downgrade(memory);
    tokio::spawn(async move {
        loop {
            let change = tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(change) => change,
                    Err(RecvError::Lagged(_)) => Change::Resync,
                    Err(RecvError::Closed) => return,
                },
            };
            let Some(memory) = memory.upgrade() else {
                return;
            };
            on_change(&memory, change);
        }
    });
}
