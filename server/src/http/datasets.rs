//! `/api/datasets`: declare a dataset's schema, read datasets, and page through their rows
//! (JSON objects keyed by column). Names are per owner: `/api/datasets/{name}` is the caller's
//! own, and admins and viewers read anyone's with `?owner=<user id>`.

use axum::{
    Json,
    extract::{
        Path, Query, State,
        rejection::{JsonRejection, QueryRejection},
    },
    http::StatusCode,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
};
use crate::{
    jobs::{create, deletion},
    spreadsheet::schema::{self, Column, Declared},
    store::datasets,
};
use app::model::{DatasetView, JobView};

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateDataset {
    name: String,
    #[serde(flatten)]
    schema: NewDataset,
}

/// A dataset's columns and key, declared.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NewDataset {
    columns: Vec<Column>,
    /// The column whose value identifies a row: a row imported with a key already there
    /// replaces that row.
    key: Option<String>,
}

impl NewDataset {
    /// The schema, checked (422 when it is not one).
    pub fn check(&self) -> Result<Declared, ApiError> {
        Declared::check(self.columns.clone(), self.key.as_deref()).map_err(ApiError::Invalid)
    }
}

/// Declares a dataset: its columns, their types, and its key.
///
/// `POST /api/datasets` → 201 with the dataset; 409 when the caller has one with that name.
#[utoipa::path(
    post,
    path = "/api/datasets",
    operation_id = "createDataset",
    tag = "datasets",
    request_body = CreateDataset,
    responses(
        (status = 201, description = "The dataset.", body = DatasetView),
        (status = 400, description = "Not JSON of this shape.", body = ErrorBody),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 409, description = "The caller has a dataset of that name.", body = ErrorBody),
        (status = 422, description = "A bad name, column or key.", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<CreateDataset>, JsonRejection>,
) -> Result<(StatusCode, Json<DatasetView>), ApiError> {
    let Json(request) = body?;
    let name = request.name.trim();
    schema::check_dataset_name(name).map_err(ApiError::Invalid)?;
    let declared = request.schema.check()?;
    let owner = caller.owner(&state).await?;
    let dataset = create::dataset(&state.pool, owner.id, name, &declared)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("A dataset named \"{name}\" already exists.")))?;
    Ok((StatusCode::CREATED, Json(dataset)))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DatasetList {
    datasets: Vec<DatasetView>,
}

/// Lists the caller's datasets (everyone's for admins and viewers).
#[utoipa::path(
    get,
    path = "/api/datasets",
    operation_id = "listDatasets",
    tag = "datasets",
    responses((status = 200, description = "The datasets.", body = DatasetList))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<DatasetList>, ApiError> {
    Ok(Json(DatasetList {
        datasets: datasets::list(&state.pool, caller.sees()).await?,
    }))
}

/// Whose dataset a request names.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OwnerQuery {
    /// The owner's id, for admins and viewers reading someone else's (default: the caller).
    owner: Option<Uuid>,
}

/// The owner of the dataset a request reads: the caller, or `?owner=` if they may see it.
/// `None` (a 404, like a missing dataset) for anything else.
pub fn dataset_owner(caller: &Caller, asked: Option<Uuid>) -> Option<Uuid> {
    let me = caller.me()?;
    let owner = asked.unwrap_or(me.id);
    me.sees(owner).then_some(owner)
}

/// Reads a dataset: its columns and key.
#[utoipa::path(
    get,
    path = "/api/datasets/{name}",
    operation_id = "getDataset",
    tag = "datasets",
    params(("name" = String, Path, description = "The dataset's name."), OwnerQuery),
    responses(
        (status = 200, description = "The dataset.", body = DatasetView),
        (status = 400, description = "An `owner` that is not a user id.", body = ErrorBody),
        (status = 404, description = "No such dataset (or not one the caller may see).", body = ErrorBody),
    )
)]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    query: Result<Query<OwnerQuery>, QueryRejection>,
) -> Result<Json<DatasetView>, ApiError> {
    let Query(query) = query?;
    let owner = dataset_owner(&caller, query.owner).ok_or_else(|| no_such_dataset(&name))?;
    datasets::find(&state.pool, owner, &name)
        .await?
        .map(Json)
        .ok_or_else(|| no_such_dataset(&name))
}

/// Deletes a dataset with its rows: at once it is gone from every list and its name is free;
/// a `delete` job removes its rows, with progress like any job.
///
/// `DELETE /api/datasets/{name}` → 202 with the job; 409 while jobs are waiting or running on
/// the dataset.
#[utoipa::path(
    delete,
    path = "/api/datasets/{name}",
    operation_id = "deleteDataset",
    tag = "datasets",
    params(("name" = String, Path, description = "The dataset's name."), OwnerQuery),
    responses(
        (status = 202, description = "Deleted: the job that removes its rows.", body = JobView),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such dataset (or not one the caller may change).", body = ErrorBody),
        (status = 409, description = "Jobs are waiting or running on it.", body = ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    query: Result<Query<OwnerQuery>, QueryRejection>,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    let Query(query) = query?;
    caller.acts()?;
    let owner = dataset_owner(&caller, query.owner).ok_or_else(|| no_such_dataset(&name))?;
    let job = deletion::request(&state.pool, owner, &name).await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

fn no_such_dataset(name: &str) -> ApiError {
    ApiError::NotFound(format!("No dataset is named \"{name}\"."))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RowsQuery {
    /// Rows per page, 1 to 1000 (default 100).
    limit: Option<i64>,
    /// The `next` of the previous page.
    after: Option<String>,
    /// The owner's id, for admins and viewers reading someone else's (default: the caller).
    owner: Option<Uuid>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RowsPage {
    /// Each row a JSON object keyed by column name.
    rows: Vec<Value>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// Pages through a dataset's rows, in the order they were imported.
#[utoipa::path(
    get,
    path = "/api/datasets/{name}/rows",
    operation_id = "getDatasetRows",
    tag = "datasets",
    params(("name" = String, Path, description = "The dataset's name."), RowsQuery),
    responses(
        (status = 200, description = "A page of rows.", body = RowsPage),
        (status = 400, description = "An `after` that is not a page's `next`, or a parameter that does not parse.", body = ErrorBody),
        (status = 404, description = "No such dataset (or not one the caller may see).", body = ErrorBody),
    )
)]
pub async fn rows(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    query: Result<Query<RowsQuery>, QueryRejection>,
) -> Result<Json<RowsPage>, ApiError> {
    let Query(query) = query?;
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
