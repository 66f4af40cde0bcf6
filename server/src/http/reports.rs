//! The error report of a job: `GET /api/jobs/{id}/errors` (paged JSON), and
//! `GET /api/jobs/{id}/errors.csv` / `.xlsx` (every bad row as it was, plus `_error`;
//! streamed).

use axum::{
    Json,
    body::Body,
    extract::{
        Path, Query, State,
        rejection::{PathRejection, QueryRejection},
    },
    http::{
        HeaderValue,
        header::{CONTENT_DISPOSITION, CONTENT_TYPE},
    },
    response::{IntoResponse, Response},
};
use futures::{Stream, StreamExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{
    AppState, disposition,
    error::{ApiError, ErrorBody},
    identity::Caller,
    jobs::visible_job,
};
use app::model::JobView;

use crate::{
    jobs::{export::XLSX_TYPE, pipe},
    spreadsheet::{
        output::{self, LongText, MAX_XLSX_ROWS},
        report,
        schema::{Column, ColumnType},
    },
    store::errors,
};

/// Errors read per query while streaming the CSV.
const CSV_PAGE: i64 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ErrorsQuery {
    /// Errors per page, 1 to 1000 (default 100).
    limit: Option<i64>,
    /// The `next` of the previous page.
    after: Option<i64>,
    /// Only rows with a problem in this column.
    column: Option<String>,
    /// Only rows whose message holds this text (any case).
    q: Option<String>,
    /// Also count the rows in error by column (`byColumn`).
    counts: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorsPage {
    errors: Vec<errors::ReportLine>,
    /// With `counts=true`: how many rows in error have a problem in each column, most first
    /// (`column: null`: the row as a whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    by_column: Option<Vec<errors::ColumnCount>>,
    /// Pass as `after` for the next page; absent on the last page. A filtered page looks
    /// through 20,000 errors at most: it may hold fewer rows than asked, or none, and still
    /// have a `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<i64>,
}

/// Reads a job's row errors, a page at a time, in sheet order: all, or those with a problem in
/// one column, or whose message holds a text; with `counts=true`, counted by column too.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/errors",
    operation_id = "getJobErrors",
    tag = "reports",
    params(("id" = Uuid, Path, description = "The job's id."), ErrorsQuery),
    responses(
        (status = 200, description = "A page of the job's errors.", body = ErrorsPage),
        (status = 400, description = "A `limit` or `after` that is not a number.", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
    )
)]
pub async fn json(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
    query: Result<Query<ErrorsQuery>, QueryRejection>,
) -> Result<Json<ErrorsPage>, ApiError> {
    let id = visible_job(&state, &caller, id).await?.view.id;
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let only = errors::Only {
        column: query.column.as_deref().filter(|c| !c.is_empty()),
        text: query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()),
    };
    let (lines, read_to) =
        errors::page(&state.pool, id, query.after.unwrap_or(0), limit, only).await?;
    let next = (lines.len() as i64 == limit)
        .then(|| lines.last().map(|l| l.row_no))
        .flatten()
        .or(read_to);
    let by_column = match query.counts {
        Some(true) => Some(errors::by_column(&state.pool, id).await?),
        _ => None,
    };
    Ok(Json(ErrorsPage {
        errors: lines,
        by_column,
        next,
    }))
}

/// Downloads a job's error report as CSV: for every bad row, its sheet row (`_row`) and what
/// is wrong (`_error`), then the row exactly as it was. Fixed and imported again, the `_row`
/// and `_error` columns are ignored.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/errors.csv",
    operation_id = "getJobErrorsCsv",
    tag = "reports",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The report, streamed, as an attachment named after the imported file.", body = String, content_type = "text/csv"),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
    )
)]
pub async fn csv(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Response, ApiError> {
    let shown = visible_job(&state, &caller, id).await?;
    let job = &shown.view;
    let (_, body) = report_csv(&state, job.id).await?;
    let body = stream::once(async { Ok(UTF8_BOM.to_vec()) }).chain(body);
    Ok(attachment(
        &report_name(job),
        "csv",
        "text/csv; charset=utf-8",
        body,
    ))
}

/// Downloads a job's error report as an XLSX workbook (all cells text).
///
/// The same report as the CSV, converted while it streams.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/errors.xlsx",
    operation_id = "getJobErrorsXlsx",
    tag = "reports",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The report, streamed, as an attachment named after the imported file.", content_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
        (status = 422, description = "More rows than an Excel sheet holds: download the CSV.", body = ErrorBody),
    )
)]
pub async fn xlsx(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Response, ApiError> {
    let shown = visible_job(&state, &caller, id).await?;
    let job = &shown.view;
    let (id, failed) = (job.id, job.rows_failed);
    if failed > MAX_XLSX_ROWS {
        return Err(ApiError::Invalid(format!(
            "The report has {failed} rows, more than an Excel sheet holds: download it as CSV."
        )));
    }
    let (width, csv) = report_csv(&state, id).await?;
    // The row numbers as numbers; everything else as the text it was.
    let columns: Vec<Column> = (0..width)
        .map(|i| Column {
            kind: if i == 0 {
                ColumnType::Integer
            } else {
                ColumnType::Text
            },
            ..Column::text(&i.to_string())
        })
        .collect();
    let (body, work) = pipe::convert(Box::pin(csv), move |input, out| {
        output::csv_to_xlsx(&columns, "errors", LongText::Cut, input, out).map(drop)
    });
    tokio::spawn(async move {
        if let Err(err) = work.await {
            tracing::warn!(%id, "error report as XLSX failed: {err}");
        }
    });
    Ok(attachment(&report_name(job), "xlsx", XLSX_TYPE, body))
}

/// Every bad row's number and errors, then the row as it was, as CSV (header first), read a
/// page at a time; and the number of columns of the header.
/// Starts the CSV download: Excel reads a CSV without it in the machine's legacy code page
/// (accents garbled, and saved back garbled); with it, as UTF-8. Our import drops it, so a
/// fixed report imports as it is.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

async fn report_csv(
    state: &AppState,
    id: Uuid,
) -> Result<
    (
        usize,
        impl Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static,
    ),
    ApiError,
> {
    let columns = errors::columns(&state.pool, id).await?;
    let width = columns.len();
    let pool = state.pool.clone();
    let pages = stream::try_unfold(Some(0i64), move |after| {
        let pool = pool.clone();
        async move {
            let Some(after) = after else { return Ok(None) };
            let (lines, _) =
                errors::page(&pool, id, after, CSV_PAGE, errors::Only::default()).await?;
            let next = (lines.len() as i64 == CSV_PAGE)
                .then(|| lines.last().map(|l| l.row_no))
                .flatten();
            let bytes: Vec<u8> = lines
                .iter()
                .flat_map(|line| report::row(line.row_no, &line.fields, &line.message))
                .collect();
            Ok::<_, sqlx::Error>((!lines.is_empty()).then_some((bytes, next)))
        }
    });
    let body = stream::once(async move { Ok(report::header(&columns)) })
        .chain(pages)
        .map_err(std::io::Error::other);
    Ok((width + report::ADDED.len(), body))
}

/// A download named after the imported file: `people.csv` → `people-errors.xlsx`.
fn attachment(
    filename: &str,
    extension: &str,
    content_type: &'static str,
    body: impl Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static,
) -> Response {
    let stem = filename.rsplit_once('.').map_or(filename, |(stem, _)| stem);
    let disposition = disposition::attachment(&format!("{stem}-errors.{extension}"));
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The imported file's name, which the report's is made from.
fn report_name(job: &JobView) -> String {
    job.filename.clone().unwrap_or_else(|| "import".to_owned())
}
