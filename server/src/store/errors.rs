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

/// Which of a job's errors a page holds (each `None`: any).
#[derive(Debug, Clone, Copy, Default)]
pub struct Only<'a> {
    /// Rows with a problem in this column.
    pub column: Option<&'a str>,
    /// Rows whose message holds this text (any case).
    pub text: Option<&'a str>,
}

/// The most errors a filtered page looks through: a filter that matches few rows of a job with
/// a million errors must not read them all for one page (the page then says where it stopped).
pub const FILTER_WINDOW: i64 = 20_000;

/// A page of a job's errors in sheet order, after row `after`; and the row it read to when a
/// filter found fewer than `limit` in the [`FILTER_WINDOW`] errors it looked through (the next
/// page goes on from there).
pub async fn page(
    pool: &PgPool,
    job_id: Uuid,
    after: i64,
    limit: i64,
    only: Only<'_>,
) -> sqlx::Result<(Vec<ReportLine>, Option<i64>)> {
    let filtered = only.column.is_some() || only.text.is_some();
    // The last error of the window, if the job has more after it (an index-only read).
    let window_end = if filtered {
        sqlx::query_scalar!(
            "select row_no from job_errors where job_id = $1 and row_no > $2
             order by row_no offset $3 limit 1",
            job_id,
            after,
            FILTER_WINDOW - 1,
        )
        .fetch_optional(pool)
        .await?
    } else {
        None
    };
    let lines = sqlx::query_as!(
        ReportLine,
        r#"select row_no, column_name as column, value, message,
               problems as "problems: Json<Vec<Problem>>",
               fields as "fields: Json<Vec<String>>"
           from job_errors
           where job_id = $1 and row_no > $2 and ($6::bigint is null or row_no <= $6)
             and ($4::text is null or column_name = $4
                  or problems @> jsonb_build_array(jsonb_build_object('column', $4::text)))
             and ($5::text is null or strpos(lower(message), lower($5)) > 0)
           order by row_no limit $3"#,
        job_id,
        after,
        limit,
        only.column,
        only.text,
        window_end,
    )
    .fetch_all(pool)
    .await?;
    let read_to = window_end.filter(|_| (lines.len() as i64) < limit);
    Ok((lines, read_to))
}

/// How many of a job's rows in error have a problem in a column (`null`: the row as a whole,
/// such as its field count).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ColumnCount {
    pub column: Option<String>,
    pub rows: i64,
}

/// [`ColumnCount`]s of a job's errors, most first: the first 50 columns.
pub async fn by_column(pool: &PgPool, job_id: Uuid) -> sqlx::Result<Vec<ColumnCount>> {
    sqlx::query_as!(
        ColumnCount,
        r#"select col as column, count(*) as "rows!"
           from (select column_name as col from job_errors
                 where job_id = $1 and problems is null
                 union all
                 select p ->> 'column'
                 from job_errors e, jsonb_array_elements(e.problems) p
                 where e.job_id = $1 and e.problems is not null) c
           group by col order by count(*) desc, col limit 50"#,
        job_id,
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
