//! API errors: one type, mapped to a status and `{"error":{"code","message"}}`. Internal
//! causes are logged here, once, under a reference ([`incident`]) that is all the client sees.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header::RETRY_AFTER},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    auth::accounts::AccountError,
    incident,
    jobs::{create::CreateError, deletion::DeleteError, preview::PreviewError},
    store::uploads::UploadError,
};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Conflict(String),
    /// No (valid) credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Known, but not allowed: a viewer changing something, a guest using an account's page,
    /// a member on an admin's, a request from another site.
    #[error("{0}")]
    Forbidden(String),
    /// Addressed to a host name we do not serve.
    #[error("{0}")]
    WrongHost(String),
    /// Too much at once: try again shortly.
    #[error("{0}")]
    Busy(String),
    /// Over one of the caller's limits (`config::LimitArgs`): try again after `retry_after`
    /// seconds, once something they hold has ended.
    #[error("{message}")]
    Limited { message: String, retry_after: u64 },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::WrongHost(_) => (StatusCode::MISDIRECTED_REQUEST, "wrong_host"),
            Self::Busy(_) => (StatusCode::TOO_MANY_REQUESTS, "busy"),
            Self::Limited { .. } => (StatusCode::TOO_MANY_REQUESTS, "limited"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for programs: `not_found`, `bad_request`, `invalid` (422),
    /// `too_large`, `conflict`, `unauthorized`, `forbidden`, `wrong_host`, `busy` or `limited`
    /// (429, with `Retry-After`), `internal`.
    #[schema(example = "not_found")]
    code: &'static str,
    /// What went wrong, in a sentence for people.
    message: String,
    /// Only for `internal`: the reference our logs hold the cause under.
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
}

impl ApiError {
    /// The body of a refusal that is one part of a larger answer (an ending in a batch); never
    /// for `Internal`, whose cause is logged under a reference instead.
    pub fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            code: self.status_and_code().1,
            message: self.to_string(),
            reference: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let (message, reference) = match &self {
            Self::Internal(err) => {
                let reference = incident::error("internal error", &format!("{err:#}"));
                let message = format!("{} Please try again.", reference.sentence());
                (message, Some(reference.as_str().to_owned()))
            }
            other => (other.to_string(), None),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message,
                reference,
            },
        };
        let retry_after = match &self {
            Self::Limited { retry_after, .. } => Some(*retry_after),
            Self::Busy(_) => Some(1),
            _ => None,
        };
        let mut response = (status, Json(body)).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A request body that is not the JSON the endpoint expects.
impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> Self {
        Self::BadRequest(rejection.body_text())
    }
}

/// A query string that does not parse into the endpoint's parameters.
impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        Self::BadRequest(rejection.body_text())
    }
}

/// An upload that is not `multipart/form-data`.
impl From<axum::extract::multipart::MultipartRejection> for ApiError {
    fn from(rejection: axum::extract::multipart::MultipartRejection) -> Self {
        Self::BadRequest(rejection.body_text())
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::Internal(err.into())
    }
}

impl From<UploadError> for ApiError {
    fn from(err: UploadError) -> Self {
        match err {
            UploadError::TooLarge { limit } => Self::file_too_large(limit),
            UploadError::Empty => Self::Invalid("The file is empty.".into()),
            UploadError::Body(_) => {
                Self::BadRequest("The upload was cut off before the end of the file.".into())
            }
            UploadError::TooManyAtOnce { limit } => Self::Limited {
                message: format!(
                    "You are already sending as many files as you may at once ({limit}). Try \
                     again when one has finished."
                ),
                retry_after: 10,
            },
            UploadError::StoreFull { limit } => Self::Limited {
                message: format!(
                    "Your stored files would take more than {}, the most one account may \
                     keep. Files no job needs are removed after a few days; an administrator \
                     can raise the limit.",
                    bytes_text(limit as u64)
                ),
                retry_after: 3600,
            },
            UploadError::Database(err) => err.into(),
        }
    }
}

impl From<CreateError> for ApiError {
    fn from(err: CreateError) -> Self {
        match err {
            CreateError::UploadNotFound(_)
            | CreateError::DatasetNotFound(_)
            | CreateError::NotAnOpenBatch(_) => {
                Self::Invalid(format!("Cannot create the job: {err}."))
            }
            CreateError::Invalid(message) => Self::Invalid(message),
            CreateError::TooManyActive { limit } => super::quotas::too_many_jobs(limit),
            CreateError::TooManyItemBytes { limit } => super::quotas::too_many_item_bytes(limit),
            CreateError::Database(err) => err.into(),
            CreateError::File(err) => err.into(),
            CreateError::Queue(err) => Self::Internal(err.into()),
            CreateError::Preview(err) => err.into(),
            CreateError::Deletion(err) => err.into(),
            CreateError::Conflict(message) => Self::Conflict(message),
            CreateError::UnknownJobType(_) => {
                Self::Invalid(format!("Cannot create the job: {err}."))
            }
        }
    }
}

impl From<DeleteError> for ApiError {
    fn from(err: DeleteError) -> Self {
        match err {
            DeleteError::NotFound(_) => Self::NotFound(format!("Cannot delete: {err}.")),
            DeleteError::Busy { .. } => Self::Conflict(format!("Cannot delete: {err}.")),
            DeleteError::Database(err) => err.into(),
            DeleteError::Queue(err) => Self::Internal(err.into()),
        }
    }
}

impl From<PreviewError> for ApiError {
    fn from(err: PreviewError) -> Self {
        match err {
            PreviewError::Database(err) => err.into(),
            PreviewError::Converter(_) => Self::Internal(err.into()),
            PreviewError::Busy => {
                Self::Busy("Other workbooks are being read just now: try again in a moment.".into())
            }
            PreviewError::TooSlow => Self::Invalid(
                "The workbook could not be read in time: it is damaged, or far larger inside than \
                 a spreadsheet of its size should be."
                    .into(),
            ),
        }
    }
}

impl From<AccountError> for ApiError {
    fn from(err: AccountError) -> Self {
        match err {
            AccountError::Invalid(message) => Self::Invalid(message),
            AccountError::EmailTaken => Self::Conflict(err.to_string()),
            AccountError::WrongCredentials => Self::Unauthorized(err.to_string()),
            AccountError::Busy => Self::Busy(err.to_string()),
            AccountError::LastAdmin => Self::Conflict(err.to_string()),
            AccountError::Database(err) => err.into(),
            AccountError::Internal(err) => Self::Internal(err),
        }
    }
}

impl ApiError {
    /// The 403 for a viewer's attempt to change something.
    pub fn viewers_change_nothing() -> Self {
        Self::Forbidden("Viewers can see everything but change nothing.".into())
    }

    /// The 413 for an upload over the limit, saying what the limit is.
    pub fn file_too_large(limit: usize) -> Self {
        Self::TooLarge(format!(
            "The file is larger than the upload limit of {}.",
            bytes_text(limit as u64)
        ))
    }
}

/// `64 MB`, `1.5 MB`, `20 GB`: a size as people read it.
fn bytes_text(bytes: u64) -> String {
    let (value, unit) = if bytes >= 1_000_000_000 {
        (bytes as f64 / 1e9, "GB")
    } else {
        (bytes as f64 / 1e6, "MB")
    };
    if value >= 10.0 {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// The JSON 404 for API paths that do not exist.
pub async fn no_such_endpoint() -> ApiError {
    ApiError::NotFound("There is no such API endpoint.".into())
}
