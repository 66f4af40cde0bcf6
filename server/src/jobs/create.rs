//! Creating a job: the job row, its first task and the first notification, in one transaction.

use app::model::JobView;
use sqlx::PgPool;
use uuid::Uuid;

use super::queue::{self, TaskMsg};
use crate::{
    spreadsheet::schema,
    store::{
        datasets,
        jobs::{self, Limits},
        notify, uploads,
    },
};

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("no upload has the id {0}")]
    UploadNotFound(Uuid),
    #[error("no dataset is named \"{0}\"")]
    DatasetNotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Queue(#[from] apalis_postgres::Error),
}

/// Queues the import of an upload into a dataset (created when new); `sheet` picks a
/// workbook's sheet (the first with a value when `None`).
pub async fn import(
    pool: &PgPool,
    owner: &str,
    upload_id: Uuid,
    dataset: &str,
    sheet: Option<&str>,
    limits: &Limits,
) -> Result<JobView, CreateError> {
    schema::check_dataset_name(dataset).map_err(CreateError::Invalid)?;
    if uploads::find(pool, upload_id).await?.is_none() {
        return Err(CreateError::UploadNotFound(upload_id));
    }
    let mut tx = pool.begin().await?;
    let dataset_id = datasets::ensure(&mut tx, owner, dataset).await?;
    let job = jobs::insert_import(&mut tx, owner, upload_id, dataset_id, sheet, limits).await?;
    let job_id = job.id;
    queue::push(&mut tx, &[(TaskMsg::Plan { job_id }, job.ticket)]).await?;
    notify::job_changed(&mut tx, job_id, 1).await?;
    tx.commit().await?;
    Ok(jobs::find(pool, job_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?)
}

/// Queues the export of a dataset as `csv` or `xlsx`.
pub async fn export(
    pool: &PgPool,
    owner: &str,
    dataset: &str,
    format: &str,
    limits: &Limits,
) -> Result<JobView, CreateError> {
    if !matches!(format, "csv" | "xlsx") {
        return Err(CreateError::Invalid(format!(
            "Unknown format \"{format}\": use \"csv\" or \"xlsx\"."
        )));
    }
    let mut tx = pool.begin().await?;
    let dataset_id = datasets::id_of(&mut tx, dataset)
        .await?
        .ok_or_else(|| CreateError::DatasetNotFound(dataset.to_owned()))?;
    let job = jobs::insert_export(&mut tx, owner, dataset_id, format, limits).await?;
    let job_id = job.id;
    queue::push(&mut tx, &[(TaskMsg::ExportPlan { job_id }, job.ticket)]).await?;
    notify::job_changed(&mut tx, job_id, 1).await?;
    tx.commit().await?;
    Ok(jobs::find(pool, job_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?)
}
