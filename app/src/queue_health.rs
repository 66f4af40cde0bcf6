//! What the queue health page (`/admin`) and `GET /api/queue` show: the worker processes, the
//! backlog, and the throughput over the last hour and day, for admins and viewers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The queue's state when it was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct QueueHealth {
    /// When the figures were read (the database's clock).
    pub at: DateTime<Utc>,
    /// Worker processes running, and those stopped or gone within the last hour; newest first.
    pub processes: Vec<WorkerProcess>,
    /// Task messages due and not taken, per task (tasks with none left out).
    pub backlog: Vec<TaskBacklog>,
    /// The waiting job due longest (since it was created or retried), batches (which wait for
    /// their children) aside.
    pub oldest_waiting: Option<OldestWaiting>,
    /// The last hour, by minute.
    pub hour: Throughput,
    /// The last day, by quarter of an hour.
    pub day: Throughput,
}

/// One worker process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkerProcess {
    /// `<host>-<pid>-<random>`: the prefix of the lease owners in job histories.
    pub process: String,
    pub host: String,
    pub pid: i32,
    /// Tasks it runs at once.
    pub slots: i32,
    pub started_at: DateTime<Utc>,
    pub seen_at: DateTime<Utc>,
    pub state: ProcessState,
    /// Tasks it holds a lease for now.
    pub running: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum ProcessState {
    /// Heartbeating.
    Alive,
    /// Stopped cleanly (its leases were given back).
    Stopped,
    /// Missed three heartbeats without stopping: killed, or cut off from the database. Its
    /// leases are rescued when they expire.
    Gone,
}

impl ProcessState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alive => "alive",
            Self::Stopped => "stopped",
            Self::Gone => "gone",
        }
    }
}

/// Messages of one task that are due and not taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskBacklog {
    pub task: String,
    pub due: i64,
    /// How long the oldest has been due.
    pub oldest_secs: f64,
}

/// The job that has been due longest without a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OldestWaiting {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    /// Since it was due: created, or retried.
    pub waited_secs: f64,
}

/// A window of time cut into equal buckets, oldest first; the last one is still filling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    /// Where the first bucket starts.
    pub from: DateTime<Utc>,
    pub bucket_secs: i64,
    pub buckets: Vec<Bucket>,
}

/// What happened in one bucket of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Bucket {
    /// Rows of chunks done (imported, refused or exported).
    pub rows: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
    /// Runs whose worker was lost, ended by the reaper or by a takeover.
    pub rescued: i64,
}

impl Throughput {
    /// Every bucket added up.
    pub fn total(&self) -> Bucket {
        self.buckets
            .iter()
            .fold(Bucket::default(), |sum, b| Bucket {
                rows: sum.rows + b.rows,
                completed: sum.completed + b.completed,
                failed: sum.failed + b.failed,
                cancelled: sum.cancelled + b.cancelled,
                rescued: sum.rescued + b.rescued,
            })
    }
}

impl Bucket {
    /// Failed jobs among those that completed or failed (cancelled ones aside); `None` when
    /// none did.
    pub fn failure_rate(&self) -> Option<f64> {
        let ended = self.completed + self.failed;
        (ended > 0).then(|| self.failed as f64 / ended as f64)
    }
}
