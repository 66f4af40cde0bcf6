//! `/api/datasets`: declare a dataset's schema, read datasets, and page through their rows
//! (JSON objects keyed by column).

use axum::{
    Extension, Json,
    extract::{Path, Query, State, rejection::JsonRejection},
    http::StatusCode,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AppState, error::ApiError, session::Owner};
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

/// `POST /api/datasets` → 201 with the dataset; 409 when the name is taken.
pub async fn create(
    State(state): State<AppState>,
    Extension(owner): Extension<Owner>,
    body: Result<Json<CreateDataset>, JsonRejection>,
) -> Result<(StatusCode, Json<DatasetView>), ApiError> {
    let Json(request) = body?;
    let name = request.name.trim();
    schema::check_dataset_name(name).map_err(ApiError::Invalid)?;
    let key = request.key.as_deref().map(str::trim);
    let columns = schema::check_schema(request.columns, key).map_err(ApiError::Invalid)?;
    let dataset = datasets::create(&state.pool, &owner.0, name, &columns, key)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("A dataset named \"{name}\" already exists.")))?;
    Ok((StatusCode::CREATED, Json(dataset)))
}

#[derive(Debug, Serialize)]
pub struct DatasetList {
    datasets: Vec<DatasetView>,
}

/// `GET /api/datasets`.
pub async fn list(State(state): State<AppState>) -> Result<Json<DatasetList>, ApiError> {
    Ok(Json(DatasetList {
        datasets: datasets::list(&state.pool).await?,
    }))
}

/// `GET /api/datasets/{name}`.
pub async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<DatasetView>, ApiError> {
    datasets::find(&state.pool, &name)
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
}

#[derive(Debug, Serialize)]
pub struct RowsPage {
    rows: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

pub async fn rows(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<RowsQuery>,
) -> Result<Json<RowsPage>, ApiError> {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let after = query.after.as_deref().map(decode_cursor).transpose()?;
    let (rows, next) = datasets::rows(&state.pool, &name, after, limit)
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
