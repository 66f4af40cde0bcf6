//! Probes for load balancers and orchestrators. `GET /healthz`: the process answers (it asks
//! nothing of the database, so a database outage does not get every process restarted).
//! `GET /readyz`: it can do its work now: the database answers within [`DATABASE_WITHIN`] and
//! has every one of our migrations this build knows, and the progress listener is connected
//! (live pages need it); `503` with what is wrong otherwise. The database is asked at most once
//! per [`FRESH_FOR`] by one probe at a time; others get that answer, so a flood of probes costs
//! the database nothing more.
//!
//! Both answer anyone, whatever the `Host` (a load balancer probes a process by its address;
//! see `defences::check_host`), without looking at credentials (`identity::resolve`), and say
//! nothing beyond the checks themselves.

use std::time::{Duration, Instant};

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use tokio::sync::Mutex;
use utoipa::ToSchema;

use super::AppState;
use crate::db;

/// The probes' paths.
pub const PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// How long the database may take to answer a readiness probe (waiting for a connection of
/// the pool included: a pool too busy to answer is not ready either).
pub const DATABASE_WITHIN: Duration = Duration::from_secs(2);

/// How long an answer from the database serves later probes.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// The database's last answer to a probe: when, and how many migrations were missing (or what
/// went wrong).
#[derive(Default)]
pub struct Probed(Mutex<Option<(Instant, Result<usize, String>)>>);

impl Probed {
    /// The database's answer, asked again only when the last is older than [`FRESH_FOR`].
    async fn missing_migrations(&self, pool: &sqlx::PgPool) -> Result<usize, String> {
        let mut last = self.0.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return answer.clone();
        }
        let answer = match tokio::time::timeout(DATABASE_WITHIN, db::missing_migrations(pool)).await
        {
            Err(_) => Err(format!("no answer within {DATABASE_WITHIN:?}")),
            Ok(Err(err)) => {
                tracing::warn!("readiness: the database failed: {err}");
                Err("unreachable".to_owned())
            }
            Ok(Ok(missing)) => Ok(missing),
        };
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}

/// Liveness: the process answers (the database is not asked).
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "live",
    tag = "operations",
    responses((status = 200, description = "`ok`.", body = String, content_type = "text/plain"))
)]
pub async fn live() -> &'static str {
    "ok\n"
}

/// One readiness check, shown as `"ok"` or as what is wrong.
#[derive(Debug)]
enum Check {
    Ok,
    Failed(String),
}

impl Serialize for Check {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(match self {
            Check::Ok => "ok",
            Check::Failed(what) => what,
        })
    }
}

/// Each check is `ok` or what is wrong.
#[derive(Debug, Serialize, ToSchema)]
struct Readiness {
    ready: bool,
    #[schema(value_type = String, example = "ok")]
    database: Check,
    #[schema(value_type = String, example = "ok")]
    migrations: Check,
    #[schema(value_type = String, example = "ok")]
    listener: Check,
}

/// Readiness: the database answers and is migrated, and the progress listener is connected.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "ready",
    tag = "operations",
    responses(
        (status = 200, description = "Ready.", body = Readiness),
        (status = 503, description = "Not ready: the checks say what is wrong.", body = Readiness),
    )
)]
pub async fn ready(State(state): State<AppState>) -> Response {
    let (database, migrations) = match state.probed.missing_migrations(&state.pool).await {
        Err(what) => (Check::Failed(what), Check::Failed("unknown".into())),
        Ok(0) => (Check::Ok, Check::Ok),
        Ok(n) => (Check::Ok, Check::Failed(format!("{n} not applied"))),
    };
    let listener = if state.hub.is_listening() {
        Check::Ok
    } else {
        Check::Failed("not connected".into())
    };
    let ready = [&database, &migrations, &listener]
        .iter()
        .all(|check| matches!(check, Check::Ok));
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Readiness {
        ready,
        database,
        migrations,
        listener,
    };
    (status, Json(body)).into_response()
}
