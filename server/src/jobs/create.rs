//! Creating a job: the job row, its first task and the first notification, in one transaction.

use app::model::JobView;
use sqlx::PgPool;
use uuid::Uuid;

use super::queue::{self, TaskMsg};
use crate::store::{datasets, jobs, notify, uploads};

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("no upload has the id {0}")]
    UploadNotFound(Uuid),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Queue(#[from] apalis_postgres::Error),
}

/// Checks a dataset name: 1–64 letters, digits, `-` or `_`, so it reads well in URLs.
pub fn check_dataset_name(name: &str) -> Result<(), CreateError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(CreateError::Invalid(
            "A dataset name is 1 to 64 letters, digits, '-' or '_'.".into(),
        ))
    }
}

/// Queues the import of an upload into a dataset (created when new).
pub async fn import(
    pool: &PgPool,
    owner: &str,
    upload_id: Uuid,
    dataset: &str,
) -> Result<JobView, CreateError> {
    check_dataset_name(dataset)?;
    if uploads::find(pool, upload_id).await?.is_none() {
        return Err(CreateError::UploadNotFound(upload_id));
    }
    let mut tx = pool.begin().await?;
    let dataset_id = datasets::ensure(&mut tx, owner, dataset).await?;
    let job_id = jobs::insert_import(&mut tx, owner, upload_id, dataset_id).await?;
    queue::push(&mut tx, &[TaskMsg::Plan { job_id }]).await?;
    notify::job_changed(&mut tx, job_id, 1).await?;
    tx.commit().await?;
    Ok(jobs::find(pool, job_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?)
}

#[cfg(test)]
mod tests {
    use super::check_dataset_name;

    #[test]
    fn dataset_names() {
        assert!(check_dataset_name("customers_2024-q1").is_ok());
        assert!(check_dataset_name("").is_err());
        assert!(check_dataset_name("a b").is_err());
        assert!(check_dataset_name("../etc").is_err());
        assert!(check_dataset_name(&"x".repeat(65)).is_err());
    }
}
