//! How an import reads its rows: the file's header lined up with the dataset (shared by the
//! plan of a CSV file and the streamed import of a sheet).

use sqlx::PgConnection;
use uuid::Uuid;

use super::TaskError;
use crate::{
    spreadsheet::{
        Plan,
        csv::RowFormat,
        schema::{self, Column},
    },
    store::datasets,
};

/// The refusal for a file with more rows than a job's row numbers hold.
pub fn too_many_rows() -> TaskError {
    TaskError::refused(format!(
        "The file has more than {} rows, the most one import takes. Split it into parts.",
        datasets::MAX_ROW_NO
    ))
}

/// How the chunks will read rows: the file's header lined up with the dataset's columns. A
/// dataset without columns takes the header's, as text; a header that does not fit the
/// dataset is the person's problem (refused, with the reason).
pub async fn row_format(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    plan: &Plan,
) -> Result<RowFormat, TaskError> {
    let (mut declared, key) = datasets::schema(conn, dataset_id).await?;
    let columns = if declared.is_empty() {
        declared = plan.columns.iter().map(|name| Column::text(name)).collect();
        datasets::adopt_columns(conn, dataset_id, &declared).await?;
        declared.clone()
    } else {
        schema::align(&plan.columns, &declared).map_err(TaskError::refused)?
    };
    // Every header cell names a dataset column (`align` made sure).
    let slots = columns
        .iter()
        .filter_map(|column| declared.iter().position(|d| d.name == column.name))
        .collect();
    let key = key.and_then(|key| columns.iter().position(|column| column.name == key));
    Ok(RowFormat {
        delimiter: plan.delimiter,
        encoding: plan.encoding,
        columns,
        slots,
        width: declared.len(),
        key,
        header_row: plan.header_row,
    })
}
