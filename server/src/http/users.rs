//! `/api/users`, for admins: every account and its role.

use axum::{
    Json,
    extract::{
        Path, State,
        rejection::{JsonRejection, PathRejection},
    },
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
};
use crate::{
    auth::Role,
    store::{
        notify,
        users::{self, RoleChange},
    },
};
use app::auth::UserView;

#[derive(Serialize, ToSchema)]
pub struct UserList {
    users: Vec<UserView>,
}

/// Lists every account, oldest first.
#[utoipa::path(
    get,
    path = "/api/users",
    operation_id = "listUsers",
    tag = "users",
    responses((status = 200, description = "The accounts.", body = UserList))
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<UserList>, ApiError> {
    Ok(Json(UserList {
        users: users::accounts(&state.pool).await?,
    }))
}

#[derive(Deserialize, ToSchema)]
pub struct RoleRequest {
    /// `admin`, `viewer` or `member`.
    #[schema(example = "viewer")]
    role: String,
}

/// Changes an account's role.
///
/// `admin`, `viewer` or `member`; `409` if it would leave no admin. The change holds from the
/// person's next request.
#[utoipa::path(
    patch,
    path = "/api/users/{id}",
    operation_id = "setUserRole",
    tag = "users",
    params(("id" = Uuid, Path, description = "The account's id.")),
    request_body = RoleRequest,
    responses(
        (status = 200, description = "The account, with its new role.", body = UserView),
        (status = 400, description = "Not JSON with a `role`.", body = ErrorBody),
        (status = 404, description = "No account has that id.", body = ErrorBody),
        (status = 409, description = "It would leave no admin.", body = ErrorBody),
        (status = 422, description = "Not `admin`, `viewer` or `member`.", body = ErrorBody),
    )
)]
pub async fn set_role(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    body: Result<Json<RoleRequest>, JsonRejection>,
) -> Result<Json<UserView>, ApiError> {
    let no_such = || ApiError::NotFound("No account has that id.".into());
    let Path(id) = id.map_err(|_| no_such())?;
    let Json(request) = body?;
    let role = Role::parse(&request.role)
        .filter(|role| *role != Role::Guest)
        .ok_or_else(|| ApiError::Invalid("\"role\" is admin, viewer or member.".into()))?;
    let mut tx = state.pool.begin().await?;
    match users::set_role(&mut tx, id, role).await? {
        RoleChange::Changed => {
            notify::account_changed(&mut tx, id).await?;
            tx.commit().await?;
        }
        RoleChange::NoSuchAccount => return Err(no_such()),
        RoleChange::LastAdmin => {
            return Err(ApiError::Conflict(
                "This is the last admin: make someone else an admin first.".into(),
            ));
        }
    }
    users::account(&state.pool, id)
        .await?
        .map(Json)
        .ok_or_else(no_such)
}
