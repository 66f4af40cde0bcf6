//! How an import reads its rows: the file's header lined up with the dataset (shared by the
//! plan of a CSV file and the streamed import of a sheet).

use sqlx::PgConnection;

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
    let mapping = &job.mapping();
    let (mut declared, key) = datasets::schema(conn, job.dataset_id).await?;
    if declared.is_empty() {
        declared = mapping::adopted(&plan.columns, mapping).map_err(TaskError::refused)?;
        if !job.dry_run {
            datasets::adopt_columns(conn, job.dataset_id, &declared).await?;
        }
    }
    let (columns, slots): (Vec<Column>, Vec<Option<usize>>) =
        mapping::lay_out(&plan.columns, mapping, &declared)
            .map_err(TaskError::refused)?
            .into_iter()
            .unzip();
    let key = key
        .and_then(|key| (0..columns.len()).find(|&i| slots[i].is_some() && columns[i].name == key));
    Ok(RowFormat {
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
    })
}
