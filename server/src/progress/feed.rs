//! A stream of job states for one SSE client: the current state first, then every change,
//! coalesced so a busy job pushes at most one state per [`COALESCE`] window, and always its
//! latest. It subscribes before its first read, so no change falls between the two.

use std::{collections::HashMap, time::Duration};

use app::{job_list::JobFilter, model::JobView};
use futures::Stream;
use sqlx::PgPool;
use tokio::sync::{
    broadcast::{
        self,
        error::{RecvError, TryRecvError},
    },
    mpsc,
};
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::{Change, Hub};
use crate::{
    auth::Sees,
    store::{
        job_list::{self, Owners},
        jobs,
    },
};

/// The shortest time between two pushes of the same job.
pub const COALESCE: Duration = Duration::from_millis(100);

/// The wait before reading again after a failed read.
const RETRY: Duration = Duration::from_secs(1);

/// Jobs a resync of the list re-reads.
const LIST_RESYNC: i64 = 100;

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

/// What to read next.
enum Pending {
    Everything,
    Jobs(Vec<Uuid>),
}

/// Job states for `scope`, of the jobs `sees` covers, starting after `last_version` (the SSE
/// `Last-Event-ID`) when given. Every read filters on the owner in SQL, so a change to someone
/// else's job costs a query that returns nothing and sends nothing.
pub fn follow(
    pool: PgPool,
    hub: &Hub,
    scope: Scope,
    sees: Sees,
    last_version: Option<i64>,
) -> impl Stream<Item = JobView> + use<> {
    follow_changes(pool, hub.subscribe(), scope, sees, last_version)
}

/// [`follow`], with the changes from `changes` (subscribed before the call): a receiver that
/// lagged behind its channel, or a [`Change::Resync`], makes the stream read again everything it
/// shows. Tests drive it through a channel of their own.
pub fn follow_changes(
    pool: PgPool,
    mut changes: broadcast::Receiver<Change>,
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
        let mut pending = Pending::Everything;
        loop {
            let views = match read(&pool, scope, sees, pending).await {
                Ok(views) => views,
                Err(err) => {
                    // Try again shortly: the job may never change again to wake us.
                    tracing::warn!("live feed cannot read jobs, retrying: {err}");
                    tokio::select! {
                        () = tx.closed() => return,
                        () = tokio::time::sleep(RETRY) => {}
                    }
                    pending = Pending::Everything;
                    continue;
                }
            };
            for view in views {
                if sent
                    .get(&view.id)
                    .is_none_or(|&version| view.version > version)
                {
                    sent.insert(view.id, view.version);
                    if tx.send(view).await.is_err() {
                        return;
                    }
                }
            }
            // Wait for a change this stream shows, then gather what else arrives in the window.
            let mut ids = Vec::new();
            let mut everything = false;
            while ids.is_empty() && !everything {
                tokio::select! {
                    () = tx.closed() => return,
                    change = changes.recv() => match change {
                        Ok(Change::Job(job)) if scope.covers(job.id) => ids.push(job.id),
                        Ok(Change::Job(_) | Change::Account(_)) => {}
                        Ok(Change::Resync) | Err(RecvError::Lagged(_)) => everything = true,
                        Err(RecvError::Closed) => return,
                    },
                }
            }
            tokio::time::sleep(COALESCE).await;
            loop {
                match changes.try_recv() {
                    Ok(Change::Job(job)) if scope.covers(job.id) => {
                        if !ids.contains(&job.id) {
                            ids.push(job.id);
                        }
                    }
                    Ok(Change::Job(_) | Change::Account(_)) => {}
                    Ok(Change::Resync) | Err(TryRecvError::Lagged(_)) => everything = true,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Closed) => return,
                }
            }
            pending = if everything {
                Pending::Everything
            } else {
                Pending::Jobs(ids)
            };
        }
    });
    ReceiverStream::new(rx)
}

async fn read(
    pool: &PgPool,
    scope: Scope,
    sees: Sees,
    pending: Pending,
) -> sqlx::Result<Vec<JobView>> {
    match (scope, pending) {
        (Scope::One(id), _) => Ok(jobs::find(pool, id, sees).await?.into_iter().collect()),
        (Scope::All, Pending::Everything) => {
            let owners = Owners::resolve(pool, sees, None).await?;
            let mut views =
                job_list::newest(pool, owners, &JobFilter::default(), LIST_RESYNC).await?;
            views.reverse();
            Ok(views)
        }
        (Scope::All, Pending::Jobs(ids)) => jobs::find_many(pool, &ids, sees).await,
    }
}
