//! Creating a job: the job row (whose insert sends its first notification) and its first task,
//! in one transaction.

use app::{
    job_types::JobTypeView,
    model::{DatasetView, JobView},
};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use std::{collections::HashMap, path::Path, sync::Arc};

use super::{
    deletion::{self, DeleteError},
    group::{self, Groups},
    lane::{self, Lane, Reserved},
    preview::{self, PreviewError},
};
use crate::{
    auth::Sees,
    spreadsheet::{
        mapping::Mapping,
        output::MAX_XLSX_ROWS,
        reading::Reading,
        schema::{self, Declared},
    },
    store::{
        datasets,
        items::{self as store_items, AddedBy, NewItem, NotAdded},
        job_types,
        jobs::{self, LiveJobs, NewJob, NewKind, NewRow, Options},
        queue::{self, Priority, TaskMsg},
        states::{DatasetState, ExportFormat, dataset},
        uploads::{self, File, Sent, Upload, UploadError},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("no upload has the id {0}")]
    UploadNotFound(Uuid),
    #[error("no dataset is named \"{0}\"")]
    DatasetNotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(
        "no open batch has the id {0}: a job can join only a batch that is running and not sealed"
    )]
    NotAnOpenBatch(Uuid),
    /// The owner has as many jobs waiting or running as they may.
    #[error("you already have {limit} jobs waiting or running")]
    TooManyActive { limit: i64 },
    /// The owner's jobs keep as many bytes of items as they may.
    #[error("your jobs keep {limit} bytes of items already")]
    TooManyItemBytes { limit: i64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The file sent with the job could not be stored (its owner's limits, or the database).
    #[error(transparent)]
    File(#[from] UploadError),
    #[error(transparent)]
    Queue(#[from] apalis_postgres::Error),
    #[error(transparent)]
    Preview(#[from] PreviewError),
    #[error(transparent)]
    Deletion(#[from] DeleteError),
    #[error("{0}")]
    Conflict(String),
    #[error(
        "unknown jobType \"{0}\": use \"import\", \"validate\", \"export\", \"batch\" or a \
         registered job type (GET /api/job-types)"
    )]
    UnknownJobType(String),
}

/// A job as a create request left it: new, or the one an earlier request with the same
/// dedupe key made (`replayed`).
#[derive(Debug)]
pub struct Created {
    pub job: JobView,
    pub replayed: bool,
}

/// An import, as asked for.
#[derive(Debug, Clone, Copy)]
pub struct Import<'a> {
    pub upload_id: Uuid,
    pub dataset: &'a str,
    /// A workbook's sheet (the first holding a table when `None`).
    pub sheet: Option<&'a str>,
    /// How to read the file, where the person said.
    pub reading: Reading,
    /// Where the file's columns go; checked against the file's header and the dataset's
    /// columns before the job is queued.
    pub mapping: Option<&'a Mapping>,
    /// A dry run: check and count every row, write none. The dataset must exist (a dry run
    /// creates nothing).
    pub dry_run: bool,
    /// The owner's import whose error report, fixed, this file is.
    pub fixes: Option<Uuid>,
    /// The dataset is new, with these columns and key: made `provisional` with the job, it
    /// comes into being when an import into it completes.
    pub new_dataset: Option<&'a Declared>,
}

/// Queues the import of one of `owner`'s uploads into their dataset (a new, provisional one
/// when they have none of that name: it comes into being when the import completes).
/// `converter` reads a workbook's header when a mapping must be checked against it. A plain
/// import is made in a group with the owner's other imports that arrive meanwhile
/// ([`group`]); a small file goes to this process's own workers through the groups' lane when
/// it has a place free. `sent`: the file the request sent with the import, for `owner`: stored
/// already (it is then not read again), or stored by the transaction that makes the job (no
/// mapping then: checking one reads the stored file).
pub async fn import(
    pool: &PgPool,
    converter: &Path,
    groups: &Arc<Groups>,
    owner: Uuid,
    (import, sent): (Import<'_>, Option<File>),
    options: &Options,
) -> Result<Created, CreateError> {
    schema::check_dataset_name(import.dataset).map_err(CreateError::Invalid)?;
    let file = match sent {
        Some(file) if file.upload().id == import.upload_id => file,
        _ => File::Stored(
            uploads::find(pool, import.upload_id, Sees::OwnedBy(owner))
                .await?
                .ok_or(CreateError::UploadNotFound(import.upload_id))?,
        ),
    };
    if let Some(mapping) = import.mapping {
        let File::Stored(upload) = &file else {
            let unstored = "a mapping is checked against a stored file only";
            return Err(sqlx::Error::Protocol(unstored.into()).into());
        };
        check_mapping(pool, converter, owner, upload, import, mapping).await?;
    }
    let options = with_dataset_order(options, owner, import.dataset);
    if group::takes(&import, &options) {
        return groups.create(pool, owner, file, import, options).await;
    }
    import_alone(pool, groups.lane(), owner, &file, import, &options).await
}

/// Makes an import of `file` in a transaction of its own (which stores the file, if it was
/// sent with the import); `options` carry its serialize key.
pub(super) async fn import_alone(
    pool: &PgPool,
    lane: Option<&Lane>,
    owner: Uuid,
    file: &File,
    import: Import<'_>,
    options: &Options,
) -> Result<Created, CreateError> {
    let mut tx = pool.begin().await?;
    // A take-over below locks a dataset that a retry of the owner's may hold: the owner's lock
    // goes first, as a retry takes it first.
    let key = options.serialize_key.as_deref().unwrap_or_default();
    jobs::hold_owners_jobs_and_keys(&mut tx, owner, &[key]).await?;
    let inserted = match insert_import(&mut tx, lane, owner, file, import, options).await {
        // The dataset a request declares exists: made by this very request, sent before?
        Err(CreateError::Conflict(message)) => {
            return match replayed(pool, tx, owner, options).await? {
                Some(created) => Ok(created),
                None => Err(CreateError::Conflict(message)),
            };
        }
        other => other?,
    };
    let plan = |job_id| Some(TaskMsg::Plan { job_id });
    queue_first_task(pool, tx, owner, options, inserted, &plan).await
}

/// Writes an import's job in `tx`, which holds the owner's lock and the import's serialize
/// key's: its checks, its dataset (made or taken over when it must be), its file if it was
/// sent with it ([`store_sent`]) and its job, whose insert leases it when `lane` has a place
/// for it. `None` when the insert met the owner's job with the same dedupe key.
pub(super) async fn insert_import(
    tx: &mut PgConnection,
    lane: Option<&Lane>,
    owner: Uuid,
    file: &File,
    import: Import<'_>,
    options: &Options,
) -> Result<Option<Inserted>, CreateError> {
    join_batch(tx, owner, options).await?;
    if let Some(fixed) = import.fixes
        && !jobs::is_owners_import(tx, fixed, owner).await?
    {
        return Err(CreateError::Invalid(format!(
            "\"fixes\" must be one of your imports; no import of yours has the id {fixed}."
        )));
    }
    let dataset_id = import_target(tx, owner, &import).await?;
    let kind = NewKind::Import {
        upload_id: import.upload_id,
        sheet: import.sheet,
        reading: &import.reading,
        mapping: import.mapping,
        dry_run: import.dry_run,
        fixes: import.fixes,
    };
    store_sent(tx, owner, file.sent().as_slice()).await?;
    let handing = place_for(lane, file.upload());
    let lease = handing
        .as_ref()
        .map(|(lane, reserved)| lane.lease(reserved));
    let inserted = jobs::insert(tx, owner, Some(dataset_id), kind, options, lease)
        .await
        .map_err(|err| match err {
            // Retention removed the file (unused for as long as files are kept) just now.
            sqlx::Error::Database(db) if db.constraint() == Some("jobs_upload_id_fkey") => {
                CreateError::UploadNotFound(import.upload_id)
            }
            err => err.into(),
        })?;
    Ok(inserted.map(|job| Inserted { job, handing }))
}

/// A plain import of a group's ([`group::takes`]): its file, what it asks for and its
/// options, which carry its serialize key.
pub(super) struct Plain<'a> {
    pub file: &'a File,
    pub import: Import<'a>,
    pub options: &'a Options,
}

/// Writes the jobs of a group of plain imports in `tx`, which holds the owner's lock and the
/// imports' serialize keys', as [`insert_import`] writes one's, with a statement for all where
/// it can: the datasets none of them has yet made in one (those that exist found, or taken
/// over, one by one), the files sent with them stored in one ([`store_sent`]), and the jobs
/// inserted in one, each leased when `lane` has a place for it. In the group's order.
pub(super) async fn insert_plain(
    tx: &mut PgConnection,
    lane: Option<&Lane>,
    owner: Uuid,
    plain: &[Plain<'_>],
) -> Result<Vec<Inserted>, CreateError> {
    debug_assert!(
        plain
            .iter()
            .all(|one| group::takes(&one.import, one.options)),
        "plain imports only: no batch, fixed import, mapping, dry run or declared dataset"
    );
    let mut names: Vec<&str> = plain.iter().map(|one| one.import.dataset).collect();
    names.sort_unstable();
    names.dedup();
    let mut targets: HashMap<String, Uuid> = datasets::make_new(tx, owner, &names)
        .await?
        .into_iter()
        .collect();
    let mut dataset_ids = Vec::with_capacity(plain.len());
    for one in plain {
        // Each name once: a dataset this group made or took over has no job yet, and a second
        // take-over would find it abandoned.
        let id = match targets.get(one.import.dataset) {
            Some(&id) => id,
            None => {
                let id = import_target(tx, owner, &one.import).await?;
                targets.insert(one.import.dataset.to_owned(), id);
                id
            }
        };
        dataset_ids.push(id);
    }
    let (sent, stored): (Vec<&File>, Vec<&File>) = plain
        .iter()
        .map(|one| one.file)
        .partition(|file| file.sent().is_some());
    if !sent.is_empty() && !stored.is_empty() {
        let ids: Vec<Uuid> = stored.iter().map(|file| file.upload().id).collect();
        uploads::hold_stored(tx, &ids).await?;
    }
    let sent: Vec<&Sent> = sent.into_iter().filter_map(File::sent).collect();
    store_sent(tx, owner, &sent).await?;
    let handing: Vec<_> = plain
        .iter()
        .map(|one| place_for(lane, one.file.upload()))
        .collect();
    let rows: Vec<NewRow<'_>> = plain
        .iter()
        .zip(&dataset_ids)
        .zip(&handing)
        .map(|((one, &dataset_id), handing)| NewRow {
            dataset_id: Some(dataset_id),
            kind: NewKind::Import {
                upload_id: one.import.upload_id,
                sheet: one.import.sheet,
                reading: &one.import.reading,
                mapping: None,
                dry_run: false,
                fixes: None,
            },
            options: one.options,
            lease: handing
                .as_ref()
                .map(|(lane, reserved)| lane.lease(reserved)),
        })
        .collect();
    let jobs = jobs::insert_many(tx, owner, &rows).await?;
    if jobs.len() != plain.len() {
        // A plain import has no dedupe key: it cannot meet an earlier job.
        return Err(sqlx::Error::RowNotFound.into());
    }
    Ok(jobs
        .into_iter()
        .zip(handing)
        .map(|(job, handing)| Inserted { job, handing })
        .collect())
}

/// Stores the files sent with the imports whose jobs `tx` is about to insert (`uploads::
/// store_sent`): once their datasets are settled, so that the owner's row of stored bytes its
/// trigger locks is held only from here to the commit, and never while a dataset is waited
/// for (retention takes them in the other order).
async fn store_sent(tx: &mut PgConnection, owner: Uuid, sent: &[&Sent]) -> Result<(), CreateError> {
    if !sent.is_empty() {
        uploads::store_sent(&mut *tx, owner, sent).await?;
    }
    Ok(())
}

/// A place in `lane` for a job of `upload`, taken under the owner's lock (a create waiting for
/// it holds none); `None` when the file is not small or the lane is full.
fn place_for(lane: Option<&Lane>, upload: &Upload) -> Option<(Lane, Reserved)> {
    lane.and_then(|lane| Some((lane.clone(), lane.reserve(upload.size)?)))
}

/// Declares a dataset of `owner`'s: `ready` at once, with its columns and key. `None` when they
/// have one of that name.
pub async fn dataset(
    pool: &PgPool,
    owner: Uuid,
    name: &str,
    declared: &Declared,
) -> Result<Option<DatasetView>, CreateError> {
    let mut tx = pool.begin().await?;
    take_over_abandoned(&mut tx, owner, name, true).await?;
    let ready = DatasetState::Ready;
    if datasets::insert_declared(&mut tx, owner, name, declared, ready)
        .await?
        .is_none()
    {
        return Ok(None);
    }
    tx.commit().await?;
    Ok(datasets::find(pool, owner, name).await?)
}

/// Deletes what a failed or abandoned import of this name left, so the new dataset starts
/// afresh; a `delete` job removes its rows, if it has any. The schema it was declared with, if
/// it was: the new dataset keeps it (unless `redeclaring`).
async fn take_over_abandoned(
    conn: &mut PgConnection,
    owner: Uuid,
    name: &str,
    redeclaring: bool,
) -> Result<Option<Declared>, CreateError> {
    let Some(abandoned) = dataset::take_over_abandoned(conn, owner, name, redeclaring).await?
    else {
        return Ok(None);
    };
    if abandoned.doomed.row_count > 0 {
        deletion::queue(conn, owner, abandoned.doomed).await?;
    }
    Ok(abandoned.declared)
}

/// The dataset a new import (or dry run) of `owner`'s writes to: the one it declares
/// (`provisional`, refused when they have one of that name), their `ready` one of that name
/// (a dry run needs one), or a new `provisional` one.
async fn import_target(
    conn: &mut PgConnection,
    owner: Uuid,
    import: &Import<'_>,
) -> Result<Uuid, CreateError> {
    let name = import.dataset;
    if import.dry_run && import.new_dataset.is_none() {
        return datasets::for_job(conn, owner, name)
            .await?
            .ok_or_else(|| CreateError::DatasetNotFound(name.to_owned()));
    }
    let inherited = take_over_abandoned(conn, owner, name, import.new_dataset.is_some()).await?;
    let Some(declared) = import.new_dataset.or(inherited.as_ref()) else {
        return Ok(datasets::for_import(conn, owner, name).await?);
    };
    let provisional = DatasetState::Provisional;
    datasets::insert_declared(conn, owner, name, declared, provisional)
        .await?
        .ok_or_else(|| {
            CreateError::Conflict(format!(
                "You have a dataset named \"{name}\" already (or an import is making it): \
                 import into it, or choose another name."
            ))
        })
}

/// Refuses a mapping the import would refuse: one that fills a column twice or a column the
/// dataset lacks, or leaves a required column empty, given the header the file has.
async fn check_mapping(
    pool: &PgPool,
    converter: &Path,
    owner: Uuid,
    upload: &Upload,
    import: Import<'_>,
    mapping: &Mapping,
) -> Result<(), CreateError> {
    let read_as = preview::ReadAs {
        sheet: import.sheet,
        reading: import.reading,
    };
    let header = preview::header(pool, converter, upload, read_as)
        .await?
        .map_err(|problem| CreateError::Invalid(format!("The file cannot be mapped: {problem}")))?;
    let columns = match import.new_dataset {
        Some(declared) => declared.columns.clone(),
        None => {
            let mut conn = pool.acquire().await?;
            datasets::columns_for_import(&mut conn, owner, import.dataset).await?
        }
    };
    preview::check_mapping(&header, mapping, &columns).map_err(CreateError::Invalid)
}

/// Queues the export of one of `owner`'s datasets as `csv` or `xlsx`.
pub async fn export(
    pool: &PgPool,
    owner: Uuid,
    dataset: &str,
    format: ExportFormat,
    options: &Options,
) -> Result<Created, CreateError> {
    let options = with_dataset_order(options, owner, dataset);
    let mut tx = pool.begin().await?;
    // Before any other lock, as every create takes it (and a retry).
    let key = options.serialize_key.as_deref().unwrap_or_default();
    jobs::hold_owners_jobs_and_keys(&mut tx, owner, &[key]).await?;
    let dataset_id = datasets::for_job(&mut tx, owner, dataset)
        .await?
        .ok_or_else(|| CreateError::DatasetNotFound(dataset.to_owned()))?;
    let rows = datasets::row_count(&mut tx, dataset_id).await?;
    if format == ExportFormat::Xlsx && rows > MAX_XLSX_ROWS {
        return Err(CreateError::Invalid(format!(
            "\"{dataset}\" has {rows} rows, more than an Excel sheet holds ({MAX_XLSX_ROWS}): \
             export it as CSV."
        )));
    }
    join_batch(&mut tx, owner, &options).await?;
    let kind = NewKind::Export { format };
    let inserted = jobs::insert(&mut tx, owner, Some(dataset_id), kind, &options, None).await?;
    let plan = |job_id| Some(TaskMsg::ExportPlan { job_id });
    queue_first_task(pool, tx, owner, &options, inserted.map(Into::into), &plan).await
}

/// An export's file format from its word in a request.
pub fn parse_format(word: &str) -> Result<ExportFormat, CreateError> {
    ExportFormat::parse(word).ok_or_else(|| {
        CreateError::Invalid(format!(
            "Unknown format \"{word}\": use \"csv\" or \"xlsx\"."
        ))
    })
}

/// Items per request at most (`POST /api/jobs` and `POST /api/jobs/{id}/items`).
pub const MAX_ITEMS_PER_CALL: usize = 10_000;

/// The longest item dedupe key accepted.
pub const MAX_ITEM_KEY_CHARS: usize = 200;

/// Refuses a batch of items a job of `job_type` cannot take: too many at once, a payload
/// larger than the type allows, a dedupe key too long.
pub fn check_items(job_type: &JobTypeView, items: &[NewItem]) -> Result<(), CreateError> {
    if items.len() > MAX_ITEMS_PER_CALL {
        return Err(CreateError::Invalid(format!(
            "At most {MAX_ITEMS_PER_CALL} items per request: add the rest with POST \
             /api/jobs/{{id}}/items."
        )));
    }
    for (i, item) in items.iter().enumerate() {
        if item.payload.len() > job_type.max_payload_bytes as usize {
            return Err(CreateError::Invalid(format!(
                "Item {} has a payload of {} bytes, more than \"{}\" takes ({} bytes).",
                i + 1,
                item.payload.len(),
                job_type.name,
                job_type.max_payload_bytes
            )));
        }
        if let Some(why) = store_items::unstorable(&item.payload) {
            return Err(CreateError::Invalid(format!(
                "Item {}'s payload holds {why}, which cannot be stored.",
                i + 1
            )));
        }
        if item.dedupe_key.as_ref().is_some_and(|key| {
            key.is_empty() || key.chars().count() > MAX_ITEM_KEY_CHARS || key.contains('\0')
        }) {
            return Err(CreateError::Invalid(format!(
                "Item {}'s \"dedupeKey\" must be 1 to {MAX_ITEM_KEY_CHARS} characters, none NUL.",
                i + 1
            )));
        }
    }
    Ok(())
}

/// The registered type a request names, with the first items it sends checked against it.
pub async fn job_type_for(
    pool: &PgPool,
    name: &str,
    items: &[NewItem],
) -> Result<JobTypeView, CreateError> {
    let job_type = job_types::find(pool, name)
        .await?
        .ok_or_else(|| CreateError::UnknownJobType(name.to_owned()))?;
    check_items(&job_type, items)?;
    Ok(job_type)
}

/// Queues a job of a registered type for `owner`, with its first items, checked
/// ([`job_type_for`]), within `max_item_bytes` of items kept by the owner's jobs; more may be
/// added until it is sealed. Its items are claimed by external workers, not queued: the job
/// has no task of its own.
pub async fn items(
    pool: &PgPool,
    owner: Uuid,
    job_type: &JobTypeView,
    items: &[NewItem],
    options: &Options,
    max_item_bytes: i64,
) -> Result<Created, CreateError> {
    let options = Options {
        serialize_key: options
            .serialize_key
            .as_ref()
            .map(|key| format!("{owner}:{key}")),
        ..options.clone()
    };
    let mut tx = pool.begin().await?;
    let key = options.serialize_key.as_deref().unwrap_or_default();
    jobs::hold_owners_jobs_and_keys(&mut tx, owner, &[key]).await?;
    join_batch(&mut tx, owner, &options).await?;
    let kind = NewKind::Items {
        job_type: &job_type.name,
        max_failures_per_item: job_type.max_failures_per_item,
    };
    let mut inserted = jobs::insert(&mut tx, owner, None, kind, &options, None).await?;
    let mut added = 0;
    if let Some(job) = &mut inserted {
        if !items.is_empty() {
            let by = AddedBy::Person {
                owner: Some(owner),
                max_bytes: max_item_bytes,
            };
            match store_items::add(&mut tx, job.id, by, items).await? {
                Ok(batch) => added = batch.added,
                Err(NotAdded::OverQuota { limit }) => {
                    return Err(CreateError::TooManyItemBytes { limit });
                }
                Err(_) => return Err(sqlx::Error::RowNotFound.into()),
            }
        }
        // The limit and the turn count the whole chain.
        if let Some(live) = follow_ups(pool, &mut tx, owner, job.id, job_type).await? {
            job.live = live;
        }
    }
    let inserted = inserted.map(Into::into);
    let created = queue_first_task(pool, tx, owner, &options, inserted, NO_TASK).await?;
    after_items_added(pool, added);
    Ok(created)
}

/// Items committed at once from which the table's statistics are checked.
const BULK_ITEMS: i64 = 1_000;

/// After `added` items were committed in one batch: a bulk load refreshes the planner's
/// statistics of the items' table if it outgrew them (`store::items::analyze_if_grown`), in the
/// background. Smaller batches grow the table slowly enough for autovacuum.
pub fn after_items_added(pool: &PgPool, added: i64) {
    if added < BULK_ITEMS {
        return;
    }
    let pool = pool.clone();
    tokio::spawn(async move {
        if let Err(err) = store_items::analyze_if_grown(&pool, added).await {
            tracing::warn!("cannot refresh the statistics of the items' table: {err}");
        }
    });
}

/// The chain a job of `job_type` starts when the type has a follow-up: a child job of the
/// follow-up type (and its own child, and so on), which the parent's results fill and which
/// is sealed once the parent's items have all ended (`store::states::item_job`). The owner's
/// live jobs as the last child's insert counted them, the whole chain included; `None` when
/// the type has no follow-up.
async fn follow_ups(
    pool: &PgPool,
    conn: &mut PgConnection,
    owner: Uuid,
    root: Uuid,
    job_type: &JobTypeView,
) -> Result<Option<LiveJobs>, CreateError> {
    let mut parent = root;
    let mut live = None;
    let mut next = job_type.follow_up.clone();
    while let Some(name) = next {
        // Registered before the type that names it, and never removed.
        let child_type = job_types::find(pool, &name)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        let kind = NewKind::Items {
            job_type: &child_type.name,
            max_failures_per_item: child_type.max_failures_per_item,
        };
        let options = Options {
            parent_id: Some(parent),
            ..Options::default()
        };
        let child = jobs::insert(conn, owner, None, kind, &options, None)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        parent = child.id;
        live = Some(child.live);
        next = child_type.follow_up;
    }
    Ok(live)
}

/// Creates a batch: a parent for imports and exports created with its id as `parentId`. It
/// completes once sealed (`POST /api/jobs/{id}/seal`) and all its children have completed.
pub async fn batch(pool: &PgPool, owner: Uuid, options: &Options) -> Result<Created, CreateError> {
    let mut tx = pool.begin().await?;
    // Before any other lock, as every create takes it (`queue_first_task` counts under it).
    jobs::hold_owners_jobs(&mut tx, owner).await?;
    let inserted = jobs::insert_batch(&mut tx, owner, options).await?;
    // A batch has no task of its own: batch settlement (`maintenance::batches`) ends it.
    queue_first_task(pool, tx, owner, options, inserted.map(Into::into), NO_TASK).await
}

/// Checks that the job's batch, if it names one, is the owner's and takes children, and holds
/// it open until the job is created.
async fn join_batch(
    conn: &mut PgConnection,
    owner: Uuid,
    options: &Options,
) -> Result<(), CreateError> {
    match options.parent_id {
        Some(parent) if !jobs::lock_open_batch(conn, parent, owner).await? => {
            Err(CreateError::NotAnOpenBatch(parent))
        }
        _ => Ok(()),
    }
}

/// The job an earlier request with the same dedupe key made (this request's changes dropped).
async fn deduped(
    pool: &PgPool,
    tx: Transaction<'_, Postgres>,
    owner: Uuid,
    options: &Options,
) -> Result<Uuid, CreateError> {
    tx.rollback().await?;
    let key = options.dedupe_key.as_deref().unwrap_or_default();
    let mut conn = pool.acquire().await?;
    Ok(jobs::find_deduped(&mut conn, owner, key)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?)
}

/// The job an earlier request with the same dedupe key made, if there is one (this request's
/// changes dropped either way).
async fn replayed(
    pool: &PgPool,
    mut tx: Transaction<'_, Postgres>,
    owner: Uuid,
    options: &Options,
) -> Result<Option<Created>, CreateError> {
    let earlier = match options.dedupe_key.as_deref() {
        Some(key) => jobs::find_deduped(&mut tx, owner, key).await?,
        None => None,
    };
    tx.rollback().await?;
    replay_of(pool, owner, earlier).await
}

/// The job an earlier request of `owner`'s with this request's dedupe key made, if there is
/// one: asked before a file sent with its job is stored, so that a retry of a request that
/// made its job stores no second file (nor is refused for the room it would take).
pub async fn replay(
    pool: &PgPool,
    owner: Uuid,
    options: &Options,
) -> Result<Option<Created>, CreateError> {
    let Some(key) = options.dedupe_key.as_deref() else {
        return Ok(None);
    };
    let earlier = jobs::find_deduped(&mut *pool.acquire().await?, owner, key).await?;
    replay_of(pool, owner, earlier).await
}

async fn replay_of(
    pool: &PgPool,
    owner: Uuid,
    earlier: Option<Uuid>,
) -> Result<Option<Created>, CreateError> {
    let Some(id) = earlier else {
        return Ok(None);
    };
    let job = jobs::find(pool, id, Sees::OwnedBy(owner))
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok(Some(Created {
        job,
        replayed: true,
    }))
}

/// Jobs on a dataset run in creation order unless the request names another serialize key:
/// an export never reads a dataset an earlier import is still writing. Keys are the owner's
/// own (stored as `<owner>:<key>`): nobody can queue ahead of, or behind, another's jobs.
fn with_dataset_order(options: &Options, owner: Uuid, dataset: &str) -> Options {
    let key = options
        .serialize_key
        .clone()
        .unwrap_or_else(|| format!("dataset:{dataset}"));
    Options {
        serialize_key: Some(format!("{owner}:{key}")),
        ..options.clone()
    }
}

/// A new job's first task, if it has one, by the job's id.
type FirstTask<'a> = &'a (dyn Fn(Uuid) -> Option<TaskMsg> + Sync);

/// No task: a batch's, or a job of a registered type's (its items are claimed).
const NO_TASK: FirstTask<'static> = &|_| None;

/// A job just inserted, and the lane and the place in it its insert took a lease for, if it
/// did.
pub(super) struct Inserted {
    pub job: NewJob,
    handing: Option<(Lane, Reserved)>,
}

impl From<NewJob> for Inserted {
    fn from(job: NewJob) -> Self {
        Self { job, handing: None }
    }
}

impl Inserted {
    /// Whether its insert leased its first task: it is handed to this process's workers,
    /// with no message.
    pub fn is_leased(&self) -> bool {
        self.handing.is_some() && self.job.leased_max_attempts.is_some()
    }

    /// Its first message's turn: the new job is the owner's newest live one, the others are
    /// ahead of it.
    pub fn turn(&self) -> Priority {
        Priority::Turn {
            ahead: self.job.live.all - 1,
        }
    }

    /// Once its insert committed: hands on the job if its insert leased it, or gives the
    /// lease back when the workers have stopped.
    pub async fn hand_on(self, pool: &PgPool) {
        if let (Some((lane, reserved)), Some(max_attempts)) =
            (self.handing, self.job.leased_max_attempts)
            && let Err(lease) = lane.hand(reserved, self.job.id, max_attempts)
        {
            lane::give_back(pool, &lease).await;
        }
    }
}

/// Refuses a new job past its owner's live-job limit: the live jobs were counted by its
/// insert, under the owner's lock.
pub(super) fn check_limit(options: &Options, job: &NewJob) -> Result<(), CreateError> {
    match options.active_jobs_limit {
        Some(limit) if job.live.limited > limit => Err(CreateError::TooManyActive { limit }),
        _ => Ok(()),
    }
}

/// Queues the new job's first task (if it has one) and commits, or hands it to this process's
/// workers when its insert leased it ([`lane`]); or, when the insert met the owner's job with
/// the same dedupe key, drops this request's changes and answers with that job. The owner's
/// live jobs were counted by the insert, under the owner's lock, which the caller has held
/// since its transaction began.
async fn queue_first_task(
    pool: &PgPool,
    mut tx: Transaction<'static, Postgres>,
    owner: Uuid,
    options: &Options,
    inserted: Option<Inserted>,
    task: FirstTask<'_>,
) -> Result<Created, CreateError> {
    let (job_id, replayed) = match inserted {
        Some(new) => {
            let job_id = new.job.id;
            if let Err(refused) = check_limit(options, &new.job) {
                tx.rollback().await?;
                return Err(refused);
            }
            if new.is_leased() {
                // Committed and handed on by a task of its own: a request dropped during its
                // commit (its client gone) still hands on the job the commit leased, rather
                // than leaving it to lease rescue, which would count a lost attempt.
                let pool = pool.clone();
                let handoff = tokio::spawn(async move {
                    tx.commit().await?;
                    new.hand_on(&pool).await;
                    sqlx::Result::Ok(())
                });
                let crashed = |err| Err(sqlx::Error::Io(std::io::Error::other(err)));
                handoff.await.unwrap_or_else(crashed)?;
            } else {
                if let Some(first) = task(job_id) {
                    queue::push(&mut tx, &[(first, new.job.ticket)], new.turn()).await?;
                }
                tx.commit().await?;
            }
            (job_id, false)
        }
        None => (deduped(pool, tx, owner, options).await?, true),
    };
    let job = jobs::find(pool, job_id, Sees::OwnedBy(owner))
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok(Created { job, replayed })
}
