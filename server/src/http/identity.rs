//! Who is asking, resolved once per request: an `Authorization: Bearer` API token, or else
//! the session cookie. The result, an [`Identity`] (and the [`Me`] it holds, which server
//! functions read), rides in the request's extensions; handlers take it as a [`Caller`]. A
//! cookie the server never issued (or whose session ended) is treated as no cookie and
//! removed. A visitor without a session gets a guest session only when a handler is about to
//! make something for them ([`Caller::owner`]), so crawlers, health checks and refused
//! requests write nothing; in `required` mode they are refused instead, and guest sessions
//! issued before count for nothing.

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
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::{AppState, error::ApiError};
use crate::{
    auth::{Me, Role, Sees, accounts, secret},
    config::AuthMode,
    progress::Change,
    store::{sessions, worker_tokens},
};

/// The cookie's name over plain HTTP, and the name every cookie had before accounts.
const PLAIN_NAME: &str = "conveyor_session";

/// The cookie's name; over HTTPS the `__Host-` prefix binds it to our exact origin.
fn cookie_name(https: bool) -> &'static str {
    if https {
        "__Host-conveyor_session"
    } else {
        PLAIN_NAME
    }
}

/// What a request proved who it is with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The session cookie's token.
    Session(String),
    /// An API token (`Authorization: Bearer`): not a browser, so exempt from cross-site checks.
    Token(String),
}

/// A request's identity, in its extensions.
#[derive(Debug, Clone)]
pub struct Identity {
    pub me: Option<Me>,
    pub credential: Option<Credential>,
    cookie: Arc<Mutex<CookieChange>>,
    /// A cookie from before accounts, under the plain name, to remove once claimed over HTTPS.
    old_cookie_left: bool,
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
    /// No person, and no cookie to change (a worker's request).
    fn nobody() -> Self {
        Self {
            me: None,
            credential: None,
            cookie: Arc::default(),
            old_cookie_left: false,
        }
    }

    /// The live session token the request carried (none for API token requests).
    pub fn session(&self) -> Option<&str> {
        match &self.credential {
            Some(Credential::Session(token)) => Some(token),
            _ => None,
        }
    }

    /// Whether an API token authenticated the request.
    pub fn via_token(&self) -> bool {
        matches!(self.credential, Some(Credential::Token(_)))
    }

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
    // Health probes answer whoever asks, and never look up credentials (a liveness probe must
    // not need the database).
    if super::health::PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    // A scraper's token is not an API token: it opens `/metrics` and nothing else.
    if request.uri().path() == super::scrape::PATH
        && super::scrape::shows_token(request.headers(), &state.metrics)
    {
        request.extensions_mut().insert(super::scrape::Scraper);
        return next.run(request).await;
    }
    // A worker token is not an API token either: it opens the worker routes (`Access::Worker`)
    // and nothing else, with no person behind it.
    if let Some(token) = bearer(request.headers())
        .filter(|token| token.starts_with(secret::WORKER_TOKEN_PREFIX))
        .map(str::to_owned)
    {
        let worker = match worker(&state, &token).await {
            Ok(_) if !request.uri().path().starts_with("/api/") => {
                let refused =
                    "A worker token opens only the worker routes (claims and assignments).";
                return ApiError::Forbidden(refused.into()).into_response();
            }
            Ok(worker) => worker,
            Err(refused) => return refused.into_response(),
        };
        request.extensions_mut().insert(worker);
        request.extensions_mut().insert(Identity::nobody());
        return next.run(request).await;
    }
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
    let old_cookie_left = identity.old_cookie_left;
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
    let old_removal = old_cookie_left.then(|| format!("{PLAIN_NAME}=; Path=/; Max-Age=0"));
    for value in header.into_iter().chain(old_removal) {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().append(SET_COOKIE, value);
        }
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

/// The API token of an `Authorization: Bearer` header. Other schemes (a proxy's Basic
/// authentication) are not ours and are ignored.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let (scheme, token) = headers.get(AUTHORIZATION)?.to_str().ok()?.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The worker a worker token belongs to; `401` for one revoked or never issued.
async fn worker(state: &AppState, token: &str) -> Result<worker_tokens::Worker, ApiError> {
    let found = if secret::well_formed(token) {
        worker_tokens::resolve(&state.pool, &secret::hash(token)).await?
    } else {
        None
    };
    found.ok_or_else(|| {
        ApiError::Unauthorized("The worker token is not valid (it may have been revoked).".into())
    })
}

/// The identity, and whether the request carried a session cookie the server does not know.
async fn identify(state: &AppState, headers: &HeaderMap) -> Result<(Identity, bool), ApiError> {
    let mut identity = Identity::nobody();
    if let Some(token) = bearer(headers) {
        let credential = Credential::Token(token.to_owned());
        identity.me = Some(who_remembered(state, &credential).await?.ok_or_else(|| {
            ApiError::Unauthorized("The API token is not valid (it may have been revoked).".into())
        })?);
        identity.credential = Some(credential);
        return Ok((identity, false));
    }
    let https = state.auth.https;
    let current = session_cookie(headers, cookie_name(https));
    if let Some(token) = &current {
        let credential = Credential::Session(token.clone());
        identity.me = who_remembered(state, &credential).await?;
        if identity.me.is_some() {
            identity.credential = Some(credential);
            return Ok((identity, false));
        }
    }
    // A cookie from before accounts (a UUID, always under the plain name) claims its guest.
    let old = current
        .clone()
        .or_else(|| https.then(|| session_cookie(headers, PLAIN_NAME)).flatten())
        .filter(|old| Uuid::parse_str(old).is_ok());
    if let Some(old) = old
        && state.auth.mode == AuthMode::Guest
        && let Some(started) =
            accounts::claim_legacy(&state.pool, &old, state.auth.session_lifetime()).await?
    {
        identity.me = Some(started.me);
        identity.start_session(started.token.clone());
        identity.credential = Some(Credential::Session(started.token));
        identity.old_cookie_left = https;
        return Ok((identity, false));
    }
    Ok((identity, current.is_some()))
}

/// The person a credential belongs to now: `None` once it was revoked or ended (or, in
/// `required` mode, for a guest's session). Asks the database.
async fn who(state: &AppState, credential: &Credential) -> sqlx::Result<Option<Me>> {
    let Some(hash) = hash_of(credential) else {
        return Ok(None);
    };
    Ok(look_up(state, credential, &hash)
        .await?
        .map(|found| found.me))
}

/// [`who`], for an API token from what this process remembers of it when it can
/// (`auth::identities`). Scripts send many requests a second with one token; a token revoked
/// through another process is refused here once that process's notification arrives
/// (milliseconds). Sessions are always asked for: a sign-out or a password reset anywhere ends
/// them before the next request, whichever process serves it.
async fn who_remembered(state: &AppState, credential: &Credential) -> sqlx::Result<Option<Me>> {
    if matches!(credential, Credential::Session(_)) {
        return who(state, credential).await;
    }
    let Some(hash) = hash_of(credential) else {
        return Ok(None);
    };
    if let Some(me) = state.identities.get(&hash) {
        return Ok(Some(me));
    }
    let ticket = state.identities.ticket();
    let found = look_up(state, credential, &hash).await?;
    if let Some(found) = &found {
        state
            .identities
            .remember(ticket, hash, found.me.clone(), found.lasting);
    }
    Ok(found.map(|found| found.me))
}

/// The hash a credential is kept by, if it has the shape of one we issue (anything else is not
/// even looked up).
fn hash_of(credential: &Credential) -> Option<Vec<u8>> {
    let token = match credential {
        Credential::Token(token) => token.starts_with(secret::TOKEN_PREFIX).then_some(token)?,
        Credential::Session(token) => (!token.starts_with(secret::TOKEN_PREFIX)
            && !token.starts_with(secret::WORKER_TOKEN_PREFIX))
        .then_some(token)?,
    };
    secret::well_formed(token).then(|| secret::hash(token))
}

async fn look_up(
    state: &AppState,
    credential: &Credential,
    hash: &[u8],
) -> sqlx::Result<Option<sessions::Resolved>> {
    let found = match credential {
        Credential::Token(_) => sessions::resolve_token(&state.pool, hash).await?,
        Credential::Session(_) => {
            sessions::resolve(&state.pool, hash, state.auth.session_lifetime()).await?
        }
    };
    Ok(found.filter(|found| state.auth.mode == AuthMode::Guest || found.me.role != Role::Guest))
}

/// Ends when what `identity` proved no longer holds: its session ended (signed out, a new
/// password, expired) or its token was revoked, or the person's role changed. Checked when an
/// `account_changed` notification names the person, after notifications may have been missed,
/// and every [`RECHECK`] (expiry sends no notification). A failed check keeps the stream. It
/// subscribes at once, so nothing between the request and the stream's first poll is missed.
pub fn revoked(state: AppState, identity: Identity) -> impl Future<Output = ()> + Send {
    let mut changes = state.hub.accounts();
    async move {
        let (Some(me), Some(credential)) = (identity.me, identity.credential) else {
            return std::future::pending().await;
        };
        let mut recheck = tokio::time::interval(RECHECK);
        recheck.tick().await;
        loop {
            let check = tokio::select! {
                change = changes.recv() => match change {
                    Ok(Change::Account(id)) => id == me.id,
                    Ok(Change::Resync) | Err(RecvError::Lagged(_)) => true,
                    Ok(Change::Job(_)) => false,
                    Err(RecvError::Closed) => return std::future::pending().await,
                },
                _ = recheck.tick() => true,
            };
            if check
                // Boxed: its state lives only while it runs, not in every open stream.
                && matches!(Box::pin(who(&state, &credential)).await, Ok(now) if now.as_ref() != Some(&me))
            {
                return;
            }
        }
    }
}

/// How often an open stream checks that its session still holds, notifications or not.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// The value of the cookie called `name`, if the request has one.
fn session_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
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
/// what those pages load. API routes (and `/metrics`) are checked by their [`super::Access`]
/// instead, which answers 401 rather than sending a program to the sign-in page.
fn open_without_account(path: &str) -> bool {
    path.starts_with("/api/")
        || path == super::scrape::PATH
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

/// The person a request comes from, if any.
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

    /// The person who will own what the request is about to create (call it once the request
    /// is known to be good). A visitor without a session becomes a guest here, in `guest` mode;
    /// a viewer is refused.
    pub async fn owner(&self, state: &AppState) -> Result<Me, ApiError> {
        match self.me() {
            Some(me) if me.role.may_change() => Ok(me.clone()),
            Some(_) => Err(ApiError::viewers_change_nothing()),
            None if state.auth.mode == AuthMode::Guest => {
                let started =
                    accounts::start_guest(&state.pool, state.auth.session_lifetime()).await?;
                self.identity.start_session(started.token);
                Ok(started.me)
            }
            None => Err(ApiError::Unauthorized("Sign in first.".into())),
        }
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
