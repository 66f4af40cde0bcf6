//! `GET /api/jobs/{id}/result`: the file a finished export produced, streamed from storage
//! with its name and type.

use app::model::ExportFormat;
use axum::{
    body::Body,
    extract::{Path, State, rejection::PathRejection},
    http::{
        HeaderValue,
        header::{CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE},
    },
    response::{IntoResponse, Response},
};
use futures::TryStreamExt;
use uuid::Uuid;

use super::{
    AppState, disposition,
    error::{ApiError, ErrorBody},
    identity::Caller,
    jobs::{job_id, no_such_job},
};
use crate::{
    jobs::export::{CSV_TYPE, XLSX_TYPE},
    store::{jobs, uploads},
};

/// Downloads the file a finished export produced.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/result",
    operation_id = "getExportResult",
    tag = "reports",
    params(("id" = Uuid, Path, description = "The export job's id.")),
    responses(
        (status = 200, description = "The file, as an attachment named after the dataset.", content(
            (String = "text/csv"),
            ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
        )),
        (status = 404, description = "No such job (or not the caller's), or not an export.", body = ErrorBody),
        (status = 409, description = "The export is not complete.", body = ErrorBody),
    )
)]
pub async fn download(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = job_id(id)?;
    let jobs::ExportResult {
        file,
        dataset,
        format,
    } = jobs::export_result(&state.pool, id, caller.sees())
        .await?
        .ok_or_else(|| no_such_job(id))?;
    let Some((upload_id, size)) = file else {
        return Err(ApiError::Conflict(
            "The export has no file yet: it is not complete.".into(),
        ));
    };
    let content_type = match format {
        ExportFormat::Xlsx => XLSX_TYPE,
        ExportFormat::Csv => CSV_TYPE,
    };
    let disposition = disposition::attachment(&format!("{dataset}.{}", format.as_str()));
    let body = uploads::stream(state.pool.clone(), upload_id).map_err(std::io::Error::other);
    Ok((
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CONTENT_DISPOSITION, disposition),
            (CONTENT_LENGTH, HeaderValue::from(size)),
        ],
        Body::from_stream(body),
    )
        .into_response())
}
