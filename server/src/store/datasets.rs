//! Datasets and their rows.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// The dataset's id, creating it (owned by `owner`) when no dataset has that name.
pub async fn ensure(conn: &mut PgConnection, owner: &str, name: &str) -> sqlx::Result<Uuid> {
    sqlx::query_scalar(
        "insert into datasets (id, owner, name) values ($1, $2, $3)
         on conflict (name) do update set name = excluded.name
         returning id",
    )
    .bind(Uuid::now_v7())
    .bind(owner)
    .bind(name)
    .fetch_one(conn)
    .await
}

/// Records the columns of a dataset that has none yet; a dataset keeps its first header.
pub async fn adopt_columns(
    conn: &mut PgConnection,
    id: Uuid,
    columns: &[String],
) -> sqlx::Result<()> {
    sqlx::query("update datasets set columns = $2 where id = $1 and columns = '[]'")
        .bind(id)
        .bind(sqlx::types::Json(columns))
        .execute(conn)
        .await?;
    Ok(())
}

/// Writes one chunk's good rows.
pub async fn insert_rows(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    job_id: Uuid,
    row_nos: &[i64],
    rows: &[Value],
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into dataset_rows (dataset_id, job_id, row_no, data)
         select $1, $2, * from unnest($3::bigint[], $4::jsonb[])",
    )
    .bind(dataset_id)
    .bind(job_id)
    .bind(row_nos)
    .bind(rows)
    .execute(conn)
    .await?;
    Ok(())
}

/// Where a page of rows ends, to ask for the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowCursor {
    pub job_id: Uuid,
    pub row_no: i64,
}

/// A page of the dataset's rows in import order, or `None` when no dataset has that name.
pub async fn rows(
    pool: &PgPool,
    name: &str,
    after: Option<RowCursor>,
    limit: i64,
) -> sqlx::Result<Option<(Vec<Value>, Option<RowCursor>)>> {
    let Some(dataset_id): Option<Uuid> =
        sqlx::query_scalar("select id from datasets where name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await?
    else {
        return Ok(None);
    };
    let page: Vec<(Uuid, i64, Value)> = sqlx::query_as(
        "select job_id, row_no, data from dataset_rows
         where dataset_id = $1 and ($2::uuid is null or (job_id, row_no) > ($2, $3))
         order by job_id, row_no
         limit $4",
    )
    .bind(dataset_id)
    .bind(after.map(|c| c.job_id))
    .bind(after.map_or(0, |c| c.row_no))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let next = (page.len() as i64 == limit)
        .then(|| {
            page.last().map(|(job_id, row_no, _)| RowCursor {
                job_id: *job_id,
                row_no: *row_no,
            })
        })
        .flatten();
    Ok(Some((
        page.into_iter().map(|(_, _, data)| data).collect(),
        next,
    )))
}
