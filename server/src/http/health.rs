//! Probes for load balancers and orchestrators. `GET /healthz`: the process answers (it asks
//! nothing of the database, so a database outage does not get every process restarted).
//! `GET /readyz`: it can do its work now: the database answers within [`DATABASE_WITHIN`] and
//! has every migration this build knows, and the progress listener is connected (live pages
//! need it); `503` with what is wrong otherwise.
//!
//! Both answer anyone, whatever the `Host` (a load balancer probes a process by its address;
//! see `defences::check_host`), and say nothing beyond the checks themselves.

use std::time::Duration;

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;

use super::AppState;
use crate::db;

/// The probes' paths.
pub const PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// How long the database may take to answer a readiness probe.
pub const DATABASE_WITHIN: Duration = Duration::from_secs(2);

/// `GET /healthz`.
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

#[derive(Debug, Serialize)]
struct Readiness {
    ready: bool,
    database: Check,
    migrations: Check,
    listener: Check,
}

/// `GET /readyz`.
pub async fn ready(State(state): State<AppState>) -> Response {
    let missing = tokio::time::timeout(DATABASE_WITHIN, db::missing_migrations(&state.pool)).await;
    let (database, migrations) = match missing {
        Err(_) => (
            Check::Failed(format!("no answer within {DATABASE_WITHIN:?}")),
            Check::Failed("unknown".into()),
        ),
        Ok(Err(err)) => {
            tracing::warn!("readiness: the database failed: {err}");
            (
                Check::Failed("unreachable".into()),
                Check::Failed("unknown".into()),
            )
        }
        Ok(Ok(0)) => (Check::Ok, Check::Ok),
        Ok(Ok(n)) => (Check::Ok, Check::Failed(format!("{n} not applied"))),
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
