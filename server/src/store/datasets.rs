//! Datasets and their rows. Their states, and every change of state, are in
//! [`super::states::dataset`].

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

use app::model::{Column, DatasetView};

use crate::{
    auth::Sees,
    spreadsheet::{
        record,
        schema::{self, Declared},
    },
    store::states::DatasetState,
};

/// `sqlx::query_as!(DatasetRow, …)`: what a [`DatasetView`] shows, from `datasets d`, with
/// `$rest` after it.
macro_rules! select_view {
    ($rest:tt, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            DatasetRow,
            r#"select d.name, d.columns as "columns: Json<Vec<Column>>", d.key, d.created_at,
                      d.owner, o.email as owner_email, d.row_count
               from datasets d join users o on o.id = d.owner "#
                + $rest,
            $($arg),+
        )
    };
}

struct DatasetRow {
    name: String,
    columns: Json<Vec<Column>>,
    key: Option<String>,
    created_at: DateTime<Utc>,
    owner: Uuid,
    owner_email: Option<String>,
    row_count: i64,
}

impl From<DatasetRow> for DatasetView {
    fn from(row: DatasetRow) -> Self {
        DatasetView {
            name: row.name,
            columns: row.columns.0,
            key: row.key,
            created_at: row.created_at,
            owner: row.owner,
            owner_email: row.owner_email,
            row_count: row.row_count,
        }
    }
}

/// Inserts a dataset of `owner` with a declared schema: `ready` (declared on its own) or
/// `provisional` (declared with the import that makes it). `None` when they have one with that
/// name. The caller has taken over an abandoned provisional one first
/// ([`super::states::dataset::take_over_abandoned`]).
pub async fn insert_declared(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
    declared: &Declared,
    state: DatasetState,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "insert into datasets (id, owner, name, columns, key, state, declared)
         values ($1, $2, $3, $4, $5, $6, true)
         on conflict (owner, name) where live do nothing
         returning id",
        Uuid::now_v7(),
        owner,
        name,
        Json(&declared.columns) as _,
        declared.key,
        state as DatasetState,
    )
    .fetch_optional(conn)
    .await
}

/// `owner`'s `ready` dataset with this name.
pub async fn find(pool: &PgPool, owner: Uuid, name: &str) -> sqlx::Result<Option<DatasetView>> {
    select_view!(
        "where d.owner = $1 and d.name = $2 and d.live and d.state = $3",
        owner,
        name,
        DatasetState::Ready as DatasetState,
    )
    .fetch_optional(pool)
    .await
    .map(|row| row.map(DatasetView::from))
}

/// Every `ready` dataset `sees` covers, by name (then owner).
pub async fn list(pool: &PgPool, sees: Sees) -> sqlx::Result<Vec<DatasetView>> {
    select_view!(
        "where ($1::uuid is null or d.owner = $1) and d.state = $2
         order by d.name, o.email nulls last, d.owner",
        sees.owner_filter(),
        DatasetState::Ready as DatasetState,
    )
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().map(DatasetView::from).collect())
}

/// A dataset's columns ('[]' before its first import when it has no declared schema) and key.
pub async fn schema(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<(Vec<Column>, Option<String>)> {
    schemas(conn, &[id])
        .await?
        .remove(&id)
        .ok_or(sqlx::Error::RowNotFound)
}

/// [`schema`] of each of these datasets that exists, by id.
pub async fn schemas(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> sqlx::Result<HashMap<Uuid, (Vec<Column>, Option<String>)>> {
    let rows = sqlx::query!(
        r#"select id, columns as "columns: Json<Vec<Column>>", key
           from datasets where id = any($1)"#,
        ids,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.id, (row.columns.0, row.key)))
        .collect())
}

/// The id of the dataset a new import of `owner`'s writes to under this name: their dataset
/// with that name, or a new `provisional` one (which becomes `ready` when an import into it
/// completes). The caller has taken over an abandoned provisional one first
/// ([`super::states::dataset::take_over_abandoned`]). The dataset is locked `for share` until
/// the caller commits, so it cannot be deleted under the new job.
pub async fn for_import(conn: &mut PgConnection, owner: Uuid, name: &str) -> sqlx::Result<Uuid> {
    // A dataset deleted between the two statements (the insert met it, the select waited for
    // its deletion and then passed it by) frees the name: the next round makes a new one.
    for _ in 0..3 {
        if let Some(id) = find_or_make(conn, owner, name).await? {
            return Ok(id);
        }
    }
    Err(sqlx::Error::RowNotFound)
}

async fn find_or_make(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
) -> sqlx::Result<Option<Uuid>> {
    // `do nothing` takes no row lock on an existing dataset; the second statement, with a
    // fresh snapshot, finds and locks it.
    let created = make_new(conn, owner, &[name]).await?.pop();
    match created {
        Some((_, id)) => Ok(Some(id)),
        None => {
            // `live` written out, so that a generic plan (`db::begin_planned_once`) can use
            // the partial index of live names.
            sqlx::query_scalar!(
                "select id from datasets where owner = $1 and name = $2 and live for share",
                owner,
                name,
            )
            .fetch_optional(conn)
            .await
        }
    }
}

/// New `provisional` datasets of `owner`'s, one for each of `names` (distinct) that they have
/// no dataset of, in one statement: the names and ids of those made. A name another
/// transaction is making waits for it, as a unique index makes an insert wait. The caller
/// finds the others with [`for_import`].
pub async fn make_new(
    conn: &mut PgConnection,
    owner: Uuid,
    names: &[&str],
) -> sqlx::Result<Vec<(String, Uuid)>> {
    let ids: Vec<Uuid> = names.iter().map(|_| Uuid::now_v7()).collect();
    let made = sqlx::query!(
        r#"insert into datasets (id, owner, name, state)
           select id, $1, name, $4 from unnest($2::uuid[], $3::text[]) as new(id, name)
           on conflict (owner, name) where live do nothing
           returning name, id"#,
        owner,
        &ids,
        names as &[&str],
        DatasetState::Provisional as DatasetState,
    )
    .fetch_all(conn)
    .await?;
    Ok(made.into_iter().map(|row| (row.name, row.id)).collect())
}

/// The id of `owner`'s `ready` dataset with this name, locked `for share` until the caller
/// commits: a job created with it cannot find its dataset deleted.
pub async fn for_job(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "select id from datasets where owner = $1 and name = $2 and live and state = $3 for share",
        owner,
        name,
        DatasetState::Ready as DatasetState,
    )
    .fetch_optional(conn)
    .await
}

/// The columns a new import of this name of `owner`'s will be laid over: its `ready` dataset's,
/// or the declared ones of a provisional one (which a take-over keeps); none for a new
/// dataset.
pub async fn columns_for_import(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
) -> sqlx::Result<Vec<Column>> {
    let columns = sqlx::query_scalar!(
        r#"select columns as "columns: Json<Vec<Column>>" from datasets
           where owner = $1 and name = $2 and live
             and (state = $3 or state = $4 and declared)"#,
        owner,
        name,
        DatasetState::Ready as DatasetState,
        DatasetState::Provisional as DatasetState,
    )
    .fetch_optional(conn)
    .await?;
    Ok(columns.map(|c| c.0).unwrap_or_default())
}

/// Where a dataset is in its life.
pub async fn state_of(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<DatasetState> {
    sqlx::query_scalar!(
        r#"select state as "state: DatasetState" from datasets where id = $1"#,
        id
    )
    .fetch_one(conn)
    .await
}

/// How many rows a dataset holds.
pub async fn row_count(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!("select row_count from datasets where id = $1", id)
        .fetch_one(conn)
        .await
}

/// How many rows a dataset holds, its row locked against updates until the transaction ends:
/// imports and deletions count their rows on it in the transaction that writes them, so none
/// commits rows that this count misses (an export's plan, which then cuts the rows into ranges).
pub async fn row_count_held(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!("select row_count from datasets where id = $1 for share", id)
        .fetch_one(conn)
        .await
}

/// The id of `owner`'s `ready` dataset with this name.
pub async fn id_of(conn: &mut PgConnection, owner: Uuid, name: &str) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "select id from datasets where owner = $1 and name = $2 and live and state = $3",
        owner,
        name,
        DatasetState::Ready as DatasetState,
    )
    .fetch_optional(conn)
    .await
}

/// The most rows (counting from 1 after the header) one import may have: a row's number is the
/// low 32 bits of its position.
pub const MAX_ROW_NO: i64 = u32::MAX as i64;

/// A row's position, its key in the dataset: the importing job's sequence number, then the
/// row's number in the file. Positions order rows by import, then by file order.
pub fn position(job_seq: i64, row_no: i64) -> i64 {
    (job_seq << 32) | row_no
}

/// At most this many rows (a chunk's, or a batch's of small imports) are written by one
/// `insert` from arrays, more with `COPY`: its two round trips cost a small job more than the
/// insert's slower rows (`make bench ONLY=small`, 10,000 jobs of 100 rows, before batches:
/// 363–403 jobs/s against 280–316 with `COPY`, three pairs of runs alternated).
const INSERTED_ROWS: usize = 1_000;

/// One chunk's good rows (stored records) for a dataset without a key, from the import with
/// sequence number `job_seq`.
pub struct NewRows<'a> {
    pub dataset_id: Uuid,
    pub job_seq: i64,
    pub row_nos: &'a [i64],
    pub rows: &'a [String],
}

/// Writes the good rows of chunks (of one import, or of a batch of small ones) with `COPY`,
/// the fastest way into PostgreSQL, inside the caller's transaction (a few rows with one
/// `insert`: [`INSERTED_ROWS`]). The binary format spares the server parsing ids and numbers
/// from text, and us escaping the records.
pub async fn insert_rows(conn: &mut PgConnection, chunks: &[NewRows<'_>]) -> sqlx::Result<()> {
    let count: usize = chunks.iter().map(|chunk| chunk.rows.len()).sum();
    if count == 0 {
        return Ok(());
    }
    let each_row = || {
        chunks.iter().flat_map(|chunk| {
            let positions = chunk.row_nos.iter().map(|&n| position(chunk.job_seq, n));
            positions
                .zip(chunk.rows)
                .map(|(pos, row)| (chunk.dataset_id, pos, row))
        })
    };
    if count <= INSERTED_ROWS {
        let (mut datasets, mut positions, mut rows) = (
            Vec::with_capacity(count),
            Vec::with_capacity(count),
            Vec::with_capacity(count),
        );
        for (dataset_id, pos, row) in each_row() {
            datasets.push(dataset_id);
            positions.push(pos);
            rows.push(row.as_str());
        }
        sqlx::query!(
            "insert into dataset_rows (dataset_id, pos, record)
             select * from unnest($1::uuid[], $2::bigint[], $3::text[])",
            &datasets,
            &positions,
            &rows as &[&str],
        )
        .execute(conn)
        .await?;
        return Ok(());
    }
    let bytes: usize = chunks
        .iter()
        .flat_map(|c| c.rows)
        .map(|r| r.len() + 60)
        .sum();
    let mut data = Vec::with_capacity(bytes + 21);
    data.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    data.extend_from_slice(&0_i32.to_be_bytes()); // flags
    data.extend_from_slice(&0_i32.to_be_bytes()); // header extension length
    for (dataset_id, pos, row) in each_row() {
        data.extend_from_slice(&3_i16.to_be_bytes());
        for field in [
            dataset_id.as_bytes().as_slice(),
            &pos.to_be_bytes(),
            row.as_bytes(),
        ] {
            data.extend_from_slice(&(field.len() as i32).to_be_bytes());
            data.extend_from_slice(field);
        }
    }
    data.extend_from_slice(&(-1_i16).to_be_bytes());
    let mut copy = conn
        .copy_in_raw("copy dataset_rows (dataset_id, pos, record) from stdin (format binary)")
        .await?;
    copy.send(data).await?;
    copy.finish().await?;
    Ok(())
}

/// Writes one chunk's good rows into a dataset with a key: a row whose key is already there
/// replaces it, unless the stored row is the newer one (a later row of the file, or of a later
/// import: chunks may commit in any order, and the newest row must win). Keys must be distinct
/// within the call. Returns how many rows were new.
pub async fn upsert_rows(
    conn: &mut PgConnection,
    dataset_id: Uuid,
    job_seq: i64,
    row_nos: &[i64],
    keys: &[&str],
    rows: &[&str],
) -> sqlx::Result<i64> {
    let positions: Vec<i64> = row_nos.iter().map(|&n| position(job_seq, n)).collect();
    sqlx::query_scalar!(
        r#"with written as (
             insert into dataset_rows (dataset_id, pos, key, record)
             select $1, u.pos, u.key, u.record
             from unnest($2::bigint[], $3::text[], $4::text[]) as u (pos, key, record)
             -- One lock order for every writer, so concurrent upserts cannot deadlock.
             order by u.key
             on conflict (dataset_id, key) where key is not null do update
                 set pos = excluded.pos, record = excluded.record
                 where dataset_rows.pos < excluded.pos
             returning xmax = 0 as inserted
         )
         select count(*) filter (where inserted) as "new!" from written"#,
        dataset_id,
        &positions,
        keys as _,
        rows as _,
    )
    .fetch_one(conn)
    .await
}

/// What writing an import's rows changes of its dataset ([`record_written`]).
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    pub dataset_id: Uuid,
    /// The columns it takes if it has none yet: a dataset keeps its first header.
    pub columns: Option<&'a [Column]>,
    /// Rows added to it.
    pub added: i64,
    /// An import into it completed: a `provisional` dataset becomes `ready` (it comes into
    /// being when an import into it completes).
    pub completed: bool,
}

/// Records what writes of rows changed of their datasets (a dataset any number of times: the
/// first columns given are taken), in the transaction that wrote them, with one update of
/// each dataset: every update of a dataset writes a row version, and after the first in a
/// transaction each also checks the dataset's owner (its foreign key, a locking read of the
/// owner's row). Three updates of a batch's datasets (columns, rows, `ready`) took 2.45 ms of
/// a batch's 5.4 (`make bench ONLY=small`, `pg_stat_statements`). Called after the jobs'
/// counters (`states::job::add_chunk`), so that every writer locks a job's row before its
/// dataset's.
pub async fn record_written(conn: &mut PgConnection, written: &[Written<'_>]) -> sqlx::Result<()> {
    let changes: Vec<&Written<'_>> = written
        .iter()
        .filter(|w| w.columns.is_some() || w.added != 0 || w.completed)
        .collect();
    if changes.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = changes.iter().map(|w| w.dataset_id).collect();
    let columns: Vec<Option<Json<&[Column]>>> =
        changes.iter().map(|w| w.columns.map(Json)).collect();
    let added: Vec<i64> = changes.iter().map(|w| w.added).collect();
    let completed: Vec<bool> = changes.iter().map(|w| w.completed).collect();
    sqlx::query!(
        "update datasets d set
             columns = case when d.columns = '[]' and a.columns is not null then a.columns
                            else d.columns end,
             row_count = d.row_count + a.added,
             state = case when a.completed and d.state = $5 then $6 else d.state end
         from (select id,
                      (array_agg(columns order by n) filter (where columns is not null))[1]
                          as columns,
                      sum(added)::int8 as added, bool_or(completed) as completed
               from unnest($1::uuid[], $2::jsonb[], $3::int8[], $4::bool[]) with ordinality
                   as w (id, columns, added, completed, n)
               group by id) a
         where d.id = a.id",
        &ids,
        &columns as _,
        &added,
        &completed,
        DatasetState::Provisional as DatasetState,
        DatasetState::Ready as DatasetState,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes up to `limit` of a dataset's rows, the first after position `after`, and counts
/// them off. How many went, and the position to go on after.
pub async fn delete_rows(
    conn: &mut PgConnection,
    id: Uuid,
    after: i64,
    limit: i64,
) -> sqlx::Result<(i64, i64)> {
    let gone = sqlx::query!(
        r#"with doomed as (
             select pos from dataset_rows where dataset_id = $1 and pos > $2
             order by pos limit $3
         ), gone as (
             delete from dataset_rows r using doomed
             where r.dataset_id = $1 and r.pos = doomed.pos
             returning r.pos
         )
         select count(*) as "count!", coalesce(max(pos), $2) as "last!" from gone"#,
        id,
        after,
        limit,
    )
    .fetch_one(&mut *conn)
    .await?;
    if gone.count > 0 {
        sqlx::query!(
            "update datasets set row_count = row_count - $2 where id = $1",
            id,
            gone.count,
        )
        .execute(conn)
        .await?;
    }
    Ok((gone.count, gone.last))
}

/// How many of a dry run's chunk's `keys` (distinct) would be new rows: neither in the
/// dataset nor met in an earlier chunk of the dry run (recorded in the chunk's transaction, so
/// a key counts once however the chunks interleave, as the import would count it).
pub async fn dry_run_new_keys(
    conn: &mut PgConnection,
    job_id: Uuid,
    id: Uuid,
    keys: &[&str],
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"with fresh as (
             insert into dry_run_keys (job_id, key)
             select $1, k from unnest($3::text[]) as k
             where not exists (select 1 from dataset_rows r where r.dataset_id = $2 and r.key = k)
             order by k
             on conflict do nothing
             returning 1
         )
         select count(*) as "n!" from fresh"#,
        job_id,
        id,
        keys as _,
    )
    .fetch_one(conn)
    .await
}

/// A page of the rows of `owner`'s dataset in import order, or `None` when they have none with
/// that name; with the position to pass as `after` for the next page (none on the last).
pub async fn rows(
    pool: &PgPool,
    owner: Uuid,
    name: &str,
    after: Option<i64>,
    limit: i64,
) -> sqlx::Result<Option<(Vec<Value>, Option<i64>)>> {
    let mut conn = pool.acquire().await?;
    let Some(dataset_id) = id_of(&mut conn, owner, name).await? else {
        return Ok(None);
    };
    let (columns, _) = schema(&mut conn, dataset_id).await?;
    let page = sqlx::query!(
        "select pos, record from dataset_rows
         where dataset_id = $1 and pos > $2
         order by pos limit $3",
        dataset_id,
        after.unwrap_or(-1),
        limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    let next = (page.len() as i64 == limit)
        .then(|| page.last().map(|row| row.pos))
        .flatten();
    let rows = page
        .into_iter()
        .map(|row| to_object(&columns, &record::decode(&row.record)))
        .collect();
    Ok(Some((rows, next)))
}

/// A stored row as a JSON object keyed by column name, values typed by the column.
fn to_object(columns: &[Column], cells: &[Option<String>]) -> Value {
    let object = columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let cell = cells.get(i).and_then(Option::as_deref);
            (column.name.clone(), schema::to_json(column.kind, cell))
        })
        .collect();
    Value::Object(object)
}
