//! Who is asking: every browser gets a random session id in a cookie, which becomes the owner
//! of what it creates. (Signed sessions and admin logins come with per-user isolation.)

use axum::{
    extract::Request,
    http::header::{COOKIE, SET_COOKIE},
    middleware::Next,
    response::Response,
};
use uuid::Uuid;

pub const COOKIE_NAME: &str = "conveyor_session";

/// The session that owns what a request creates.
#[derive(Debug, Clone)]
pub struct Owner(pub String);

/// Middleware: finds the session cookie, or issues one.
pub async fn ensure(mut request: Request, next: Next) -> Response {
    let existing = request
        .headers()
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .and_then(|(_, value)| Uuid::parse_str(value).ok());
    let session = existing.unwrap_or_else(Uuid::new_v4);
    request.extensions_mut().insert(Owner(session.to_string()));
    let mut response = next.run(request).await;
    if existing.is_none() {
        let cookie =
            format!("{COOKIE_NAME}={session}; Path=/; HttpOnly; SameSite=Lax; Max-Age=31536000");
        if let Ok(value) = cookie.parse() {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
    response
}
