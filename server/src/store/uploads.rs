//! Uploaded files, stored in PostgreSQL as fixed-size parts so that any server or worker can
//! stream a whole file or read just a byte range of it (a chunk's rows).

use std::time::{Duration, Instant};

use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::auth::Sees;

/// Bytes per stored part.
pub const PART_BYTES: usize = 1 << 20;

/// An upload as the API reports it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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
    Body(std::io::Error),
    /// The owner is sending as many files as they may at once.
    #[error("you are already sending {limit} files; wait for one to finish")]
    TooManyAtOnce { limit: i64 },
    /// The owner's stored files would pass their limit.
    #[error("your stored files would pass the limit of {limit} bytes")]
    StoreFull { limit: i64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A stream that breaks off is an interrupted upload.
impl From<std::io::Error> for UploadError {
    fn from(err: std::io::Error) -> Self {
        UploadError::Body(err)
    }
}

/// An upload that went away while it was being received (retention gave up on it).
fn removed() -> UploadError {
    let gone = std::io::ErrorKind::NotFound;
    UploadError::Body(std::io::Error::new(
        gone,
        "the upload was removed while it was received",
    ))
}

/// What [`take`] lets one file and its owner take.
#[derive(Debug, Clone, Copy)]
pub struct UploadLimits {
    /// The largest file.
    pub file_bytes: usize,
    /// Files the owner may be sending at once (`None`: no limit, for our own files).
    pub at_once: Option<i64>,
    /// Bytes the owner's files may hold in all (`None`: no limit).
    pub stored_bytes: Option<i64>,
}

impl UploadLimits {
    /// For files we make ourselves (an export's result): no limit.
    pub const NONE: UploadLimits = UploadLimits {
        file_bytes: usize::MAX,
        at_once: None,
        stored_bytes: None,
    };
}

/// Files under this many bytes that have arrived whole by the time their first bytes are read
/// are stored in one statement ([`store_sent`]), or held to be stored with the job they were
/// sent with ([`take`]). Held before the owner's limits are checked: no more than a request's
/// own buffers would hold, or, for files waiting for their group (`jobs::group`, which a
/// request that went away leaves behind), at most an owner's imports that may wait at once.
const WHOLE_BYTES: usize = 64 << 10;

/// A small file that arrived whole with the request that sent it ([`WHOLE_BYTES`]), not stored
/// yet: [`store_sent`] stores it, in the transaction that makes its job when it was sent with
/// one. Its id is chosen already.
pub struct Sent {
    pub upload: Upload,
    content_type: Option<String>,
    data: Vec<u8>,
    sha256: Vec<u8>,
    limits: UploadLimits,
}

/// Its bytes left out.
impl std::fmt::Debug for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sent")
            .field("upload", &self.upload)
            .finish_non_exhaustive()
    }
}

impl Sent {
    fn new(file: Received, filename: &str, content_type: Option<&str>) -> Self {
        Self {
            upload: Upload {
                id: Uuid::now_v7(),
                filename: filename.to_owned(),
                size: file.size as i64,
            },
            content_type: content_type.map(str::to_owned),
            sha256: file.hasher.finalize().to_vec(),
            data: file.part,
            limits: file.limits,
        }
    }
}

/// The file a job is made of: stored already, or sent with the request that makes the job and
/// stored by the transaction that makes it (nothing to remove if no job comes of it).
#[derive(Debug)]
pub enum File {
    Stored(Upload),
    Sent(Sent),
}

impl File {
    pub fn upload(&self) -> &Upload {
        match self {
            File::Stored(upload) => upload,
            File::Sent(sent) => &sent.upload,
        }
    }

    pub fn sent(&self) -> Option<&Sent> {
        match self {
            File::Stored(_) => None,
            File::Sent(sent) => Some(sent),
        }
    }
}

/// Takes a file from a stream of byte chunks. A small one that has arrived whole by the time
/// its first bytes are read ([`WHOLE_BYTES`]) is held, to be stored in one statement: by the
/// transaction that makes the job it was sent with, or at once ([`store_whole`]). Any other is
/// stored now, all or nothing: `receiving` (seen by nothing but its owner's limits) until its
/// last byte is stored, every part in its own statement, so a slow sender holds no
/// transaction or connection while we wait.
pub async fn take<S, B, E>(
    pool: &PgPool,
    owner: Uuid,
    filename: &str,
    content_type: Option<&str>,
    limits: UploadLimits,
    mut body: S,
) -> Result<File, UploadError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<UploadError>,
{
    Ok(match arrive(limits, &mut body).await? {
        Arrived::Whole(file) => File::Sent(Sent::new(file, filename, content_type)),
        Arrived::Started(file) => {
            File::Stored(save_rest(pool, owner, (filename, content_type), file, body).await?)
        }
    })
}

/// What of a file had arrived when its first bytes were read.
enum Arrived {
    /// All of it (under [`WHOLE_BYTES`], and not empty).
    Whole(Received),
    /// Its start: the rest is on its way.
    Started(Received),
}

/// Reads a file's first bytes, and whatever else of it has arrived with them, up to
/// [`WHOLE_BYTES`].
async fn arrive<S, B, E>(limits: UploadLimits, body: &mut S) -> Result<Arrived, UploadError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<UploadError>,
{
    let mut file = Received::new(limits);
    while file.part.len() < WHOLE_BYTES {
        // The first bytes are waited for; after them, only bytes already here are taken. A
        // file still on its way is being sent, and counts among its owner's files at once.
        let next = match file.size {
            0 => Some(body.next().await),
            _ => body.next().now_or_never(),
        };
        match next {
            None => break,
            Some(None) if file.size == 0 => return Err(UploadError::Empty),
            Some(None) => return Ok(Arrived::Whole(file)),
            Some(Some(bytes)) => file.take(bytes.map_err(Into::into)?.as_ref())?,
        }
    }
    Ok(Arrived::Started(file))
}

/// Stores a file whose start has arrived (`file`), part by part, as the rest of `body`
/// arrives.
async fn save_rest<S, B, E>(
    pool: &PgPool,
    owner: Uuid,
    (filename, content_type): (&str, Option<&str>),
    file: Received,
    body: S,
) -> Result<Upload, UploadError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<UploadError>,
{
    let id = begin(pool, owner, filename, content_type, file.limits).await?;
    // Whatever ends the upload early, what was stored goes: before the answer on an error (so
    // a retry at once finds its place free), from a guard if the request is dropped mid-way.
    let unfinished = Unclaimed::new(pool, id);
    match receive(pool, (owner, id), file, body).await {
        Ok(size) => {
            unfinished.keep();
            Ok(Upload {
                id,
                filename: filename.to_owned(),
                size: size as i64,
            })
        }
        Err(err) => {
            unfinished.remove().await;
            Err(err)
        }
    }
}

/// An upload nothing uses yet (one being received, or one sent with a job not yet made):
/// removed unless [`Unclaimed::keep`] is called, at once by [`Unclaimed::remove`], or by a
/// task of its own if dropped (the request dropped mid-way). Retention removes it if even that
/// fails. An upload a job came to use meanwhile is not removed (the job's foreign key refuses).
pub struct Unclaimed(Option<(PgPool, Uuid)>);

impl Unclaimed {
    pub fn new(pool: &PgPool, id: Uuid) -> Self {
        Self(Some((pool.clone(), id)))
    }

    pub fn keep(mut self) {
        self.0 = None;
    }

    pub async fn remove(mut self) {
        if let Some((pool, id)) = self.0.take() {
            remove_unclaimed(&pool, id).await;
        }
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let (Some((pool, id)), Ok(runtime)) =
            (self.0.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move { remove_unclaimed(&pool, id).await });
        }
    }
}

async fn remove_unclaimed(pool: &PgPool, id: Uuid) {
    match delete(pool, id).await {
        Ok(()) => {}
        // A job came to use it after all (made by a group's task for a request now gone).
        Err(sqlx::Error::Database(err)) if err.is_foreign_key_violation() => {
            tracing::debug!(upload = %id, "an upload a job uses is kept");
        }
        Err(err) => tracing::warn!(upload = %id, "could not remove an upload nothing uses: {err}"),
    }
}

/// How recently a receiving upload must have shown life to count as being sent; a sender
/// shows life at least this often (every stored part, and every [`ALIVE_EVERY`]).
const ALIVE_WITHIN: Duration = Duration::from_secs(600);
const ALIVE_EVERY: Duration = Duration::from_secs(60);

/// Registers a file about to arrive, if the owner's limits allow it. One short transaction,
/// serialized per owner, so that racing uploads cannot both take the last place.
async fn begin(
    pool: &PgPool,
    owner: Uuid,
    filename: &str,
    content_type: Option<&str>,
    limits: UploadLimits,
) -> Result<Uuid, UploadError> {
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "select 1 as locked from pg_advisory_xact_lock(hashtextextended('uploads:' || $1::uuid::text, 0))",
        owner,
    )
    .fetch_one(&mut *tx)
    .await?;
    // Over the owner's uploads being received (an index of its own) and the total their files
    // keep (`upload_bytes`, kept by a trigger): neither reads every upload the owner keeps.
    let totals = sqlx::query!(
        r#"select (select count(*) from uploads
                   where owner = $1 and receiving
                     and alive_at > now() - make_interval(secs => $2)) as "sending!",
                  (select coalesce(sum(stored), 0) from upload_bytes where owner = $1)::int8
                      as "stored!""#,
        owner,
        ALIVE_WITHIN.as_secs_f64(),
    )
    .fetch_one(&mut *tx)
    .await?;
    let (sending, stored) = (totals.sending, totals.stored);
    if let Some(limit) = limits.at_once.filter(|&limit| sending >= limit) {
        return Err(UploadError::TooManyAtOnce { limit });
    }
    if let Some(limit) = limits.stored_bytes.filter(|&limit| stored >= limit) {
        return Err(UploadError::StoreFull { limit });
    }
    let id = Uuid::now_v7();
    sqlx::query!(
        "insert into uploads (id, owner, filename, content_type, size, sha256, receiving)
         values ($1, $2, $3, $4, 0, '', true)",
        id,
        owner,
        filename,
        content_type,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// A file as it arrives: its bytes counted and hashed, those not yet stored (up to a part).
struct Received {
    limits: UploadLimits,
    hasher: Sha256,
    part: Vec<u8>,
    size: usize,
}

impl Received {
    fn new(limits: UploadLimits) -> Self {
        Self {
            limits,
            hasher: Sha256::new(),
            part: Vec::new(),
            size: 0,
        }
    }

    /// Takes the next bytes into the part (which may pass a part's size: the caller stores
    /// whole parts from it); refused past the largest file.
    fn take(&mut self, bytes: &[u8]) -> Result<(), UploadError> {
        self.size += bytes.len();
        if self.size > self.limits.file_bytes {
            return Err(UploadError::TooLarge {
                limit: self.limits.file_bytes,
            });
        }
        self.hasher.update(bytes);
        self.part.extend_from_slice(bytes);
        Ok(())
    }
}

/// Stores the rest of the body of upload `id` part by part, after what `file` holds; its size
/// once the last part is in.
async fn receive<S, B, E>(
    pool: &PgPool,
    (owner, id): (Uuid, Uuid),
    mut file: Received,
    mut body: S,
) -> Result<usize, UploadError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<UploadError>,
{
    let limits = file.limits;
    let mut part_no = 0i32;
    let mut alive_at = Instant::now();
    loop {
        while file.part.len() >= PART_BYTES {
            let part = &file.part[..PART_BYTES];
            store_part(pool, (owner, id), part_no, part, limits, None).await?;
            file.part.drain(..PART_BYTES);
            part_no += 1;
            alive_at = Instant::now();
        }
        let Some(bytes) = body.next().await else {
            break;
        };
        file.take(bytes.map_err(Into::into)?.as_ref())?;
        if alive_at.elapsed() >= ALIVE_EVERY {
            // A slow sender still counts as sending (and is not taken for a dead one).
            sqlx::query!("update uploads set alive_at = now() where id = $1", id)
                .execute(pool)
                .await?;
            alive_at = Instant::now();
        }
    }
    let sha256 = file.hasher.finalize();
    if !file.part.is_empty() {
        // The last part finishes the upload in its own statement (one statement and commit
        // fewer for every file under a part: `make bench ONLY=small`).
        store_part(
            pool,
            (owner, id),
            part_no,
            &file.part,
            limits,
            Some(&sha256),
        )
        .await?;
        return Ok(file.size);
    }
    let stored = sqlx::query!(
        "update uploads set sha256 = $2, receiving = false, alive_at = now()
         where id = $1 and receiving",
        id,
        sha256.as_slice(),
    )
    .execute(pool)
    .await?;
    if stored.rows_affected() == 0 {
        return Err(removed());
    }
    Ok(file.size)
}

/// Stores a small file that arrived whole in one (autocommitted) statement ([`store_sent`]):
/// it needs neither the owner's lock (it never takes a place among the files being received)
/// nor a transaction of its own. Before, every upload took the owner's lock for four round
/// trips, and one owner's uploads waited 9.3 ms for it on average (`make bench ONLY=small`,
/// 3,000 jobs). Run by a task of its own: a request dropped meanwhile has the file, stored once
/// the statement commits, deleted.
pub async fn store_whole(pool: &PgPool, owner: Uuid, file: Sent) -> Result<Upload, UploadError> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let (pool, upload) = (pool.clone(), file.upload.clone());
    tokio::spawn(async move {
        let stored = store_sent(&pool, owner, &[&file]).await;
        let id = file.upload.id;
        if let Err(Ok(())) = answer.send(stored)
            && let Err(err) = delete(&pool, id).await
        {
            tracing::warn!(upload = %id, "could not remove an upload nobody waits for: {err}");
        }
    });
    let stopped =
        |_| Err(sqlx::Error::Io(std::io::Error::other("the upload's task stopped")).into());
    answered.await.unwrap_or_else(stopped)?;
    Ok(upload)
}

/// Stores files of `owner`'s that arrived whole, in one statement that checks the owner's
/// limits (the strictest of the files') as [`begin`] and [`store_part`] do: all of them, or
/// none and the limit they would pass. The owner's stored bytes are read without a lock, as
/// [`store_part`] reads them: statements storing files at the same moment may each pass the
/// limit by up to what they store (files under [`WHOLE_BYTES`] each, up to a group's worth:
/// `jobs::group`), until their transactions commit. Reading them locked, and adding to one row
/// per owner, had one owner's files stored one at a time, each holding the row through its
/// commit (migration `stored_bytes_in_stripes`).
pub async fn store_sent(
    conn: impl sqlx::PgExecutor<'_>,
    owner: Uuid,
    files: &[&Sent],
) -> Result<(), UploadError> {
    let strictest = |limit: fn(&UploadLimits) -> Option<i64>| {
        files.iter().filter_map(|file| limit(&file.limits)).min()
    };
    let (at_once, stored_bytes) = (strictest(|l| l.at_once), strictest(|l| l.stored_bytes));
    let ids: Vec<Uuid> = files.iter().map(|file| file.upload.id).collect();
    let names: Vec<&str> = files.iter().map(|file| &*file.upload.filename).collect();
    let types: Vec<Option<&str>> = files
        .iter()
        .map(|file| file.content_type.as_deref())
        .collect();
    let data: Vec<&[u8]> = files.iter().map(|file| &*file.data).collect();
    let sha256: Vec<&[u8]> = files.iter().map(|file| &*file.sha256).collect();
    let outcome = sqlx::query!(
        r#"with totals as (
               select (select count(*) from uploads
                       where owner = $1 and receiving
                         and alive_at > now() - make_interval(secs => $7)) as sending,
                      (select coalesce(sum(stored), 0) from upload_bytes where owner = $1)::int8
                          as stored
           ),
           sent as (
               select * from unnest($2::uuid[], $3::text[], $4::text[], $5::bytea[], $6::bytea[])
                   as f (id, filename, content_type, data, sha256)
           ),
           upload as (
               insert into uploads (id, owner, filename, content_type, size, sha256, receiving)
               select f.id, $1, f.filename, f.content_type, length(f.data), f.sha256, false
               from sent f, totals
               where ($8::bigint is null or sending < $8)
                 and ($9::bigint is null
                      or stored + (select sum(length(data)) from sent) <= $9)
               returning id
           ),
           part as (insert into upload_parts (upload_id, part_no, data)
                    select id, 0, f.data from upload join sent f using (id))
         select sending as "sending!", (select count(*) from upload) as "stored!"
         from totals"#,
        owner,
        &ids,
        &names as &[&str],
        &types as &[Option<&str>],
        &data as &[&[u8]],
        &sha256 as &[&[u8]],
        ALIVE_WITHIN.as_secs_f64(),
        at_once,
        stored_bytes,
    )
    .fetch_one(conn)
    .await?;
    if outcome.stored == files.len() as i64 {
        return Ok(());
    }
    if let Some(limit) = at_once.filter(|&limit| outcome.sending >= limit) {
        return Err(UploadError::TooManyAtOnce { limit });
    }
    match stored_bytes {
        Some(limit) => Err(UploadError::StoreFull { limit }),
        None => {
            Err(sqlx::Error::Protocol("files within their limits were not stored".into()).into())
        }
    }
}

/// Stores one part and counts its bytes against the owner, in one (autocommitted) statement,
/// unless the owner's files would then pass their limit. Parts of the owner's uploads stored at
/// the same moment may each pass: the limit is overshot by at most a part per upload at once.
/// With the file's `sha256`, the part is its last and the upload is received. An upload that
/// retention removed meanwhile (its sender was quiet for a day) stores nothing more.
async fn store_part(
    pool: &PgPool,
    (owner, id): (Uuid, Uuid),
    part_no: i32,
    data: &[u8],
    limits: UploadLimits,
    sha256: Option<&[u8]>,
) -> Result<(), UploadError> {
    let outcome = sqlx::query!(
        "with live as (select from uploads where id = $1 and receiving for key share),
         part as (
             insert into upload_parts (upload_id, part_no, data)
             select $1, $2, $3::bytea
             where exists (select from live)
               and ($5::bigint is null
                    or (select coalesce(sum(stored), 0) from upload_bytes where owner = $4)
                       + length($3::bytea) <= $5)
             returning 1),
         stored as (
             update uploads set size = size + length($3::bytea), alive_at = now(),
                 sha256 = coalesce($6, sha256), receiving = $6::bytea is null
             where id = $1 and receiving and exists (select from part)
             returning 1)
         select exists (select from live) as \"live!\", exists (select from stored) as \"stored!\"",
        id,
        part_no,
        data,
        owner,
        limits.stored_bytes,
        sha256,
    )
    .fetch_one(pool)
    .await?;
    match (outcome.live, outcome.stored, limits.stored_bytes) {
        (_, true, _) => Ok(()),
        (true, false, Some(limit)) => Err(UploadError::StoreFull { limit }),
        _ => Err(removed()),
    }
}

/// Holds the rows of these stored files `for key share` until the transaction ends, as the
/// foreign keys of jobs that name them would: taken before a transaction that stores files
/// sent with their jobs ([`store_sent`], which locks a row of the owner's stored bytes) names
/// files stored earlier, so that it never waits for one being deleted (retention, an
/// unclaimed upload) while holding the row that deletion goes on to lock.
pub async fn hold_stored(conn: &mut PgConnection, ids: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query!(
        "select 1 as held from uploads where id = any($1) order by id for key share",
        ids
    )
    .fetch_all(conn)
    .await?;
    Ok(())
}

/// The received file with this id, if `sees` covers it (an export's file is not one: see
/// [`create_output`]).
pub async fn find(pool: &PgPool, id: Uuid, sees: Sees) -> sqlx::Result<Option<Upload>> {
    sqlx::query_as!(
        Upload,
        "select id, filename, size from uploads
         where id = $1 and not receiving and part_bytes is not null
           and ($2::uuid is null or owner = $2)",
        id,
        sees.owner_filter(),
    )
    .fetch_optional(pool)
    .await
}

/// The whole file, part by part, in order: one query per part, so the stream owns what it
/// needs and can outlive its caller (an HTTP body) without holding a connection between parts;
/// the next part is read while the last one is sent. (An export's parts are numbered with gaps:
/// see `jobs::export`.)
pub fn stream(
    pool: PgPool,
    id: Uuid,
) -> impl Stream<Item = sqlx::Result<Vec<u8>>> + Send + 'static {
    let part_nos = {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar!(
                "select part_no from upload_parts where upload_id = $1 order by part_no",
                id,
            )
            .fetch_all(&pool)
            .await
        }
    };
    futures::stream::once(part_nos)
        .map_ok(|part_nos| futures::stream::iter(part_nos.into_iter().map(Ok)))
        .try_flatten()
        .map_ok(move |part_no| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar!(
                    "select data from upload_parts where upload_id = $1 and part_no = $2",
                    id,
                    part_no,
                )
                .fetch_one(&pool)
                .await
            }
        })
        .try_buffered(2)
}

/// Makes the file an export writes in parts, in the plan's transaction: its parts come one
/// per chunk, written in parallel, so they vary in size (no `part_bytes`: no byte range can be
/// read from it, and no import takes it) and the whole is never hashed. Nothing counts it as
/// being received: the export's job refers to it until it completes or goes.
pub async fn create_output(
    conn: &mut PgConnection,
    owner: Uuid,
    filename: &str,
    content_type: &str,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query!(
        "insert into uploads (id, owner, filename, content_type, size, sha256, receiving,
                              part_bytes)
         values ($1, $2, $3, $4, 0, null, false, null)",
        id,
        owner,
        filename,
        content_type,
    )
    .execute(conn)
    .await?;
    Ok(id)
}

/// Stores part `part_no` of an export's file (see [`create_output`]).
pub async fn put_output_part(
    conn: &mut PgConnection,
    id: Uuid,
    part_no: i32,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into upload_parts (upload_id, part_no, data) values ($1, $2, $3)",
        id,
        part_no,
        data,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records an export's file as whole, with its size; the size.
pub async fn seal_output(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"update uploads
           set size = (select coalesce(sum(length(data)), 0) from upload_parts
                       where upload_id = $1)
           where id = $1 and part_bytes is null
           returning size"#,
        id,
    )
    .fetch_one(conn)
    .await
}

/// The first part of each of these uploads (a file smaller than a part is all there), by
/// upload; an upload with no part has none. One statement for a batch of small imports
/// (`jobs::batch`).
pub async fn first_parts(
    conn: impl sqlx::PgExecutor<'_>,
    ids: &[Uuid],
) -> sqlx::Result<std::collections::HashMap<Uuid, Vec<u8>>> {
    let parts = sqlx::query!(
        "select upload_id, data from upload_parts where upload_id = any($1) and part_no = 0",
        ids,
    )
    .fetch_all(conn)
    .await?;
    Ok(parts
        .into_iter()
        .map(|part| (part.upload_id, part.data))
        .collect())
}

/// Bytes `start..end` of a received file.
pub async fn read_range(
    conn: impl sqlx::PgExecutor<'_>,
    id: Uuid,
    start: u64,
    end: u64,
) -> sqlx::Result<Vec<u8>> {
    if end <= start {
        return Ok(Vec::new());
    }
    let part_len = PART_BYTES as i64;
    let (start, end) = (start as i64, end as i64);
    // Only the range's slice of each part leaves the database: parts are stored uncompressed
    // (`storage external`), so PostgreSQL reads just the TOAST pages the slice covers.
    let slices = sqlx::query_scalar!(
        r#"select substring(data
                            from (greatest($2::bigint - part_no * $4::bigint, 0) + 1)::int
                            for (least($3::bigint - part_no * $4, $4)
                                 - greatest($2 - part_no * $4, 0))::int) as "slice!"
           from upload_parts
           where upload_id = $1 and part_no between $2 / $4 and ($3 - 1) / $4
           order by part_no"#,
        id,
        start,
        end,
        part_len,
    )
    .fetch_all(conn)
    .await?;
    Ok(slices.concat())
}

/// Removes a file (a sheet converted twice by racing plan runs keeps only one copy).
pub async fn delete(conn: impl sqlx::PgExecutor<'_>, id: Uuid) -> sqlx::Result<()> {
    sqlx::query!("delete from uploads where id = $1", id)
        .execute(conn)
        .await?;
    Ok(())
}
