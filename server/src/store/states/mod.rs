//! The job and chunk state machines: their types and every transition, one function each,
//! named for what it does and naming the state it expects, so a late or duplicated message can
//! never move a job that has moved on. No SQL elsewhere changes a status or a chunk state (rows
//! are only created in one: a batch `running`, a streamed chunk `done`), and none names one in
//! its text: queries bind these enums (PostgreSQL enum types of the same
//! names), so a misspelt state is an error rather than a query that quietly matches nothing.
//! (The exceptions: claims, `store::assignments`, write the live statuses and `pending` out,
//! and `store::leases` its serialize-key test and a lease's live statuses, so that every plan
//! can use the partial indexes those name; as do a few reads, such as `jobs::live_jobs`.)
//!
//! A job ([`JobStatus`], transitions in [`job`]):
//!
//! ```text
//!          create             start (plan task)               last chunk done
//!  (none) ───────▶ waiting ──────────────────────▶ running ─────────────────────▶ completed
//!                   │  ▲                            │ │ │   export finish step ───▶ completed
//!                   │  │ retry                      │ │ └── a part out of attempts,
//!                   │  │                            │ │     too many bad rows,
//!                   │  │                            │ │     file unusable ─────────▶ failed
//!                   │  └──────── failed, cancelled ◀┘ │
//!                   └── cancel ──────────────────────┴──────────────────────────▶ cancelled
//! ```
//!
//! A small file the plan refuses fails its job while still `waiting`: the plan reads it before
//! it starts the job, to import it in that same transaction (`jobs::plan`). One it imports with
//! no row in error goes from `waiting` to `completed` in one update ([`job::add_chunk`]).
//!
//! A deletion's one step starts it and completes it once its dataset has no rows left; it is
//! never cancelled (its dataset is gone already). A batch is created `running`, takes children until sealed, and is settled `completed` (every
//! child completed) or `failed` once they have all ended; cancelling it cancels its live
//! children. Every transition bumps the job's `version` and the caller notifies
//! (`store::notify`) in the same transaction.
//!
//! A chunk ([`ChunkState`], transitions in [`chunk`]): `pending` → `done` when its rows commit
//! (or is recorded `done` at once, for a streamed sheet); `pending` → `failed` when an attempt
//! fails or its lease expires with no attempts left; back to `pending` when its job is retried.
//!
//! An item of a job of a registered type moves through the chunk states too ([`item`]); such
//! jobs, and the follow-up chains they make, end as [`item_job`] says.
//!
//! A dataset ([`DatasetState`], transitions in [`dataset`]): `provisional` until an import into
//! it completes, then `ready`; `deleted` when its owner deletes it or a new import takes over
//! what a failed one left.

pub mod chunk;
pub mod dataset;
pub mod item;
pub mod item_job;
pub mod job;

pub use dataset::DatasetState;

pub use app::model::{ExportFormat, JobKind, JobStatus};

/// Where a chunk is: the `chunk_state` type of PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "chunk_state", rename_all = "lowercase")]
pub enum ChunkState {
    /// To do, whether or not a worker holds its lease now.
    Pending,
    /// Its rows are written and counted.
    Done,
    /// Out of attempts; runs again only if its job is retried.
    Failed,
}

/// An item whose holder stopped renewing its lease (killed, machine gone, or stalled): a chunk
/// ([`chunk::expire_leases`]) or a job's step (`store::leases::free_expired`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub job_id: uuid::Uuid,
    /// `None` for a step.
    pub chunk_no: Option<i32>,
    pub attempts: i32,
    pub max_attempts: i32,
}

/// The statuses of a job that can still change: waiting or running.
pub const LIVE: [JobStatus; 2] = [JobStatus::Waiting, JobStatus::Running];
