//! A stream of job states for one SSE client: the current state first (its own read, once),
//! then every change its reader may see from the process's shared reader ([`Views`]), which
//! coalesces and reads once for every stream. It subscribes before its first read, so no change
//! falls between the two. Behind (a lagged channel) or told to resync, it reads again what it
//! shows.

use std::collections::HashMap;
use std::time::Duration;

use app::{job_list::JobFilter, model::JobView};
use futures::Stream;
use sqlx::PgPool;
use tokio::sync::{
    broadcast::{self, error::RecvError},
    mpsc,
};
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::views::{Seen, Views};
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
) -> impl Stream<Item = JobView> + use<> {
    follow_seen(pool, views.subscribe(), scope, sees, last_version)
}

/// [`follow`], with the views from `seen` (subscribed before the call). Tests drive it
/// through a channel of their own.
pub fn follow_seen(
    pool: PgPool,
    mut seen: broadcast::Receiver<Seen>,
    scope: Scope,
    sees: Sees,
    last_version: Option<i64>,
) -> impl Stream<Item = JobView> + use<> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut sent: HashMap<Uuid, i64> = HashMap::new();
        if let (Scope::One(id), Some(version)) = (scope, last_version) {
            sent.insert(id, version);
        }
        let send = async |view: JobView, sent: &mut HashMap<Uuid, i64>| -> bool {
            if sent
                .get(&view.id)
                .is_some_and(|&version| view.version <= version)
            {
                return true;
            }
            if sent.len() >= REMEMBERED {
                sent.clear();
            }
            sent.insert(view.id, view.version);
            tx.send(view).await.is_ok()
        };
        loop {
            // What the stream shows, read for itself.
            let views = match read(&pool, scope, sees).await {
                Ok(views) => views,
                Err(err) => {
                    // Try again shortly: the job may never change again to wake us.
                    tracing::warn!("live feed cannot read jobs, retrying: {err}");
                    tokio::select! {
                        () = tx.closed() => return,
                        () = tokio::time::sleep(RETRY) => {}
                    }
                    continue;
                }
            };
            for view in views {
                if !send(view, &mut sent).await {
                    return;
                }
            }
            // Then what the shared reader sees, until it says to read again.
            loop {
                let next = tokio::select! {
                    () = tx.closed() => return,
                    next = seen.recv() => next,
                };
                match next {
                    Ok(Seen::Job(view)) if scope.covers(view.id) && sees.covers(view.owner) => {
                        if !send(JobView::clone(&view), &mut sent).await {
                            return;
                        }
                    }
                    Ok(Seen::Job(_)) => {}
                    Ok(Seen::Resync) | Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
        }
    });
    ReceiverStream::new(rx)
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
