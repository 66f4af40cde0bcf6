//! `/api/worker-tokens`: the credentials of external workers (issue 14). Admins create one for
//! a set of job types (its secret is shown once), list them and revoke them.

use axum::{
    Json,
    extract::{Path, State, rejection::JsonRejection},
    http::StatusCode,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
};
use crate::{
    auth::secret,
    store::worker_tokens::{self, NotCreated, WorkerTokenView},
};

/// The most types one token may claim items of.
const MAX_TYPES: usize = 50;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWorkerToken {
    /// 1 to 100 characters: what runs with it (`render farm, rack 3`).
    name: String,
    /// The registered job types whose items it may claim (1 to 50).
    types: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedWorkerToken {
    #[serde(flatten)]
    token: WorkerTokenView,
    /// `Authorization: Bearer <this>` on the worker routes; shown only now.
    secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerTokenList {
    worker_tokens: Vec<WorkerTokenView>,
}

/// Creates a worker token for job types.
#[utoipa::path(
    post,
    path = "/api/worker-tokens",
    operation_id = "createWorkerToken",
    tag = "workers",
    request_body = NewWorkerToken,
    responses(
        (status = 201, description = "The token, with its secret (shown only now).", body = CreatedWorkerToken),
        (status = 403, description = "Only admins create worker tokens.", body = ErrorBody),
        (status = 422, description = "A bad name, or a type nobody registered.", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<NewWorkerToken>, JsonRejection>,
) -> Result<(StatusCode, Json<CreatedWorkerToken>), ApiError> {
    let Json(request) = body?;
    let admin = caller.signed_in()?.id;
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(ApiError::Invalid(
            "A worker token's name is 1 to 100 characters.".into(),
        ));
    }
    let mut types: Vec<String> = request.types.iter().map(|t| t.trim().to_owned()).collect();
    types.sort();
    types.dedup();
    if types.is_empty() || types.len() > MAX_TYPES {
        return Err(ApiError::Invalid(format!(
            "\"types\" names 1 to {MAX_TYPES} registered job types."
        )));
    }
    let secret = secret::generate_worker_token();
    let hash = secret::hash(&secret);
    match worker_tokens::insert(&state.pool, name, &types, &hash, admin).await? {
        Ok(token) => Ok((
            StatusCode::CREATED,
            Json(CreatedWorkerToken { token, secret }),
        )),
        Err(NotCreated::NoSuchType(name)) => Err(ApiError::Invalid(format!(
            "No job type is named \"{name}\" (GET /api/job-types)."
        ))),
    }
}

/// Lists the worker tokens (never their secrets).
#[utoipa::path(
    get,
    path = "/api/worker-tokens",
    operation_id = "listWorkerTokens",
    tag = "workers",
    responses(
        (status = 200, description = "The tokens.", body = WorkerTokenList),
        (status = 403, description = "Only admins see worker tokens.", body = ErrorBody),
    )
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<WorkerTokenList>, ApiError> {
    Ok(Json(WorkerTokenList {
        worker_tokens: worker_tokens::list(&state.pool).await?,
    }))
}

/// Revokes a worker token: its worker's next request is refused (`401`); items it holds go to
/// other workers when their leases run out.
#[utoipa::path(
    delete,
    path = "/api/worker-tokens/{id}",
    operation_id = "revokeWorkerToken",
    tag = "workers",
    params(("id" = Uuid, Path, description = "The token's id.")),
    responses(
        (status = 204, description = "Revoked."),
        (status = 403, description = "Only admins revoke worker tokens.", body = ErrorBody),
        (status = 404, description = "No worker token has that id.", body = ErrorBody),
    )
)]
pub async fn revoke(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, axum::extract::rejection::PathRejection>,
) -> Result<StatusCode, ApiError> {
    let no_such = || ApiError::NotFound("No worker token has that id.".into());
    let Path(id) = id.map_err(|_| no_such())?;
    if worker_tokens::delete(&state.pool, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_such())
    }
}
