//! Jobs: creation, and reads for the API, pages and workers. Status changes are in
//! [`super::states::job`].

use app::model::{CallbackState, CallbackTry, CallbackView, FailedPart, JobView, Remedy};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

use super::{
    notify,
    states::{ChunkState, ExportFormat, JobKind, JobStatus, LIVE},
};
use crate::{
    auth::Sees,
    spreadsheet::{csv::RowFormat, mapping::Mapping, reading::Reading},
};

/// `sqlx::query_as!(ViewRow, "select … from jobs" + $rest, args…)`: what a [`JobView`]
/// shows, with the given SQL after it; `$failed` is the parameter that binds
/// [`ChunkState::Failed`].
macro_rules! select_view {
    ($failed:tt, $rest:tt, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            ViewRow,
            r#"select j.id, j.kind as "kind: JobKind", j.status as "status: JobStatus",
           j.item_count, j.item_progress, j.rows_ok, j.rows_failed, j.rows_updated,
           j.chunks_total, j.chunks_done, j.version, j.error, j.created_at, j.started_at,
           j.finished_at, j.source_filename as filename, j.sheet,
           j.mapping as "mapping: Json<Mapping>", j.dry_run, j.fixes,
           d.name as "dataset?", j.format as "format: ExportFormat",
           coalesce(d.state = 'deleted'::dataset_state, false) as "dataset_deleted!",
           j.job_type as item_type, j.sealed,
           j.result_upload_id is not null as "has_result!",
           extract(epoch from coalesce(j.finished_at, now()) - j.started_at)::float8
               as elapsed_seconds,
           (select coalesce(json_agg(json_build_object('part', c.chunk_no + 1,
                        'firstRow', c.first_row, 'rowCount', c.row_count,
                        'attempts', c.attempts, 'error', c.last_error) order by c.chunk_no), '[]')
            from (select * from job_chunks where job_id = j.id and state = "#
                + $failed
                + r#"
                  order by chunk_no limit 100) c) as "failed_parts!: Json<Vec<FailedPart>>",
           j.parent_id, j.owner, o.email as owner_email,
           j.callback_url, j.callback_delivered_at, j.callback_gave_up_at, j.callback_next_at,
           case when j.callback_url is not null then
               (select coalesce(json_agg(json_build_object('attempt', a.attempt,
                           'at', a.at, 'status', a.status, 'error', a.error)
                           order by a.attempt), '[]')
                from (select * from callback_attempts where job_id = j.id
                      order by attempt desc limit 20) a) end
               as "callback_tries: Json<Vec<CallbackTry>>",
           j.remedy as "remedy: Json<Remedy>"
    from jobs j
    join users o on o.id = j.owner
    left join datasets d on d.id = j.dataset_id "#
                + $rest,
            $($arg),+
        )
    };
}

struct ViewRow {
    id: Uuid,
    kind: JobKind,
    status: JobStatus,
    item_count: Option<i64>,
    item_progress: i64,
    rows_ok: i64,
    rows_failed: i64,
    rows_updated: i64,
    chunks_total: i32,
    chunks_done: i32,
    version: i64,
    error: Option<String>,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    filename: Option<String>,
    sheet: Option<String>,
    mapping: Option<Json<Mapping>>,
    dry_run: bool,
    fixes: Option<Uuid>,
    dataset: Option<String>,
    dataset_deleted: bool,
    item_type: Option<String>,
    sealed: bool,
    format: Option<ExportFormat>,
    has_result: bool,
    elapsed_seconds: Option<f64>,
    failed_parts: Json<Vec<FailedPart>>,
    parent_id: Option<Uuid>,
    owner: Uuid,
    owner_email: Option<String>,
    callback_url: Option<String>,
    callback_delivered_at: Option<DateTime<Utc>>,
    callback_gave_up_at: Option<DateTime<Utc>>,
    callback_next_at: Option<DateTime<Utc>>,
    callback_tries: Option<Json<Vec<CallbackTry>>>,
    remedy: Option<Json<Remedy>>,
}

impl ViewRow {
    /// The completion callback, if the job has one, and where its delivery stands.
    fn callback(&mut self) -> Option<CallbackView> {
        let url = self.callback_url.as_deref()?;
        let state = if self.callback_delivered_at.is_some() {
            CallbackState::Delivered
        } else if self.callback_gave_up_at.is_some() {
            CallbackState::GaveUp
        } else if self.finished_at.is_none() {
            CallbackState::Waiting
        } else {
            CallbackState::Sending
        };
        Some(CallbackView {
            url: shown_url(url),
            state,
            next_at: matches!(state, CallbackState::Waiting | CallbackState::Sending)
                .then_some(self.callback_next_at)
                .flatten(),
            tries: self
                .callback_tries
                .take()
                .map(|Json(tries)| tries)
                .unwrap_or_default(),
        })
    }
}

/// A callback URL as the job's view shows it: its origin only, as the rest often holds a secret
/// (a webhook's token in its path or query), and the job's viewers need not be its owner. The
/// receiver still gets the whole URL.
fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) if url.path() == "/" && url.query().is_none() => url.origin().ascii_serialization(),
        Ok(url) => format!("{}/…", url.origin().ascii_serialization()),
        Err(_) => String::new(),
    }
}

impl From<ViewRow> for JobView {
    fn from(mut row: ViewRow) -> Self {
        JobView {
            callback: row.callback(),
            id: row.id,
            job_type: row.kind,
            status: row.status,
            item_count: row.item_count,
            item_progress: row.item_progress,
            rows_ok: row.rows_ok,
            rows_failed: row.rows_failed,
            rows_updated: row.rows_updated,
            chunks_total: row.chunks_total,
            chunks_done: row.chunks_done,
            version: row.version,
            error: row.error,
            filename: row.filename,
            sheet: row.sheet,
            dataset_deleted: row.dataset_deleted,
            item_type: row.item_type,
            sealed: row.sealed,
            mapping: row.mapping.map(|Json(mapping)| mapping),
            dry_run: row.dry_run,
            fixes: row.fixes,
            dataset: row.dataset,
            format: row.format,
            result_url: row
                .has_result
                .then(|| format!("/api/jobs/{}/result", row.id)),
            created_at: row.created_at,
            started_at: row.started_at,
            finished_at: row.finished_at,
            elapsed_seconds: row.elapsed_seconds,
            failed_parts: row.failed_parts.0,
            parent_id: row.parent_id,
            owner: row.owner,
            owner_email: row.owner_email,
            remedy: row.remedy.map(|Json(remedy)| remedy),
        }
    }
}

/// What a request may set on a new job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Options {
    /// A repeated create with this key (same owner) returns the first job.
    pub dedupe_key: Option<String>,
    /// Jobs with the same key start one at a time, in creation order.
    pub serialize_key: Option<String>,
    /// The open batch the job belongs to.
    pub parent_id: Option<Uuid>,
    /// Where the job's final state is POSTed once it ends.
    pub callback_url: Option<String>,
    /// Attempts per chunk (and per step) before it fails; the table's default (5) when `None`.
    pub max_failures_per_item: Option<i32>,
    /// The job stops, failed, once more rows than this failed…
    pub max_row_errors: Option<i64>,
    /// …or more than this percentage of its rows.
    pub max_row_errors_percent: Option<f64>,
    /// Not stored: the most jobs the owner may have waiting or running, checked as this one is
    /// created (`config::LimitArgs`).
    pub active_jobs_limit: Option<i64>,
}

/// A job just inserted, and the ticket of its first message (see [`super::leases`]; unused when
/// its insert leased it: it gets a message only if requeueing queues one).
#[derive(Debug, Clone, Copy)]
pub struct NewJob {
    pub id: Uuid,
    pub ticket: Uuid,
    /// The owner's live jobs, this one included, counted as it was inserted: what the live-job
    /// limit and the job's turn are checked against, under the owner's lock when the caller
    /// holds it ([`hold_owners_jobs`]).
    pub live: LiveJobs,
    /// Its step was leased by the insert ([`NewLease`]): the attempts the lease may take.
    pub leased_max_attempts: Option<i32>,
}

/// A lease of a new job's step, taken by its insert for a run of the creating process.
#[derive(Debug, Clone, Copy)]
pub struct NewLease<'a> {
    /// The run's lease owner (`<process>/<run>`).
    pub owner: &'a str,
    pub ttl: std::time::Duration,
}

/// What only one kind of job has.
#[derive(Debug, Clone, Copy)]
pub enum NewKind<'a> {
    /// The upload to read and, for a workbook, the sheet; how to read it and where its
    /// columns go, when the person said.
    Import {
        upload_id: Uuid,
        sheet: Option<&'a str>,
        reading: &'a Reading,
        mapping: Option<&'a Mapping>,
        /// Only check the rows: write none.
        dry_run: bool,
        /// The import whose fixed error report this is.
        fixes: Option<Uuid>,
    },
    /// The file format to write.
    Export { format: ExportFormat },
    /// The rows of the (deleted) dataset to remove: the job's item count.
    Delete { rows: i64 },
    /// A job of a registered type, with the type's attempts per item unless the request
    /// says otherwise.
    Items {
        job_type: &'a str,
        max_failures_per_item: i32,
    },
}

/// A job for [`insert_many`] to insert.
#[derive(Debug, Clone, Copy)]
pub struct NewRow<'a> {
    pub dataset_id: Option<Uuid>,
    pub kind: NewKind<'a>,
    pub options: &'a Options,
    /// A lease of its step for a run of this process, taken by the insert when the job is
    /// first in line for its serialize key.
    pub lease: Option<NewLease<'a>>,
}

/// Inserts a new import, export, delete or items job, `waiting`, and announces it (version 1)
/// in the same statement: [`insert_many`] of one. `None` when the owner already has a job with
/// the same dedupe key (nothing is announced).
pub async fn insert(
    conn: &mut PgConnection,
    owner: Uuid,
    dataset_id: Option<Uuid>,
    kind: NewKind<'_>,
    options: &Options,
    lease: Option<NewLease<'_>>,
) -> sqlx::Result<Option<NewJob>> {
    let row = NewRow {
        dataset_id,
        kind,
        options,
        lease,
    };
    Ok(insert_many(conn, owner, &[row]).await?.pop())
}

/// New jobs' columns, an array each, as [`insert_many`] binds them.
#[derive(Default)]
struct NewColumns<'a> {
    id: Vec<Uuid>,
    kind: Vec<JobKind>,
    upload_id: Vec<Option<Uuid>>,
    dataset_id: Vec<Option<Uuid>>,
    sheet: Vec<Option<&'a str>>,
    format: Vec<Option<ExportFormat>>,
    max_failures_per_item: Vec<Option<i32>>,
    max_row_errors: Vec<Option<i64>>,
    max_row_errors_percent: Vec<Option<f64>>,
    dedupe_key: Vec<Option<&'a str>>,
    serialize_key: Vec<Option<&'a str>>,
    parent_id: Vec<Option<Uuid>>,
    callback_url: Vec<Option<&'a str>>,
    reading: Vec<Option<Json<&'a Reading>>>,
    mapping: Vec<Option<Json<&'a Mapping>>>,
    dry_run: Vec<bool>,
    fixes: Vec<Option<Uuid>>,
    item_count: Vec<Option<i64>>,
    job_type: Vec<Option<&'a str>>,
    lease_owner: Vec<Option<&'a str>>,
    lease_secs: Vec<f64>,
    announcing: Vec<String>,
}

impl<'a> NewColumns<'a> {
    fn push(&mut self, row: &NewRow<'a>) {
        let options = row.options;
        let (mut upload_id, mut sheet, mut reading, mut mapping) = (None, None, None, None);
        let (mut format, mut dry_run, mut fixes, mut job_type) = (None, false, None, None);
        let mut max_failures_per_item = options.max_failures_per_item;
        let (kind, item_count) = match row.kind {
            NewKind::Import {
                upload_id: file,
                sheet: named,
                reading: read,
                mapping: mapped,
                dry_run: dry,
                fixes: fixed,
            } => {
                upload_id = Some(file);
                sheet = named;
                reading = (!read.is_default()).then_some(Json(read));
                mapping = mapped.map(Json);
                dry_run = dry;
                fixes = fixed;
                (JobKind::Import, None)
            }
            NewKind::Export { format: written } => {
                format = Some(written);
                (JobKind::Export, None)
            }
            NewKind::Delete { rows } => (JobKind::Delete, Some(rows)),
            NewKind::Items {
                job_type: typed,
                max_failures_per_item: typed_max,
            } => {
                job_type = Some(typed);
                max_failures_per_item = max_failures_per_item.or(Some(typed_max));
                (JobKind::Items, Some(0))
            }
        };
        let id = Uuid::now_v7();
        self.id.push(id);
        self.kind.push(kind);
        self.upload_id.push(upload_id);
        self.dataset_id.push(row.dataset_id);
        self.sheet.push(sheet);
        self.format.push(format);
        self.max_failures_per_item.push(max_failures_per_item);
        self.max_row_errors.push(options.max_row_errors);
        self.max_row_errors_percent
            .push(options.max_row_errors_percent);
        self.dedupe_key.push(options.dedupe_key.as_deref());
        self.serialize_key.push(options.serialize_key.as_deref());
        self.parent_id.push(options.parent_id);
        self.callback_url.push(options.callback_url.as_deref());
        self.reading.push(reading);
        self.mapping.push(mapping);
        self.dry_run.push(dry_run);
        self.fixes.push(fixes);
        self.item_count.push(item_count);
        self.job_type.push(job_type);
        self.lease_owner.push(row.lease.map(|lease| lease.owner));
        self.lease_secs
            .push(row.lease.map_or(0.0, |lease| lease.ttl.as_secs_f64()));
        self.announcing.push(notify::announcing(id, 1));
    }
}

/// Inserts new jobs of `owner`'s, `waiting`, in one statement, as one insert after another
/// in a transaction would, and announces each (version 1) in it: a group of creates makes all
/// its jobs with one round trip ([`crate::jobs::group`]). The jobs inserted, in `rows`' order;
/// one the owner's job with the same dedupe key met is left out (and not announced).
///
/// The owner's live jobs are counted by the insert, as [`live_jobs`] counts them, each new job
/// with those before it in `rows`: a create holds its owner's lock from before the insert to
/// its commit, and a statement of its own was a round trip more that the owner's other creates
/// waited for (`make bench ONLY=small`). The statement's snapshot does not see the rows it
/// inserts, hence the window counts.
///
/// A row with a lease has its step leased to that run by the insert when it is first in line
/// for its serialize key (which the caller's create holds the lock of): no live job has the
/// key, and no row before it in `rows` does (one its dedupe key leaves out included: a group's
/// imports have none). The run is recorded, as `leases::acquire` would:
/// the caller hands the job to its own process's workers (`jobs::lane`).
pub async fn insert_many(
    conn: &mut PgConnection,
    owner: Uuid,
    rows: &[NewRow<'_>],
) -> sqlx::Result<Vec<NewJob>> {
    let mut new = NewColumns::default();
    for row in rows {
        new.push(row);
    }
    let inserted = sqlx::query!(
        r#"with new as (
               select * from unnest($2::uuid[], $3::job_kind[], $4::uuid[], $5::uuid[],
                                    $6::text[], $7::export_format[], $8::int4[], $9::int8[],
                                    $10::float8[], $11::text[], $12::text[], $13::uuid[],
                                    $14::text[], $15::jsonb[], $16::jsonb[], $17::bool[],
                                    $18::uuid[], $19::int8[], $20::text[], $21::text[],
                                    $22::float8[], $23::text[])
                   with ordinality
                   as n(id, kind, upload_id, dataset_id, sheet, format, max_failures_per_item,
                        max_row_errors, max_row_errors_percent, dedupe_key, serialize_key,
                        parent_id, callback_url, reading, mapping, dry_run, fixes, item_count,
                        job_type, lease_owner, lease_secs, announcing, nth)
           ),
           line as (
               select new.*, lease_owner is not null and (serialize_key is null or (
                          nth = min(nth) over (partition by serialize_key)
                          and not exists (
                              select 1 from jobs o
                              where o.serialize_key = new.serialize_key
                                and o.status in ('waiting', 'running'))))
                          as leased
               from new
           ),
           job as (
               insert into jobs (id, kind, owner, upload_id, dataset_id, sheet, format,
                                 max_failures_per_item, max_row_errors, max_row_errors_percent,
                                 dedupe_key, serialize_key, parent_id, callback_url,
                                 source_filename, reading, mapping, dry_run, fixes, item_count,
                                 job_type, lease_owner, lease_expires_at, attempts)
               select id, kind, $1, upload_id, dataset_id, sheet, format,
                      coalesce(max_failures_per_item, 5), max_row_errors,
                      max_row_errors_percent, dedupe_key, serialize_key, parent_id,
                      callback_url, (select filename from uploads u where u.id = line.upload_id),
                      reading, mapping, dry_run, fixes, item_count, job_type,
                      case when leased then lease_owner end,
                      case when leased then clock_timestamp() + make_interval(secs => lease_secs)
                      end,
                      leased::int
               from line
               order by nth
               on conflict (owner, dedupe_key) where dedupe_key is not null do nothing
               returning id, ticket, kind, lease_owner, max_failures_per_item
           ),
           run as (insert into job_runs (run, job_id, attempt, started_at)
                   select lease_owner, id, 1, clock_timestamp() from job
                   where lease_owner is not null),
           counted as (
               select job.*, new.nth, new.announcing,
                      count(*) over (order by new.nth) as all_before,
                      count(*) filter (where job.kind <> 'delete') over (order by new.nth)
                          as limited_before
               from job join new using (id)
           )
         select id as "id!", ticket as "ticket!",
             (select count(*) from jobs o
              where o.owner = $1 and o.status in ('waiting', 'running')) + all_before
                 as "live_all!",
             (select count(*) from jobs o
              where o.owner = $1 and o.status in ('waiting', 'running') and o.kind <> 'delete')
                 + limited_before as "live_limited!",
             lease_owner is not null as "leased!",
             max_failures_per_item as "max_failures_per_item!",
             (select true from pg_notify($24, announcing)) as "announced!"
         from counted
         order by nth"#,
        owner,
        &new.id,
        &new.kind as &[JobKind],
        &new.upload_id as &[Option<Uuid>],
        &new.dataset_id as &[Option<Uuid>],
        &new.sheet as &[Option<&str>],
        &new.format as &[Option<ExportFormat>],
        &new.max_failures_per_item as &[Option<i32>],
        &new.max_row_errors as &[Option<i64>],
        &new.max_row_errors_percent as &[Option<f64>],
        &new.dedupe_key as &[Option<&str>],
        &new.serialize_key as &[Option<&str>],
        &new.parent_id as &[Option<Uuid>],
        &new.callback_url as &[Option<&str>],
        &new.reading as _,
        &new.mapping as _,
        &new.dry_run,
        &new.fixes as &[Option<Uuid>],
        &new.item_count as &[Option<i64>],
        &new.job_type as &[Option<&str>],
        &new.lease_owner as &[Option<&str>],
        &new.lease_secs,
        &new.announcing,
        notify::CHANNEL,
    )
    .fetch_all(conn)
    .await?;
    Ok(inserted
        .into_iter()
        .map(|row| NewJob {
            id: row.id,
            ticket: row.ticket,
            live: LiveJobs {
                all: row.live_all,
                limited: row.live_limited,
            },
            leased_max_attempts: row.leased.then_some(row.max_failures_per_item),
        })
        .collect())
}

/// Inserts a batch: a parent job, `running` at once, that children join until it is sealed,
/// and announces it as [`insert`] does. `None` as for [`insert`].
pub async fn insert_batch(
    conn: &mut PgConnection,
    owner: Uuid,
    options: &Options,
) -> sqlx::Result<Option<NewJob>> {
    let id = Uuid::now_v7();
    let inserted = sqlx::query!(
        r#"insert into jobs (id, kind, owner, status, started_at, dedupe_key, callback_url)
         values ($1, $5, $2, $6, now(), $3, $4)
         on conflict (owner, dedupe_key) where dedupe_key is not null do nothing
         returning id, ticket, (select true from pg_notify($7, $8)) as "announced!""#,
        id,
        owner,
        options.dedupe_key,
        options.callback_url,
        JobKind::Batch as JobKind,
        JobStatus::Running as JobStatus,
        notify::CHANNEL,
        notify::announcing(id, 1),
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(batch) = inserted else {
        return Ok(None);
    };
    Ok(Some(NewJob {
        id: batch.id,
        ticket: batch.ticket,
        live: live_jobs(conn, owner).await?,
        leased_max_attempts: None,
    }))
}

/// Whether `id` is `owner`'s batch still taking children; holds it (against a concurrent
/// seal) until the transaction ends.
pub async fn lock_open_batch(conn: &mut PgConnection, id: Uuid, owner: Uuid) -> sqlx::Result<bool> {
    let open = sqlx::query_scalar!(
        r#"select true as "open!" from jobs where id = $1 and owner = $2 and kind = $3
             and status = $4 and not sealed
         for share"#,
        id,
        owner,
        JobKind::Batch as JobKind,
        JobStatus::Running as JobStatus,
    )
    .fetch_optional(conn)
    .await?;
    Ok(open.is_some())
}

/// The owner's job made with this dedupe key.
pub async fn find_deduped(
    conn: &mut PgConnection,
    owner: Uuid,
    dedupe_key: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "select id from jobs where owner = $1 and dedupe_key = $2",
        owner,
        dedupe_key,
    )
    .fetch_optional(conn)
    .await
}

/// Waits for, then holds until the transaction ends, the lock that orders the creates and
/// retries of `owner`'s jobs. Taken before any job or dataset row by every transaction that
/// takes it, so they wait for each other rather than deadlock.
pub async fn hold_owners_jobs(conn: &mut PgConnection, owner: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "select 1 as locked from pg_advisory_xact_lock(hashtextextended('active jobs:' || $1, 0))",
        owner.to_string(),
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// [`hold_owners_jobs`], then the locks that order creates with the same serialize key (job
/// sequence numbers, `seq`, then follow commit order, so "earlier" is well defined), in one
/// round trip: a create holds its owner's lock from here to its commit, and each statement
/// inside adds a round trip to the time the owner's other creates wait (`make bench
/// ONLY=small`). The keys' locks are a subquery of the owner's lock's row, so they are taken
/// second (by a create of one job, or a group of them: `jobs::group`). An empty key (a job of a
/// registered type made without one) orders nothing: no lock, or every owner's such creates
/// would wait for each other.
pub async fn hold_owners_jobs_and_keys(
    conn: &mut PgConnection,
    owner: Uuid,
    keys: &[&str],
) -> sqlx::Result<()> {
    sqlx::query_scalar!(
        "select (select count(*) from unnest($2::text[]) as key,
                      pg_advisory_xact_lock(hashtextextended(key, 0))
                 where owners.held = 1 and key <> '') as locked
         from (select 1 as held
               from pg_advisory_xact_lock(hashtextextended('active jobs:' || $1, 0))
               offset 0) as owners",
        owner.to_string(),
        keys as &[&str],
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// The jobs an owner has waiting or running.
#[derive(Debug, Clone, Copy)]
pub struct LiveJobs {
    /// All of them: their turns in the queue count these ([`ahead`]).
    pub all: i64,
    /// Those the live-job limit counts: deletions, which nobody starts but by deleting, aside.
    pub limited: i64,
}

/// How many jobs `owner` has waiting or running, counted in the caller's transaction, which
/// holds the owner's lock ([`hold_owners_jobs`]): so racing creates and retries cannot all
/// pass a limit.
pub async fn live_jobs(conn: &mut PgConnection, owner: Uuid) -> sqlx::Result<LiveJobs> {
    // The live statuses are written into the query, not bound: a generic plan of a bound
    // status list cannot use the partial index of live jobs, and scanned every job the owner
    // ever made, under the lock every create of theirs waits for (`make bench ONLY=small`).
    sqlx::query_as!(
        LiveJobs,
        r#"select count(*) as "all!", count(*) filter (where kind <> 'delete') as "limited!"
           from jobs where owner = $1 and status in ('waiting', 'running')"#,
        owner,
    )
    .fetch_one(&mut *conn)
    .await
}

/// How many of the owner's jobs that wait or run were created before job `id`: its place in
/// its owner's turns ([`super::queue::Priority::Turn`]). Read from the index of live jobs by
/// owner, in id (creation) order.
pub async fn ahead(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"select count(*) as "ahead!" from jobs o
           where o.owner = (select owner from jobs where id = $1)
             and o.status in ('waiting', 'running') and o.id < $1"#,
        id,
    )
    .fetch_one(conn)
    .await
}

/// Why a job was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotDeleted {
    /// No job with that id that the caller may change.
    NoSuchJob,
    /// It, a job above it or a job below it is waiting or running.
    Live,
    /// It is a chain's follow-up job: it goes with its root.
    FollowUp,
}

/// Deletes a finished job that `acts` covers, with everything it holds (its items, chunks,
/// row errors, history) and the jobs below it (a batch's children, a chain's follow-up jobs,
/// all ended with it); and its result file. The file it read goes with retention, once no
/// job uses it. The items of the jobs are locked first, then the jobs in id order, as every
/// change of them takes them.
pub async fn delete_finished(
    conn: &mut PgConnection,
    id: Uuid,
    acts: Sees,
) -> sqlx::Result<Result<(), NotDeleted>> {
    let below: Vec<Uuid> = sqlx::query_scalar!(
        r#"with recursive below as (
               select id from jobs where id = $1 and ($2::uuid is null or owner = $2)
               union
               select c.id from jobs c join below b on c.parent_id = b.id
           )
           select id as "id!" from below"#,
        id,
        acts.owner_filter(),
    )
    .fetch_all(&mut *conn)
    .await?;
    if below.is_empty() {
        return Ok(Err(NotDeleted::NoSuchJob));
    }
    // Checked before anything is locked (a refused delete holds nothing up), and again once
    // the rows are locked.
    if let Err(refused) = deletable(conn, id, &below).await? {
        return Ok(Err(refused));
    }
    sqlx::query!(
        r#"select count(*) as "locked!" from (
               select 1 from job_items where job_id = any($1)
               order by job_id, item_no for no key update) items"#,
        &below,
    )
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query!(
        r#"select count(*) as "locked!" from (
               select 1 from jobs where id = any($1) order by id for update) jobs"#,
        &below,
    )
    .fetch_one(&mut *conn)
    .await?;
    if let Err(refused) = deletable(conn, id, &below).await? {
        return Ok(Err(refused));
    }
    sqlx::query!(
        "with gone as (delete from jobs where id = $1
                       returning result_upload_id, output_upload_id)
         delete from uploads u using gone
         where u.id in (gone.result_upload_id, gone.output_upload_id)",
        id,
    )
    .execute(&mut *conn)
    .await?;
    super::notify::jobs_gone(conn, &below).await?;
    Ok(Ok(()))
}

/// Whether job `id` (with the jobs `below` it) may be deleted: none of them live, and it is not
/// a chain's follow-up job nor a live batch's child.
async fn deletable(
    conn: &mut PgConnection,
    id: Uuid,
    below: &[Uuid],
) -> sqlx::Result<Result<(), NotDeleted>> {
    let found = sqlx::query!(
        r#"select exists (select 1 from jobs where id = any($1) and status = any($3)) as "live!",
               p.kind as "parent_kind?: JobKind", p.status = any($3) as "parent_live?"
           from jobs j left join jobs p on p.id = j.parent_id
           where j.id = $2"#,
        below,
        id,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_one(conn)
    .await?;
    Ok(if found.parent_kind == Some(JobKind::Items) {
        Err(NotDeleted::FollowUp)
    } else if found.live || found.parent_live == Some(true) {
        Err(NotDeleted::Live)
    } else {
        Ok(())
    })
}

/// The job with this id, if `sees` covers it.
pub async fn find(pool: &PgPool, id: Uuid, sees: Sees) -> sqlx::Result<Option<JobView>> {
    select_view!(
        "$3",
        "where j.id = $1 and ($2::uuid is null or j.owner = $2)",
        id,
        sees.owner_filter(),
        ChunkState::Failed as ChunkState,
    )
    .fetch_optional(pool)
    .await
    .map(|row| row.map(JobView::from))
}

/// The jobs with these ids that `sees` covers.
pub async fn find_many(pool: &PgPool, ids: &[Uuid], sees: Sees) -> sqlx::Result<Vec<JobView>> {
    select_view!(
        "$3",
        "where j.id = any($1) and ($2::uuid is null or j.owner = $2)",
        ids,
        sees.owner_filter(),
        ChunkState::Failed as ChunkState,
    )
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().map(JobView::from).collect())
}

/// Whether `id` is one of `owner`'s imports (one a new import may fix).
pub async fn is_owners_import(
    conn: &mut PgConnection,
    id: Uuid,
    owner: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select exists (select from jobs where id = $1 and owner = $2 and kind = $3) as "found!""#,
        id,
        owner,
        JobKind::Import as JobKind,
    )
    .fetch_one(conn)
    .await
}

/// The mappings earlier imports into a dataset were given, newest first (the last 10).
pub async fn used_mappings(pool: &PgPool, dataset_id: Uuid) -> sqlx::Result<Vec<Mapping>> {
    let rows = sqlx::query_scalar!(
        r#"select mapping as "mapping!: Json<Mapping>" from jobs
           where dataset_id = $1 and mapping is not null
           order by created_at desc limit 10"#,
        dataset_id,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|Json(mapping)| mapping).collect())
}

/// What the workers need to know about an import job.
#[derive(Debug, Clone)]
pub struct ImportJob {
    pub id: Uuid,
    pub status: JobStatus,
    /// Orders this import's rows after earlier imports' (see [`super::datasets::position`]).
    pub seq: i64,
    pub sealed: bool,
    pub owner: Uuid,
    pub upload_id: Uuid,
    pub dataset_id: Uuid,
    pub sheet: Option<String>,
    pub row_format: Option<sqlx::types::Json<RowFormat>>,
    pub reading: Option<sqlx::types::Json<Reading>>,
    pub mapping: Option<sqlx::types::Json<Mapping>>,
    /// Checks and counts rows, writes none (see [`NewKind::Import`]).
    pub dry_run: bool,
}

impl ImportJob {
    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running
    }

    /// Waiting or running.
    pub fn is_live(&self) -> bool {
        LIVE.contains(&self.status)
    }

    /// How to read the file: as the person said, or as found.
    pub fn reading(&self) -> Reading {
        self.reading.as_ref().map(|r| r.0).unwrap_or_default()
    }

    /// Where the file's columns go: as mapped, or each to the column of its name.
    pub fn mapping(&self) -> Mapping {
        self.mapping
            .as_ref()
            .map(|m| m.0.clone())
            .unwrap_or_default()
    }
}

/// Records how a streamed sheet's chunks read their rows (see `jobs::sheet`), the sheet
/// chosen and, until the plan is sealed with the real count, the rows the sheet says it has
/// (so progress shows a percentage), before its first chunk is written.
pub async fn set_format(
    conn: &mut PgConnection,
    id: Uuid,
    format: &RowFormat,
    sheet: &str,
    declared_rows: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update jobs set row_format = $2, sheet = $3, item_count = coalesce($4, item_count)
         where id = $1 and status = $5 and not sealed",
        id,
        Json(format) as _,
        sheet,
        declared_rows,
        JobStatus::Running as JobStatus,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// `sqlx::query_as!(ImportJob, …)` for the import jobs `$which` picks of `$ids` (`$1`), with
/// `$rest` after that.
macro_rules! select_import_jobs {
    ($which:literal, $ids:expr, $rest:literal) => {
        sqlx::query_as!(
            ImportJob,
            r#"select id, status as "status: JobStatus", seq, sealed, owner,
                      upload_id as "upload_id!", dataset_id as "dataset_id!", sheet,
                      row_format as "row_format: Json<RowFormat>",
                      reading as "reading: Json<Reading>", mapping as "mapping: Json<Mapping>",
                      dry_run
               from jobs where kind = $2 and "#
                + $which
                + $rest,
            $ids,
            JobKind::Import as JobKind,
        )
    };
}

pub async fn import_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ImportJob>> {
    select_import_jobs!("id = $1", id, "")
        .fetch_optional(conn)
        .await
}

/// Locks the job row for the rest of the transaction and returns it.
pub async fn lock_import_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ImportJob>> {
    select_import_jobs!("id = $1", id, " for update")
        .fetch_optional(conn)
        .await
}

/// Locks these import jobs' rows for the rest of the transaction, in the order of their ids,
/// and returns them: those that are imports. The lock is the one their updates take, which
/// lets a new job that names one of them (`fixes`) be inserted meanwhile: the create holding
/// a dataset the batch goes on to write cannot wait for the batch in a circle.
pub async fn lock_import_jobs(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> sqlx::Result<Vec<ImportJob>> {
    select_import_jobs!("id = any($1)", ids, " order by id for no key update")
        .fetch_all(conn)
        .await
}

/// What the workers need to know about an export job.
#[derive(Debug, Clone)]
pub struct ExportJob {
    pub status: JobStatus,
    pub sealed: bool,
    pub owner: Uuid,
    pub dataset_id: Uuid,
    pub dataset: String,
    pub format: ExportFormat,
    pub chunks_total: i32,
    pub chunks_done: i32,
    pub result_upload_id: Option<Uuid>,
    /// The file its chunks write (see `uploads::create_output`), from its plan until it
    /// completes.
    pub output_upload_id: Option<Uuid>,
}

impl ExportJob {
    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running
    }
}

/// `sqlx::query_as!(ExportJob, …)` for export job `$id`, with `$rest` after the `where`.
macro_rules! select_export_job {
    ($id:expr, $rest:tt) => {
        sqlx::query_as!(
            ExportJob,
            r#"select j.status as "status: JobStatus", j.sealed, j.owner,
                      j.dataset_id as "dataset_id!", d.name as dataset,
                      j.format as "format!: ExportFormat",
                      j.chunks_total, j.chunks_done, j.result_upload_id, j.output_upload_id
               from jobs j join datasets d on d.id = j.dataset_id
               where j.id = $1 and j.kind = $2"#
                + $rest,
            $id,
            JobKind::Export as JobKind,
        )
    };
}

pub async fn export_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ExportJob>> {
    select_export_job!(id, "").fetch_optional(conn).await
}

/// Locks the export's job row for the rest of the transaction and returns it.
pub async fn lock_export_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<ExportJob>> {
    select_export_job!(id, " for update of j")
        .fetch_optional(conn)
        .await
}

/// What `GET /api/jobs/{id}/result` serves: a completed export's file (id and size), the
/// dataset's name and the format.
#[derive(Debug, Clone)]
pub struct ExportResult {
    pub file: Option<(Uuid, i64)>,
    pub dataset: String,
    pub format: ExportFormat,
}

/// The file a completed export that `sees` covers produced.
pub async fn export_result(
    pool: &PgPool,
    id: Uuid,
    sees: Sees,
) -> sqlx::Result<Option<ExportResult>> {
    let row = sqlx::query!(
        r#"select u.id as "file?", u.size as "size?", d.name, j.format as "format!: ExportFormat"
           from jobs j join datasets d on d.id = j.dataset_id
           left join uploads u on u.id = j.result_upload_id
           where j.id = $1 and j.kind = $3 and ($2::uuid is null or j.owner = $2)"#,
        id,
        sees.owner_filter(),
        JobKind::Export as JobKind,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|row| ExportResult {
        file: row.file.zip(row.size),
        dataset: row.name,
        format: row.format,
    }))
}

/// A `delete` job that is still live, as a run of its step needs it.
#[derive(Debug, Clone, Copy)]
pub struct DeleteJob {
    pub dataset_id: Uuid,
    pub status: JobStatus,
}

/// Locks a live `delete` job for one batch of its work: two runs of its step take turns.
pub async fn lock_delete_job(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<DeleteJob>> {
    sqlx::query_as!(
        DeleteJob,
        r#"select dataset_id as "dataset_id!", status as "status: JobStatus" from jobs
           where id = $1 and kind = $2 and status = any($3)
           for update"#,
        id,
        JobKind::Delete as JobKind,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_optional(conn)
    .await
}
