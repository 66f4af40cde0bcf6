//! Job types: kinds of work other services run on the engine (issue 14), registered by name
//! with their defaults, as `GET /api/job-types` shows them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A registered job type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobTypeView {
    /// `payroll.run`, `video-render`: what `jobType` names when a job of it is created.
    pub name: String,
    /// How long a claimed item stays its worker's without a heartbeat.
    pub lease_seconds: i32,
    /// Attempts per item before it fails.
    pub max_failures_per_item: i32,
    /// The wait before a failed item's next attempt, doubled at each attempt.
    pub backoff_seconds: i32,
    /// The items of a job run one at a time, in the order they were added.
    pub ordered: bool,
    /// Days a finished job of this type is kept; the deployment's default when absent.
    pub retain_days: Option<i32>,
    /// The type of the job that each succeeded item's result starts an item of.
    pub follow_up: Option<String>,
    /// The largest item payload accepted, in bytes of JSON.
    pub max_payload_bytes: i32,
    pub created_at: DateTime<Utc>,
}

/// Where an item is: to do (claimed or not), done with a result, or failed for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::Type))]
#[cfg_attr(
    feature = "ssr",
    sqlx(type_name = "chunk_state", rename_all = "lowercase")
)]
#[serde(rename_all = "lowercase")]
pub enum ItemState {
    Pending,
    Done,
    Failed,
}

impl ItemState {
    pub fn parse(word: &str) -> Option<Self> {
        [Self::Pending, Self::Done, Self::Failed]
            .into_iter()
            .find(|state| state.as_str() == word)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

/// One item of a job of a registered type, as `GET /api/jobs/{id}/items` pages them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ItemView {
    /// 1, 2, 3… in the order the items were added.
    pub item_no: i64,
    pub state: ItemState,
    #[cfg_attr(feature = "ssr", schema(value_type = Object))]
    pub payload: serde_json::Value,
    pub dedupe_key: Option<String>,
    pub attempts: i32,
    /// What its worker answered, once done.
    #[cfg_attr(feature = "ssr", schema(value_type = Option<Object>))]
    pub result: Option<serde_json::Value>,
    /// `[{"message","at","worker"}]`, one per failed attempt.
    #[cfg_attr(feature = "ssr", schema(value_type = Vec<Object>))]
    pub failures: serde_json::Value,
    pub done_at: Option<DateTime<Utc>>,
}
