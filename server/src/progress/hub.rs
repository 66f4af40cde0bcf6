//! The process's one listener. It reconnects with backoff; after every (re)connect it
//! broadcasts [`Change::Resync`], because notifications sent while it was away are lost and
//! every stream must re-read what it shows. Whether it is listening now is part of the
//! process's readiness (`http::health`).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use sqlx::{PgPool, postgres::PgListener};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use uuid::Uuid;

use crate::store::notify::{ACCOUNTS, CHANNEL, ITEMS, JobChanged};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A job's row changed.
    Job(JobChanged),
    /// A person's sessions, tokens or role changed.
    Account(Uuid),
    /// Changes may have been missed: re-read everything shown.
    Resync,
}

/// Items may be claimed now (`items_ready`): claims waiting for them try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemsReady {
    /// Of this job type.
    Of(Arc<str>),
    /// Of any type: notifications may have been missed.
    Any,
}

#[derive(Clone)]
pub struct Hub {
    /// Jobs' changes (and resyncs): the process's one reader of changed jobs reads them.
    changes: broadcast::Sender<Change>,
    /// Accounts' changes (and resyncs), kept apart: every open stream hears these, and should
    /// not wake for every change of every job.
    accounts: broadcast::Sender<Change>,
    /// Kept apart from `changes`, which every event stream reads.
    items: broadcast::Sender<ItemsReady>,
    listening: Arc<AtomicBool>,
}

impl Hub {
    /// Starts listening; stops when `shutdown` fires.
    pub fn start(pool: PgPool, shutdown: CancellationToken) -> Self {
        let (changes, _) = broadcast::channel(4096);
        let (accounts, _) = broadcast::channel(1024);
        let (items, _) = broadcast::channel(1024);
        let listening = Arc::new(AtomicBool::new(false));
        let senders = Senders {
            changes: changes.clone(),
            accounts: accounts.clone(),
            items: items.clone(),
        };
        tokio::spawn(listen(pool, senders, listening.clone(), shutdown));
        Self {
            changes,
            accounts,
            items,
            listening,
        }
    }

    /// Hears jobs' changes ([`Change::Job`]) and resyncs.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Hears accounts' changes ([`Change::Account`]) and resyncs.
    pub fn accounts(&self) -> broadcast::Receiver<Change> {
        self.accounts.subscribe()
    }

    /// Hears when items may be claimed (`store::assignments`).
    pub fn items_ready(&self) -> broadcast::Receiver<ItemsReady> {
        self.items.subscribe()
    }

    /// Whether notifications reach this process now (false while it connects or reconnects).
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }
}

struct Senders {
    changes: broadcast::Sender<Change>,
    accounts: broadcast::Sender<Change>,
    items: broadcast::Sender<ItemsReady>,
}

async fn listen(
    pool: PgPool,
    senders: Senders,
    listening: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    while !shutdown.is_cancelled() {
        let connected = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            // A lost connection is reported at once (we reconnect below), so that
            // `is_listening` is never true while nothing listens.
            listener.eager_reconnect(false);
            listener.listen_all([CHANNEL, ACCOUNTS, ITEMS]).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = match shutdown.run_until_cancelled(connected).await {
            None => return,
            Some(Ok(listener)) => listener,
            Some(Err(err)) => {
                tracing::warn!("progress listener cannot connect, retrying in {backoff:?}: {err}");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        listening.store(true, Ordering::Relaxed);
        let _ = senders.changes.send(Change::Resync);
        let _ = senders.accounts.send(Change::Resync);
        let _ = senders.items.send(ItemsReady::Any);
        loop {
            // `try_recv` answers `None` when the connection dropped; reconnect ourselves so the
            // resync is sent only once we listen again.
            match shutdown.run_until_cancelled(listener.try_recv()).await {
                None => break,
                Some(Ok(Some(notification))) if notification.channel() == ITEMS => {
                    let job_type = Arc::from(notification.payload());
                    let _ = senders.items.send(ItemsReady::Of(job_type));
                }
                Some(Ok(Some(notification))) => match parse(&notification) {
                    Some(change @ Change::Account(_)) => {
                        let _ = senders.accounts.send(change);
                    }
                    Some(change) => {
                        let _ = senders.changes.send(change);
                    }
                    None => tracing::warn!(
                        channel = notification.channel(),
                        "ignoring a malformed notification"
                    ),
                },
                Some(Ok(None)) => {
                    tracing::warn!("progress listener lost its connection; reconnecting");
                    break;
                }
                Some(Err(err)) => {
                    tracing::warn!("progress listener failed, reconnecting: {err}");
                    break;
                }
            }
        }
        listening.store(false, Ordering::Relaxed);
    }
}

fn parse(notification: &sqlx::postgres::PgNotification) -> Option<Change> {
    if notification.channel() == ACCOUNTS {
        notification.payload().parse().ok().map(Change::Account)
    } else {
        serde_json::from_str(notification.payload())
            .ok()
            .map(Change::Job)
    }
}
