//! The HTTP surface: the JSON API and SSE under `/api`, server functions under `/rpc`, and the
//! Leptos pages for everything else. One file per resource.
//!
//! Every API route is one [`Endpoint`] of [`endpoints`], with the [`Access`] it needs, checked
//! by a layer on that route before its handler runs; the router is built from that table, so a
//! route cannot exist without declaring who may call it (`tests/access.rs` walks the table with
//! every role). Whose rows a caller reads or changes is decided next to the SQL (`auth::Sees`).
//! Around every route: `defences` (host names, cross-site writes, headers) and `identity`.

mod account;
mod bulk;
pub mod connections;
mod datasets;
mod defences;
mod disposition;
pub mod error;
mod events;
pub mod health;
pub mod identity;
mod items;
mod job_types;
mod jobs;
mod measure;
mod openapi;
mod pages;
mod queue;
mod quotas;
mod reports;
mod request_id;
mod results;
pub mod scrape;
mod sse;
mod uploads;
mod users;
mod worker_tokens;
mod workers;

use std::sync::Arc;

use axum::{
    Router,
    extract::{DefaultBodyLimit, FromRef, Request, State},
    handler::Handler,
    http::Method,
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{MethodFilter, MethodRouter, any, on},
};
use leptos::prelude::LeptosOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tower_http::{
    timeout::RequestBodyTimeoutLayer,
    trace::{DefaultOnFailure, DefaultOnResponse, TraceLayer},
};

pub use pages::{leptos_options, page_paths, rpc_paths};

use crate::{
    auth::{Me, Role},
    config::{AuthArgs, AuthMode, LimitArgs},
    progress::{Hub, Views},
};
use error::ApiError;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub hub: Hub,
    /// The process's one reader of changed jobs, for every event stream.
    pub views: Views,
    /// Job views read lately, for `GET /api/jobs/{id}`.
    pub recent: Arc<crate::progress::recent::RecentViews>,
    /// Identities requests proved lately.
    pub identities: Arc<crate::auth::identities::Identities>,
    pub leptos_options: LeptosOptions,
    pub max_upload_bytes: usize,
    pub auth: Arc<AuthArgs>,
    pub limits: Arc<LimitArgs>,
    /// The live event streams open, per owner.
    pub streams: Arc<quotas::Streams>,
    /// The database's last answer to a readiness probe.
    pub probed: Arc<health::Probed>,
    /// Where completion callbacks may go (checked when a job names one).
    pub callbacks: Arc<crate::jobs::callbacks::address::Policy>,
    /// Who may read `/metrics` besides admins.
    pub metrics: Arc<crate::config::MetricsArgs>,
    /// The program run as `<converter> convert` to read a workbook's head for a preview.
    pub converter: Arc<std::path::PathBuf>,
    /// Fires on shutdown; open event streams end with it.
    pub shutdown: CancellationToken,
    /// Where an owner's plain imports are gathered to be made together, and the lane to
    /// this process's own workers (if it runs any), which take small imports straight from
    /// their creates.
    pub groups: Arc<crate::jobs::group::Groups>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// Who may call an API route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, even without an account in `required` mode: signing in, up and out, and the
    /// health probes.
    Public,
    /// Anyone with a session, and in `guest` mode any visitor (who sees nothing yet, and
    /// becomes a guest on making something). The handler scopes rows to the caller.
    Anyone,
    /// A signed-in account, not a guest: its password and API tokens.
    Account,
    /// Admins: the users and their roles.
    Admin,
    /// Admins, and a scraper with the metrics token (`/metrics`).
    Scraper,
    /// Admins and viewers: the queue's health.
    Operator,
    /// External workers, with a worker token (and nobody else): claims and assignments. A
    /// worker token opens nothing but these.
    Worker,
}

impl Access {
    /// Whether `me` (none: a visitor without a session) may call a route with this access.
    pub fn check(self, me: Option<&Me>, mode: AuthMode) -> Result<(), ApiError> {
        let sign_in = || ApiError::Unauthorized("Sign in first.".into());
        match (self, me) {
            (Self::Public, _) => Ok(()),
            (Self::Anyone, None) if mode == AuthMode::Required => Err(sign_in()),
            (Self::Anyone, _) => Ok(()),
            (_, None) => Err(sign_in()),
            (Self::Account, Some(me)) if me.role == Role::Guest => Err(ApiError::Forbidden(
                "Guests have no account: sign up first.".into(),
            )),
            (Self::Admin | Self::Scraper, Some(me)) if me.role != Role::Admin => {
                Err(ApiError::Forbidden("Only admins can do this.".into()))
            }
            (Self::Operator, Some(me)) if !me.role.sees_everything() => Err(ApiError::Forbidden(
                "Only admins and viewers can see the queue.".into(),
            )),
            (Self::Worker, Some(_)) => Err(ApiError::Forbidden(
                "Only workers call this, with a worker token (Authorization: Bearer cvw_…).".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// One API route.
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
    route: MethodRouter<AppState>,
}

impl Endpoint {
    fn new<H, T>(method: Method, path: &'static str, access: Access, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("a routable method");
        Self {
            method,
            path,
            access,
            route: on(filter, handler),
        }
    }
}

/// Multipart framing around a form's fields.
const MULTIPART_OVERHEAD: usize = 64 * 1024;

/// A batch of items takes up to this much JSON (10,000 items of up to 1.6 KiB; axum's default,
/// which `POST /api/jobs` and its first items keep, is 2 MB). Payloads are kept as text while
/// the body is read (`http::jobs::NewItemBody`), so memory stays about the body's size.
const MAX_ITEMS_BODY: usize = 16 << 20;

/// An endpoint whose request may carry a batch of items.
fn items_endpoint(mut endpoint: Endpoint) -> Endpoint {
    endpoint.route = endpoint.route.layer(DefaultBodyLimit::max(MAX_ITEMS_BODY));
    endpoint
}

/// Every API route, with who may call it.
pub fn endpoints(max_upload_bytes: usize) -> Vec<Endpoint> {
    use Access::*;
    let (get, post, patch, delete) = (Method::GET, Method::POST, Method::PATCH, Method::DELETE);
    let with_file = |mut endpoint: Endpoint, besides: usize| {
        let limit = max_upload_bytes.saturating_add(MULTIPART_OVERHEAD + besides);
        endpoint.route = endpoint.route.layer(DefaultBodyLimit::max(limit));
        endpoint
    };
    vec![
        with_file(
            Endpoint::new(post.clone(), "/api/uploads", Anyone, uploads::create),
            0,
        ),
        Endpoint::new(
            get.clone(),
            "/api/uploads/{id}/preview",
            Anyone,
            uploads::preview,
        ),
        // A file may come with an import, after its JSON (JSON alone is held to 2 MiB).
        with_file(
            Endpoint::new(post.clone(), "/api/jobs", Anyone, jobs::create),
            jobs::JSON_BODY_BYTES,
        ),
        Endpoint::new(get.clone(), "/api/jobs", Anyone, jobs::list),
        Endpoint::new(get.clone(), "/api/jobs/events", Anyone, events::all_jobs),
        Endpoint::new(post.clone(), "/api/jobs/bulk", Anyone, bulk::run),
        Endpoint::new(get.clone(), "/api/audit", Admin, bulk::log),
        Endpoint::new(get.clone(), "/api/jobs/{id}", Anyone, jobs::show),
        Endpoint::new(delete.clone(), "/api/jobs/{id}", Anyone, jobs::delete),
        Endpoint::new(
            get.clone(),
            "/api/jobs/{id}/events",
            Anyone,
            events::one_job,
        ),
        Endpoint::new(get.clone(), "/api/jobs/{id}/history", Anyone, jobs::history),
        Endpoint::new(post.clone(), "/api/jobs/{id}/cancel", Anyone, jobs::cancel),
        Endpoint::new(post.clone(), "/api/jobs/{id}/retry", Anyone, jobs::retry),
        Endpoint::new(post.clone(), "/api/jobs/{id}/seal", Anyone, jobs::seal),
        Endpoint::new(
            post.clone(),
            "/api/jobs/{id}/import",
            Anyone,
            jobs::import_dry_run,
        ),
        items_endpoint(Endpoint::new(
            post.clone(),
            "/api/jobs/{id}/items",
            Anyone,
            items::add,
        )),
        Endpoint::new(get.clone(), "/api/jobs/{id}/items", Anyone, items::list),
        Endpoint::new(get.clone(), "/api/jobs/{id}/errors", Anyone, reports::json),
        Endpoint::new(
            get.clone(),
            "/api/jobs/{id}/errors.csv",
            Anyone,
            reports::csv,
        ),
        Endpoint::new(
            get.clone(),
            "/api/jobs/{id}/errors.xlsx",
            Anyone,
            reports::xlsx,
        ),
        Endpoint::new(
            get.clone(),
            "/api/jobs/{id}/result",
            Anyone,
            results::download,
        ),
        Endpoint::new(post.clone(), "/api/datasets", Anyone, datasets::create),
        Endpoint::new(get.clone(), "/api/datasets", Anyone, datasets::list),
        Endpoint::new(get.clone(), "/api/datasets/{name}", Anyone, datasets::show),
        Endpoint::new(
            delete.clone(),
            "/api/datasets/{name}",
            Anyone,
            datasets::delete,
        ),
        Endpoint::new(
            get.clone(),
            "/api/datasets/{name}/rows",
            Anyone,
            datasets::rows,
        ),
        Endpoint::new(post.clone(), "/api/job-types", Admin, job_types::register),
        Endpoint::new(get.clone(), "/api/job-types", Anyone, job_types::list),
        Endpoint::new(
            get.clone(),
            "/api/job-types/{name}",
            Anyone,
            job_types::show,
        ),
        Endpoint::new(
            post.clone(),
            "/api/worker-tokens",
            Admin,
            worker_tokens::create,
        ),
        Endpoint::new(
            get.clone(),
            "/api/worker-tokens",
            Admin,
            worker_tokens::list,
        ),
        Endpoint::new(
            delete.clone(),
            "/api/worker-tokens/{id}",
            Admin,
            worker_tokens::revoke,
        ),
        Endpoint::new(
            post.clone(),
            "/api/workers/{worker}/claims",
            Worker,
            workers::claim,
        ),
        Endpoint::new(
            post.clone(),
            "/api/assignments/{id}/heartbeat",
            Worker,
            workers::heartbeat,
        ),
        Endpoint::new(
            post.clone(),
            "/api/assignments/{id}/result",
            Worker,
            workers::result,
        ),
        Endpoint::new(
            post.clone(),
            "/api/assignments/{id}/failure",
            Worker,
            workers::failure,
        ),
        items_endpoint(Endpoint::new(
            post.clone(),
            "/api/assignments/endings",
            Worker,
            workers::endings,
        )),
        Endpoint::new(get.clone(), "/api/openapi.json", Anyone, openapi::document),
        Endpoint::new(get.clone(), "/api/session", Public, account::session),
        Endpoint::new(post.clone(), "/api/session", Public, account::sign_in),
        Endpoint::new(delete.clone(), "/api/session", Public, account::sign_out),
        Endpoint::new(post.clone(), "/api/account", Public, account::sign_up),
        Endpoint::new(
            post.clone(),
            "/api/account/password",
            Account,
            account::password,
        ),
        Endpoint::new(get.clone(), "/api/account/tokens", Account, account::tokens),
        Endpoint::new(
            post.clone(),
            "/api/account/tokens",
            Account,
            account::new_token,
        ),
        Endpoint::new(
            delete,
            "/api/account/tokens/{id}",
            Account,
            account::revoke_token,
        ),
        Endpoint::new(get.clone(), "/api/users", Admin, users::list),
        Endpoint::new(get.clone(), "/api/queue", Operator, queue::health),
        Endpoint::new(get.clone(), "/healthz", Public, health::live),
        Endpoint::new(get.clone(), "/readyz", Public, health::ready),
        Endpoint::new(get, scrape::PATH, Scraper, scrape::metrics),
        Endpoint::new(patch, "/api/users/{id}", Admin, users::set_role),
    ]
}

/// The API's routes as (method, path, access), for tests and docs.
pub fn route_table() -> Vec<(Method, &'static str, Access)> {
    endpoints(0)
        .into_iter()
        .map(|e| (e.method, e.path, e.access))
        .collect()
}

/// Refuses a request its route's [`Access`] does not admit.
async fn require(access: Access, state: AppState, request: Request, next: Next) -> Response {
    if access == Access::Scraper && request.extensions().get::<scrape::Scraper>().is_some() {
        return next.run(request).await;
    }
    match (
        access,
        request
            .extensions()
            .get::<crate::store::worker_tokens::Worker>()
            .is_some(),
    ) {
        (Access::Worker, true) => return next.run(request).await,
        (_, true) => {
            let refused = "A worker token opens only the worker routes (claims and assignments).";
            return ApiError::Forbidden(refused.into()).into_response();
        }
        (_, false) => {}
    }
    match access.check(request.extensions().get::<Me>(), state.auth.mode) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

pub fn router(state: AppState) -> Router {
    let mut api = Router::new();
    for endpoint in endpoints(state.max_upload_bytes) {
        let access = endpoint.access;
        let guard = middleware::from_fn_with_state(
            state.clone(),
            move |State(state): State<AppState>, request: Request, next: Next| {
                require(access, state, request, next)
            },
        );
        api = api.route(endpoint.path, endpoint.route.route_layer(guard));
    }
    let api = api.route("/api/{*rest}", any(error::no_such_endpoint));
    pages::add(api, &state)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            identity::resolve,
        ))
        .layer(middleware::from_fn(defences::same_origin_writes))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            defences::check_host,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            defences::security_headers,
        ))
        .layer(RequestBodyTimeoutLayer::new(state.limits.body_timeout()))
        // An access log: one line per response, in the request's span. A 5xx is a `warn` line
        // too (our own failures are logged where they happen, under their reference; a
        // not-ready probe is not an error).
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_id::span)
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO))
                .on_failure(DefaultOnFailure::new().level(tracing::Level::WARN)),
        )
        .layer(middleware::from_fn(measure::requests))
        .layer(middleware::from_fn(request_id::assign))
        .with_state(state)
}
