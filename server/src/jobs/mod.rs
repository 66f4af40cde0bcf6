//! The job engine. PostgreSQL is the truth; apalis only delivers task messages, at least once.
//! A job's states and every transition between them are in [`crate::store::states`] (with the
//! diagram); this module runs the tasks that make those transitions.
//!
//! - Creating a job writes the job row and its plan task in one transaction ([`create`]).
//! - The plan task ([`plan`]) reads a CSV file once, records every chunk and the row count,
//!   marks the job `sealed` and queues one task per chunk, again in one transaction (a small
//!   file of one chunk it imports itself, in the same transaction). A
//!   workbook's sheet is converted to CSV ([`convert`]) and written chunk by chunk as it
//!   streams, by the plan task itself ([`sheet`]), which seals the job at the end.
//! - A chunk task ([`chunk`]) writes its rows, marks the chunk done and adds to the job's
//!   counters in one transaction that does nothing if the chunk is already done: a redelivered,
//!   duplicated or re-run task counts once. The last chunk of a sealed job completes it.
//! - An export ([`export`]) runs the same states with its own tasks: plan (key ranges of the
//!   dataset), one chunk task per range (rendered rows written into the file's parts, behind
//!   the same done-gate), the last of which completes the job with its file.
//! - A deletion ([`deletion`]) is one step: it removes a deleted dataset's rows batch by
//!   batch, each batch counted as progress, and completes when none are left.
//! - Every transition sends `job_progress` in its transaction (see [`crate::store::notify`]).

pub mod batch;
pub mod bulk;
pub mod callbacks;
pub mod chunk;
pub mod claims;
pub mod control;
pub mod convert;
pub mod create;
pub mod deletion;
mod error;
pub mod export;
mod export_file;
mod format;
pub mod group;
pub mod lane;
pub mod maintenance;
pub mod pipe;
pub mod plan;
pub mod preview;
pub mod sheet;
pub mod worker;

use std::path::PathBuf;

pub use error::{Cause, Refusal, TaskError};
use sqlx::PgPool;
use uuid::Uuid;

use tokio_util::sync::CancellationToken;

use crate::{
    config::WorkerArgs,
    store::{leases::Lease, notify, states},
};

/// A run of a work item: the lease it holds (a chunk's commit checks it) and the signal to
/// stop at the next safe point (lease lost, job cancelled, process stopping).
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pub lease: &'a Lease,
    pub stop: &'a CancellationToken,
}

/// How a task that did not fail left its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Its lease is still held: the worker gives it back and records the run's end.
    LeaseHeld,
    /// The transaction that committed its work also gave the lease back and ended the run (a
    /// small file imported at once): a small job saves the worker's two transactions after it.
    RunEnded,
}

/// What every task needs.
#[derive(Clone)]
pub struct Engine {
    pub pool: PgPool,
    /// Rows per chunk when a job is planned.
    pub chunk_rows: usize,
    /// Rows per chunk when an export is planned.
    pub export_chunk_rows: usize,
    /// The program run as `<converter> convert` to turn a workbook into CSV.
    pub converter: PathBuf,
}

impl Engine {
    pub fn new(pool: PgPool, args: &WorkerArgs) -> std::io::Result<Self> {
        Ok(Self {
            pool,
            chunk_rows: args.chunk_rows,
            export_chunk_rows: args.export_chunk_rows,
            converter: args.converter_path()?,
        })
    }
}

/// Fails a job for good, with a reason for the person who started it (a task refused: it cannot
/// succeed however often it is retried).
async fn fail(pool: &PgPool, job_id: Uuid, refusal: &Refusal) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let remedy = refusal.remedy.as_ref();
    if let Some(version) = states::job::fail(&mut tx, job_id, &refusal.reason, remedy).await? {
        notify::job_changed(&mut tx, job_id, version).await?;
    }
    tx.commit().await?;
    tracing::info!(%job_id, reason = refusal.reason, "job failed");
    Ok(())
}
