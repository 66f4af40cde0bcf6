//! `POST /api/uploads`: stream a multipart `file` field into storage. `GET
//! /api/uploads/{id}/preview`: what an import of it would read (`jobs::preview`).

use app::preview::UploadPreview;
use axum::{
    Json,
    extract::{
        Multipart, Path, Query, State,
        multipart::{Field, MultipartError, MultipartRejection},
        rejection::{PathRejection, QueryRejection},
    },
    http::StatusCode,
};
use serde::Deserialize;
use uuid::Uuid;

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
};
use futures::TryStreamExt;
use utoipa::{
    IntoParams, PartialSchema, ToSchema,
    openapi::{ObjectBuilder, RefOr, Schema, Type},
};

use crate::{
    auth::Sees,
    jobs::preview::{self, ReadAs},
    spreadsheet::{reading::Reading, schema},
    store::uploads::{self, File, Upload, UploadError, UploadLimits},
};

/// The form field that holds the file.
pub(super) const FILE_FIELD: &str = "file";

/// The form an upload is sent as, in the OpenAPI document.
pub struct UploadForm;

/// The file field of a form, in the OpenAPI document.
pub(super) fn file_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/octet-stream")
        .description(Some("The file: CSV, XLSX, XLS or ODS."))
}

impl PartialSchema for UploadForm {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property(FILE_FIELD, file_schema())
            .required(FILE_FIELD)
            .description(Some("Other fields are ignored."))
            .into()
    }
}

impl ToSchema for UploadForm {}

/// Uploads a file, to import with `POST /api/jobs`.
#[utoipa::path(
    post,
    path = "/api/uploads",
    operation_id = "createUpload",
    tag = "uploads",
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 201, description = "Stored.", body = Upload),
        (status = 400, description = "Not a `multipart/form-data` request, or a form that cannot be read, or cut off.", body = ErrorBody),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 413, description = "Larger than the upload limit.", body = ErrorBody),
        (status = 422, description = "No `file` field, or an empty file.", body = ErrorBody),
        (status = 429, description = "Too many uploads at once, or the caller's stored files are at their limit.", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<(StatusCode, Json<Upload>), ApiError> {
    let mut multipart = multipart?;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|err| multipart_error(err, state.max_upload_bytes))?
    {
        if field.name() != Some(FILE_FIELD) {
            continue;
        }
        let owner = caller.owner(&state).await?;
        let upload = store(&state, owner.id, field).await?;
        return Ok((StatusCode::CREATED, Json(upload)));
    }
    Err(ApiError::Invalid(
        "Send the file as multipart/form-data in a field named \"file\".".into(),
    ))
}

/// Stores a form's file field as an upload of `owner`'s, within the server's upload limits.
pub(super) async fn store(
    state: &AppState,
    owner: Uuid,
    field: Field<'_>,
) -> Result<Upload, ApiError> {
    let upload = match receive(state, owner, field).await? {
        File::Stored(upload) => upload,
        File::Sent(sent) => uploads::store_whole(&state.pool, owner, sent).await?,
    };
    tracing::info!(upload = %upload.id, size = upload.size, "file uploaded");
    Ok(upload)
}

/// A form's file field sent with the job it is for, within the server's upload limits: a small
/// file that arrived whole is held, to be stored with its job; any other is stored now.
pub(super) async fn take(
    state: &AppState,
    owner: Uuid,
    field: Field<'_>,
) -> Result<File, ApiError> {
    let file = receive(state, owner, field).await?;
    let Upload { id, size, .. } = file.upload();
    match &file {
        File::Stored(_) => tracing::info!(upload = %id, size, "file uploaded"),
        File::Sent(_) => tracing::info!(upload = %id, size, "file received, to store with its job"),
    }
    Ok(file)
}

/// A form's file field, taken as `store::uploads::take` takes a file.
async fn receive(state: &AppState, owner: Uuid, field: Field<'_>) -> Result<File, UploadError> {
    let filename = clean_file_name(field.file_name().unwrap_or("upload.csv"));
    let content_type = field.content_type().map(str::to_owned);
    let limits = UploadLimits {
        file_bytes: state.max_upload_bytes,
        at_once: Some(state.limits.uploads_at_once),
        stored_bytes: Some(state.limits.stored_bytes),
    };
    let body = std::pin::pin!(file_body(field, limits.file_bytes));
    let content_type = content_type.as_deref();
    uploads::take(&state.pool, owner, &filename, content_type, limits, body).await
}

/// A file field's bytes, its errors as an upload's.
fn file_body(
    field: Field<'_>,
    limit: usize,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, UploadError>> + '_ {
    field.map_err(move |err| match multipart_error(err, limit) {
        ApiError::TooLarge(_) => UploadError::TooLarge { limit },
        other => UploadError::Body(std::io::Error::other(other.to_string())),
    })
}

/// How to read the upload for its preview; each left out is found from the file.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// A workbook's sheet (default: the one an import picks: the first shown sheet holding a
    /// table).
    sheet: Option<String>,
    /// The sheet row (1-based) of the header (default: found past title and blank rows).
    header_row: Option<i64>,
    /// A CSV's delimiter: `,` `;` `|` or `\t` (default: found).
    delimiter: Option<String>,
    /// A CSV's text encoding: `utf-8` or `windows-1252` (default: found).
    encoding: Option<String>,
    /// One of the caller's datasets (or a new name): the preview then suggests which of its
    /// columns each file column fills.
    dataset: Option<String>,
}

/// Previews an upload: a workbook's sheets with their sizes, the header row (found past title
/// rows), the first 20 rows, a CSV's delimiter and encoding, a type for each column and, for a
/// dataset, a suggested mapping. Reads only the start of the file.
#[utoipa::path(
    get,
    path = "/api/uploads/{id}/preview",
    operation_id = "previewUpload",
    tag = "uploads",
    params(("id" = Uuid, Path, description = "The upload's id."), PreviewQuery),
    responses(
        (status = 200, description = "What an import would read; `problem` says why it would fail from the start.", body = UploadPreview),
        (status = 400, description = "An id that is not a UUID, or a query that cannot be read.", body = ErrorBody),
        (status = 404, description = "No such upload (or not the caller's).", body = ErrorBody),
        (status = 422, description = "A header row, delimiter, encoding, sheet or dataset name that cannot be.", body = ErrorBody),
    )
)]
pub async fn preview(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
) -> Result<Json<UploadPreview>, ApiError> {
    let missing = || ApiError::NotFound("No upload has that id.".into());
    let Path(id) = id.map_err(|_| missing())?;
    let Query(query) = query?;
    let owner = caller.me().ok_or_else(missing)?.id;
    let upload = uploads::find(&state.pool, id, Sees::OwnedBy(owner))
        .await?
        .ok_or_else(missing)?;
    let reading = Reading::parse(
        query.header_row,
        query.delimiter.as_deref(),
        query.encoding.as_deref(),
    )
    .map_err(ApiError::Invalid)?;
    let sheet = query
        .sheet
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let Some(sheet) = sheet {
        schema::check_sheet_name(sheet).map_err(ApiError::Invalid)?;
    }
    let dataset = query
        .dataset
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let Some(name) = dataset {
        schema::check_dataset_name(name).map_err(ApiError::Invalid)?;
    }
    let read_as = ReadAs { sheet, reading };
    let preview = preview::preview(
        &state.pool,
        &state.converter,
        owner,
        &upload,
        read_as,
        dataset,
    )
    .await?;
    Ok(Json(preview))
}

pub(super) fn multipart_error(err: MultipartError, limit: usize) -> ApiError {
    if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::file_too_large(limit)
    } else {
        ApiError::BadRequest(format!(
            "The upload could not be read: {}.",
            err.body_text()
        ))
    }
}

/// The last path component, without control characters, at most 255 characters.
fn clean_file_name(raw: &str) -> String {
    let base = raw.rsplit(['/', '\\']).next().unwrap_or(raw);
    let name: String = base.chars().filter(|c| !c.is_control()).take(255).collect();
    if name.trim().is_empty() {
        "upload.csv".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::clean_file_name;

    #[test]
    fn file_names_lose_paths_and_control_characters() {
        assert_eq!(clean_file_name("C:\\Users\\me\\data.csv"), "data.csv");
        assert_eq!(clean_file_name("../../etc/passwd"), "passwd");
        assert_eq!(clean_file_name("a\nb.csv"), "ab.csv");
        assert_eq!(clean_file_name(""), "upload.csv");
    }
}
