//! Server-sent events: `/api/jobs/{id}/events` for one job, `/api/jobs/events` for the list.
//! Each event is `event: job`, `id: <version>`, `data: <JobView JSON>`. A reconnecting browser
//! sends `Last-Event-ID` and gets only newer states. Streams end on shutdown so the server can
//! stop.

use axum::{
    extract::{Path, State, rejection::PathRejection},
    http::HeaderMap,
    response::Response,
};
use futures::StreamExt;
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::{self, Caller},
    jobs::visible_job,
    sse,
};
use crate::{
    progress::feed::{self, Scope},
    telemetry,
};

/// Follows one job: a server-sent event for each of its changes.
///
/// For those who may see the job (a job's owner never changes, so one check at the start holds
/// for the stream's life).
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/events",
    operation_id = "followJob",
    tag = "events",
    params(
        ("id" = Uuid, Path, description = "The job's id."),
        ("Last-Event-ID" = Option<i64>, Header, description = "The last version seen: only newer states are sent."),
    ),
    responses(
        (status = 200, description = "Server-sent events: each `event: job`, `id: <version>`, `data: <a JobView as JSON>`; the first is the job's current state.", body = String, content_type = "text/event-stream"),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
        (status = 429, description = "The caller has as many live streams open as they may.", body = ErrorBody),
    )
)]
pub async fn one_job(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = visible_job(&state, &caller, id).await?.view.id;
    let last_version = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok());
    stream(&state, &caller, Scope::One(id), last_version)
}

/// Follows the job list: a server-sent event for every change of the jobs the caller may see.
#[utoipa::path(
    get,
    path = "/api/jobs/events",
    operation_id = "followJobs",
    tag = "events",
    responses(
        (status = 200, description = "Server-sent events: each `event: job`, `id: <version>`, `data: <a JobView as JSON>`.", body = String, content_type = "text/event-stream"),
        (status = 429, description = "The caller has as many live streams open as they may.", body = ErrorBody),
    )
)]
pub async fn all_jobs(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    stream(&state, &caller, Scope::All, None)
}

/// The stream of `scope` as the caller sees it, until shutdown, or until the session or token
/// it was opened with ends (or the caller's role changes: they reconnect and are checked
/// again).
///
/// Each of an owner's open streams takes one of their places (`LimitArgs::streams`) until it
/// ends. A visitor's streams show nothing and are not counted.
fn stream(
    state: &AppState,
    caller: &Caller,
    scope: Scope,
    last_version: Option<i64>,
) -> Result<Response, ApiError> {
    let slot = caller
        .me()
        .map(|me| state.streams.open(me.id, state.limits.streams))
        .transpose()?;
    let sees = caller.sees();
    let open = telemetry::SseClient::open();
    let events = feed::follow(state.pool.clone(), &state.views, scope, sees, last_version).inspect(
        move |_| {
            let _held = (&slot, &open);
        },
    );
    let shutdown = state.shutdown.clone().cancelled_owned();
    let revoked = identity::revoked(state.clone(), caller.identity.clone());
    let end = async move {
        tokio::select! {
            () = shutdown => {}
            () = revoked => {}
        }
    };
    Ok(sse::response(events, end))
}
