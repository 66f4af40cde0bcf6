//! `POST /api/jobs/bulk`: cancel or retry many jobs at once; `GET /api/audit`: the log of those
//! actions, for admins. The work is `jobs::bulk`.

use app::{
    bulk::{AuditEntry, BulkAction, BulkOutcome},
    job_list::{JobFilter, ListQuery},
};
use axum::{
    Json,
    extract::{Query, State, rejection::JsonRejection},
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
};
use crate::{
    auth::Sees,
    jobs::bulk::{self, Actor},
    store::{audit, job_list::Owners},
};

/// The most ids one request may name.
const MAX_IDS: usize = 1000;

/// The longest filter accepted (it is kept in the audit log).
const MAX_FILTER_CHARS: usize = 2000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkRequest {
    action: BulkAction,
    /// These jobs…
    ids: Option<Vec<Uuid>>,
    /// …or every job this query string of `GET /api/jobs` selects (its paging ignored).
    filter: Option<String>,
    /// Only count the jobs it would apply to.
    #[serde(default)]
    dry_run: bool,
}

/// Cancels or retries many jobs at once, named by ids or by a filter of the job list.
///
/// `POST /api/jobs/bulk {"action": "cancel"|"retry", "ids": [...] | "filter": "status=failed&…",
/// "dryRun"?}` → what it did (or would apply to), with its audit log entry. Only the jobs the
/// caller may change are changed.
#[utoipa::path(
    post,
    path = "/api/jobs/bulk",
    operation_id = "bulkAction",
    tag = "jobs",
    request_body = BulkRequest,
    responses(
        (status = 200, description = "What it did, or for a dry run what it would apply to.", body = BulkOutcome),
        (status = 400, description = "Not JSON of this shape.", body = ErrorBody),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 422, description = "Neither or both of `ids` and `filter`, too many ids, or a filter that cannot be read.", body = ErrorBody),
    )
)]
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<BulkRequest>, JsonRejection>,
) -> Result<Json<BulkOutcome>, ApiError> {
    let Json(request) = body?;
    let acts = caller.acts()?;
    let (ids, filter, asked) = match (request.ids, request.filter) {
        (Some(ids), None) => {
            if ids.is_empty() || ids.len() > MAX_IDS {
                return Err(ApiError::Invalid(format!(
                    "\"ids\" must name 1 to {MAX_IDS} jobs."
                )));
            }
            let asked = json!({ "ids": ids });
            (Some(ids), JobFilter::default(), asked)
        }
        (None, Some(filter)) => {
            if filter.len() > MAX_FILTER_CHARS {
                return Err(ApiError::Invalid(format!(
                    "\"filter\" must be at most {MAX_FILTER_CHARS} characters."
                )));
            }
            let query = ListQuery::from_query_string(&filter).map_err(ApiError::Invalid)?;
            let asked = json!({ "filter": query.at(Default::default()).to_query_string() });
            (None, query.filter, asked)
        }
        _ => {
            return Err(ApiError::Invalid(
                "Name the jobs with either \"ids\" or \"filter\".".into(),
            ));
        }
    };
    let owners = Owners::resolve(&state.pool, acts, filter.owner.as_deref()).await?;
    let selection = bulk::applicable(request.action, ids, filter);
    let dry_run = BulkOutcome {
        action: request.action,
        matched: 0,
        changed: 0,
        audit_id: None,
        stopped_at_limit: None,
    };
    let Some(me) = caller.me().filter(|_| !request.dry_run) else {
        let matched = bulk::preview(&state.pool, owners, &selection).await?;
        return Ok(Json(BulkOutcome { matched, ..dry_run }));
    };
    let actor = Actor {
        id: me.id,
        acts,
        limit: matches!(acts, Sees::OwnedBy(_)).then_some(state.limits.active_jobs),
    };
    // Its own task: a client that hangs up does not cut the action short between batches.
    let pool = state.pool.clone();
    let action = request.action;
    let work =
        tokio::spawn(
            async move { bulk::run(&pool, actor, owners, action, selection, asked).await },
        );
    let outcome = work
        .await
        .map_err(|err| ApiError::Internal(anyhow::anyhow!("bulk action stopped: {err}")))??;
    Ok(Json(outcome))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// The `next` of the previous page: entries older than this one.
    before: Option<i64>,
    /// Entries per page, 1 to 500 (default 50).
    limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    entries: Vec<AuditEntry>,
    /// Pass as `before` for older entries; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<i64>,
}

/// The audit log of bulk actions, newest first.
#[utoipa::path(
    get,
    path = "/api/audit",
    operation_id = "auditLog",
    tag = "audit",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of the log.", body = AuditPage),
        (status = 400, description = "A parameter that is not a number.", body = ErrorBody),
    )
)]
pub async fn log(
    State(state): State<AppState>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(50).clamp(1, 500);
    let entries = audit::list(&state.pool, query.before, limit).await?;
    let next = (entries.len() as i64 == limit)
        .then(|| entries.last().map(|entry| entry.id))
        .flatten();
    Ok(Json(AuditPage { entries, next }))
}
