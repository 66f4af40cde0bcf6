//! `/api/job-types`: the kinds of work other services run on the engine (issue 14). Admins
//! register them; anyone who may create jobs reads them.

use axum::{
    Json,
    extract::{Path, State, rejection::JsonRejection},
    http::StatusCode,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
};
use crate::store::job_types::{self, NewJobType, NotRegistered};
use app::{job_types::JobTypeView, model::JobKind};

/// A type to register; what is left out takes its default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterJobType {
    /// 1 to 63 characters: lower-case letters, digits, `.`, `_` and `-`, starting with a
    /// letter; not a built-in kind (`import`, `export`, `batch`, `delete`, `validate`).
    #[schema(example = "video-render")]
    name: String,
    /// 5 to 3,600 (default 60): how long a claimed item stays its worker's without a heartbeat.
    lease_seconds: Option<i32>,
    /// 1 to 100 (default 5): attempts per item before it fails.
    max_failures_per_item: Option<i32>,
    /// 0 to 3,600 (default 5): the wait before a failed item's next attempt, doubled at each.
    backoff_seconds: Option<i32>,
    /// Whether a job's items run one at a time, in the order they were added (default false).
    ordered: Option<bool>,
    /// 1 to 3,650: days a finished job of this type is kept (default: the deployment's).
    retain_days: Option<i32>,
    /// A registered type: each succeeded item's result becomes an item of a child job of it.
    follow_up: Option<String>,
    /// 1 to 1,048,576 (default 65,536): the largest item payload, in bytes of JSON.
    max_payload_bytes: Option<i32>,
}

/// The defaults a type takes for what its registration leaves out.
const DEFAULT_LEASE_SECONDS: i32 = 60;
const DEFAULT_MAX_FAILURES: i32 = 5;
const DEFAULT_BACKOFF_SECONDS: i32 = 5;
const DEFAULT_MAX_PAYLOAD_BYTES: i32 = 64 * 1024;

impl RegisterJobType {
    /// The type to register, or why it cannot be.
    fn checked(self) -> Result<NewJobType, String> {
        let name = self.name.trim().to_owned();
        if !job_types::is_well_formed(&name) {
            return Err(
                "\"name\" must be 1 to 63 characters: lower-case letters, digits, \".\", \"_\" \
                 and \"-\", starting with a letter."
                    .into(),
            );
        }
        if name == "validate" || JobKind::ALL.iter().any(|kind| kind.as_str() == name) {
            return Err(format!(
                "\"{name}\" is a built-in kind of job: choose another name."
            ));
        }
        let within = |field: &str, value: Option<i32>, default: i32, low: i32, high: i32| {
            let value = value.unwrap_or(default);
            if (low..=high).contains(&value) {
                Ok(value)
            } else {
                Err(format!("\"{field}\" must be between {low} and {high}."))
            }
        };
        let follow_up = self.follow_up.map(|f| f.trim().to_owned());
        if follow_up.as_deref() == Some(name.as_str()) {
            return Err("A type cannot be its own follow-up.".into());
        }
        Ok(NewJobType {
            lease_seconds: within(
                "leaseSeconds",
                self.lease_seconds,
                DEFAULT_LEASE_SECONDS,
                5,
                3600,
            )?,
            max_failures_per_item: within(
                "maxFailuresPerItem",
                self.max_failures_per_item,
                DEFAULT_MAX_FAILURES,
                1,
                100,
            )?,
            backoff_seconds: within(
                "backoffSeconds",
                self.backoff_seconds,
                DEFAULT_BACKOFF_SECONDS,
                0,
                3600,
            )?,
            ordered: self.ordered.unwrap_or(false),
            retain_days: match self.retain_days {
                None => None,
                days => Some(within("retainDays", days, 0, 1, 3650)?),
            },
            max_payload_bytes: within(
                "maxPayloadBytes",
                self.max_payload_bytes,
                DEFAULT_MAX_PAYLOAD_BYTES,
                1,
                1 << 20,
            )?,
            follow_up,
            name,
        })
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobTypeList {
    job_types: Vec<JobTypeView>,
}

/// Registers a job type.
///
/// `POST /api/job-types` → 201 with the type; 409 when one of that name exists (a type does not
/// change: its jobs run on its defaults).
#[utoipa::path(
    post,
    path = "/api/job-types",
    operation_id = "registerJobType",
    tag = "job types",
    request_body = RegisterJobType,
    responses(
        (status = 201, description = "The type, registered.", body = JobTypeView),
        (status = 400, description = "Not JSON of this shape.", body = ErrorBody),
        (status = 403, description = "Only admins register types.", body = ErrorBody),
        (status = 409, description = "A type of that name exists.", body = ErrorBody),
        (status = 422, description = "A bad name, value or follow-up.", body = ErrorBody),
    )
)]
pub async fn register(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<RegisterJobType>, JsonRejection>,
) -> Result<(StatusCode, Json<JobTypeView>), ApiError> {
    let Json(request) = body?;
    let new = request.checked().map_err(ApiError::Invalid)?;
    let admin = caller.signed_in()?.id;
    match job_types::register(&state.pool, &new, admin).await? {
        Ok(registered) => Ok((StatusCode::CREATED, Json(registered))),
        Err(NotRegistered::Exists) => Err(ApiError::Conflict(format!(
            "A job type named \"{}\" exists already.",
            new.name
        ))),
        Err(NotRegistered::NoSuchFollowUp(follow_up)) => Err(ApiError::Invalid(format!(
            "\"followUp\" must name a registered type; no type is named \"{follow_up}\"."
        ))),
    }
}

/// Lists the registered job types, by name.
#[utoipa::path(
    get,
    path = "/api/job-types",
    operation_id = "listJobTypes",
    tag = "job types",
    responses((status = 200, description = "The types.", body = JobTypeList))
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<JobTypeList>, ApiError> {
    Ok(Json(JobTypeList {
        job_types: job_types::list(&state.pool).await?,
    }))
}

/// Reads a job type.
#[utoipa::path(
    get,
    path = "/api/job-types/{name}",
    operation_id = "getJobType",
    tag = "job types",
    params(("name" = String, Path, description = "The type's name.")),
    responses(
        (status = 200, description = "The type.", body = JobTypeView),
        (status = 404, description = "No type of that name.", body = ErrorBody),
    )
)]
pub async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<JobTypeView>, ApiError> {
    job_types::find(&state.pool, &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("No job type is named \"{name}\".")))
}
