//! `/api/datasets/{name}/rows`: a dataset's rows as JSON objects keyed by column, paged.

use axum::{
    Json,
    extract::{Path, Query, State},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AppState, error::ApiError};
use crate::store::datasets::{self, RowCursor};

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
        .ok_or_else(|| ApiError::NotFound(format!("No dataset is named \"{name}\".")))?;
    Ok(Json(RowsPage {
        rows,
        next: next.map(|cursor| format!("{}.{}", cursor.job_id, cursor.row_no)),
    }))
}

fn decode_cursor(raw: &str) -> Result<RowCursor, ApiError> {
    let bad =
        || ApiError::BadRequest("\"after\" must be the \"next\" value of a previous page.".into());
    let (job_id, row_no) = raw.split_once('.').ok_or_else(bad)?;
    Ok(RowCursor {
        job_id: job_id.parse().map_err(|_| bad())?,
        row_no: row_no.parse().map_err(|_| bad())?,
    })
}
