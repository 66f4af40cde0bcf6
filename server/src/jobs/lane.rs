//! The local lane: an import of a small file, created by a `serve` process that runs its own
//! workers, goes straight to those workers. Its insert leases the job's step to a run of this
//! process and records the run (`store::jobs::insert` with a `NewLease`), and no queue message
//! is written: the job skips apalis's insert (under its owner's lock), fetch and
//! acknowledgement and the lease's own statement (`make bench ONLY=small`, 10,000 jobs: 209–262
//! jobs/s before, 261–307 after, four pairs of runs alternated).
//!
//! A create takes one of the lane's places ([`PLACES_PER_SLOT`] for each task the workers run
//! at once) under its owner's lock, before the job's insert, and holds it until the job's run
//! ends; a handed job waits for one of the workers' run slots ([`Slots`], which the tasks they
//! fetch take too, first come first served), so the process never runs more tasks at once than
//! its concurrency. With no place free (or no workers in the process: `serve --no-workers`,
//! `server worker`), or when the job is not first in line for its serialize key, the create
//! queues a message with its owner's turn as before.
//!
//! Our tables stay the truth. A handed job is leased like any running item: if the process
//! dies before its run ends, the lease runs out, lease rescue frees the job and requeueing
//! queues it as it queues any item without a message. The jobs waiting when a slot frees run
//! in it together, as a batch ([`super::batch`]). A job that finds no slot within a heartbeat
//! is given back (so a lease never runs out while it waits), one that began late renews its
//! lease first, one that waits in a batch for the jobs before it has its lease renewed every
//! heartbeat, and one that cannot be handed (the workers stopped) is given back by its create:
//! each given back is then queued, with its owner's turn.

use std::{sync::Arc, time::Instant};

use app::history::RunOutcome;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::store::{
    history,
    jobs::NewLease,
    leases::{self, Item, Lease},
    queue::TaskMsg,
};

/// Places in the lane for each run slot (a place is held from the insert to the run's end).
/// With one, creates often found every place taken and queued their jobs instead: `make bench
/// ONLY=small` (5,000 jobs) ran at 227–269 jobs/s, against 212–231 without the lane and
/// 272–276 with four, runs alternated. Since a run imports handed jobs in batches
/// ([`super::batch`]), eight (10,000 jobs: 426–516 jobs/s, three runs) do better than four
/// (335) or sixteen (429–445, two runs): with four, a batch holds most of the places while it
/// runs, and creates queue more of their jobs.
pub const PLACES_PER_SLOT: usize = 8;

/// The run slots of one process's workers: a run holds one from before it begins to its end.
pub type Slots = Arc<Semaphore>;

/// The workers' end of a lane.
pub type Receiver = mpsc::UnboundedReceiver<Handed>;

/// Where creates hand jobs on; cheap to clone.
#[derive(Clone)]
pub struct Lane {
    sender: mpsc::UnboundedSender<Handed>,
    places: Arc<Semaphore>,
    process: Arc<str>,
    ttl: std::time::Duration,
}

/// A place in the lane, held from before a job's insert until its run ends.
pub struct Reserved {
    place: OwnedSemaphorePermit,
    owner: String,
    at: Instant,
}

/// A job whose step its insert leased, to run in the next free slot.
pub struct Handed {
    pub lease: Lease,
    /// Given up when its run ends.
    pub place: OwnedSemaphorePermit,
    /// Before its insert leased it.
    pub leased_at: Instant,
}

impl Handed {
    /// The task the lease is for: the job's plan.
    pub fn task(&self) -> TaskMsg {
        TaskMsg::Plan {
            job_id: self.lease.item.job_id(),
        }
    }
}

/// The lane of the workers of `process` (the prefix of their lease owners), whose leases last
/// `ttl` and who run `concurrency` tasks at once; and its other end, for those workers.
pub fn new(process: &str, ttl: std::time::Duration, concurrency: usize) -> (Lane, Receiver) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let lane = Lane {
        sender,
        places: Arc::new(Semaphore::new(concurrency.max(1) * PLACES_PER_SLOT)),
        process: process.into(),
        ttl,
    };
    (lane, receiver)
}

impl Lane {
    /// A place for an upload of `size` bytes, if it is small enough ([`takes`]), a place is
    /// free and the workers still take jobs.
    pub fn reserve(&self, size: i64) -> Option<Reserved> {
        if !takes(size) || self.sender.is_closed() {
            return None;
        }
        let place = self.places.clone().try_acquire_owned().ok()?;
        let run = uuid::Uuid::new_v4().simple();
        Some(Reserved {
            place,
            owner: format!("{}/{run}", self.process),
            at: Instant::now(),
        })
    }

    /// The lease a job's insert takes for `reserved`.
    pub fn lease<'a>(&self, reserved: &'a Reserved) -> NewLease<'a> {
        NewLease {
            owner: &reserved.owner,
            ttl: self.ttl,
        }
    }

    /// Hands on the plan of `job_id`, whose insert took [`Self::lease`] with `max_attempts`
    /// attempts, once its transaction committed. The lease back, when the workers have
    /// stopped: the caller gives it back.
    pub fn hand(
        &self,
        reserved: Reserved,
        job_id: uuid::Uuid,
        max_attempts: i32,
    ) -> Result<(), Lease> {
        let handed = Handed {
            lease: Lease {
                item: Item::Step(job_id),
                owner: reserved.owner,
                attempt: 1,
                max_attempts,
            },
            place: reserved.place,
            leased_at: reserved.at,
        };
        self.sender.send(handed).map_err(|unsent| unsent.0.lease)
    }
}

/// Whether an upload of `size` bytes is small enough for the lane: one part, read whole by the
/// plan, which imports it at once when it is one chunk ([`super::plan`]).
fn takes(size: i64) -> bool {
    size < super::plan::SMALL_FILE as i64
}

/// Gives back the lease of a handed job that will not run here (the workers stopped, no run
/// slot came within a heartbeat, or its lease could not be renewed) and ends its run, without
/// counting the attempt: requeueing queues it, with its owner's turn.
pub async fn give_back(pool: &sqlx::PgPool, lease: &Lease) {
    let given = leases::release(pool, lease).await;
    let ended = history::end_run(pool, &lease.owner, RunOutcome::Stopped, None).await;
    if let Err(err) = given.and(ended) {
        // The lease runs out and `maintenance::lease_rescue` frees the item.
        tracing::warn!(item = ?lease.item, "could not give back a handed lease: {err}");
    }
}
