//! `/api/jobs/{id}/items`: the items of a job of a registered type (issue 14): added in
//! batches until the job is sealed, and paged through with their results and failures.

use axum::{
    Json,
    extract::{
        Path, Query, State,
        rejection::{JsonRejection, PathRejection, QueryRejection},
    },
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
    jobs::{NewItemBody, job_id, new_items, no_such_job},
    quotas,
};
use crate::{
    auth::Sees,
    jobs::create,
    store::{
        items::{self, AddedBy, NotAdded},
        job_types, jobs, notify,
    },
};
use app::{
    job_types::{ItemState, ItemView},
    model::{JobKind, JobView},
};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddItems {
    /// Up to 10,000 items; those whose `dedupeKey` the job has are left out.
    items: Vec<NewItemBody>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemsAdded {
    added: i64,
    /// Items left out: the job had their dedupe key (or the request repeated it).
    duplicates: i64,
    job: JobView,
}

/// Adds items to a job of a registered type, in one transaction.
///
/// `POST /api/jobs/{id}/items` → what was added, and the job; `409` once it is sealed or has
/// ended.
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/items",
    operation_id = "addItems",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = AddItems,
    responses(
        (status = 200, description = "The items added.", body = ItemsAdded),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such job of a registered type (or not the caller's).", body = ErrorBody),
        (status = 409, description = "The job is sealed, or has ended.", body = ErrorBody),
        (status = 422, description = "Too many items, or one too large.", body = ErrorBody),
        (status = 429, description = "The owner's jobs keep as many bytes of items as they may.", body = ErrorBody),
    )
)]
pub async fn add(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
    body: Result<Json<AddItems>, JsonRejection>,
) -> Result<Json<ItemsAdded>, ApiError> {
    let id = job_id(id)?;
    let acts = caller.acts()?;
    let Json(request) = body?;
    let job = jobs::find(&state.pool, id, acts)
        .await?
        .filter(|job| job.job_type == JobKind::Items)
        .ok_or_else(|| no_such_job(id))?;
    let type_name = job.item_type.as_deref().unwrap_or_default();
    let job_type = job_types::find(&state.pool, type_name)
        .await?
        .ok_or_else(|| no_such_job(id))?;
    let new = new_items(&request.items);
    create::check_items(&job_type, &new)?;
    let mut tx = state.pool.begin().await?;
    let by = AddedBy::Person {
        owner: acts.owner_filter(),
        max_bytes: state.limits.stored_bytes,
    };
    let added = match items::add(&mut tx, id, by, &new).await? {
        Ok(added) => added,
        Err(NotAdded::NoSuchJob) => return Err(no_such_job(id)),
        Err(NotAdded::OverQuota { limit }) => return Err(quotas::too_many_item_bytes(limit)),
        Err(NotAdded::FollowUp) => {
            return Err(ApiError::Conflict(
                "This job is a follow-up in a chain: its parent job's results fill it.".into(),
            ));
        }
        Err(NotAdded::Closed) => {
            return Err(ApiError::Conflict(
                "The job takes no more items: it is sealed, or has ended.".into(),
            ));
        }
    };
    if let Some(version) = added.version {
        notify::job_changed(&mut tx, id, version).await?;
    }
    tx.commit().await?;
    create::after_items_added(&state.pool, added.added);
    let job = jobs::find(&state.pool, id, acts)
        .await?
        .ok_or_else(|| no_such_job(id))?;
    Ok(Json(ItemsAdded {
        added: added.added,
        duplicates: added.duplicates,
        job,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// `pending`, `done` or `failed`: only items in that state.
    state: Option<String>,
    /// The `next` of the previous page.
    after: Option<i64>,
    /// Items per page, 1 to 1000 (default 100).
    limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemPage {
    items: Vec<ItemView>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<i64>,
}

/// Pages through a job's items, in the order they were added, with their results and
/// failures.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/items",
    operation_id = "listItems",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id."), ItemsQuery),
    responses(
        (status = 200, description = "A page of items.", body = ItemPage),
        (status = 400, description = "A parameter that does not parse.", body = ErrorBody),
        (status = 404, description = "No such job of a registered type (or not one the caller may see).", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
    query: Result<Query<ItemsQuery>, QueryRejection>,
) -> Result<Json<ItemPage>, ApiError> {
    let id = job_id(id)?;
    let Query(query) = query?;
    let sees = Sees::of(caller.me());
    jobs::find(&state.pool, id, sees)
        .await?
        .filter(|job| job.job_type == JobKind::Items)
        .ok_or_else(|| no_such_job(id))?;
    let item_state = match query.state.as_deref() {
        None | Some("") => None,
        Some(word) => Some(ItemState::parse(word).ok_or_else(|| {
            ApiError::BadRequest("\"state\" must be \"pending\", \"done\" or \"failed\".".into())
        })?),
    };
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let after = query.after.unwrap_or(0);
    let (items, next) = items::page(&state.pool, id, item_state, after, limit).await?;
    Ok(Json(ItemPage { items, next }))
}
