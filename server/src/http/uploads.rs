//! `POST /api/uploads`: stream a multipart `file` field into storage.

use axum::{
    Json,
    extract::{
        Multipart, State,
        multipart::{MultipartError, MultipartRejection},
    },
    http::StatusCode,
};

use super::{
    AppState,
    error::{ApiError, ErrorBody},
    identity::Caller,
};
use futures::TryStreamExt;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{ObjectBuilder, RefOr, Schema, Type},
};

use crate::store::uploads::{self, Upload, UploadError, UploadLimits};

/// The form field that holds the file.
const FILE_FIELD: &str = "file";

/// The form an upload is sent as, in the OpenAPI document.
pub struct UploadForm;

impl PartialSchema for UploadForm {
    fn schema() -> RefOr<Schema> {
        let file = ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/octet-stream")
            .description(Some("The file: CSV, XLSX, XLS or ODS."));
        ObjectBuilder::new()
            .property(FILE_FIELD, file)
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
    let limit = state.max_upload_bytes;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|err| multipart_error(err, limit))?
    {
        if field.name() != Some(FILE_FIELD) {
            continue;
        }
        let filename = clean_file_name(field.file_name().unwrap_or("upload.csv"));
        let content_type = field.content_type().map(str::to_owned);
        let owner = caller.owner(&state).await?;
        let limits = UploadLimits {
            file_bytes: limit,
            at_once: Some(state.limits.uploads_at_once),
            stored_bytes: Some(state.limits.stored_bytes),
        };
        let upload = uploads::save(
            &state.pool,
            owner.id,
            &filename,
            content_type.as_deref(),
            limits,
            std::pin::pin!(field.map_err(|err| match multipart_error(err, limit) {
                ApiError::TooLarge(_) => UploadError::TooLarge { limit },
                other => UploadError::Body(std::io::Error::other(other.to_string())),
            })),
        )
        .await?;
        tracing::info!(upload = %upload.id, size = upload.size, "file uploaded");
        return Ok((StatusCode::CREATED, Json(upload)));
    }
    Err(ApiError::Invalid(
        "Send the file as multipart/form-data in a field named \"file\".".into(),
    ))
}

fn multipart_error(err: MultipartError, limit: usize) -> ApiError {
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
