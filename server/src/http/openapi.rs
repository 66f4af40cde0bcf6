//! `GET /api/openapi.json`: the OpenAPI 3.1 document of the whole JSON API, so that clients
//! (and generated ones) have one source to read instead of the handlers. Each handler
//! describes itself (`#[utoipa::path]`, its doc comment the summary and description); who may
//! call it is added here from the route table ([`super::endpoints`]), so the document names
//! the access the router checks (in guest mode, the default: with `CONVEYOR_AUTH=required` a
//! visitor without a session gets the 401 it lists instead). `tests/it/openapi.rs` fails when a route of the
//! router is missing from the document, or the document has one the router lacks.

use std::sync::LazyLock;

use axum::http::header::CONTENT_TYPE;
use utoipa::{
    Modify, OpenApi,
    openapi::{
        self, ContentBuilder, Ref, RefOr, ResponseBuilder,
        path::{Operation, PathItem},
        security::{
            ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        },
    },
};

use super::{
    Access, account, bulk, datasets, error::ErrorBody, events, health, items, job_types, jobs,
    queue, reports, results, route_table, scrape, uploads, users, worker_tokens, workers,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Conveyor",
        version = env!("CARGO_PKG_VERSION"),
        description = "Long-running imports and exports of spreadsheets: upload a file, start a \
            job, follow it live. Errors answer `{\"error\": {\"code\", \"message\"}}`. Scripts \
            send an API token (`Authorization: Bearer cvt_…`, made on `/account`); browsers \
            the session cookie."
    ),
    paths(
        uploads::create,
        uploads::preview,
        jobs::create,
        jobs::list,
        events::all_jobs,
        bulk::run,
        bulk::log,
        jobs::show,
        jobs::delete,
        events::one_job,
        jobs::history,
        jobs::cancel,
        jobs::retry,
        jobs::seal,
        jobs::import_dry_run,
        reports::json,
        reports::csv,
        reports::xlsx,
        results::download,
        datasets::create,
        datasets::list,
        datasets::show,
        datasets::delete,
        items::add,
        items::list,
        job_types::register,
        job_types::list,
        job_types::show,
        worker_tokens::create,
        worker_tokens::list,
        worker_tokens::revoke,
        workers::claim,
        workers::heartbeat,
        workers::result,
        workers::failure,
        workers::endings,
        datasets::rows,
        account::session,
        account::sign_in,
        account::sign_out,
        account::sign_up,
        account::password,
        account::tokens,
        account::new_token,
        account::revoke_token,
        users::list,
        users::set_role,
        queue::health,
        health::live,
        health::ready,
        scrape::metrics,
        document,
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "uploads", description = "Files to import."),
        (name = "jobs", description = "Imports, exports and batches of them: start, read, list, cancel, retry, seal; many at once."),
        (name = "events", description = "Changes of jobs as they happen, as server-sent events."),
        (name = "reports", description = "What jobs leave behind: their row errors, an export's file."),
        (name = "datasets", description = "Datasets: their columns and rows."),
        (name = "job types", description = "Kinds of work other services run on the engine."),
        (name = "workers", description = "External workers: their tokens, and claiming, renewing and ending items of job types."),
        (name = "session", description = "Signing in and out."),
        (name = "account", description = "Signing up, one's password and API tokens."),
        (name = "users", description = "Accounts and their roles."),
        (name = "audit", description = "The log of bulk actions."),
        (name = "operations", description = "Health probes, metrics, the queue's health and this document."),
    ),
    modifiers(&Accesses),
)]
struct ApiDoc;

/// The document, made once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    ApiDoc::openapi()
        .to_json()
        .expect("the OpenAPI document is JSON")
});

/// This document: every route of the JSON API.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = Object))
)]
pub async fn document() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    ([(CONTENT_TYPE, "application/json")], DOCUMENT.as_str())
}

/// The security schemes, and each operation's access from the route table: its security
/// requirements, a line of its description, and the refusals the router answers for it.
struct Accesses;

const SESSION: &str = "session";
const API_TOKEN: &str = "apiToken";
const METRICS_TOKEN: &str = "metricsToken";
const WORKER_TOKEN: &str = "workerToken";

/// A refusal by a route's access: its status and the name of its response component.
type Refusal = (&'static str, &'static str);
const UNAUTHORIZED: Refusal = ("401", "Unauthorized");
const FORBIDDEN: Refusal = ("403", "Forbidden");

/// What an access means in the document.
struct Rule {
    who: &'static str,
    /// Callable without credentials (the security requirement `{}`).
    anonymous: bool,
    schemes: &'static [&'static str],
    refusals: &'static [Refusal],
}

fn rule(access: Access) -> Rule {
    let signed_in = |who| Rule {
        who,
        anonymous: false,
        schemes: &[SESSION, API_TOKEN],
        refusals: &[UNAUTHORIZED, FORBIDDEN],
    };
    match access {
        // Signing in, up and out, and asking who one is: no session needed, but one sent is
        // used (and a bad API token refused).
        Access::Public => Rule {
            who: "public: no session needed.",
            anonymous: true,
            schemes: &[SESSION, API_TOKEN],
            refusals: &[UNAUTHORIZED],
        },
        Access::Anyone => Rule {
            who: "anyone with a session or an API token; in guest mode (the default) any \
                  visitor too, who sees nothing of anyone's and becomes a guest on making \
                  something. Each caller reads and changes only what their role lets them.",
            anonymous: true,
            schemes: &[SESSION, API_TOKEN],
            refusals: &[UNAUTHORIZED],
        },
        Access::Account => signed_in("signed-in accounts (not guests)."),
        Access::Admin => signed_in("admins."),
        Access::Operator => signed_in("admins and viewers."),
        Access::Scraper => Rule {
            schemes: &[SESSION, API_TOKEN, METRICS_TOKEN],
            ..signed_in("admins, and a scraper with the metrics token.")
        },
        Access::Worker => Rule {
            who: "external workers, with a worker token (`cvw_…`, made by an admin) bound to \
                  the item's job type; nobody else.",
            anonymous: false,
            schemes: &[WORKER_TOKEN],
            refusals: &[UNAUTHORIZED, FORBIDDEN],
        },
    }
}

impl Modify for Accesses {
    fn modify(&self, doc: &mut openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "conveyor_session",
                "The session cookie, set by signing in or up (and for a guest on making \
                 something); `__Host-conveyor_session` over HTTPS.",
            ))),
        );
        components.add_security_scheme(
            API_TOKEN,
            bearer("A personal API token (`cvt_…`), made on `/account`: acts as its account."),
        );
        components.add_security_scheme(
            WORKER_TOKEN,
            bearer(
                "A worker token (`cvw_…`, `POST /api/worker-tokens`): only for the worker \
                 routes, for items of its job types.",
            ),
        );
        components.add_security_scheme(
            METRICS_TOKEN,
            bearer("The metrics token (`CONVEYOR_METRICS_TOKEN`): only for `/metrics`."),
        );
        for ((_, name), description) in [
            (
                UNAUTHORIZED,
                "No session or API token, where one is needed.",
            ),
            (FORBIDDEN, "The caller's role may not do this."),
        ] {
            let body = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build();
            let response = ResponseBuilder::new()
                .description(description)
                .content("application/json", body)
                .build();
            components
                .responses
                .insert(name.to_owned(), response.into());
        }

        for (method, path, access) in route_table() {
            // A route missing here is the test's to name.
            let Some(operation) = doc
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| operation_mut(item, method.as_str()))
            else {
                continue;
            };
            // The probes look at no credentials at all.
            let rule = if super::health::PATHS.contains(&path) {
                Rule {
                    schemes: &[],
                    refusals: &[],
                    ..rule(access)
                }
            } else {
                rule(access)
            };
            let line = format!("Access: {}", rule.who);
            operation.description = Some(match operation.description.take() {
                Some(text) if !text.is_empty() => format!("{text}\n\n{line}"),
                _ => line,
            });
            if !rule.schemes.is_empty() {
                let anonymous = rule.anonymous.then(SecurityRequirement::default);
                let schemes = rule
                    .schemes
                    .iter()
                    .map(|scheme| SecurityRequirement::new(*scheme, Vec::<String>::new()));
                operation.security = Some(anonymous.into_iter().chain(schemes).collect());
            }
            for (status, name) in rule.refusals {
                operation
                    .responses
                    .responses
                    .entry((*status).to_owned())
                    .or_insert_with(|| RefOr::Ref(Ref::from_response_name(*name)));
            }
        }
    }
}

fn bearer(description: &str) -> SecurityScheme {
    SecurityScheme::Http(
        HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(description))
            .build(),
    )
}

fn operation_mut<'a>(item: &'a mut PathItem, method: &str) -> Option<&'a mut Operation> {
    match method {
        "GET" => item.get.as_mut(),
        "POST" => item.post.as_mut(),
        "PUT" => item.put.as_mut(),
        "PATCH" => item.patch.as_mut(),
        "DELETE" => item.delete.as_mut(),
        _ => None,
    }
}
