//! `/api/jobs`: create, read and list jobs.

use axum::{
    Json,
    body::Body,
    extract::{
        FromRequest, Multipart, Path, RawQuery, Request, State, multipart::Field,
        rejection::PathRejection,
    },
    http::{
        HeaderMap, HeaderName, HeaderValue, StatusCode,
        header::{CONTENT_TYPE, LOCATION},
    },
    response::{IntoResponse, Response},
};
use http_body_util::Limited;
use serde::Deserialize;
use sqlx::PgPool;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{ObjectBuilder, RefOr, Schema, Type},
};
use uuid::Uuid;

use super::{
    AppState,
    datasets::NewDataset,
    error::{ApiError, ErrorBody},
    identity::Caller,
    quotas, uploads,
};
use std::sync::Arc;

use crate::{
    auth::Sees,
    jobs::{
        callbacks::address::Policy,
        control,
        create::{self, CreateError},
    },
    progress::views::Shown,
    spreadsheet::{
        mapping::Mapping,
        reading::Reading,
        schema::{self, Declared},
    },
    store::items::NewItem,
    store::{
        datasets, history,
        job_list::{self, Owners},
        jobs::{self, Options},
        states::DatasetState,
        uploads::{self as store_uploads, File},
    },
};

static REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
use app::{
    history::JobHistory,
    job_list::{JobPage, ListQuery},
    job_types::JobTypeView,
    model::{ExportFormat, JobKind, JobStatus, JobView},
};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateJob {
    /// `import`, `export`, `batch`, `validate` (a dry run of an import, which checks and counts
    /// every row and reports its errors, writing none: its job is an import with `dryRun:
    /// true`), or the name of a registered job type (`GET /api/job-types`).
    #[schema(value_type = String, example = "import")]
    job_type: String,
    /// For an import: the id of an upload (`POST /api/uploads`).
    file_guid: Option<Uuid>,
    /// The dataset to import into (made from the file's header if it does not exist) or to
    /// export.
    dataset: Option<String>,
    /// For a workbook: the sheet to import (default: the first sheet not hidden that holds a table, passing over a cover sheet).
    sheet: Option<String>,
    /// For an import: the sheet row (1-based) of the header; rows above it (titles) are
    /// skipped. Default: the first row (of a workbook, the first with a value). The preview
    /// (`GET /api/uploads/{id}/preview`) finds it.
    header_row: Option<i64>,
    /// For a CSV import: the delimiter, `,` `;` `|` or `\t` (default: found from the file).
    delimiter: Option<String>,
    /// For a CSV import: the text encoding, `utf-8` or `windows-1252` (default: found).
    encoding: Option<String>,
    /// For an import: file column → the dataset column it fills, or `null` to ignore it. File
    /// columns left out fill the column of their own name. Checked against the file's header
    /// and the dataset before the job is queued (422: a column filled twice, a column the
    /// dataset lacks, a required column left empty).
    #[schema(value_type = Option<std::collections::BTreeMap<String, Option<String>>>)]
    mapping: Option<Mapping>,
    /// For an import: the id of the import whose error report (fixed) this file is; the new
    /// job links back to it. The report's `_row` and `_error` columns are ignored.
    fixes: Option<Uuid>,
    /// For a job of a registered type: its first items (more with `POST
    /// /api/jobs/{id}/items`, until it is sealed).
    items: Option<Vec<NewItemBody>>,
    /// For an import or a dry run into a new dataset: its columns and key. The dataset comes
    /// into being when an import into it completes (a dry run's import keeps them); 409 when
    /// the caller has a dataset of that name.
    new_dataset: Option<NewDataset>,
    /// For an export: `csv` (the default) or `xlsx`.
    #[schema(value_type = Option<ExportFormat>)]
    format: Option<String>,
    /// Attempts per chunk before it is marked failed (1–100, default 5).
    max_failures_per_item: Option<i32>,
    /// Stop the import once more rows than this failed: a count (`1000`) or a percentage
    /// of the rows (`"5%"`).
    #[schema(example = "5%")]
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

/// One item of a job of a registered type.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewItemBody {
    /// Any JSON, at most the type's `maxPayloadBytes` as sent. Kept as text while the request
    /// is read: a body takes about its own size in memory, whatever its shape.
    #[schema(value_type = Object)]
    payload: Box<serde_json::value::RawValue>,
    /// Unique within the job: an item sent again with its key is not added twice.
    dedupe_key: Option<String>,
}

/// The items of a request, as the store takes them.
pub fn new_items(items: &[NewItemBody]) -> Vec<NewItem> {
    items
        .iter()
        .map(|item| NewItem {
            payload: item.payload.get().to_owned(),
            dedupe_key: item.dedupe_key.as_deref().map(|key| key.trim().to_owned()),
        })
        .collect()
}

/// The job a create request asks for.
enum What<'a> {
    Import(create::Import<'a>),
    Export {
        dataset: &'a str,
        format: ExportFormat,
    },
    Batch,
    /// A job of a registered type (`jobType` names it), with its first items.
    Items {
        job_type: JobTypeView,
        items: Vec<NewItem>,
    },
}

/// The longest dedupe or serialize key accepted.
const MAX_KEY_CHARS: usize = 200;

impl CreateJob {
    async fn what<'a>(
        &'a self,
        pool: &PgPool,
        new_dataset: Option<&'a Declared>,
    ) -> Result<What<'a>, ApiError> {
        let dataset = |missing: &str| {
            self.dataset
                .as_deref()
                .map(str::trim)
                .ok_or_else(|| ApiError::Invalid(missing.to_owned()))
        };
        Ok(match self.job_type.as_str() {
            kind @ ("import" | "validate") => What::Import(create::Import {
                upload_id: self.file_guid.ok_or_else(|| {
                    ApiError::Invalid(format!(
                        "A{}{kind} needs \"fileGuid\": the id of an upload.",
                        if kind == "import" { "n " } else { " " }
                    ))
                })?,
                dataset: dataset("An import needs \"dataset\": the dataset to import into.")
                    .and_then(|name| {
                        schema::check_dataset_name(name).map_err(ApiError::Invalid)?;
                        Ok(name)
                    })?,
                sheet: self.sheet()?,
                reading: Reading::parse(
                    self.header_row,
                    self.delimiter.as_deref(),
                    self.encoding.as_deref(),
                )
                .map_err(ApiError::Invalid)?,
                mapping: self.mapping.as_ref(),
                dry_run: kind == "validate",
                fixes: self.fixes,
                new_dataset,
            }),
            "export" => {
                let format = create::parse_format(self.format.as_deref().unwrap_or("csv"))?;
                What::Export {
                    dataset: dataset("An export needs \"dataset\": the dataset to export.")?,
                    format,
                }
            }
            "batch" => What::Batch,
            name => {
                // A type that is not registered, or items it refuses, fail before a visitor
                // becomes a guest.
                let items = new_items(self.items.as_deref().unwrap_or_default());
                let job_type = create::job_type_for(pool, name, &items).await?;
                What::Items { job_type, items }
            }
        })
    }

    /// The sheet asked for ([`schema::check_sheet_name`]).
    fn sheet(&self) -> Result<Option<&str>, ApiError> {
        let Some(sheet) = self
            .sheet
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        schema::check_sheet_name(sheet).map_err(ApiError::Invalid)?;
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

/// Creates a job: an import, an export or a batch.
///
/// `POST /api/jobs` → 202 with `Location` and the job; 200 with `Idempotent-Replayed: true`
/// and the first job when the `Idempotency-Key` header (or `dedupeKey`) was used before.
#[utoipa::path(
    post,
    path = "/api/jobs",
    operation_id = "createJob",
    tag = "jobs",
    params((
        "Idempotency-Key" = Option<String>,
        Header,
        description = "A repeated request with the same key answers the first job (as `dedupeKey`)."
    )),
    request_body(
        description = "The job as JSON; or, for an import or a dry run sent with its file, a form of the job's JSON (without `fileGuid`) and then the file.",
        content(
            (CreateJob = "application/json"),
            (CreateJobForm = "multipart/form-data")
        )
    ),
    responses(
        (status = 202, description = "Created, waiting to start.", body = JobView,
            headers(("Location" = String, description = "The job's URL."))),
        (status = 200, description = "The job first created with this key.", body = JobView,
            headers(
                ("Location" = String, description = "The job's URL."),
                ("Idempotent-Replayed" = String, description = "`true`.")
            )),
        (status = 400, description = "Not JSON (or a form that cannot be read), or an `Idempotency-Key` that is not text.", body = ErrorBody),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 413, description = "A form's file larger than the upload limit, or its `job` field larger than 2 MiB (a JSON body that is: 400).", body = ErrorBody),
        (status = 422, description = "An invalid request, or an upload, dataset or batch the caller does not have; a form without its `job` field followed by its `file` field, or an empty file.", body = ErrorBody),
        (status = 429, description = "The caller has as many jobs waiting or running as they may, or (a job of a registered type) its items would pass the bytes of items the caller may keep; a form's file: as `POST /api/uploads`.", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let idempotency_key = headers
        .get("idempotency-key")
        .map(|value| {
            value.to_str().map_err(|_| {
                ApiError::BadRequest("The Idempotency-Key header must be plain text.".into())
            })
        })
        .transpose()?;
    let created = if is_form(&headers) {
        let form = Multipart::from_request(request, &state).await?;
        with_file(&state, &caller, idempotency_key, form).await?
    } else {
        // The route takes files this large: JSON alone is held to axum's default.
        let request = request.map(|body| Body::new(Limited::new(body, JSON_BODY_BYTES)));
        let Json(body) = Json::<CreateJob>::from_request(request, &state).await?;
        make(&state, &caller, idempotency_key, &body, None).await?
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

/// The form an import is sent with its file as, in the OpenAPI document.
pub struct CreateJobForm;

impl PartialSchema for CreateJobForm {
    fn schema() -> RefOr<Schema> {
        let job = ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/json")
            .description(Some(
                "The job, as `POST /api/jobs` takes it as JSON (`jobType` `import` or \
                 `validate`), without `fileGuid`. Sent before the file.",
            ));
        ObjectBuilder::new()
            .property(JOB_FIELD, job)
            .property(uploads::FILE_FIELD, uploads::file_schema())
            .required(JOB_FIELD)
            .required(uploads::FILE_FIELD)
            .description(Some("Fields after the file are ignored."))
            .into()
    }
}

impl ToSchema for CreateJobForm {}

/// The largest JSON body of `POST /api/jobs` (and of its `job` field).
pub(super) const JSON_BODY_BYTES: usize = 2 << 20;

/// The form field that holds the job's JSON, sent before the file.
const JOB_FIELD: &str = "job";

fn is_form(headers: &HeaderMap) -> bool {
    let content_type = headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes);
    content_type.is_some_and(|value| {
        let value = value.trim_ascii_start();
        value.len() >= FORM.len() && value[..FORM.len()].eq_ignore_ascii_case(FORM)
    })
}

const FORM: &[u8] = b"multipart/form-data";

/// Makes the job a request asks for; `sent`: the file the request sent with it, taken for its
/// owner (the job is then made as that owner, of that file).
async fn make(
    state: &AppState,
    caller: &Caller,
    idempotency_key: Option<&str>,
    request: &CreateJob,
    sent: Option<(Uuid, File)>,
) -> Result<create::Created, ApiError> {
    let mut options = request.options(idempotency_key, &state.callbacks)?;
    options.active_jobs_limit = Some(state.limits.active_jobs);
    let new_dataset = request
        .new_dataset
        .as_ref()
        .map(NewDataset::check)
        .transpose()?;
    let what = request.what(&state.pool, new_dataset.as_ref()).await?;
    if sent.is_none() && caller.me().is_none() {
        // A visitor owns no upload, dataset or batch: whatever the request names does not
        // exist for them, and they do not become a guest for a request that cannot succeed.
        let missing = match what {
            What::Import(import) => Some(CreateError::UploadNotFound(import.upload_id)),
            What::Export { dataset, .. } => Some(CreateError::DatasetNotFound(dataset.into())),
            What::Batch | What::Items { .. } => None,
        };
        if let Some(missing) = missing.or(options.parent_id.map(CreateError::NotAnOpenBatch)) {
            return Err(missing.into());
        }
    }
    let (owner, file) = match sent {
        Some((owner, file)) => (owner, Some(file)),
        None => (caller.owner(state).await?.id, None),
    };
    Ok(match what {
        What::Import(import) => {
            let (pool, converter, groups) = (&state.pool, &state.converter, &state.groups);
            create::import(pool, converter, groups, owner, (import, file), &options).await?
        }
        What::Export { dataset, format } => {
            create::export(&state.pool, owner, dataset, format, &options).await?
        }
        What::Batch => create::batch(&state.pool, owner, &options).await?,
        What::Items { job_type, items } => {
            let max_item_bytes = state.limits.stored_bytes;
            create::items(
                &state.pool,
                owner,
                &job_type,
                &items,
                &options,
                max_item_bytes,
            )
            .await?
        }
    })
}

/// Makes an import (or a dry run) sent with its file: a form whose `job` field holds the
/// request's JSON (without `fileGuid`) and whose `file` field, after it, holds the file. The
/// JSON is checked before the file is read (what depends on the owner's data or on the file,
/// such as the live-job limit or a mapping, is checked as the job is made). A small file that
/// has arrived whole is stored by the transaction that makes its job (with its group's other
/// files, in one statement), so nothing is left of it if no job is made; any other (or one
/// whose mapping must be checked against it) is stored first, as `POST /api/uploads` stores
/// one, then the job is made as `POST /api/jobs` makes it, and the file is removed if no job
/// comes of it (an error, the request dropped). A repeat of a request that made its job (its
/// dedupe key) answers that job before any file is stored. One request instead of two: a
/// script's import costs one round trip, and the server one request, one read of the upload
/// and (a small file) one commit less.
async fn with_file(
    state: &AppState,
    caller: &Caller,
    idempotency_key: Option<&str>,
    mut form: Multipart,
) -> Result<create::Created, ApiError> {
    let limit = state.max_upload_bytes;
    let out_of_order = || {
        ApiError::Invalid(format!(
            "Send the job's JSON in a form field named \"{JOB_FIELD}\", then the file in a \
             field named \"{}\".",
            uploads::FILE_FIELD
        ))
    };
    let job = next_field(&mut form, limit)
        .await?
        .ok_or_else(out_of_order)?;
    if job.name() != Some(JOB_FIELD) {
        return Err(out_of_order());
    }
    let mut request = job_json(job, limit).await?;
    if !matches!(request.job_type.as_str(), "import" | "validate") {
        return Err(ApiError::Invalid(
            "Only an import or a dry run (\"validate\") is sent with its file.".into(),
        ));
    }
    if request.file_guid.is_some() {
        return Err(ApiError::Invalid(
            "Send the file or \"fileGuid\", not both.".into(),
        ));
    }
    // The JSON checked before the file is read, with a stand-in for its id (replaced below,
    // before the job is made).
    request.file_guid = Some(Uuid::nil());
    let options = request.options(idempotency_key, &state.callbacks)?;
    let new_dataset = request.new_dataset.as_ref().map(NewDataset::check);
    request
        .what(&state.pool, new_dataset.transpose()?.as_ref())
        .await?;
    let field = next_field(&mut form, limit)
        .await?
        .ok_or_else(out_of_order)?;
    if field.name() != Some(uploads::FILE_FIELD) {
        return Err(out_of_order());
    }
    if caller.me().is_none() {
        // What a visitor cannot have yet, refused before they become a guest.
        visitor_lacks(&request)?;
    }
    let owner = caller.owner(state).await?.id;
    if let Some(earlier) = create::replay(&state.pool, owner, &options).await? {
        // The file is read (not stored), so that the client hears the answer.
        let mut field = field;
        while let Ok(Some(_)) = field.chunk().await {}
        return Ok(earlier);
    }
    let file = match request.mapping {
        None => uploads::take(state, owner, field).await?,
        Some(_) => File::Stored(uploads::store(state, owner, field).await?),
    };
    let unclaimed = match &file {
        File::Stored(upload) => Some(store_uploads::Unclaimed::new(&state.pool, upload.id)),
        File::Sent(_) => None,
    };
    request.file_guid = Some(file.upload().id);
    // As the owner the file was taken for (a visitor became a guest above).
    let made = make(
        state,
        caller,
        idempotency_key,
        &request,
        Some((owner, file)),
    )
    .await;
    match (unclaimed, &made) {
        (None, _) => {}
        (
            Some(unclaimed),
            Ok(create::Created {
                replayed: false, ..
            }),
        ) => unclaimed.keep(),
        (Some(unclaimed), _) => unclaimed.remove().await,
    }
    made
}

/// What a visitor's import sent with its file names that nobody without an account has: a
/// batch, an import it fixes, or (for a dry run) a dataset that exists.
fn visitor_lacks(request: &CreateJob) -> Result<(), ApiError> {
    let missing = if let Some(batch) = request.parent_id {
        CreateError::NotAnOpenBatch(batch)
    } else if let Some(fixed) = request.fixes {
        CreateError::Invalid(format!(
            "\"fixes\" must be one of your imports; no import of yours has the id {fixed}."
        ))
    } else if request.job_type == "validate" && request.new_dataset.is_none() {
        let dataset = request.dataset.as_deref().unwrap_or_default().trim();
        CreateError::DatasetNotFound(dataset.into())
    } else {
        return Ok(());
    };
    Err(missing.into())
}

async fn next_field(form: &mut Multipart, limit: usize) -> Result<Option<Field<'_>>, ApiError> {
    let field = form.next_field().await;
    field.map_err(|err| uploads::multipart_error(err, limit))
}

/// The `job` field's JSON, at most [`JSON_BODY_BYTES`] (`limit`: the route's, for files).
async fn job_json(mut field: Field<'_>, limit: usize) -> Result<CreateJob, ApiError> {
    let mut json = Vec::new();
    while let Some(bytes) = field
        .chunk()
        .await
        .map_err(|err| uploads::multipart_error(err, limit))?
    {
        if json.len() + bytes.len() > JSON_BODY_BYTES {
            return Err(ApiError::TooLarge(format!(
                "The \"{JOB_FIELD}\" field is larger than {JSON_BODY_BYTES} bytes."
            )));
        }
        json.extend_from_slice(&bytes);
    }
    serde_json::from_slice(&json).map_err(|err| {
        ApiError::BadRequest(format!(
            "The \"{JOB_FIELD}\" field is not a job's JSON: {err}."
        ))
    })
}

/// Imports what a dry run checked: a new import of the same upload into the same dataset, read
/// and mapped the same way.
///
/// `POST /api/jobs/{id}/import` → the new import (`202`, as `POST /api/jobs`).
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/import",
    operation_id = "importDryRun",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The dry run's id.")),
    responses(
        (status = 202, description = "The import, queued.", body = JobView),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's own).", body = ErrorBody),
        (status = 409, description = "Not a dry run that completed.", body = ErrorBody),
        (status = 422, description = "The upload is gone, or the dataset changed so that the mapping no longer fits.", body = ErrorBody),
        (status = 429, description = "The caller has as many jobs waiting or running as they may.", body = ErrorBody),
    )
)]
pub async fn import_dry_run(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = job_id(id)?;
    caller.acts()?;
    // Only its owner imports a dry run: the import is theirs, into their dataset.
    let owner = caller.me().ok_or_else(|| no_such_job(id))?.id;
    let job = jobs::find(&state.pool, id, Sees::OwnedBy(owner))
        .await?
        .ok_or_else(|| no_such_job(id))?;
    if !(job.dry_run && job.status == JobStatus::Completed) {
        return Err(ApiError::Conflict(
            "Only a dry run that completed can be imported.".into(),
        ));
    }
    let mut conn = state.pool.acquire().await?;
    let checked = jobs::import_job(&mut conn, id)
        .await?
        .ok_or_else(|| no_such_job(id))?;
    if datasets::state_of(&mut conn, checked.dataset_id).await? == DatasetState::Deleted {
        return Err(ApiError::Conflict(
            "The dataset this dry run checked has been deleted since: import the file again."
                .into(),
        ));
    }
    drop(conn);
    let dataset = job.dataset.as_deref().ok_or_else(|| no_such_job(id))?;
    let mapping = job.mapping.as_ref();
    let import = create::Import {
        upload_id: checked.upload_id,
        dataset,
        sheet: job.sheet.as_deref(),
        reading: checked.reading(),
        mapping,
        dry_run: false,
        fixes: job.fixes,
        new_dataset: None,
    };
    let options = Options {
        active_jobs_limit: Some(state.limits.active_jobs),
        ..Options::default()
    };
    let (pool, converter, groups) = (&state.pool, &state.converter, &state.groups);
    let created = create::import(pool, converter, groups, owner, (import, None), &options).await?;
    let location = format!("/api/jobs/{}", created.job.id);
    Ok((
        StatusCode::ACCEPTED,
        [(LOCATION, location)],
        Json(created.job),
    )
        .into_response())
}

/// Deletes a finished job, with its items and results (and the jobs below it).
///
/// `DELETE /api/jobs/{id}` → 204; 409 while it (or the job above it) is waiting or running.
#[utoipa::path(
    delete,
    path = "/api/jobs/{id}",
    operation_id = "deleteJob",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
        (status = 409, description = "The job, the job above it or one below it has not ended, or it is a chain's follow-up job.", body = ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let id = job_id(id)?;
    let acts = caller.acts()?;
    let mut tx = state.pool.begin().await?;
    match jobs::delete_finished(&mut tx, id, acts).await? {
        Ok(()) => {
            tx.commit().await?;
            Ok(StatusCode::NO_CONTENT)
        }
        Err(jobs::NotDeleted::NoSuchJob) => Err(no_such_job(id)),
        Err(jobs::NotDeleted::Live) => Err(ApiError::Conflict(
            "Only a finished job can be deleted: cancel it first (or the job it belongs to, \
             or the jobs below it)."
                .into(),
        )),
        Err(jobs::NotDeleted::FollowUp) => Err(ApiError::Conflict(
            "This job is a follow-up in a chain: delete the chain's first job.".into(),
        )),
    }
}

/// Cancels a job.
///
/// `POST /api/jobs/{id}/cancel` → the job, `cancelled` (409 when it had already ended).
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/cancel",
    operation_id = "cancelJob",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job, cancelled.", body = JobView),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
        (status = 409, description = "The job has already ended.", body = ErrorBody),
    )
)]
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

/// Seals a batch: it takes no more children.
///
/// `POST /api/jobs/{id}/seal` → the batch, taking no more children (409 unless an open batch).
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/seal",
    operation_id = "sealBatch",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The batch, sealed.", body = JobView),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
        (status = 409, description = "Not a running batch that is still open.", body = ErrorBody),
    )
)]
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
        "Only a running batch, or a live job of a registered type, that is not sealed can be \
         sealed.",
    )
    .await
}

/// Retries a failed or cancelled job.
///
/// `POST /api/jobs/{id}/retry` → the job, running again what it had not done (409 unless it
/// failed or was cancelled, or when it would fail the same way: the job's `remedy` says what
/// to do instead).
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/retry",
    operation_id = "retryJob",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job, running again.", body = JobView),
        (status = 403, description = "Viewers change nothing.", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
        (status = 409, description = "Neither failed nor cancelled, or it would fail the same way.", body = ErrorBody),
        (status = 429, description = "The caller has as many jobs waiting or running as they may.", body = ErrorBody),
    )
)]
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
        && let Some(job) = jobs::find(&state.pool, id, acts).await?
    {
        if let Some(remedy) = job.remedy {
            return Err(ApiError::Conflict(format!(
                "Retrying would fail the same way: {} instead.",
                remedy.action()
            )));
        }
        let ended_badly = matches!(job.status, JobStatus::Failed | JobStatus::Cancelled);
        if ended_badly && job.dataset_deleted && job.job_type != JobKind::Delete {
            return Err(ApiError::Conflict(
                "Its dataset has been deleted since: there is nothing to retry into.".into(),
            ));
        }
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

/// Reads a job.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}",
    operation_id = "getJob",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job.", body = JobView),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
    )
)]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Response, ApiError> {
    let shown = visible_job(&state, &caller, id).await?;
    Ok((
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        shown.json.clone(),
    )
        .into_response())
}

/// Reads a job's history: its changes of status, runs, chunks and what it waits for.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/history",
    operation_id = "getJobHistory",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job's history.", body = JobHistory),
        (status = 404, description = "No such job (or not the caller's).", body = ErrorBody),
    )
)]
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

/// The job, if the caller may see it; a 404 otherwise, as for a missing one. From what this
/// process read lately when it can (`progress::recent`).
pub async fn visible_job(
    state: &AppState,
    caller: &Caller,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Arc<Shown>, ApiError> {
    let id = job_id(id)?;
    state
        .recent
        .find(&state.pool, id, caller.sees())
        .await?
        .ok_or_else(|| no_such_job(id))
}

/// Lists jobs: a page of those the filter selects, newest first, with counts per status.
///
/// `GET /api/jobs?status=&type=&owner=&dataset=&from=&to=&errors=&q=&before=&after=&limit=`:
/// a page of the jobs the caller may see that the filter selects, newest first, with the
/// counts per status.
#[utoipa::path(
    get,
    path = "/api/jobs",
    operation_id = "listJobs",
    tag = "jobs",
    params(
        ("status" = Option<String>, Query, description = "Any of these statuses, comma-separated or repeated (`failed,cancelled`)."),
        ("type" = Option<String>, Query, description = "Any of these kinds, comma-separated or repeated: `import`, `export`, `batch`."),
        ("owner" = Option<String>, Query, description = "The owner's email or id (members only ever see their own jobs)."),
        ("dataset" = Option<String>, Query, description = "The dataset's exact name."),
        ("from" = Option<String>, Query, description = "Created at or after: a date or an RFC 3339 time."),
        ("to" = Option<String>, Query, description = "Created before: an RFC 3339 time, or a date (its end)."),
        ("tz" = Option<i32>, Query, description = "The time zone of dates in `from` and `to`, in minutes east of UTC (default 0)."),
        ("errors" = Option<String>, Query, description = "`1` (or `true`, `yes`, `on`): only jobs with rows in error; `0` (`false`, `no`): no filter."),
        ("q" = Option<String>, Query, description = "The file or dataset name contains it, or the job id starts with it."),
        ("before" = Option<String>, Query, description = "The page just older than this cursor (a page's `older`)."),
        ("after" = Option<String>, Query, description = "The page just newer than this cursor (a page's `newer`)."),
        ("limit" = Option<i64>, Query, description = "Jobs per page, 1 to 500 (default 50)."),
    ),
    responses(
        (status = 200, description = "A page of jobs.", body = JobPage),
        (status = 400, description = "A parameter that cannot be read (the message names it).", body = ErrorBody),
    )
)]
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
