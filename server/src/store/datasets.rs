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

/// Writes one chunk's good rows (JSON object text) with `COPY`, the fastest way into
/// PostgreSQL, inside the caller's transaction.
pub async fn insert_rows(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    job_id: Uuid,
    row_nos: &[i64],
    rows: &[String],
) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let prefix = format!("{dataset_id}\t{job_id}\t");
    let mut data = Vec::with_capacity(rows.iter().map(|r| r.len() + prefix.len() + 24).sum());
    for (row_no, row) in row_nos.iter().zip(rows) {
        data.extend_from_slice(prefix.as_bytes());
        data.extend_from_slice(row_no.to_string().as_bytes());
        data.push(b'\t');
        copy_text_escape(&mut data, row);
        data.push(b'\n');
    }
    let mut copy = conn
        .copy_in_raw("copy dataset_rows (dataset_id, job_id, row_no, data) from stdin")
        .await?;
    copy.send(data).await?;
    copy.finish().await?;
    Ok(())
}

/// Escapes a value for COPY's text format. JSON text never holds raw control characters (they
/// are escaped inside strings), so doubling the backslash is all it needs; the others are
/// handled anyway so the function is right for any text.
fn copy_text_escape(out: &mut Vec<u8>, text: &str) {
    for byte in text.bytes() {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            other => out.push(other),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::copy_text_escape;

    #[test]
    fn copy_text_is_escaped() {
        let mut out = Vec::new();
        copy_text_escape(&mut out, "{\"a\":\"x\\\\y\\n\"}\tz\n");
        assert_eq!(out, b"{\"a\":\"x\\\\\\\\y\\\\n\"}\\tz\\n");
    }
}
