//! The worker routes (issue 14): external workers, in any language, with a worker token, claim
//! items of their types (`POST /api/workers/{worker}/claims`, long-polling), send heartbeats
//! while they work on one (`…/heartbeat`, which also says when its job was cancelled), and end
//! it with a result or a failure. Only an item's current assignment, inside its lease, counts:
//! anything late is `409` and changes nothing (`store::assignments`).

use std::time::Duration;

use axum::{
    Extension, Json,
    extract::{
        Path, State,
        rejection::{JsonRejection, PathRejection},
    },
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody, ErrorDetail},
};
use crate::{
    jobs::claims::{self, Claim},
    store::{
        assignments::{self, Assignment, Heartbeat},
        endings::{self, Ending, Finished, Outcome},
        items,
        states::{ChunkState, JobStatus},
        worker_tokens::Worker,
    },
};

/// The most items one claim takes.
const MAX_CLAIM: i64 = 1000;
/// The longest a claim waits for items.
const MAX_WAIT_SECONDS: u64 = 60;
/// The largest result, in bytes of JSON (a follow-up type may take less: see its
/// `maxPayloadBytes`).
const MAX_RESULT_BYTES: usize = 1 << 20;
/// The longest failure message kept.
const MAX_MESSAGE_CHARS: usize = 10_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimRequest {
    /// Of the token's types, those to claim items of (default: all of them).
    types: Option<Vec<String>>,
    /// 1 to 1,000 items at most (default 1).
    max: Option<i64>,
    /// 0 to 60 (default 0): how long to wait for items when none can be had at once. The
    /// answer comes as soon as there are some.
    wait_seconds: Option<u64>,
}

/// An item claimed: do it, send heartbeats before `leaseExpiresAt`, then its result or failure.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentView {
    /// The assignment's id: what heartbeats, results and failures name.
    id: Uuid,
    job_id: Uuid,
    item_no: i64,
    job_type: String,
    #[schema(value_type = Object)]
    payload: Box<RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dedupe_key: Option<String>,
    /// 1 on the first attempt.
    attempt: i32,
    lease_expires_at: DateTime<Utc>,
}

impl TryFrom<Assignment> for AssignmentView {
    type Error = serde_json::Error;

    fn try_from(a: Assignment) -> Result<Self, Self::Error> {
        Ok(Self {
            id: a.assignment,
            job_id: a.job_id,
            item_no: a.item_no,
            job_type: a.job_type,
            payload: RawValue::from_string(a.payload)?,
            dedupe_key: a.dedupe_key,
            attempt: a.attempt,
            lease_expires_at: a.lease_expires_at,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Claimed {
    /// Empty when the wait ended with nothing to do: claim again.
    assignments: Vec<AssignmentView>,
}

/// Claims items of the token's types, waiting up to `waitSeconds` for some.
#[utoipa::path(
    post,
    path = "/api/workers/{worker}/claims",
    operation_id = "claimItems",
    tag = "workers",
    params(("worker" = String, Path, description = "The worker's own name for itself (1 to 100 of `A-Z a-z 0-9 . _ : @ -`), recorded on the items it takes.")),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "The items claimed (none when the wait ended empty).", body = Claimed),
        (status = 401, description = "No valid worker token.", body = ErrorBody),
        (status = 403, description = "A type the token is not bound to.", body = ErrorBody),
        (status = 422, description = "A bad worker name, `max` or `waitSeconds`.", body = ErrorBody),
    )
)]
pub async fn claim(
    State(state): State<AppState>,
    Extension(token): Extension<Worker>,
    worker: Result<Path<String>, PathRejection>,
    body: Result<Json<ClaimRequest>, JsonRejection>,
) -> Result<Json<Claimed>, ApiError> {
    let worker = worker
        .map(|Path(worker)| worker)
        .ok()
        .filter(|name| well_named(name))
        .ok_or_else(|| {
            ApiError::Invalid(
                "A worker's name is 1 to 100 characters of A-Z, a-z, 0-9, \".\", \"_\", \":\", \
                 \"@\" and \"-\"."
                    .into(),
            )
        })?;
    let Json(request) = body?;
    let types = match request.types {
        None => token.types.clone(),
        Some(types) if types.is_empty() => {
            return Err(ApiError::Invalid(
                "\"types\" names at least one type (leave it out for all of the token's).".into(),
            ));
        }
        Some(types) => {
            if let Some(other) = types.iter().find(|t| !token.types.contains(t)) {
                return Err(ApiError::Forbidden(format!(
                    "This worker token does not claim items of \"{other}\"."
                )));
            }
            types
        }
    };
    let max = request.max.unwrap_or(1);
    if !(1..=MAX_CLAIM).contains(&max) {
        return Err(ApiError::Invalid(format!(
            "\"max\" must be between 1 and {MAX_CLAIM}."
        )));
    }
    let wait = request.wait_seconds.unwrap_or(0);
    if wait > MAX_WAIT_SECONDS {
        return Err(ApiError::Invalid(format!(
            "\"waitSeconds\" must be between 0 and {MAX_WAIT_SECONDS}."
        )));
    }
    let claim = Claim {
        worker: &worker,
        types: &types,
        max,
        wait: Duration::from_secs(wait),
    };
    let claimed = claims::claim(&state.pool, &state.hub, &claim, &state.shutdown).await?;
    let assignments = claimed
        .into_iter()
        .map(AssignmentView::try_from)
        .collect::<Result<_, _>>()
        .map_err(|err| ApiError::Internal(err.into()))?;
    Ok(Json(Claimed { assignments }))
}

fn well_named(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:@".contains(&b))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAnswer {
    /// The job was cancelled (or failed): drop the item, its result would not count.
    cancelled: bool,
    /// The lease, renewed (absent when `cancelled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_expires_at: Option<DateTime<Utc>>,
}

/// Renews an assignment's lease by its type's lease length; says when its job was cancelled.
#[utoipa::path(
    post,
    path = "/api/assignments/{id}/heartbeat",
    operation_id = "heartbeat",
    tag = "workers",
    params(("id" = Uuid, Path, description = "The assignment's id.")),
    responses(
        (status = 200, description = "Renewed, or the job was cancelled.", body = HeartbeatAnswer),
        (status = 401, description = "No valid worker token.", body = ErrorBody),
        (status = 409, description = "Not current: the lease expired, or the item ended.", body = ErrorBody),
    )
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    Extension(token): Extension<Worker>,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<HeartbeatAnswer>, ApiError> {
    let id = assignment_id(id)?;
    match assignments::heartbeat(&state.pool, id, &token.types).await? {
        Heartbeat::Renewed(until) => Ok(Json(HeartbeatAnswer {
            cancelled: false,
            lease_expires_at: Some(until),
        })),
        Heartbeat::JobStopped(_) => Ok(Json(HeartbeatAnswer {
            cancelled: true,
            lease_expires_at: None,
        })),
        Heartbeat::NotCurrent => Err(not_current()),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultRequest {
    /// Any JSON (up to 1 MiB): what the item produced. With a follow-up type, the payload of
    /// the follow-up item.
    #[schema(value_type = Object)]
    result: Option<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailureRequest {
    /// What went wrong (up to 10,000 characters), shown with the item.
    message: String,
    /// Whether another attempt may succeed (default true): it runs after the type's backoff,
    /// doubled at each attempt, while attempts are left. `false` fails the item now.
    retry: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// The item's state now: `done`, `failed`, or `pending` (to be tried again).
    #[schema(value_type = String)]
    state: &'static str,
    /// When a failed item is tried again.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_at: Option<DateTime<Utc>>,
    /// The same ending was recorded before (a request sent again): nothing changed.
    already_recorded: bool,
}

/// Ends an assignment with its result.
#[utoipa::path(
    post,
    path = "/api/assignments/{id}/result",
    operation_id = "postResult",
    tag = "workers",
    params(("id" = Uuid, Path, description = "The assignment's id.")),
    request_body = ResultRequest,
    responses(
        (status = 200, description = "Recorded (or recorded before).", body = Recorded),
        (status = 401, description = "No valid worker token.", body = ErrorBody),
        (status = 409, description = "Not current (the lease expired, or the item went to another worker), or the job was cancelled: nothing recorded.", body = ErrorBody),
        (status = 422, description = "A result too large, or holding a NUL character.", body = ErrorBody),
    )
)]
pub async fn result(
    State(state): State<AppState>,
    Extension(token): Extension<Worker>,
    id: Result<Path<Uuid>, PathRejection>,
    body: Result<Json<ResultRequest>, JsonRejection>,
) -> Result<Json<Recorded>, ApiError> {
    let id = assignment_id(id)?;
    let Json(request) = body?;
    let result = checked_result(request.result.as_deref())?;
    finish(&state, &token, id, Outcome::Done(result)).await
}

/// A result as stored: JSON text (`null` when none was sent), refused when too large or
/// holding a NUL character.
fn checked_result(result: Option<&RawValue>) -> Result<&str, ApiError> {
    let result = result.map_or("null", RawValue::get);
    if result.len() > MAX_RESULT_BYTES {
        return Err(ApiError::Invalid(format!(
            "A result is at most {MAX_RESULT_BYTES} bytes of JSON."
        )));
    }
    if let Some(why) = items::unstorable(result) {
        return Err(ApiError::Invalid(format!(
            "The result holds {why}, which cannot be stored."
        )));
    }
    Ok(result)
}

/// A failure's message as stored: trimmed, without NUL characters, at most 10,000 characters.
fn checked_message(message: &str) -> Result<String, ApiError> {
    let message = message.trim().replace('\0', "");
    if message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(ApiError::Invalid(format!(
            "A failure's message is at most {MAX_MESSAGE_CHARS} characters."
        )));
    }
    Ok(if message.is_empty() {
        "The worker gave no reason.".to_owned()
    } else {
        message
    })
}

/// Ends an assignment with a failure: tried again after the backoff while attempts are left
/// (and `retry` is not false), else the item fails.
#[utoipa::path(
    post,
    path = "/api/assignments/{id}/failure",
    operation_id = "postFailure",
    tag = "workers",
    params(("id" = Uuid, Path, description = "The assignment's id.")),
    request_body = FailureRequest,
    responses(
        (status = 200, description = "Recorded (or recorded before).", body = Recorded),
        (status = 401, description = "No valid worker token.", body = ErrorBody),
        (status = 409, description = "Not current, or the job was cancelled: nothing recorded.", body = ErrorBody),
        (status = 422, description = "A message too long.", body = ErrorBody),
    )
)]
pub async fn failure(
    State(state): State<AppState>,
    Extension(token): Extension<Worker>,
    id: Result<Path<Uuid>, PathRejection>,
    body: Result<Json<FailureRequest>, JsonRejection>,
) -> Result<Json<Recorded>, ApiError> {
    let id = assignment_id(id)?;
    let Json(request) = body?;
    let message = checked_message(&request.message)?;
    let outcome = Outcome::Failed {
        message: &message,
        retry: request.retry.unwrap_or(true),
    };
    finish(&state, &token, id, outcome).await
}

/// The most endings one batch carries.
const MAX_ENDINGS: usize = 1000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndingsRequest {
    /// Assignments done: `{"id","result"}`.
    #[serde(default)]
    results: Vec<BatchResult>,
    /// Assignments failed: `{"id","message","retry"?}`.
    #[serde(default)]
    failures: Vec<BatchFailure>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchResult {
    id: Uuid,
    #[schema(value_type = Object)]
    result: Option<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchFailure {
    id: Uuid,
    message: String,
    retry: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndingAnswer {
    id: Uuid,
    /// What was recorded, as `…/result` and `…/failure` answer it.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    recorded: Option<Recorded>,
    /// Why this one was refused (`409`, `422` as the single routes answer), nothing recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDetail>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndingsAnswer {
    /// One per ending sent, results first, in the order sent.
    endings: Vec<EndingAnswer>,
}

/// Ends many assignments at once, with results and failures, in one transaction: what a
/// worker that claims in batches sends instead of one request per item. Each ending is
/// answered as `…/result` or `…/failure` would answer it (a result too large is refused alone,
/// `invalid`); one refused leaves the others.
#[utoipa::path(
    post,
    path = "/api/assignments/endings",
    operation_id = "postEndings",
    tag = "workers",
    request_body = EndingsRequest,
    responses(
        (status = 200, description = "An answer per ending.", body = EndingsAnswer),
        (status = 401, description = "No valid worker token.", body = ErrorBody),
        (status = 422, description = "More than 1,000 endings.", body = ErrorBody),
    )
)]
pub async fn endings(
    State(state): State<AppState>,
    Extension(token): Extension<Worker>,
    body: Result<Json<EndingsRequest>, JsonRejection>,
) -> Result<Json<EndingsAnswer>, ApiError> {
    let Json(request) = body?;
    if request.results.len() + request.failures.len() > MAX_ENDINGS {
        return Err(ApiError::Invalid(format!(
            "At most {MAX_ENDINGS} endings per request."
        )));
    }
    let messages: Vec<Result<String, ApiError>> = request
        .failures
        .iter()
        .map(|failure| checked_message(&failure.message))
        .collect();
    // Each ending checked on its own: one refused is answered alone, the others go on.
    let mut sent: Vec<(Uuid, Result<Outcome<'_>, ApiError>)> = Vec::new();
    for done in &request.results {
        let outcome = checked_result(done.result.as_deref()).map(Outcome::Done);
        sent.push((done.id, outcome));
    }
    for (failure, message) in request.failures.iter().zip(&messages) {
        let outcome = match message {
            Ok(message) => Ok(Outcome::Failed {
                message,
                retry: failure.retry.unwrap_or(true),
            }),
            Err(refused) => Err(ApiError::Invalid(refused.to_string())),
        };
        sent.push((failure.id, outcome));
    }
    let checked: Vec<Ending<'_>> = sent
        .iter()
        .filter_map(|(id, outcome)| {
            outcome.as_ref().ok().map(|outcome| Ending {
                assignment: *id,
                outcome: *outcome,
            })
        })
        .collect();
    let mut finished = endings::finish(&state.pool, &token.types, &checked)
        .await?
        .into_iter();
    let endings = sent
        .iter()
        .map(|(id, outcome)| {
            let answered = match outcome {
                Ok(outcome) => {
                    let finished = finished.next().unwrap_or(Finished::NotCurrent);
                    answer(finished, *outcome)
                }
                Err(refused) => Err(ApiError::Invalid(refused.to_string())),
            };
            let (recorded, error) = match answered {
                Ok(recorded) => (Some(recorded), None),
                Err(refused) => (None, Some(refused.detail())),
            };
            EndingAnswer {
                id: *id,
                recorded,
                error,
            }
        })
        .collect();
    Ok(Json(EndingsAnswer { endings }))
}

async fn finish(
    state: &AppState,
    token: &Worker,
    id: Uuid,
    outcome: Outcome<'_>,
) -> Result<Json<Recorded>, ApiError> {
    let ending = Ending {
        assignment: id,
        outcome,
    };
    let finished = endings::finish(&state.pool, &token.types, &[ending]).await?;
    answer(finished[0], outcome).map(Json)
}

/// What an ending did, as the worker is told it; a refusal as an error.
fn answer(finished: Finished, outcome: Outcome<'_>) -> Result<Recorded, ApiError> {
    match finished {
        Finished::Recorded { state, retry_at } => Ok(Recorded {
            state: state_word(state),
            retry_at,
            already_recorded: false,
        }),
        Finished::AlreadyRecorded { state } => Ok(Recorded {
            state: state_word(state),
            retry_at: None,
            already_recorded: true,
        }),
        Finished::JobStopped(status) => Err(ApiError::Conflict(format!(
            "The job has {}: nothing was recorded.",
            match status {
                JobStatus::Cancelled => "been cancelled",
                JobStatus::Completed => "completed",
                _ => "failed",
            }
        ))),
        Finished::NotCurrent => Err(not_current()),
        Finished::TooLargeForFollowUp { limit } => Err(ApiError::Invalid(format!(
            "The result is {} bytes; its follow-up type takes payloads of at most {limit} \
             bytes. Nothing was recorded.",
            match outcome {
                Outcome::Done(result) => result.len(),
                Outcome::Failed { .. } => 0,
            }
        ))),
    }
}

fn state_word(state: ChunkState) -> &'static str {
    match state {
        ChunkState::Pending => "pending",
        ChunkState::Done => "done",
        ChunkState::Failed => "failed",
    }
}

fn assignment_id(id: Result<Path<Uuid>, PathRejection>) -> Result<Uuid, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|_| ApiError::NotFound("No assignment has that id.".into()))
}

fn not_current() -> ApiError {
    ApiError::Conflict(
        "This assignment is not current: its lease expired (or it ended), and its item may be \
         another worker's now. Nothing was recorded."
            .into(),
    )
}
