//! A job's history, as operators read it on the job page and from `GET /api/jobs/{id}/history`:
//! its changes of status, every run of its steps and chunks (attempt, worker, duration, how it
//! ended), its chunks by state with those worth a look, and, while it waits, what it waits for.
//! Its callback's tries are in [`crate::model::JobView::callback`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::JobStatus;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(
    feature = "ssr",
    derive(sqlx::Type),
    sqlx(type_name = "run_outcome", rename_all = "lowercase")
)]
pub enum RunOutcome {
    /// It did its work (or found nothing left to do).
    Ok,
    /// It failed; the item ran again after a backoff, or failed for good out of attempts.
    Retry,
    /// It refused the job (a file that cannot be imported): the job failed with the reason.
    Refused,
    /// It was stopped: the job was cancelled, or its process shut down. The attempt did not count.
    Stopped,
    /// Its worker stopped renewing the lease (killed, machine gone), and the item was freed.
    Lost,
}

impl RunOutcome {
    /// The word in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Retry => "retry",
            Self::Refused => "refused",
            Self::Stopped => "stopped",
            Self::Lost => "lost",
        }
    }

    /// In words, for the job page.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "done",
            Self::Retry => "failed",
            Self::Refused => "refused",
            Self::Stopped => "stopped",
            Self::Lost => "worker lost",
        }
    }
}

/// One change of the job's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub at: DateTime<Utc>,
    pub from: JobStatus,
    pub to: JobStatus,
}

/// One run: a worker holding the lease of the job's step (its plan, an export's finish) or of
/// one chunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// 1-based part number; `None` for the job's own step.
    pub part: Option<i32>,
    pub attempt: i32,
    /// The worker process (`<host>-<pid>-<random>`), for operators only.
    pub worker: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// `None` while it runs.
    pub outcome: Option<RunOutcome>,
    pub error: Option<String>,
}

impl Run {
    /// What the run was for, in words.
    pub fn item(&self) -> String {
        match self.part {
            Some(part) => format!("part {part}"),
            None => "plan or finish".to_owned(),
        }
    }

    pub fn duration_seconds(&self) -> Option<f64> {
        self.ended_at
            .map(|ended| (ended - self.started_at).num_milliseconds() as f64 / 1000.0)
    }
}

/// One chunk, as the history shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Chunk {
    /// 1-based.
    pub part: i32,
    pub first_row: i64,
    pub row_count: i32,
    /// `pending`, `done` or `failed`.
    pub state: String,
    pub attempts: i32,
    /// The worker holding it now, if any (for operators only).
    pub leased_by: Option<String>,
    pub last_error: Option<String>,
}

/// The job's chunks: how many in each state, and those worth a look (not done, or tried more
/// than once), at most [`Chunks::SHOWN`] of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Chunks {
    pub pending: i64,
    pub done: i64,
    pub failed: i64,
    pub notable: Vec<Chunk>,
}

impl Chunks {
    pub const SHOWN: i64 = 200;
}

/// What a waiting job waits for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", tag = "reason")]
pub enum Waiting {
    /// An earlier job with its serialize key has yet to end.
    BehindJob { id: Uuid, key: String },
    /// Its last attempt to start failed; it tries again then.
    RetryAt { at: DateTime<Utc> },
    /// A worker has yet to take it; operators see how many tasks are due in the queue (its own
    /// included).
    Queue { due: Option<i64> },
    /// A job of a registered type: an external worker has yet to claim one of its items (or,
    /// unsealed and empty, it has yet to be given one).
    Claim { items: i64, sealed: bool },
}

impl Waiting {
    pub fn sentence(&self) -> String {
        match self {
            Self::BehindJob { key, .. } => {
                format!("Waits for an earlier job on {key} to end (jobs on it run one at a time).")
            }
            Self::RetryAt { at } => format!(
                "Its last attempt to start failed; it tries again at {}.",
                at.format("%H:%M:%S UTC")
            ),
            Self::Queue { due: None } => "Waits for a free worker.".to_owned(),
            Self::Queue { due: Some(due) } => format!(
                "Waits for a free worker: {due} task{} due in the queue.",
                if *due == 1 { " is" } else { "s are" }
            ),
            Self::Claim { items: 0, .. } => {
                "Waits for items: add them, or seal it to end it.".to_owned()
            }
            Self::Claim { sealed, .. } => format!(
                "Waits for a worker of its type to claim an item{}.",
                if *sealed {
                    ""
                } else {
                    " (more items may be added until it is sealed)"
                }
            ),
        }
    }
}

/// Everything the history holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobHistory {
    pub transitions: Vec<Transition>,
    /// The newest [`JobHistory::RUNS`] runs, oldest first.
    pub runs: Vec<Run>,
    pub chunks: Chunks,
    pub waiting: Option<Waiting>,
}

impl JobHistory {
    pub const RUNS: i64 = 200;
}
