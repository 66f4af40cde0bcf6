//! The error report: rows that could not be imported, with their original fields.

use serde::Serialize;
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

use crate::spreadsheet::RowError;

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
    sqlx::query(
        "insert into job_errors (job_id, row_no, column_name, value, message, fields)
         select $1, * from unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::jsonb[])",
    )
    .bind(job_id)
    .bind(row_nos)
    .bind(columns)
    .bind(values)
    .bind(messages)
    .bind(fields)
    .execute(conn)
    .await?;
    Ok(())
}

/// One error as the API shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct ReportLine {
    pub row_no: i64,
    #[sqlx(rename = "column_name")]
    pub column: Option<String>,
    pub value: Option<String>,
    pub message: String,
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
    sqlx::query_as(
        "select row_no, column_name, value, message, fields from job_errors
         where job_id = $1 and row_no > $2 order by row_no limit $3",
    )
    .bind(job_id)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The header the job read, for the report's columns.
pub async fn columns(pool: &PgPool, job_id: Uuid) -> sqlx::Result<Vec<String>> {
    let columns: Option<Json<Vec<String>>> = sqlx::query_scalar(
        "select jsonb_path_query_array(row_format, '$.columns[*].name') from jobs where id = $1",
    )
    .bind(job_id)
    .fetch_optional(pool)
    .await?
    .flatten();
    Ok(columns.map(|c| c.0).unwrap_or_default())
}
