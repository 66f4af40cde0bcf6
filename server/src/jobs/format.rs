//! How an import reads its rows: the file's header lined up with the dataset (shared by the
//! plan of a CSV file and the streamed import of a sheet).

use sqlx::PgConnection;
use uuid::Uuid;

use super::TaskError;
use crate::{
    spreadsheet::{Plan, csv::RowFormat, mapping, report, schema::Column},
    store::{datasets, jobs::ImportJob},
};

/// The refusal for a file with more rows than a job's row numbers hold.
pub fn too_many_rows() -> TaskError {
    TaskError::refused(format!(
        "The file has more than {} rows, the most one import takes. Split it into parts.",
        datasets::MAX_ROW_NO
    ))
}

/// How the chunks will read rows: the file's header, through the job's mapping, lined up with
/// the dataset's columns. A dataset without columns takes the mapped header's, as text (a dry
/// run only reads as if it had); a header that does not fit the dataset is the person's
/// problem (refused, with the reason).
pub async fn row_format(
    conn: &mut PgConnection,
    job: &ImportJob,
    plan: &Plan,
) -> Result<RowFormat, TaskError> {
    let mut formats = row_formats(conn, &[(job, plan)]).await?;
    formats.pop().expect("one format for one import")
}

/// [`row_format`] for each of these imports (a batch of small ones), with one read of their
/// datasets and one write of the columns those without any take. An import into a dataset that
/// an earlier one of them gives columns lines up with those.
pub async fn row_formats(
    conn: &mut PgConnection,
    imports: &[(&ImportJob, &Plan)],
) -> sqlx::Result<Vec<Result<RowFormat, TaskError>>> {
    let ids: Vec<Uuid> = imports.iter().map(|(job, _)| job.dataset_id).collect();
    let mut schemas = datasets::schemas(conn, &ids).await?;
    let mut adopted = Vec::new();
    let mut formats = Vec::with_capacity(imports.len());
    for (job, plan) in imports {
        let (declared, key) = schemas
            .get(&job.dataset_id)
            .ok_or(sqlx::Error::RowNotFound)?;
        let format = lay_out(job, plan, declared, key.as_deref());
        if let Ok((_, Some(columns))) = &format
            && !job.dry_run
        {
            schemas.insert(job.dataset_id, (columns.clone(), key.clone()));
            adopted.push((job.dataset_id, columns.clone()));
        }
        formats.push(format.map(|(format, _)| format));
    }
    datasets::adopt_columns(conn, &adopted).await?;
    Ok(formats)
}

/// How `job` reads `plan`'s rows into a dataset of these columns and key; with the columns the
/// dataset takes when it has none.
fn lay_out(
    job: &ImportJob,
    plan: &Plan,
    declared: &[Column],
    key: Option<&str>,
) -> Result<(RowFormat, Option<Vec<Column>>), TaskError> {
    let mapping = &job.mapping();
    let adopted = if declared.is_empty() {
        Some(mapping::adopted(&plan.columns, mapping).map_err(TaskError::refused)?)
    } else {
        None
    };
    let declared = adopted.as_deref().unwrap_or(declared);
    let (columns, slots): (Vec<Column>, Vec<Option<usize>>) =
        mapping::lay_out(&plan.columns, mapping, declared)
            .map_err(TaskError::refused)?
            .into_iter()
            .unzip();
    let key = key
        .and_then(|key| (0..columns.len()).find(|&i| slots[i].is_some() && columns[i].name == key));
    let format = RowFormat {
        delimiter: plan.delimiter,
        encoding: plan.encoding,
        header: plan.columns.clone(),
        columns,
        slots,
        width: declared.len(),
        key,
        header_row: plan.header_row,
        from_report: report::ADDED
            .iter()
            .all(|added| plan.columns.iter().any(|c| c == added)),
    };
    Ok((format, adopted))
}
