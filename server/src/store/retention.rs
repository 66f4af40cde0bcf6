//! Retention: what finished jobs leave behind is deleted after a while, so no table grows
//! without bound. A job of a registered type whose type sets `retainDays` keeps its items and
//! its summary that long instead (`kept_for`, migration 26); a chain goes as its root's type
//! says, its follow-up jobs with the root. A finished job's items (its chunks and their runs, row errors, export parts, and the files
//! it read or wrote, a dry run's keys, a job of a type's items) go after `items_age`; its summary row after `jobs_age`, and with the last
//! job naming it, a dataset that is deleted or was never completed. Uploads no job
//! uses and finished queue messages go after `items_age` too, and the queue's workers (apalis's
//! records of them) a day after they went silent. Sessions go once expired (or
//! idle past their timeout), and
//! guests once they have no session and own nothing (nobody can ever be them again). Each
//! statement is bounded: at most `BATCH` rows, or a hundredth of it for jobs whose items go
//! (per registered type, with their chains) and typed summaries, files and datasets, ten
//! datasets' `BATCH` rows each. So a large backlog is worked off over several rounds in short
//! transactions, run one after the other while a round says more is left
//! ([`Pruned::more_left`]).

use std::time::Duration;

use sqlx::{PgConnection, Postgres, Transaction};

use uuid::Uuid;

use super::{
    queue,
    states::{DatasetState, JobKind},
};

/// Rows per statement at most.
const BATCH: i64 = 10_000;

/// What one round deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Jobs whose items were deleted (their summaries stay).
    pub job_items: u64,
    pub jobs: u64,
    pub datasets: u64,
    pub uploads: u64,
    pub messages: u64,
    /// Workers apalis recorded, gone a day (`queue::prune_workers`).
    pub queue_workers: u64,
    pub sessions: u64,
    pub guests: u64,
    /// A statement deleted as many as one round may: more may be due now.
    pub more_left: bool,
}

impl Pruned {
    pub fn is_empty(&self) -> bool {
        *self == Pruned::default()
    }
}

impl std::ops::AddAssign for Pruned {
    /// What rounds one after the other deleted in all; more is left if the last round says so.
    fn add_assign(&mut self, later: Pruned) {
        self.job_items += later.job_items;
        self.jobs += later.jobs;
        self.datasets += later.datasets;
        self.uploads += later.uploads;
        self.messages += later.messages;
        self.queue_workers += later.queue_workers;
        self.sessions += later.sessions;
        self.guests += later.guests;
        self.more_left = later.more_left;
    }
}

/// One round, in the caller's transaction: the row locks its statements take (claimed items,
/// held files) must last until the statements after them have deleted what they hold.
pub async fn prune(
    tx: &mut Transaction<'_, Postgres>,
    items_age: Duration,
    jobs_age: Duration,
) -> sqlx::Result<Pruned> {
    let conn: &mut PgConnection = tx;
    // Claimed first, under row locks re-checked against the age: a retry committing meanwhile
    // (which clears `finished_at`) keeps its job's items, and a retry coming after finds the
    // items gone and is refused. Jobs of no registered type by the deployment's age; those of
    // a type by its `retainDays` (else the same age), one type at a time, each a range of an
    // index: a chain's root for the whole chain, whose follow-up jobs go with it.
    // Each from an index of the jobs whose items are kept (migration 33, and 26 for types).
    let mut claimed: Vec<Uuid> = sqlx::query_scalar!(
        "update jobs j set items_pruned_at = now(), upload_id = null, result_upload_id = null,
             output_upload_id = null, remedy = null
         where id in (select id from jobs
                      where job_type is null and items_pruned_at is null
                        and finished_at < now() - make_interval(secs => $1)
                      order by finished_at limit $2
                      for update skip locked)
           and finished_at < now() - make_interval(secs => $1)
         returning id",
        items_age.as_secs_f64(),
        BATCH / 100,
    )
    .fetch_all(&mut *conn)
    .await?;
    claimed.extend(
        sqlx::query_scalar!(
            r#"with recursive roots as (
                   update jobs j set items_pruned_at = now()
                   where id in (
                       select due.id from job_types t cross join lateral (
                           select d.id from jobs d
                           where d.job_type = t.name and d.items_pruned_at is null
                             and d.finished_at < now() - kept_for(t.name, $1)
                             and not exists (select 1 from jobs p
                                             where p.id = d.parent_id and p.kind = $3)
                           order by d.finished_at limit $2
                           for update skip locked) due)
                     and finished_at < now() - kept_for(job_type, $1)
                   returning id
               ), chain as (
                   select id from roots
                   union
                   select c.id from jobs c join chain on c.parent_id = chain.id
               ), below as (
                   update jobs j set items_pruned_at = now()
                   where id in (select id from chain) and items_pruned_at is null
                   returning id
               )
               select id as "id!" from roots union all select id from below"#,
            items_age.as_secs_f64(),
            BATCH / 100,
            JobKind::Items as JobKind,
        )
        .fetch_all(&mut *conn)
        .await?,
    );
    sqlx::query!(
        "with chunks as (delete from job_chunks where job_id = any($1)),
              runs as (delete from job_runs where job_id = any($1)),
              errors as (delete from job_errors where job_id = any($1)),
              keys as (delete from dry_run_keys where job_id = any($1))
         delete from job_items where job_id = any($1)",
        &claimed,
    )
    .execute(&mut *conn)
    .await?;
    let job_items = claimed.len() as u64;

    // Summaries: the same split; a chain's root once its items went (its follow-up jobs with
    // it, by the foreign key).
    let mut gone = sqlx::query_scalar!(
        "delete from jobs where id in (
             select id from jobs where job_type is null
               and finished_at < now() - make_interval(secs => $1)
             order by finished_at limit $2)
         returning id",
        jobs_age.as_secs_f64(),
        BATCH,
    )
    .fetch_all(&mut *conn)
    .await?;
    gone.extend(
        sqlx::query_scalar!(
            "delete from jobs where id in (
                 select due.id from job_types t cross join lateral (
                     select d.id from jobs d
                     where d.job_type = t.name and d.items_pruned_at is not null
                       and d.finished_at < now() - kept_for(t.name, $1)
                       and not exists (select 1 from jobs p
                                       where p.id = d.parent_id and p.kind = $3)
                     order by d.finished_at limit $2) due)
             returning id",
            jobs_age.as_secs_f64(),
            BATCH / 100,
            JobKind::Items as JobKind,
        )
        .fetch_all(&mut *conn)
        .await?,
    );
    // Not announced: a burst of thousands would overflow every process's channel of changes
    // (and so make every live stream read again), for jobs nobody has read in months. A
    // process that read one lately serves it for a second at most (`progress::recent`);
    // this one forgets them now.
    crate::progress::recent::gone(&gone);
    let jobs = gone.len() as u64;

    // Datasets that are not `ready` (deleted, or left provisional by a failed import) once no
    // job names them any more: first their rows, if any are left (a failed import's, or those
    // of a deletion that ran out of attempts; rows have no foreign key to their dataset), a
    // batch a round, then the dataset.
    let emptied = sqlx::query!(
        "with orphaned as (
             select d.id from datasets d
             where d.state <> $2 and d.row_count > 0
               and not exists (select 1 from jobs j where j.dataset_id = d.id)
             order by d.id limit 10
             for update skip locked
         ), doomed as (
             select r.dataset_id, r.pos from orphaned o
             cross join lateral (select dataset_id, pos from dataset_rows
                                 where dataset_id = o.id order by pos limit $1) r
         ), gone as (
             delete from dataset_rows r using doomed
             where r.dataset_id = doomed.dataset_id and r.pos = doomed.pos
             returning r.dataset_id
         )
         update datasets d set row_count = d.row_count - g.n
         from (select dataset_id, count(*) as n from gone group by dataset_id) g
         where d.id = g.dataset_id",
        BATCH,
        DatasetState::Ready as DatasetState,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();
    let datasets = sqlx::query!(
        "delete from datasets where id in (
             select d.id from datasets d
             where d.state <> $2 and d.row_count = 0
               and not exists (select 1 from jobs j where j.dataset_id = d.id)
             limit $1
             for update skip locked)",
        BATCH / 100,
        DatasetState::Ready as DatasetState,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();

    let messages = queue::prune(&mut *conn, items_age, BATCH).await?;
    let queue_workers = queue::prune_workers(&mut *conn, BATCH).await?;

    let sessions = sqlx::query!(
        "delete from sessions where token_hash in (
             select token_hash from sessions where least(expires_at, idle_expires_at) < now()
             limit $1)",
        BATCH,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();

    let guests = sqlx::query!(
        "delete from users where id in (
             select u.id from users u
             where u.role = 'guest'
               and not exists (select 1 from sessions s where s.user_id = u.id)
               and not exists (select 1 from jobs j where j.owner = u.id)
               and not exists (select 1 from uploads f where f.owner = u.id)
               and not exists (select 1 from datasets d where d.owner = u.id)
             limit $1
             for update skip locked)",
        BATCH,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();

    // Files no job refers to, received whole as long ago as items are kept (`alive_at` is
    // when the last part came in): their jobs' items are gone, or no job was ever made. And
    // files whose sender stopped a day ago (the process receiving them died: a live one shows
    // life every minute); a file still arriving is kept however long it takes. Last, as
    // deleting one holds a row of its owner's total of stored bytes (this transaction's
    // stripe) until this commits, and uploads of theirs that land on it wait for it (a guest
    // whose last files go here goes next round).
    // Each test of a file is three probes of the indexes of jobs by file (migration 31).
    // Held first, passing over any file a transaction still holds: a job being made names it
    // (its foreign key's check holds the row until it commits), or a part is being stored
    // (which makes it young). Then deleted, unless a job names it after all: that statement
    // sees every job committed before it, and a job made after it waits for this round and
    // then finds the file gone.
    let held: Vec<Uuid> = sqlx::query_scalar!(
        "select u.id from uploads u
         where u.alive_at < now() - case when u.receiving then interval '1 day'
                                         else make_interval(secs => $1) end
           and not exists (select from jobs j where j.upload_id = u.id)
           and not exists (select from jobs j where j.result_upload_id = u.id)
           and not exists (select from jobs j where j.output_upload_id = u.id)
         limit $2
         for update skip locked",
        items_age.as_secs_f64(),
        BATCH / 100,
    )
    .fetch_all(&mut *conn)
    .await?;
    let held_files = held.len() as u64;
    let uploads = sqlx::query!(
        "delete from uploads d
         where d.id = any($1)
           and not exists (select from jobs j where j.upload_id = d.id)
           and not exists (select from jobs j where j.result_upload_id = d.id)
           and not exists (select from jobs j where j.output_upload_id = d.id)",
        &held,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();

    // Each limit is checked against the smallest of its statements' (a round too many finds
    // less and ends the run); a dataset whose rows were deleted may have more.
    let round = BATCH as u64 / 100;
    let more_left = [job_items, jobs, datasets, held_files]
        .iter()
        .any(|&n| n >= round)
        || [messages, queue_workers, sessions, guests]
            .iter()
            .any(|&n| n >= BATCH as u64)
        || emptied > 0;
    Ok(Pruned {
        job_items,
        jobs,
        datasets,
        uploads,
        messages,
        queue_workers,
        sessions,
        guests,
        more_left,
    })
}
