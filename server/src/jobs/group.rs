//! Creating an owner's imports in groups. Every create of an owner's holds the owner's lock
//! from before its job's insert to its commit (`store::jobs::hold_owners_jobs_and_keys`), so
//! one owner's creates run one at a time, however many processes make them. Made one
//! transaction each, the lock was handed from connection to connection after every job, and
//! its waits were most of a create's time: `make bench ONLY=small` (2,000 jobs, 16 clients)
//! measured 36.7 ms of waiting for it per create, for 3.3 ms of holding it.
//!
//! So a process gathers the plain imports ([`takes`]) its requests ask of one owner while that
//! owner's previous group is being made: a task of its own, the group's leader, makes them
//! all in one transaction, which takes the owner's lock (and the imports' serialize keys')
//! once, writes their jobs as creates of one would, with one statement for all where it can
//! (`create::insert_plain`: their new datasets in one, the files sent with them in one, their
//! jobs in one), queues the messages
//! of those their insert did not lease in one statement, and commits once. Jobs leased by their
//! inserts are then handed to this process's workers ([`super::lane`]), and the requests are
//! answered by a task of their own while the leader makes the owner's next group. The first
//! import an owner asks for while no group of theirs is being made is made at once, alone.
//!
//! A group is rolled back when an insert meets anything but a new job within the owner's
//! live-job limit. Past the limit, that import and those after it are refused (each adds a
//! live job) and those before it are made again, as a smaller group. Anything else an import
//! meets (a dataset being made by another import, a file removed meanwhile, the files sent
//! with the group past their owner's limits, an error the database reported) has the
//! group's imports made one by one, each as a create of one, which
//! gives each request its own answer; no connection, or the database gone, is every request's
//! answer at once. Being made by a task of their own, a group's jobs are created even if the
//! requests that asked for them are gone; an owner has at most [`MAX_WAITING`] imports
//! waiting for a group, and a request past them is made alone, by itself.

use std::{
    collections::{HashMap, hash_map::Entry},
    sync::{Arc, Mutex},
};

use sqlx::PgPool;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{
    create::{self, CreateError, Created, Import, Inserted, Plain},
    lane::Lane,
};
use crate::{
    auth::Sees,
    spreadsheet::reading::Reading,
    store::{
        jobs::{self, Options},
        queue::{self, TaskMsg},
        uploads::{File, UploadError},
    },
};

/// Imports made in one transaction at most: each of a group's requests waits for its commit.
const MAX_GROUP: usize = 32;

/// Imports of one owner's that may wait for a group; a request past them is made alone, in its
/// own request (waiting for the owner's lock as creates of one do), so a client that asks for
/// many and hangs up leaves no unbounded queue behind.
const MAX_WAITING: usize = 4 * MAX_GROUP;

/// The imports each owner's requests wait to have made, by owner; an owner is here while a
/// group of theirs is being made. And the lane their jobs are handed on by.
pub struct Groups {
    lane: Option<Lane>,
    waiting: Mutex<HashMap<Uuid, Vec<Waiting>>>,
}

/// A plain import a request asked for, and where its answer goes.
struct Waiting {
    file: File,
    dataset: String,
    sheet: Option<String>,
    reading: Reading,
    options: Options,
    answer: oneshot::Sender<Result<Created, CreateError>>,
}

impl Waiting {
    fn import(&self) -> Import<'_> {
        Import {
            upload_id: self.file.upload().id,
            dataset: &self.dataset,
            sheet: self.sheet.as_deref(),
            reading: self.reading,
            mapping: None,
            dry_run: false,
            fixes: None,
            new_dataset: None,
        }
    }
}

/// Whether an import is plain enough to be made in a group: one that needs nothing but its
/// insert and whose insert can only make a new job (or fail). An import with a mapping, a
/// declared dataset, a dry run, a fixed import, a batch or a dedupe key (whose replay drops
/// the request's changes) is made alone.
pub fn takes(import: &Import<'_>, options: &Options) -> bool {
    import.mapping.is_none()
        && import.new_dataset.is_none()
        && !import.dry_run
        && import.fixes.is_none()
        && options.parent_id.is_none()
        && options.dedupe_key.is_none()
}

impl Groups {
    /// Groups whose small imports' jobs are handed on by `lane` (if the process runs workers).
    pub fn new(lane: Option<Lane>) -> Arc<Self> {
        Arc::new(Self {
            lane,
            waiting: Mutex::default(),
        })
    }

    pub fn lane(&self) -> Option<&Lane> {
        self.lane.as_ref()
    }

    /// Makes a plain import of `owner`'s ([`takes`]), of `file`, in the owner's next group
    /// (which stores the file, if it was sent with the import); `options` carry its serialize
    /// key already.
    pub async fn create(
        self: &Arc<Self>,
        pool: &PgPool,
        owner: Uuid,
        file: File,
        import: Import<'_>,
        options: Options,
    ) -> Result<Created, CreateError> {
        debug_assert!(takes(&import, &options), "a group makes plain imports only");
        let (answer, answered) = oneshot::channel();
        let waiting = Waiting {
            file,
            dataset: import.dataset.to_owned(),
            sheet: import.sheet.map(str::to_owned),
            reading: import.reading,
            options,
            answer,
        };
        let joined = match self.lock().entry(owner) {
            Entry::Occupied(mut queued) if queued.get().len() < MAX_WAITING => {
                queued.get_mut().push(waiting);
                Joined::Queued
            }
            Entry::Occupied(_) => Joined::Full(waiting),
            Entry::Vacant(idle) => {
                idle.insert(Vec::new());
                Joined::Leads(waiting)
            }
        };
        match joined {
            Joined::Queued => {}
            Joined::Full(waiting) => return self.make_alone(pool, owner, &waiting).await,
            Joined::Leads(first) => {
                // Made before the task, so that the owner leaves the map even if the task
                // never runs (the runtime stopping).
                let leading = Leading {
                    groups: Arc::clone(self),
                    owner,
                    done: false,
                };
                tokio::spawn(Arc::clone(self).lead(pool.clone(), leading, first));
            }
        }
        answered
            .await
            .unwrap_or_else(|_| Err(stopped("the group's leader stopped").into()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Vec<Waiting>>> {
        // A panic while it was held cannot leave the map half changed.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes `first`, then the groups of the owner's imports that wait meanwhile, until none
    /// does.
    async fn lead(self: Arc<Self>, pool: PgPool, mut leading: Leading, first: Waiting) {
        let owner = leading.owner;
        let mut group = vec![first];
        while !group.is_empty() {
            self.make(&pool, owner, group).await;
            group = self.next_group(owner);
        }
        leading.done = true;
    }

    /// The owner's next group, taken from those waiting; none (and the owner is no longer
    /// here) when none waits.
    fn next_group(&self, owner: Uuid) -> Vec<Waiting> {
        let mut waiting = self.lock();
        let Some(queued) = waiting.get_mut(&owner) else {
            return Vec::new();
        };
        if queued.is_empty() {
            waiting.remove(&owner);
            return Vec::new();
        }
        let taken = queued.len().min(MAX_GROUP);
        queued.drain(..taken).collect()
    }

    /// Makes a group and answers each of its requests.
    async fn make(&self, pool: &PgPool, owner: Uuid, mut group: Vec<Waiting>) {
        while group.len() > 1 {
            match self.insert_group(pool, owner, &group).await {
                Outcome::Made(made) => {
                    // Read back and answered while the owner's next group is made.
                    tokio::spawn(answer_made(pool.clone(), owner, group, made));
                    return;
                }
                Outcome::OverLimit { at, limit } => {
                    // Those before it are made again, as a smaller group.
                    for waiting in group.drain(at..) {
                        let _gone = waiting
                            .answer
                            .send(Err(CreateError::TooManyActive { limit }));
                    }
                }
                Outcome::OneByOne(err) => {
                    tracing::debug!(
                        "a group of {} imports is made one by one instead: {err}",
                        group.len()
                    );
                    break;
                }
                Outcome::Failed(err) => return answer_failed(group, &err),
            }
        }
        for waiting in group {
            let made = self.make_alone(pool, owner, &waiting).await;
            let _gone = waiting.answer.send(made);
        }
    }

    /// Makes one waiting import in a transaction of its own, as a create of one.
    async fn make_alone(
        &self,
        pool: &PgPool,
        owner: Uuid,
        waiting: &Waiting,
    ) -> Result<Created, CreateError> {
        let (lane, file, options) = (self.lane(), &waiting.file, &waiting.options);
        create::import_alone(pool, lane, owner, file, waiting.import(), options).await
    }

    /// Inserts the group's jobs and commits, handing on those the inserts leased; or rolls
    /// back, when an insert meets anything but a new job within its owner's limit.
    async fn insert_group(&self, pool: &PgPool, owner: Uuid, group: &[Waiting]) -> Outcome {
        let mut tx = match crate::db::begin_planned_once(pool).await {
            Ok(tx) => tx,
            Err(err) => return Outcome::Failed(err.into()),
        };
        let keys: Vec<&str> = group
            .iter()
            .map(|waiting| waiting.options.serialize_key.as_deref().unwrap_or_default())
            .collect();
        if let Err(err) = jobs::hold_owners_jobs_and_keys(&mut tx, owner, &keys).await {
            return Outcome::Failed(err.into());
        }
        let plain: Vec<_> = group
            .iter()
            .map(|waiting| Plain {
                file: &waiting.file,
                import: waiting.import(),
                options: &waiting.options,
            })
            .collect();
        let inserted = match create::insert_plain(&mut tx, self.lane(), owner, &plain).await {
            Ok(inserted) => inserted,
            Err(err) => {
                // Given back before the group goes on, so the owner's lock is free at once.
                let _rolled_back = tx.rollback().await;
                return match its_own(&err) {
                    true => Outcome::OneByOne(err),
                    false => Outcome::Failed(err),
                };
            }
        };
        if let Some(refused) = refused(group, &inserted) {
            let _rolled_back = tx.rollback().await;
            return refused;
        }
        let queued: Vec<_> = inserted
            .iter()
            .filter(|new| !new.is_leased())
            .map(|new| {
                (
                    TaskMsg::Plan { job_id: new.job.id },
                    new.job.ticket,
                    new.turn(),
                )
            })
            .collect();
        if !queued.is_empty()
            && let Err(err) = queue::push_ranked(&mut tx, queued).await
        {
            let _rolled_back = tx.rollback().await;
            return Outcome::Failed(err.into());
        }
        if let Err(err) = tx.commit().await {
            return Outcome::Made(Err(err.into()));
        }
        let ids = inserted.iter().map(|new| new.job.id).collect();
        for new in inserted {
            new.hand_on(pool).await;
        }
        Outcome::Made(Ok(ids))
    }
}

/// How a group is refused, if one of its jobs is past its owner's live-job limit (counted by
/// its insert): the first such import and those after it, each adding a live job.
fn refused(group: &[Waiting], inserted: &[Inserted]) -> Option<Outcome> {
    let mut checked = group.iter().zip(inserted).enumerate();
    checked.find_map(
        |(at, (waiting, new))| match create::check_limit(&waiting.options, &new.job) {
            Ok(()) => None,
            Err(CreateError::TooManyActive { limit }) => Some(Outcome::OverLimit { at, limit }),
            Err(err) => Some(Outcome::OneByOne(err)),
        },
    )
}

/// How a group's transaction ended.
enum Outcome {
    /// Committed: the jobs' ids, in the group's order. Or its commit's error: it may have
    /// committed, so this is every request's answer.
    Made(Result<Vec<Uuid>, CreateError>),
    /// Rolled back: the import at `at` in the group (and so every one after it, each adding a
    /// live job) is past its owner's live-job limit.
    OverLimit { at: usize, limit: i64 },
    /// Rolled back: an import met something of its own (a dataset another import is making,
    /// its file removed meanwhile, files sent with the group past their owner's limits, an
    /// error the database reported): each is made alone.
    OneByOne(CreateError),
    /// No connection, or the database went away (or the group's lock or messages failed):
    /// every request is answered with this error, once, rather than each waiting for it in
    /// turn.
    Failed(CreateError),
}

/// Whether an import's error may be its own rather than the connection's or the database
/// server's (gone, shutting down, out of connections: SQLSTATE classes 08 and 57P).
fn its_own(err: &CreateError) -> bool {
    let (CreateError::Database(err) | CreateError::File(UploadError::Database(err))) = err else {
        return true;
    };
    match err {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            !(code.starts_with("08") || code.starts_with("57P"))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => false,
        _ => true,
    }
}

/// Answers every request of a group that could not be made with `err`.
fn answer_failed(group: Vec<Waiting>, err: &CreateError) {
    let message = err.to_string();
    for waiting in group {
        let _gone = waiting.answer.send(Err(stopped(&message).into()));
    }
}

/// Answers each request of a group that was made (`made`: its jobs' ids, or the commit's
/// error), with its job as it stands.
async fn answer_made(
    pool: PgPool,
    owner: Uuid,
    group: Vec<Waiting>,
    made: Result<Vec<Uuid>, CreateError>,
) {
    let found = match made {
        Ok(ids) => jobs::find_many(&pool, &ids, Sees::OwnedBy(owner))
            .await
            .map(|views| (ids, views))
            .map_err(CreateError::from),
        Err(err) => Err(err),
    };
    match found {
        Ok((ids, views)) => {
            let mut views: HashMap<Uuid, _> = views.into_iter().map(|job| (job.id, job)).collect();
            for (waiting, id) in group.into_iter().zip(ids) {
                let job = views.remove(&id).ok_or(sqlx::Error::RowNotFound.into());
                let _gone = waiting.answer.send(job.map(|job| Created {
                    job,
                    replayed: false,
                }));
            }
        }
        Err(err) => answer_failed(group, &err),
    }
}

/// An error a request is answered with when its group could not be made or read back.
fn stopped(why: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(why.to_owned()))
}

/// How a request joined its owner's imports waiting for a group.
enum Joined {
    /// It waits for the leader's next group.
    Queued,
    /// Too many wait: it is made alone.
    Full(Waiting),
    /// None of the owner's was being made: it leads, with its import first.
    Leads(Waiting),
}

/// Held by a group's leader: if it stops before its last group (a panic), the owner leaves
/// the map, and the requests still waiting are answered with an error (their answers'
/// senders dropped), rather than waiting for ever; the owner's next request leads anew.
struct Leading {
    groups: Arc<Groups>,
    owner: Uuid,
    done: bool,
}

impl Drop for Leading {
    fn drop(&mut self) {
        if !self.done {
            self.groups.lock().remove(&self.owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(dataset: &str) -> Import<'_> {
        Import {
            upload_id: Uuid::nil(),
            dataset,
            sheet: None,
            reading: Reading::default(),
            mapping: None,
            dry_run: false,
            fixes: None,
            new_dataset: None,
        }
    }

    #[test]
    fn only_plain_imports_are_grouped() {
        let plain = Options::default();
        assert!(takes(&import("a"), &plain));
        let dry = Import {
            dry_run: true,
            ..import("a")
        };
        assert!(!takes(&dry, &plain));
        let deduped = Options {
            dedupe_key: Some("k".into()),
            ..Options::default()
        };
        assert!(!takes(&import("a"), &deduped));
        let in_batch = Options {
            parent_id: Some(Uuid::nil()),
            ..Options::default()
        };
        assert!(!takes(&import("a"), &in_batch));
    }
}
