//! Server-sent events: `/api/jobs/{id}/events` for one job, `/api/jobs/events` for the list.
//! Each event is `event: job`, `id: <version>`, `data: <JobView JSON>`. A reconnecting browser
//! sends `Last-Event-ID` and gets only newer states. Streams end on shutdown so the server can
//! stop.

use std::{convert::Infallible, time::Duration};

use app::model::JobView;
use axum::{
    extract::{Path, State, rejection::PathRejection},
    http::HeaderMap,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::StreamExt;
use uuid::Uuid;

use super::{
    AppState,
    error::ApiError,
    jobs::{job_id, no_such_job},
};
use crate::{
    progress::feed::{self, Scope},
    store::jobs,
};

pub async fn one_job(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = job_id(id)?;
    if jobs::find(&state.pool, id).await?.is_none() {
        return Err(no_such_job(id));
    }
    let last_version = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok());
    Ok(stream(&state, Scope::One(id), last_version))
}

pub async fn all_jobs(State(state): State<AppState>) -> Response {
    stream(&state, Scope::All, None)
}

fn stream(state: &AppState, scope: Scope, last_version: Option<i64>) -> Response {
    let events = feed::follow(state.pool.clone(), &state.hub, scope, last_version)
        .map(to_event)
        .take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn to_event(job: JobView) -> Result<Event, Infallible> {
    let event = Event::default().event("job").id(job.version.to_string());
    Ok(event
        .json_data(&job)
        .unwrap_or_else(|_| Event::default().comment("unserializable job")))
}
