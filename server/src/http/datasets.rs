//! `/api/datasets`: declare a dataset's schema, read datasets, and page through their rows
//! (JSON objects keyed by column). Names are per owner: `/api/datasets/{name}` is the caller's
//! own, and admins and viewers read anyone's with `?owner=<user id>`.

use axum::{
    Json,
    extract::{Path, Query, State, rejection::JsonRejection},
    http::StatusCode,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{AppState, error::ApiError, identity::Caller};
use crate::{
    spreadsheet::schema::{self, Column},
    store::datasets,
};
use app::model::DatasetView;

#[derive(Debug, Deserialize)]
pub struct CreateDataset {
    name: String,
    columns: Vec<Column>,
    key: Option<String>,
}

/// `POST /api/datasets` → 201 with the dataset; 409 when the caller has one with that name.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<CreateDataset>, JsonRejection>,
) -> Result<(StatusCode, Json<DatasetView>), ApiError> {
    let Json(request) = body?;
    let name = request.name.trim();
    schema::check_dataset_name(name).map_err(ApiError::Invalid)?;
    let key = request.key.as_deref().map(str::trim);
    let columns = schema::check_schema(request.columns, key).map_err(ApiError::Invalid)?;
    let owner = caller.owner(&state).await?;
    let dataset = datasets::create(&state.pool, owner.id, name, &columns, key)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("A dataset named \"{name}\" already exists.")))?;
    Ok((StatusCode::CREATED, Json(dataset)))
}

#[derive(Debug, Serialize)]
pub struct DatasetList {
    datasets: Vec<DatasetView>,
}

/// `GET /api/datasets`: the caller's datasets (everyone's for admins and viewers).
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<DatasetList>, ApiError> {
    Ok(Json(DatasetList {
        datasets: datasets::list(&state.pool, caller.sees()).await?,
    }))
}

/// Whose dataset a request names.
#[derive(Debug, Deserialize)]
pub struct OwnerQuery {
    owner: Option<Uuid>,
}

/// The owner of the dataset a request reads: the caller, or `?owner=` if they may see it.
/// `None` (a 404, like a missing dataset) for anything else.
pub fn dataset_owner(caller: &Caller, asked: Option<Uuid>) -> Option<Uuid> {
    let me = caller.me()?;
    let owner = asked.unwrap_or(me.id);
    me.sees(owner).then_some(owner)
}

/// `GET /api/datasets/{name}[?owner=]`.
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<OwnerQuery>,
) -> Result<Json<DatasetView>, ApiError> {
    let owner = dataset_owner(&caller, query.owner).ok_or_else(|| no_such_dataset(&name))?;
    datasets::find(&state.pool, owner, &name)
        .await?
        .map(Json)
        .ok_or_else(|| no_such_dataset(&name))
}

fn no_such_dataset(name: &str) -> ApiError {
    ApiError::NotFound(format!("No dataset is named \"{name}\"."))
}

#[derive(Debug, Deserialize)]
pub struct RowsQuery {
    limit: Option<i64>,
    /// The `next` of the previous page.
    after: Option<String>,
    owner: Option<Uuid>,
}

#[derive(Debug, Serialize)]
pub struct RowsPage {
    rows: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// `GET /api/datasets/{name}/rows?limit=&after=[&owner=]`.
pub async fn rows(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<RowsQuery>,
) -> Result<Json<RowsPage>, ApiError> {
    let owner = dataset_owner(&caller, query.owner).ok_or_else(|| no_such_dataset(&name))?;
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let after = query.after.as_deref().map(decode_cursor).transpose()?;
    let (rows, next) = datasets::rows(&state.pool, owner, &name, after, limit)
        .await?
        .ok_or_else(|| no_such_dataset(&name))?;
    Ok(Json(RowsPage {
        rows,
        next: next.map(|pos| pos.to_string()),
    }))
}

fn decode_cursor(raw: &str) -> Result<i64, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::BadRequest("\"after\" must be the \"next\" value of a previous page.".into())
    })
}
