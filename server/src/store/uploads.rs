//! Uploaded files, stored in PostgreSQL as fixed-size parts so that any server or worker can
//! stream a whole file or read just a byte range of it (a chunk's rows).

use futures::{Stream, StreamExt};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::Sees;

/// Bytes per stored part.
pub const PART_BYTES: usize = 1 << 20;

/// An upload as the API reports it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Upload {
    pub id: Uuid,
    pub filename: String,
    pub size: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("the file is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the file is empty")]
    Empty,
    #[error("the upload was interrupted: {0}")]
    Body(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A stream that breaks off is an interrupted upload.
impl From<std::io::Error> for UploadError {
    fn from(err: std::io::Error) -> Self {
        UploadError::Body(err.to_string())
    }
}

/// Stores a file from a stream of byte chunks, all or nothing (one transaction).
pub async fn save<S, B, E>(
    pool: &PgPool,
    owner: Uuid,
    filename: &str,
    content_type: Option<&str>,
    max_bytes: usize,
    mut body: S,
) -> Result<Upload, UploadError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<UploadError>,
{
    let id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "insert into uploads (id, owner, filename, content_type, size, sha256)
         values ($1, $2, $3, $4, 0, '')",
    )
    .bind(id)
    .bind(owner)
    .bind(filename)
    .bind(content_type)
    .execute(&mut *tx)
    .await?;

    let mut hasher = Sha256::new();
    let mut part = Vec::with_capacity(PART_BYTES);
    let mut part_no = 0i32;
    let mut size = 0usize;
    while let Some(bytes) = body.next().await {
        let bytes = bytes.map_err(Into::into)?;
        let mut bytes = bytes.as_ref();
        size += bytes.len();
        if size > max_bytes {
            return Err(UploadError::TooLarge { limit: max_bytes });
        }
        hasher.update(bytes);
        while !bytes.is_empty() {
            let take = bytes.len().min(PART_BYTES - part.len());
            part.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if part.len() == PART_BYTES {
                insert_part(&mut tx, id, part_no, &part).await?;
                part.clear();
                part_no += 1;
            }
        }
    }
    if size == 0 {
        return Err(UploadError::Empty);
    }
    if !part.is_empty() {
        insert_part(&mut tx, id, part_no, &part).await?;
    }
    sqlx::query("update uploads set size = $2, sha256 = $3 where id = $1")
        .bind(id)
        .bind(size as i64)
        .bind(hasher.finalize().as_slice())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Upload {
        id,
        filename: filename.to_owned(),
        size: size as i64,
    })
}

async fn insert_part(
    tx: &mut sqlx::PgConnection,
    id: Uuid,
    part_no: i32,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query("insert into upload_parts (upload_id, part_no, data) values ($1, $2, $3)")
        .bind(id)
        .bind(part_no)
        .bind(data)
        .execute(tx)
        .await?;
    Ok(())
}

/// The upload with this id, if `sees` covers it.
pub async fn find(pool: &PgPool, id: Uuid, sees: Sees) -> sqlx::Result<Option<Upload>> {
    sqlx::query_as(
        "select id, filename, size from uploads
         where id = $1 and ($2::uuid is null or owner = $2)",
    )
    .bind(id)
    .bind(sees.owner_filter())
    .fetch_optional(pool)
    .await
}

/// The whole file, part by part, in order: one query per part, so the stream owns what it
/// needs and can outlive its caller (an HTTP body).
pub fn stream(
    pool: PgPool,
    id: Uuid,
) -> impl Stream<Item = sqlx::Result<Vec<u8>>> + Send + 'static {
    futures::stream::try_unfold(0i32, move |part_no| {
        let pool = pool.clone();
        async move {
            let part: Option<Vec<u8>> = sqlx::query_scalar(
                "select data from upload_parts where upload_id = $1 and part_no = $2",
            )
            .bind(id)
            .bind(part_no)
            .fetch_optional(&pool)
            .await?;
            Ok(part.map(|part| (part, part_no + 1)))
        }
    })
}

/// Bytes `start..end` of the file.
pub async fn read_range(pool: &PgPool, id: Uuid, start: u64, end: u64) -> sqlx::Result<Vec<u8>> {
    if end <= start {
        return Ok(Vec::new());
    }
    let part_len = PART_BYTES as i64;
    let (start, end) = (start as i64, end as i64);
    // Only the range's slice of each part leaves the database: parts are stored uncompressed
    // (`storage external`), so PostgreSQL reads just the TOAST pages the slice covers.
    let slices: Vec<Vec<u8>> = sqlx::query_scalar(
        "select substring(data
                          from (greatest($2 - part_no * $4, 0) + 1)::int
                          for (least($3 - part_no * $4, $4) - greatest($2 - part_no * $4, 0))::int)
         from upload_parts
         where upload_id = $1 and part_no between $2 / $4 and ($3 - 1) / $4
         order by part_no",
    )
    .bind(id)
    .bind(start)
    .bind(end)
    .bind(part_len)
    .fetch_all(pool)
    .await?;
    Ok(slices.concat())
}

/// Removes a file (a sheet converted twice by racing plan runs keeps only one copy).
pub async fn delete(pool: &PgPool, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("delete from uploads where id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}
