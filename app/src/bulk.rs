//! Bulk actions on the job list (`POST /api/jobs/bulk`, the list's selection bar) and the audit
//! log that records each (`GET /api/audit`, admins).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{JobKind, JobStatus};

/// What a bulk action does to each job it applies to. On the server, also the `bulk_action`
/// type of PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(
    feature = "ssr",
    derive(sqlx::Type),
    sqlx(type_name = "bulk_action", rename_all = "lowercase")
)]
pub enum BulkAction {
    Cancel,
    Retry,
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Retry => "retry",
        }
    }

    /// The statuses of the jobs it applies to.
    pub fn applies_to(self) -> &'static [JobStatus] {
        match self {
            Self::Cancel => &[JobStatus::Waiting, JobStatus::Running],
            Self::Retry => &[JobStatus::Failed, JobStatus::Cancelled],
        }
    }

    /// The kinds of job it applies to (a batch is not retried: its children are; a deletion
    /// is not cancelled: its dataset is gone already).
    pub fn applies_to_kinds(self) -> &'static [JobKind] {
        match self {
            Self::Cancel => &[
                JobKind::Import,
                JobKind::Export,
                JobKind::Batch,
                JobKind::Items,
            ],
            Self::Retry => &[
                JobKind::Import,
                JobKind::Export,
                JobKind::Delete,
                JobKind::Items,
            ],
        }
    }

    /// "Cancel" / "Retry", for buttons.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Cancel => "Cancel",
            Self::Retry => "Retry",
        }
    }
}

/// What a bulk action did (or, for a dry run, would apply to).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct BulkOutcome {
    pub action: BulkAction,
    /// Jobs selected that the action applies to, when it began.
    pub matched: i64,
    /// Jobs it changed (none for a dry run). Fewer than `matched` when some moved on
    /// meanwhile (a job that completed is never retried) or could not be retried; more when
    /// cancelled batches took live children along.
    pub changed: i64,
    /// The audit log entry; none for a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<i64>,
    /// It stopped at the owner's limit of live jobs (`limit`) before it was through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at_limit: Option<i64>,
}

/// One bulk action in the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// `None` once the account is gone (a guest removed by retention); the email stays.
    pub actor: Option<Uuid>,
    pub actor_email: Option<String>,
    pub action: BulkAction,
    /// `{"ids": [...]}` or `{"filter": "<the list's query string>"}`, as asked.
    pub selection: serde_json::Value,
    pub matched: i64,
    pub changed: i64,
    /// Unset while it runs (or if its process died before it was through).
    pub finished_at: Option<DateTime<Utc>>,
    /// Why it stopped before it was through, if it did.
    pub error: Option<String>,
}
