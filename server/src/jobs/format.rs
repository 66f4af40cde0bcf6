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
/// run only reads as if it had), recorded at once; a header that does not fit the dataset is
/// the person's problem (refused, with the reason).
pub async fn row_format(
    conn: &mut PgConnection,
    job: &ImportJob,
    plan: &Plan,
) -> Result<RowFormat, TaskError> {
    let mut formats = row_formats(conn, &[(job, plan)]).await?;
    let (format, columns) = formats.pop().expect("one format for one import")?;
    let taken = datasets::Written {
        dataset_id: job.dataset_id,
        columns: columns.as_deref(),
        added: 0,
        completed: false,
    };
    datasets::record_written(conn, &[taken]).await?;
    Ok(format)
}

/// How each of these imports (one, or a batch of small ones) reads its rows, with one read of
/// their datasets, as [`row_format`] says; with the columns its dataset takes (not a dry
/// run's), which the caller records (`datasets::record_written`) with the rows it writes. An
/// import into a dataset that an earlier one of them gives columns lines up with those.
pub async fn row_formats(
    conn: &mut PgConnection,
    imports: &[(&ImportJob, &Plan)],
) -> sqlx::Result<Vec<Result<Laid, TaskError>>> {
    let ids: Vec<Uuid> = imports.iter().map(|(job, _)| job.dataset_id).collect();
    let mut schemas = datasets::schemas(conn, &ids).await?;
    let mut formats = Vec::with_capacity(imports.len());
    for (job, plan) in imports {
        let (declared, key) = schemas
            .get(&job.dataset_id)
            .ok_or(sqlx::Error::RowNotFound)?;
        let format = lay_out(job, plan, declared, key.as_deref())
            .map(|(format, columns)| (format, columns.filter(|_| !job.dry_run)));
        if let Ok((_, Some(columns))) = &format {
            let key = key.clone();
            schemas.insert(job.dataset_id, (columns.clone(), key));
        }
        formats.push(format);
    }
    Ok(formats)
}

/// An import's row format, and the columns its dataset takes when it has none.
pub type Laid = (RowFormat, Option<Vec<Column>>);

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
