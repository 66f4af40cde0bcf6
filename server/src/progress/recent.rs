//! The job views this process read lately, for `GET /api/jobs/{id}`: a job asked for again is
//! answered from memory (its JSON made once), until a notification says it changed, or after
//! [`LASTING`] (some of what a view shows changes without one: the elapsed time of a running
//! job, the dataset's name, the owner's email). See [`super::remembered`] for why what is served
//! is never older than the notifications this process has heard.
//!
//! The transaction that changes a job holds its entry from before its commit
//! (`store::notify::job_changed`, or `notify::announcing` for a new job's insert, calls
//! [`changing`]), so a client that changed a job through this process reads the change back
//! at once, whatever it had read before.

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    Change, Hub,
    remembered::{self, Live, Remembered},
    views::Shown,
};
use crate::{auth::Sees, store::jobs};

/// The longest a view is served from memory.
pub const LASTING: Duration = Duration::from_secs(1);

/// Views remembered at most.
const CAPACITY: usize = 10_000;

pub struct RecentViews {
    remembered: Remembered<Uuid, Arc<Shown>>,
}

/// Every [`RecentViews`] of this process, which a transaction changing a job holds it in.
static LIVE: Live<RecentViews> = Live::new();

impl RecentViews {
    /// Starts forgetting what the hub reports changed; stops on `shutdown`.
    pub fn start(hub: &Hub, shutdown: CancellationToken) -> Arc<Self> {
        let recent = Arc::new(Self {
            remembered: Remembered::new(hub.clone(), CAPACITY),
        });
        LIVE.add(&recent);
        remembered::follow(
            &recent,
            hub.subscribe(),
            shutdown,
            |recent, change| match change {
                Change::Job(job) => recent.remembered.forget(&job.id, job.version),
                Change::Account(_) => {}
                Change::Resync => recent.remembered.forget_all(),
            },
        );
        recent
    }

    /// The job as `sees` may see it (`None`: no such job, or not theirs).
    pub async fn find(
        &self,
        pool: &PgPool,
        id: Uuid,
        sees: Sees,
    ) -> sqlx::Result<Option<Arc<Shown>>> {
        let shown = match self.remembered.get(&id) {
            Some(shown) => shown,
            None => {
                let ticket = self.remembered.ticket();
                let Some(view) = jobs::find(pool, id, Sees::Everything).await? else {
                    return Ok(None);
                };
                let shown = Arc::new(Shown::new(view));
                self.remembered.remember(ticket, id, shown.clone(), LASTING);
                shown
            }
        };
        Ok(sees.covers(shown.view.owner).then_some(shown))
    }
}

/// A transaction is changing job `id` to `version`: no process-local memory serves the job
/// until that change's notification arrives (or notifications resync).
pub fn changing(id: Uuid, version: i64) {
    LIVE.each(|recent| recent.remembered.hold(id, version));
}

/// These jobs are gone (retention removed them): this process forgets them now; others within
/// [`LASTING`].
pub fn gone(ids: &[Uuid]) {
    LIVE.each(|recent| {
        for id in ids {
            recent.remembered.forget(id, i64::MAX);
        }
    });
}
