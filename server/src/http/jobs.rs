//! `/api/jobs`: create, read and list jobs.

use axum::{
    Json,
    extract::{
        Path, RawQuery, State,
        rejection::{JsonRejection, PathRejection},
    },
    http::{HeaderMap, HeaderName, StatusCode, header::LOCATION},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use uuid::Uuid;

use super::{AppState, error::ApiError, identity::Caller, quotas};
use crate::{
    auth::Sees,
    jobs::{
        callbacks::address::Policy,
        control,
        create::{self, CreateError},
    },
    spreadsheet::schema,
    store::{
        history,
        job_list::{self, Owners},
        jobs::{self, Options},
    },
};

static REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
use app::{
    history::JobHistory,
    job_list::{JobPage, ListQuery},
    model::{ExportFormat, JobView},
};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateJob {
    job_type: String,
    file_guid: Option<Uuid>,
    dataset: Option<String>,
    /// For a workbook: the sheet to import (default: the first with a value).
    sheet: Option<String>,
    /// For an export: `csv` (the default) or `xlsx`.
    format: Option<String>,
    /// Attempts per chunk before it is marked failed (1–100, default 5).
    max_failures_per_item: Option<i32>,
    /// Stop the import once more rows than this failed: a count (`1000`) or a percentage
    /// of the rows (`"5%"`).
    max_row_errors: Option<serde_json::Value>,
    /// A repeated request with the same key returns the first job (as `Idempotency-Key`).
    dedupe_key: Option<String>,
    /// Jobs with the same key run one at a time, in creation order (default: the dataset).
    serialize_key: Option<String>,
    /// The open batch this job joins.
    parent_id: Option<Uuid>,
    /// Where the job's final state is POSTed once it ends.
    callback_url: Option<String>,
}

/// A callback URL we can call: absolute `http://` or `https://`, at most 2,000 characters,
/// and not an internal address (a name is checked again, resolved, when the callback is sent).
fn callback_url(raw: &str, policy: &Policy) -> Result<String, ApiError> {
    let url = reqwest::Url::parse(raw.trim())
        .ok()
        .filter(|url| {
            matches!(url.scheme(), "http" | "https") && url.host().is_some() && raw.len() <= 2000
        })
        .ok_or_else(|| {
            ApiError::Invalid("\"callbackUrl\" must be an absolute http(s):// URL.".into())
        })?;
    if let Some(Err(refused)) = url.host().map(|host| policy.check_host(host)) {
        return Err(ApiError::Invalid(format!(
            "\"callbackUrl\" cannot be used: {refused}."
        )));
    }
    Ok(url.to_string())
}

/// The job a create request asks for.
enum What<'a> {
    Import {
        upload: Uuid,
        dataset: &'a str,
        sheet: Option<&'a str>,
    },
    Export {
        dataset: &'a str,
        format: ExportFormat,
    },
    Batch,
}

/// The longest dedupe or serialize key accepted.
const MAX_KEY_CHARS: usize = 200;

/// The longest sheet name accepted (ODS allows longer names than Excel's 31).
const MAX_SHEET_CHARS: usize = 255;

impl CreateJob {
    fn what(&self) -> Result<What<'_>, ApiError> {
        let dataset = |missing: &str| {
            self.dataset
                .as_deref()
                .map(str::trim)
                .ok_or_else(|| ApiError::Invalid(missing.to_owned()))
        };
        Ok(match self.job_type.as_str() {
            "import" => What::Import {
                upload: self.file_guid.ok_or_else(|| {
                    ApiError::Invalid("An import needs \"fileGuid\": the id of an upload.".into())
                })?,
                dataset: dataset("An import needs \"dataset\": the dataset to import into.")
                    .and_then(|name| {
                        schema::check_dataset_name(name).map_err(ApiError::Invalid)?;
                        Ok(name)
                    })?,
                sheet: self.sheet()?,
            },
            "export" => {
                let format = create::parse_format(self.format.as_deref().unwrap_or("csv"))?;
                What::Export {
                    dataset: dataset("An export needs \"dataset\": the dataset to export.")?,
                    format,
                }
            }
            "batch" => What::Batch,
            other => {
                return Err(ApiError::Invalid(format!(
                    "Unknown jobType \"{other}\": use \"import\", \"export\" or \"batch\"."
                )));
            }
        })
    }

    /// The sheet asked for: a workbook's sheet names are short (Excel allows 31 characters),
    /// and none looks like a command-line flag.
    fn sheet(&self) -> Result<Option<&str>, ApiError> {
        let Some(sheet) = self
            .sheet
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        if sheet.chars().count() > MAX_SHEET_CHARS
            || sheet.starts_with("--")
            || sheet.chars().any(char::is_control)
        {
            return Err(ApiError::Invalid(format!(
                "\"sheet\" must be a sheet's name: at most {MAX_SHEET_CHARS} characters, no \
                 control characters, not starting with \"--\"."
            )));
        }
        Ok(Some(sheet))
    }

    fn options(
        &self,
        idempotency_key: Option<&str>,
        callbacks: &Policy,
    ) -> Result<Options, ApiError> {
        let key = |name: &str, value: Option<&str>| -> Result<Option<String>, ApiError> {
            match value.map(str::trim) {
                None => Ok(None),
                Some(key) if key.is_empty() || key.chars().count() > MAX_KEY_CHARS => Err(
                    ApiError::Invalid(format!("{name} must be 1 to {MAX_KEY_CHARS} characters.")),
                ),
                Some(key) => Ok(Some(key.to_owned())),
            }
        };
        let mut options = Options {
            max_failures_per_item: self.max_failures_per_item,
            dedupe_key: key(
                "The Idempotency-Key header (or \"dedupeKey\")",
                idempotency_key.or(self.dedupe_key.as_deref()),
            )?,
            serialize_key: key("\"serializeKey\"", self.serialize_key.as_deref())?,
            parent_id: self.parent_id,
            callback_url: self
                .callback_url
                .as_deref()
                .map(|url| callback_url(url, callbacks))
                .transpose()?,
            ..Options::default()
        };
        if matches!(options.max_failures_per_item, Some(n) if !(1..=100).contains(&n)) {
            return Err(ApiError::Invalid(
                "\"maxFailuresPerItem\" must be between 1 and 100.".into(),
            ));
        }
        let bad_budget = || {
            ApiError::Invalid(
                "\"maxRowErrors\" must be a count of rows (like 1000) or a percentage of the \
                 rows (like \"5%\")."
                    .into(),
            )
        };
        match &self.max_row_errors {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Number(n)) => {
                let count = n.as_u64().and_then(|n| i64::try_from(n).ok());
                options.max_row_errors = Some(count.ok_or_else(bad_budget)?);
            }
            Some(serde_json::Value::String(text)) => {
                let percent: f64 = text
                    .trim()
                    .strip_suffix('%')
                    .and_then(|n| n.trim().parse().ok())
                    .filter(|n| (0.0..=100.0).contains(n))
                    .ok_or_else(bad_budget)?;
                options.max_row_errors_percent = Some(percent);
            }
            Some(_) => return Err(bad_budget()),
        }
        Ok(options)
    }
}

/// `POST /api/jobs` → 202 with `Location` and the job; 200 with `Idempotent-Replayed: true`
/// and the first job when the `Idempotency-Key` header (or `dedupeKey`) was used before.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Json<CreateJob>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    let idempotency_key = headers
        .get("idempotency-key")
        .map(|value| {
            value.to_str().map_err(|_| {
                ApiError::BadRequest("The Idempotency-Key header must be plain text.".into())
            })
        })
        .transpose()?;
    let mut options = request.options(idempotency_key, &state.callbacks)?;
    options.active_jobs_limit = Some(state.limits.active_jobs);
    let what = request.what()?;
    if caller.me().is_none() {
        // A visitor owns no upload, dataset or batch: whatever the request names does not
        // exist for them, and they do not become a guest for a request that cannot succeed.
        let missing = match what {
            What::Import { upload, .. } => Some(CreateError::UploadNotFound(upload)),
            What::Export { dataset, .. } => Some(CreateError::DatasetNotFound(dataset.into())),
            What::Batch => None,
        };
        if let Some(missing) = missing.or(options.parent_id.map(CreateError::NotAnOpenBatch)) {
            return Err(missing.into());
        }
    }
    let owner = caller.owner(&state).await?.id;
    let created = match what {
        What::Import {
            upload,
            dataset,
            sheet,
        } => create::import(&state.pool, owner, upload, dataset, sheet, &options).await?,
        What::Export { dataset, format } => {
            create::export(&state.pool, owner, dataset, format, &options).await?
        }
        What::Batch => create::batch(&state.pool, owner, &options).await?,
    };
    let location = format!("/api/jobs/{}", created.job.id);
    if created.replayed {
        let replayed = [(LOCATION, location), (REPLAYED.clone(), "true".to_owned())];
        return Ok((StatusCode::OK, replayed, Json(created.job)).into_response());
    }
    Ok((
        StatusCode::ACCEPTED,
        [(LOCATION, location)],
        Json(created.job),
    )
        .into_response())
}

/// `POST /api/jobs/{id}/cancel` → the job, `cancelled` (409 when it had already ended).
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(id)?;
    let acts = caller.acts()?;
    let outcome = control::cancel(&state.pool, id, acts).await?;
    answer(&state, id, acts, outcome, "The job has already ended.").await
}

/// `POST /api/jobs/{id}/seal` → the batch, taking no more children (409 unless an open batch).
pub async fn seal(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(id)?;
    let acts = caller.acts()?;
    let outcome = control::seal(&state.pool, id, acts).await?;
    answer(
        &state,
        id,
        acts,
        outcome,
        "Only a running batch that is not sealed can be sealed.",
    )
    .await
}

/// `POST /api/jobs/{id}/retry` → the job, running again what it had not done (409 unless it
/// failed or was cancelled).
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(id)?;
    let acts = caller.acts()?;
    // People retrying their own jobs are held to their limit of live jobs; admins are not.
    let limit = matches!(acts, Sees::OwnedBy(_)).then_some(state.limits.active_jobs);
    let outcome = control::retry(&state.pool, id, acts, limit).await?;
    if matches!(outcome, control::Outcome::NotApplicable)
        && let Some(remedy) = jobs::find(&state.pool, id, acts)
            .await?
            .and_then(|job| job.remedy)
    {
        return Err(ApiError::Conflict(format!(
            "Retrying would fail the same way: {} instead.",
            remedy.action()
        )));
    }
    answer(
        &state,
        id,
        acts,
        outcome,
        "Only a failed or cancelled job can be retried, while its details are kept.",
    )
    .await
}

async fn answer(
    state: &AppState,
    id: Uuid,
    acts: Sees,
    outcome: control::Outcome,
    not_applicable: &str,
) -> Result<Json<JobView>, ApiError> {
    match outcome {
        control::Outcome::NoSuchJob => Err(no_such_job(id)),
        control::Outcome::NotApplicable => Err(ApiError::Conflict(not_applicable.into())),
        control::Outcome::OverLimit { limit } => Err(quotas::too_many_jobs(limit)),
        control::Outcome::Done => jobs::find(&state.pool, id, acts)
            .await?
            .map(Json)
            .ok_or_else(|| no_such_job(id)),
    }
}

/// `GET /api/jobs/{id}`.
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    visible_job(&state, &caller, id).await.map(Json)
}

/// `GET /api/jobs/{id}/history`: its changes of status, runs, chunks and what it waits for.
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<JobHistory>, ApiError> {
    let id = job_id(id)?;
    history::read(&state.pool, id, caller.sees())
        .await?
        .map(Json)
        .ok_or_else(|| no_such_job(id))
}

/// The job, if the caller may see it; a 404 otherwise, as for a missing one.
pub async fn visible_job(
    state: &AppState,
    caller: &Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<JobView, ApiError> {
    let id = job_id(id)?;
    jobs::find(&state.pool, id, caller.sees())
        .await?
        .ok_or_else(|| no_such_job(id))
}

/// `GET /api/jobs?status=&type=&owner=&dataset=&from=&to=&errors=&q=&before=&after=&limit=`:
/// a page of the jobs the caller may see that the filter selects, newest first, with the
/// counts per status (`app::job_list` has the parameters).
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<JobPage>, ApiError> {
    let query = ListQuery::from_query_string(query.as_deref().unwrap_or_default())
        .map_err(ApiError::BadRequest)?;
    let owners = Owners::resolve(&state.pool, caller.sees(), query.filter.owner.as_deref()).await?;
    Ok(Json(job_list::page(&state.pool, owners, &query).await?))
}

/// A path id that is not a UUID names no job either.
pub fn job_id(id: Result<Path<Uuid>, PathRejection>) -> Result<Uuid, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|_| ApiError::NotFound("No job has that id.".into()))
}

pub fn no_such_job(id: Uuid) -> ApiError {
    ApiError::NotFound(format!("No job has the id {id}."))
}
