//! A person's own account: `/api/session` (who am I, sign in, sign out) and `/api/account`
//! (sign up, change the password, personal API tokens). Signing in or up starts a new session
//! (the browser's old one ends); the cookie is written by `identity`.

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
    auth::{Me, accounts, secret},
    config::AuthMode,
    store::{notify, sessions},
};
use app::auth::{NewToken, SessionView, TokenView};

/// The most API tokens one person may hold.
const MAX_TOKENS: usize = 100;

#[derive(Deserialize, ToSchema)]
pub struct Credentials {
    email: String,
    password: String,
}

/// The browser's session, which signing in or up replaces.
fn ending(caller: &Caller) -> Option<accounts::Ending<'_>> {
    let (me, token) = caller.me().zip(caller.identity.session())?;
    Some(accounts::Ending { token, user: me.id })
}

fn view(state: &AppState, me: Option<Me>) -> SessionView {
    SessionView {
        me,
        sign_up: state.auth.sign_up,
        guests: state.auth.mode == AuthMode::Guest,
    }
}

/// Who is signed in (if anyone), and whether one may sign up.
#[utoipa::path(
    get,
    path = "/api/session",
    operation_id = "getSession",
    tag = "session",
    responses((status = 200, description = "The caller's session.", body = SessionView))
)]
pub async fn session(State(state): State<AppState>, caller: Caller) -> Json<SessionView> {
    Json(view(&state, caller.me().cloned()))
}

/// Signs in, starting a new session (the session cookie is set).
#[utoipa::path(
    post,
    path = "/api/session",
    operation_id = "signIn",
    tag = "session",
    request_body = Credentials,
    responses(
        (status = 200, description = "Signed in.", body = SessionView),
        (status = 400, description = "Not JSON with `email` and `password`.", body = ErrorBody),
        (status = 401, description = "The email or the password is wrong.", body = ErrorBody),
        (status = 429, description = "Too many sign-ins at once: try again shortly.", body = ErrorBody),
    )
)]
pub async fn sign_in(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<Credentials>, JsonRejection>,
) -> Result<Json<SessionView>, ApiError> {
    let Json(credentials) = body?;
    let started = accounts::sign_in(
        &state.pool,
        &credentials.email,
        &credentials.password,
        ending(&caller),
        state.auth.session_lifetime(),
    )
    .await?;
    caller.identity.start_session(started.token);
    Ok(Json(view(&state, Some(started.me))))
}

/// Signs out: ends this browser's session.
#[utoipa::path(
    delete,
    path = "/api/session",
    operation_id = "signOut",
    tag = "session",
    responses((status = 204, description = "Signed out (or was not signed in)."))
)]
pub async fn sign_out(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<StatusCode, ApiError> {
    if let (Some(me), Some(token)) = (caller.me(), caller.identity.session()) {
        accounts::sign_out(&state.pool, me, token).await?;
        caller.identity.end_session();
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Signs up: a new member account, signed in.
///
/// A guest keeps what they made. `403` when sign-up is switched off, `409` when the email is
/// taken.
#[utoipa::path(
    post,
    path = "/api/account",
    operation_id = "signUp",
    tag = "account",
    request_body = Credentials,
    responses(
        (status = 201, description = "The account, signed in.", body = SessionView),
        (status = 400, description = "Not JSON with `email` and `password`.", body = ErrorBody),
        (status = 403, description = "Sign-up is switched off.", body = ErrorBody),
        (status = 409, description = "The email is taken.", body = ErrorBody),
        (status = 422, description = "Not an email, or too short a password.", body = ErrorBody),
        (status = 429, description = "Too many passwords being hashed at once: try again shortly (`Retry-After`).", body = ErrorBody),
    )
)]
pub async fn sign_up(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<Credentials>, JsonRejection>,
) -> Result<(StatusCode, Json<SessionView>), ApiError> {
    if !state.auth.sign_up {
        return Err(ApiError::Forbidden(
            "Sign-up is switched off here: ask an admin for an account.".into(),
        ));
    }
    let Json(credentials) = body?;
    let started = accounts::sign_up(
        &state.pool,
        &credentials.email,
        &credentials.password,
        caller.me(),
        ending(&caller),
        state.auth.session_lifetime(),
    )
    .await?;
    caller.identity.start_session(started.token);
    Ok((StatusCode::CREATED, Json(view(&state, Some(started.me)))))
}

#[derive(Deserialize, ToSchema)]
pub struct PasswordChange {
    current: String,
    new: String,
}

/// Changes the caller's password.
///
/// Ends every session of the account; the browser that asked gets a new one.
#[utoipa::path(
    post,
    path = "/api/account/password",
    operation_id = "changePassword",
    tag = "account",
    request_body = PasswordChange,
    responses(
        (status = 204, description = "Changed."),
        (status = 400, description = "Not JSON with `current` and `new`.", body = ErrorBody),
        (status = 422, description = "The current password is wrong, or the new one too short.", body = ErrorBody),
        (status = 429, description = "Too many passwords being hashed at once: try again shortly (`Retry-After`).", body = ErrorBody),
    )
)]
pub async fn password(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<PasswordChange>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let Json(change) = body?;
    let me = caller.signed_in()?;
    let new_session = (!caller.identity.via_token()).then(|| state.auth.session_lifetime());
    let token =
        accounts::change_password(&state.pool, me, &change.current, &change.new, new_session)
            .await?;
    if let Some(token) = token {
        caller.identity.start_session(token);
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub struct TokenList {
    tokens: Vec<TokenView>,
}

/// Lists the caller's API tokens (never their secrets).
#[utoipa::path(
    get,
    path = "/api/account/tokens",
    operation_id = "listTokens",
    tag = "account",
    responses((status = 200, description = "The caller's tokens.", body = TokenList))
)]
pub async fn tokens(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<TokenList>, ApiError> {
    let me = caller.signed_in()?;
    Ok(Json(TokenList {
        tokens: sessions::tokens_of(&state.pool, me.id).await?,
    }))
}

#[derive(Deserialize, ToSchema)]
pub struct TokenRequest {
    /// 1 to 100 characters, to tell tokens apart.
    name: String,
}

/// Creates an API token; its secret is shown this once.
#[utoipa::path(
    post,
    path = "/api/account/tokens",
    operation_id = "createToken",
    tag = "account",
    request_body = TokenRequest,
    responses(
        (status = 201, description = "The token, with its secret.", body = NewToken),
        (status = 400, description = "Not JSON with a `name`.", body = ErrorBody),
        (status = 409, description = "The caller has as many tokens as they may.", body = ErrorBody),
        (status = 422, description = "A name that is not 1 to 100 characters.", body = ErrorBody),
    )
)]
pub async fn new_token(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<TokenRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<NewToken>), ApiError> {
    let Json(request) = body?;
    let me = caller.signed_in()?;
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(ApiError::Invalid(
            "A token's name is 1 to 100 characters.".into(),
        ));
    }
    if sessions::tokens_of(&state.pool, me.id).await?.len() >= MAX_TOKENS {
        return Err(ApiError::Conflict(format!(
            "You have {MAX_TOKENS} tokens already: revoke one first."
        )));
    }
    let secret = secret::generate_token();
    let token = sessions::insert_token(&state.pool, me.id, name, &secret::hash(&secret)).await?;
    Ok((StatusCode::CREATED, Json(NewToken { token, secret })))
}

/// Revokes one of the caller's API tokens (`404` for anyone else's).
#[utoipa::path(
    delete,
    path = "/api/account/tokens/{id}",
    operation_id = "revokeToken",
    tag = "account",
    params(("id" = Uuid, Path, description = "The token's id.")),
    responses(
        (status = 204, description = "Revoked."),
        (status = 404, description = "The caller has no token with that id.", body = ErrorBody),
    )
)]
pub async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, axum::extract::rejection::PathRejection>,
) -> Result<StatusCode, ApiError> {
    let me = caller.signed_in()?;
    let no_such = || ApiError::NotFound("You have no token with that id.".into());
    let Path(id) = id.map_err(|_| no_such())?;
    let mut tx = state.pool.begin().await?;
    if !sessions::delete_token(&mut tx, me.id, id).await? {
        return Err(no_such());
    }
    notify::account_changed(&mut tx, me.id).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
