//! The error report: rows that could not be imported, with their original fields.

use serde::Serialize;
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

use crate::spreadsheet::{Problem, RowError};

pub async fn insert(
    conn: &mut PgConnection,
    job_id: Uuid,
    errors: &[RowError],
) -> sqlx::Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let row_nos: Vec<i64> = errors.iter().map(|e| e.row_no).collect();
    let columns: Vec<Option<&str>> = errors.iter().map(|e| e.column.as_deref()).collect();
    let values: Vec<Option<&str>> = errors.iter().map(|e| e.value.as_deref()).collect();
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    let fields: Vec<Json<&[String]>> = errors.iter().map(|e| Json(e.fields.as_slice())).collect();
    let problems: Vec<Option<Json<&[Problem]>>> = errors
        .iter()
        .map(|e| (!e.problems.is_empty()).then_some(Json(e.problems.as_slice())))
        .collect();
    sqlx::query!(
        "insert into job_errors (job_id, row_no, column_name, value, message, fields, problems)
         select $1, * from unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                                  $7::jsonb[])",
        job_id,
        &row_nos,
        &columns as &[Option<&str>],
        &values as &[Option<&str>],
        &messages as &[&str],
        &fields as _,
        &problems as _,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One error as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportLine {
    pub row_no: i64,
    pub column: Option<String>,
    pub value: Option<String>,
    pub message: String,
    /// Each problem, when the row has more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Problem>>)]
    pub problems: Option<Json<Vec<Problem>>>,
    #[serde(skip)]
    pub fields: Json<Vec<String>>,
}

/// A page of a job's errors in sheet order, after row `after`.
pub async fn page(
    pool: &PgPool,
    job_id: Uuid,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<ReportLine>> {
    sqlx::query_as!(
        ReportLine,
        r#"select row_no, column_name as column, value, message,
               problems as "problems: Json<Vec<Problem>>",
               fields as "fields: Json<Vec<String>>"
           from job_errors
           where job_id = $1 and row_no > $2 order by row_no limit $3"#,
        job_id,
        after,
        limit
    )
    .fetch_all(pool)
    .await
}

/// The header the job read, as the file has it, for the report's columns (formats stored
/// before mappings: their columns' names, which were the header's).
pub async fn columns(pool: &PgPool, job_id: Uuid) -> sqlx::Result<Vec<String>> {
    let columns = sqlx::query_scalar!(
        r#"select coalesce(row_format -> 'header',
                           jsonb_path_query_array(row_format, '$.columns[*].name'))
               as "names: Json<Vec<String>>"
           from jobs where id = $1"#,
        job_id,
    )
    .fetch_optional(pool)
    .await?
    .flatten();
    Ok(columns.map(|c| c.0).unwrap_or_default())
}
