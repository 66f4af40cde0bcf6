//! The job engine. PostgreSQL is the truth; apalis only delivers task messages, at least once.
//!
//! ```text
//!             POST /api/jobs                 plan task                 last chunk task
//!  (none) ──────────────────▶ waiting ─────────────────▶ running ─────────────────────▶ completed
//!                                │                        │  │
//!                                │ file unusable          │  └── file unusable ───────▶ failed
//!                                └────────────────────────┴─────────────────────────▶ failed
//! ```
//!
//! - Creating a job writes the job row and its plan task in one transaction ([`create`]).
//! - The plan task ([`plan`]) reads the file once, records every chunk and the row count, marks
//!   the job `sealed` and queues one task per chunk, again in one transaction.
//! - A chunk task ([`chunk`]) writes its rows, marks the chunk done and adds to the job's
//!   counters in one transaction that does nothing if the chunk is already done: a redelivered,
//!   duplicated or re-run task counts once. The last chunk of a sealed job completes it.
//! - Every transition names the state it expects and sends `job_progress` (see
//!   [`crate::store::notify`]).

pub mod chunk;
pub mod create;
mod error;
pub mod plan;
pub mod queue;
pub mod worker;

pub use error::TaskError;
use sqlx::PgPool;

/// What every task needs.
#[derive(Clone)]
pub struct Engine {
    pub pool: PgPool,
    /// Rows per chunk when a job is planned.
    pub chunk_rows: usize,
}
