//! The browser's own defences, as middleware around every route:
//!
//! - [`check_host`]: a request addressed to a host name we do not serve is refused (`421`), so
//!   a page on another domain that resolves to our address (DNS rebinding, the classic attack
//!   on a server bound to localhost) cannot talk to us.
//! - [`same_origin_writes`]: a state-changing request from a browser must come from our own
//!   origin (`403` otherwise), judged by `Sec-Fetch-Site`, or `Origin` where a browser sends no
//!   fetch metadata, the algorithm of Go's `http.CrossOriginProtection`. Requests carrying an
//!   API token (`Authorization: Bearer`) are exempt: a browser never adds one across sites,
//!   and a bad one is refused by `identity`. Clients that send neither header are not browsers.
//! - [`security_headers`]: `nosniff`, no framing, a referrer policy, HSTS over HTTPS, and a
//!   Content-Security-Policy: pages get [`page_policy`] with the nonce Leptos puts on its
//!   hydration scripts; everything else the strictest one.

use axum::{
    extract::{Request, State},
    http::{
        HeaderMap, HeaderName, HeaderValue, Method,
        header::{
            CONTENT_SECURITY_POLICY, HOST, ORIGIN, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY,
            X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
        },
    },
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{AppState, error::ApiError, identity::bearer};

/// Middleware: refuses a `Host` outside the configured names, except on the health probes and
/// `/metrics` (a load balancer or a scraper reaches a process by its address; a page on a
/// rebound name could not read them: the probes show nothing, and `/metrics` wants a token or
/// an admin's cookie, which the browser sends only to our own names).
pub async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if super::health::PATHS.contains(&path) || path == super::scrape::PATH {
        return next.run(request).await;
    }
    let allowed = &state.auth.allowed_hosts;
    let authority = request
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default()
        .to_ascii_lowercase();
    if host_allowed(allowed, &authority) {
        next.run(request).await
    } else {
        ApiError::WrongHost("This server does not answer to that host name.".into()).into_response()
    }
}

/// Whether `authority` (`host[:port]`) is one of `allowed` (names with or without a port, or
/// `*` for any).
fn host_allowed(allowed: &[String], authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        // `[::1]:3000` or `name:3000`, but not the colons inside a bare `[::1]`.
        Some((host, port)) if !port.contains(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => authority,
    };
    !authority.is_empty()
        && allowed.iter().map(|a| a.trim()).any(|name| {
            name == "*" || name.eq_ignore_ascii_case(host) || name.eq_ignore_ascii_case(authority)
        })
}

/// Middleware: refuses a browser's state-changing request from another origin.
pub async fn same_origin_writes(request: Request, next: Next) -> Response {
    if cross_site_write(request.method(), request.headers()) {
        return ApiError::Forbidden(
            "Cross-site requests cannot change anything here. Use an API token for scripts.".into(),
        )
        .into_response();
    }
    next.run(request).await
}

fn cross_site_write(method: &Method, headers: &HeaderMap) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) || bearer(headers).is_some()
    {
        return false;
    }
    let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(&HeaderName::from_static("sec-fetch-site")) {
        return !matches!(site, "same-origin" | "none");
    }
    match text(&ORIGIN) {
        None => false,
        Some(origin) => {
            let origin_authority = origin.split_once("://").map(|(_, rest)| rest);
            origin_authority.is_none_or(|a| !text(&HOST).is_some_and(|h| h.eq_ignore_ascii_case(a)))
        }
    }
}

/// The policy of an HTML page whose inline scripts carry `nonce`: our own scripts and the
/// wasm module (compiling it needs `'wasm-unsafe-eval'`), our styles, calls to our own API
/// and streams, no plugins, no framing, no `<base>`, forms only to us.
pub fn page_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// The policy of anything that is not a page (JSON, downloads, static files).
const NOTHING_POLICY: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'";

/// Middleware: the headers every response carries.
pub async fn security_headers(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let mut set = |name: HeaderName, value: &'static str| {
        headers
            .entry(name)
            .or_insert_with(|| HeaderValue::from_static(value));
    };
    set(CONTENT_SECURITY_POLICY, NOTHING_POLICY);
    set(X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(X_FRAME_OPTIONS, "DENY");
    set(REFERRER_POLICY, "same-origin");
    set(
        HeaderName::from_static("cross-origin-opener-policy"),
        "same-origin",
    );
    if state.auth.https {
        set(
            STRICT_TRANSPORT_SECURITY,
            "max-age=31536000; includeSubDomains",
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn hosts_are_matched_with_or_without_ports() {
        let allowed = vec![
            "localhost".to_owned(),
            "[::1]".into(),
            "example.com:8443".into(),
        ];
        for ok in [
            "localhost",
            "localhost:3000",
            "[::1]:80",
            "[::1]",
            "example.com:8443",
        ] {
            assert!(host_allowed(&allowed, ok), "{ok}");
        }
        for bad in [
            "",
            "evil.com",
            "evil.com:3000",
            "example.com",
            "localhost.evil.com",
        ] {
            assert!(!host_allowed(&allowed, bad), "{bad}");
        }
        assert!(host_allowed(&["*".to_owned()], "anything:1"));
    }

    #[test]
    fn only_same_origin_browsers_write() {
        let post = Method::POST;
        let host = ("host", "127.0.0.1:3000");
        assert!(!cross_site_write(
            &Method::GET,
            &headers(&[("sec-fetch-site", "cross-site")])
        ));
        assert!(!cross_site_write(&post, &headers(&[host])));
        assert!(!cross_site_write(
            &post,
            &headers(&[host, ("sec-fetch-site", "same-origin")])
        ));
        assert!(cross_site_write(
            &post,
            &headers(&[host, ("sec-fetch-site", "cross-site")])
        ));
        assert!(cross_site_write(
            &post,
            &headers(&[host, ("sec-fetch-site", "same-site")])
        ));
        assert!(!cross_site_write(
            &post,
            &headers(&[host, ("origin", "http://127.0.0.1:3000")])
        ));
        assert!(cross_site_write(
            &post,
            &headers(&[host, ("origin", "http://evil.com")])
        ));
        assert!(cross_site_write(
            &post,
            &headers(&[host, ("origin", "null")])
        ));
        let token = ("authorization", "Bearer x");
        assert!(!cross_site_write(
            &post,
            &headers(&[host, token, ("origin", "http://evil.com")])
        ));
        let basic = ("authorization", "Basic eDp5");
        assert!(cross_site_write(
            &post,
            &headers(&[host, basic, ("origin", "http://evil.com")])
        ));
    }
}
