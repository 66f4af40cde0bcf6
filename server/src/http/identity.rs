//! Who is asking, resolved once per request: an `Authorization: Bearer` API token, or else
//! the session cookie. The result, an [`Identity`] (and the [`Me`] it holds, which server
//! functions read), rides in the request's extensions; handlers take it as a [`Caller`], or as
//! an [`Owner`] when they create something. A cookie the server never issued (or whose session
//! ended) is treated as no cookie and removed. A visitor without a session gets a guest session
//! only when they first make something (so crawlers and health checks write nothing); in
//! `required` mode they are refused instead.

use std::sync::{Arc, Mutex};

use axum::{
    extract::{FromRequestParts, Request, State},
    http::{
        HeaderMap, HeaderValue, Method,
        header::{AUTHORIZATION, COOKIE, SET_COOKIE},
        request::Parts,
    },
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};

use super::{AppState, error::ApiError};
use crate::{
    auth::{Me, Sees, accounts, secret},
    config::AuthMode,
    store::sessions,
};

/// The cookie's name; over HTTPS the `__Host-` prefix binds it to our exact origin.
fn cookie_name(https: bool) -> &'static str {
    if https {
        "__Host-conveyor_session"
    } else {
        "conveyor_session"
    }
}

/// A request's identity, in its extensions.
#[derive(Debug, Clone)]
pub struct Identity {
    pub me: Option<Me>,
    /// The live session token the request carried (none for API token requests).
    pub session: Option<String>,
    /// Authenticated by an API token: not a browser, so exempt from the cross-site checks.
    pub via_token: bool,
    cookie: Arc<Mutex<CookieChange>>,
}

/// What the response does to the session cookie.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum CookieChange {
    #[default]
    Keep,
    Set(String),
    Clear,
}

impl Identity {
    /// The response sets the cookie to this new session's token.
    pub fn start_session(&self, token: String) {
        *self.cookie.lock().unwrap_or_else(|e| e.into_inner()) = CookieChange::Set(token);
    }

    /// The response removes the cookie.
    pub fn end_session(&self) {
        *self.cookie.lock().unwrap_or_else(|e| e.into_inner()) = CookieChange::Clear;
    }
}

/// Middleware: resolves the identity (or answers 401 to a bad API token), keeps visitors out
/// of pages in `required` mode, and writes the cookie the handler decided on.
pub async fn resolve(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let lifetime = state.auth.session_lifetime();
    let https = state.auth.https;
    let (identity, stale_cookie) = match identify(&state, request.headers()).await {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    if identity.me.is_none()
        && state.auth.mode == AuthMode::Required
        && !open_without_account(request.uri().path())
    {
        return sign_in_first(&request);
    }
    if let Some(me) = &identity.me {
        request.extensions_mut().insert(me.clone());
    }
    let cookie = identity.cookie.clone();
    request.extensions_mut().insert(identity);
    let mut response = next.run(request).await;
    let change = std::mem::take(&mut *cookie.lock().unwrap_or_else(|e| e.into_inner()));
    let header = match change {
        CookieChange::Set(token) => Some(format!(
            "{}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
            cookie_name(https),
            lifetime.absolute.as_secs(),
            if https { "; Secure" } else { "" }
        )),
        CookieChange::Clear => Some(removal(https)),
        CookieChange::Keep => stale_cookie.then(|| removal(https)),
    };
    if let Some(value) = header.and_then(|h| HeaderValue::from_str(&h).ok()) {
        response.headers_mut().append(SET_COOKIE, value);
    }
    response
}

fn removal(https: bool) -> String {
    format!(
        "{}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
        cookie_name(https),
        if https { "; Secure" } else { "" }
    )
}

/// The identity, and whether the request carried a session cookie the server does not know.
async fn identify(state: &AppState, headers: &HeaderMap) -> Result<(Identity, bool), ApiError> {
    let mut identity = Identity {
        me: None,
        session: None,
        via_token: false,
        cookie: Arc::default(),
    };
    if let Some(value) = headers.get(AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| t.starts_with(secret::TOKEN_PREFIX) && secret::well_formed(t));
        let me = match token {
            Some(token) => sessions::resolve_token(&state.pool, &secret::hash(token)).await?,
            None => None,
        };
        identity.me = Some(me.ok_or_else(|| {
            ApiError::Unauthorized("The API token is not valid (it may have been revoked).".into())
        })?);
        identity.via_token = true;
        return Ok((identity, false));
    }
    let Some(token) = session_cookie(headers, state.auth.https) else {
        return Ok((identity, false));
    };
    let lifetime = state.auth.session_lifetime();
    let me = if secret::well_formed(&token) && !token.starts_with(secret::TOKEN_PREFIX) {
        sessions::resolve(&state.pool, &secret::hash(&token), lifetime).await?
    } else {
        None
    };
    let stale = me.is_none();
    identity.session = me.is_some().then_some(token);
    identity.me = me;
    Ok((identity, stale))
}

/// The value of our session cookie, if the request has one.
fn session_cookie(headers: &HeaderMap, https: bool) -> Option<String> {
    let name = cookie_name(https);
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim().to_owned())
}

/// Paths a visitor may reach without an account in `required` mode: signing in and up, and
/// what those pages load. API routes are checked by their [`super::Access`] instead.
fn open_without_account(path: &str) -> bool {
    path.starts_with("/api/")
        || path.starts_with("/pkg/")
        || matches!(path, "/login" | "/signup" | "/favicon.svg" | "/rpc/session")
}

/// A visitor in `required` mode: pages send them to sign in (and back), anything else is 401.
fn sign_in_first(request: &Request) -> Response {
    let page = request.method() == Method::GET && !request.uri().path().starts_with("/rpc/");
    if page {
        let back = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let query = serde_urlencoded::to_string([("next", back)]).unwrap_or_default();
        Redirect::to(&format!("/login?{query}")).into_response()
    } else {
        ApiError::Unauthorized("Sign in first.".into()).into_response()
    }
}

/// The person a request comes from, if any, for handlers that read or change what exists.
#[derive(Debug, Clone)]
pub struct Caller {
    pub identity: Identity,
}

impl Caller {
    pub fn me(&self) -> Option<&Me> {
        self.identity.me.as_ref()
    }

    /// Whose things this caller's reads cover.
    pub fn sees(&self) -> Sees {
        Sees::of(self.me())
    }

    /// Whose things this caller may change: a viewer is refused (403).
    pub fn acts(&self) -> Result<Sees, ApiError> {
        match self.me() {
            Some(me) if !me.role.may_change() => Err(ApiError::viewers_change_nothing()),
            me => Ok(Sees::of(me)),
        }
    }

    /// The person, on a route whose [`super::Access`] has already required one.
    pub fn signed_in(&self) -> Result<&Me, ApiError> {
        self.me()
            .ok_or_else(|| ApiError::Unauthorized("Sign in first.".into()))
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        let identity =
            parts.extensions.get::<Identity>().cloned().ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!("identity middleware missing"))
            })?;
        Ok(Self { identity })
    }
}

/// The person who will own what the request creates. A visitor without a session becomes a
/// guest here (in `guest` mode); a viewer is refused.
#[derive(Debug, Clone)]
pub struct Owner(pub Me);

impl FromRequestParts<AppState> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        match caller.identity.me {
            Some(me) if me.role.may_change() => Ok(Owner(me)),
            Some(_) => Err(ApiError::viewers_change_nothing()),
            None if state.auth.mode == AuthMode::Guest => {
                let started =
                    accounts::start_guest(&state.pool, state.auth.session_lifetime()).await?;
                caller.identity.start_session(started.token);
                Ok(Owner(started.me))
            }
            None => Err(ApiError::Unauthorized("Sign in first.".into())),
        }
    }
}
