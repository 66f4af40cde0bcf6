//! Small jobs: a file of one chunk is imported by its plan alone, in one transaction, and one
//! owner's backlog does not make another owner's job wait behind all of it (owners take turns
//! in the queue).

use app::{
    auth::Role,
    model::{JobStatus, JobView},
};
use std::time::Duration;

use reqwest::Client;
use serde_json::json;
use server::{
    jobs::{create, group, lane},
    store::jobs::Options,
};
use uuid::Uuid;

use crate::support::{
    TestDb, TestServer, WorkerProcess, account, csv, drop_trigger, install_trigger, until,
    worker_args, writers,
};

/// Task messages queued for `job_id`, by task name: "plan" before "chunk". Not by `run_at`:
/// apalis keeps it to the second, so a plan and the chunk it queued often tie.
async fn tasks_of(db: &TestDb, job_id: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "select convert_from(job, 'UTF8')::jsonb ->> 'task' from apalis.jobs
         where convert_from(job, 'UTF8')::jsonb ->> 'job_id' = $1::text
         order by 1 desc",
    )
    .bind(job_id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// A job's changes of status, oldest first.
async fn transitions(db: &TestDb, job_id: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "select from_status::text || ' -> ' || to_status::text from job_transitions
         where job_id = $1 order by id",
    )
    .bind(job_id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_file_of_one_chunk_is_imported_by_its_plan_in_one_task() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;

    let job = server.import("small.csv", csv(40), "small").await;
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!((done.rows_ok, done.item_count), (40, Some(40)));
    assert_eq!((done.chunks_done, done.chunks_total), (1, 1));
    // Handed by its create to the server's own workers (`jobs::lane`): no message at all.
    assert_eq!(tasks_of(&db, job.id).await, Vec::<String>::new());
    // The import's transaction also gave the plan's lease back and ended its run: the run
    // ended when the job started (both are that transaction's `now()`).
    let run: (bool, bool, String) = sqlx::query_as(
        "select j.lease_owner is null, r.ended_at = j.started_at, r.outcome::text
         from jobs j join job_runs r on r.job_id = j.id where j.id = $1",
    )
    .bind(job.id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(run, (true, true, "ok".to_owned()));
    // Started, counted and completed in one update: nobody could have seen it running.
    assert_eq!(transitions(&db, job.id).await, ["waiting -> completed"]);
    let ready: (String, i64) =
        sqlx::query_as("select state::text, row_count from datasets where name = 'small'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(ready, ("ready".to_owned(), 40));
    // With a row in error, a second update ends it once the row error limit is checked.
    let request = json!({ "dataset": "bad_rows", "maxRowErrors": 1 });
    let bad = "id,name\n1,a\n2\n3,c\n".as_bytes().to_vec();
    let job = server.import_with("bad.csv", bad, request).await;
    let done = server.finished(job.id).await;
    assert_eq!(
        (done.status, done.rows_ok, done.rows_failed),
        (JobStatus::Completed, 2, 1)
    );
    assert_eq!(
        transitions(&db, job.id).await,
        ["waiting -> running", "running -> completed"]
    );
    let lease: (bool, i32) =
        sqlx::query_as("select lease_owner is null, attempts from jobs where id = $1")
            .bind(job.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        lease,
        (true, 0),
        "the plan's lease given back with the import"
    );
    let rows: Vec<String> = server
        .get_json::<serde_json::Value>("/api/datasets/small/rows?limit=2")
        .await["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rows, ["Name 1, Jr.", "Name 2, Jr."]);

    // A file of more chunks is planned, then its chunks run as tasks of their own.
    let job = server.import("large.csv", csv(250), "large").await;
    let done = server.finished(job.id).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 250));
    assert_eq!(done.chunks_total, 3);
    assert_eq!(tasks_of(&db, job.id).await, ["chunk", "chunk", "chunk"]);
    server.stop().await;
}

#[tokio::test]
async fn a_small_file_whose_rows_cannot_be_written_fails_as_a_part_and_retry_runs_it() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    install_trigger(&db, "raise exception 'the disk is on fire';").await;

    let request = json!({ "dataset": "broken", "maxFailuresPerItem": 1 });
    let job = server.import_with("small.csv", csv(5), request).await;
    let failed = server.finished(job.id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    // Importing at once failed: the plan (handed on, with no message) queued its chunk as a
    // task of its own, which failed.
    assert_eq!(tasks_of(&db, job.id).await, ["chunk"]);
    assert_eq!(failed.failed_parts.len(), 1);
    assert_eq!(failed.failed_parts[0].row_count, 5);

    drop_trigger(&db).await;
    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert!(retried.status().is_success(), "{}", retried.status());
    let done = server.finished(job.id).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 5));
    server.stop().await;
}

/// Jobs in one owner's backlog.
const BACKLOG: usize = 20;

/// One owner's backlog of small imports, then another owner's one, all queued while no worker
/// runs: the backlog's job ids, the other job, and its owner's client.
async fn backlog_then_other(db: &TestDb, server: &TestServer) -> (Vec<Uuid>, JobView, Client) {
    account(db, "busy@example.com", Role::Member).await;
    account(db, "other@example.com", Role::Member).await;
    let (busy_client, other_client) = (
        server.signed_in("busy@example.com").await,
        server.signed_in("other@example.com").await,
    );
    let mut backlog = Vec::new();
    for n in 0..BACKLOG {
        let dataset = json!({ "dataset": format!("b{n}") });
        let created = server
            .import_as(&busy_client, "b.csv", csv(3), dataset)
            .await;
        assert_eq!(created.status(), 202);
        backlog.push(created.json::<JobView>().await.unwrap().id);
    }
    let dataset = json!({ "dataset": "o" });
    let created = server
        .import_as(&other_client, "o.csv", csv(3), dataset)
        .await;
    assert_eq!(created.status(), 202);
    (backlog, created.json().await.unwrap(), other_client)
}

/// One worker runs the queue, one task at a time (the order it takes them is the queue's):
/// how many of `backlog` finished before the other owner's job did.
async fn ran_before_other(
    db: &TestDb,
    server: &TestServer,
    backlog: &[Uuid],
    other: (&JobView, &Client),
) -> i64 {
    let _worker = WorkerProcess::start(db, 100);
    let done = server.finished_as(other.1, other.0.id).await;
    assert_eq!(done.status, JobStatus::Completed);
    sqlx::query_scalar("select count(*) from jobs where id = any($1) and finished_at < $2")
        .bind(backlog)
        .bind(done.finished_at.unwrap())
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn another_owners_job_does_not_wait_behind_one_owners_backlog() {
    let db = TestDb::new().await;
    // No workers while the jobs are made: the backlog is queued first.
    let server = TestServer::start(&db, None).await;
    let (backlog, other, other_client) = backlog_then_other(&db, &server).await;
    let before = ran_before_other(&db, &server, &backlog, (&other, &other_client)).await;
    // The busy owner's first job ranks with the other owner's only one (and is older).
    assert!(before <= 1, "{before} of the busy owner's jobs ran first");
    server.stop().await;
}

#[tokio::test]
async fn queued_again_a_backlog_still_takes_its_turns() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let (backlog, other, other_client) = backlog_then_other(&db, &server).await;

    // The backlog's messages are lost (as a bulk retry's re-opened jobs have none): the
    // requeue round queues them again, each at its job's turn, not above every turn.
    queued_again(&db, &backlog).await;
    let queued: i64 =
        sqlx::query_scalar("select count(*) from apalis.jobs where status = 'Pending'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(queued, BACKLOG as i64 + 1);
    // Each at its place among its owner's live jobs (in the order they were made), as at
    // create.
    let turns: Vec<i32> = (0..BACKLOG as i32).map(|ahead| 1_000_000 - ahead).collect();
    assert_eq!(priorities(&db, &backlog).await, turns);

    let before = ran_before_other(&db, &server, &backlog, (&other, &other_client)).await;
    assert!(
        before <= 1,
        "{before} of the busy owner's requeued jobs ran first"
    );
    server.stop().await;
}

/// The messages of `jobs` are lost; the requeue round queues them again.
async fn queued_again(db: &TestDb, jobs: &[Uuid]) {
    sqlx::query(
        "delete from apalis.jobs where (convert_from(job, 'UTF8')::jsonb ->> 'job_id')::uuid
         = any($1)",
    )
    .bind(jobs)
    .execute(&db.pool)
    .await
    .unwrap();
    server::jobs::maintenance::requeue::round(db.pool.clone(), std::time::Duration::from_secs(5))
        .await
        .unwrap();
}

/// The priority apalis stores for each of these jobs' messages, in the order given.
async fn priorities(db: &TestDb, jobs: &[Uuid]) -> Vec<i32> {
    let mut priorities = Vec::new();
    for job in jobs {
        let priority = sqlx::query_scalar(
            "select priority from apalis.jobs
             where (convert_from(job, 'UTF8')::jsonb ->> 'job_id')::uuid = $1",
        )
        .bind(job)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        priorities.push(priority);
    }
    priorities
}

#[tokio::test]
async fn a_deletion_takes_its_turn_at_create_and_when_queued_again() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let filled = server.import("rows.csv", csv(3), "doomed").await;
    let worker = WorkerProcess::start(&db, 100);
    assert_eq!(
        server.finished(filled.id).await.status,
        JobStatus::Completed
    );
    drop(worker);

    // A dataset with rows is deleted by a job, which waits (no workers now): the import made
    // after it has it ahead in its owner's turns.
    let response = server
        .client
        .delete(server.url("/api/datasets/doomed"))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let deletion: Uuid = sqlx::query_scalar("select id from jobs where kind = 'delete'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let import = server.import("next.csv", csv(3), "next").await.id;
    let turns = [1_000_000, 1_000_000 - 1];
    assert_eq!(priorities(&db, &[deletion, import]).await, turns);

    // Queued again, by the requeue round, each keeps the place it was created with.
    queued_again(&db, &[deletion, import]).await;
    assert_eq!(priorities(&db, &[deletion, import]).await, turns);
    server.stop().await;
}

/// A small import's create hands it to its own process's workers (`jobs::lane`) with the lease
/// taken by its insert and no message; a job not first in line for its dataset is queued as
/// before. If that process never runs what it was handed (it died), the lease runs out, lease
/// rescue frees the job and another process's worker runs it: our tables, not the lane, are
/// the truth.
#[tokio::test]
async fn a_handed_job_its_process_never_runs_is_rescued_and_run_by_another() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let id_of = |upload: serde_json::Value| Uuid::parse_str(upload["id"].as_str().unwrap());
    let first = id_of(server.upload("a.csv", csv(10)).await).unwrap();
    let second = id_of(server.upload("b.csv", csv(20)).await).unwrap();
    let owner: Uuid = sqlx::query_scalar("select owner from uploads where id = $1")
        .bind(first)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // A process that takes jobs and never runs them.
    let (lane, _never_read) = lane::new("gone-1-deadbeef", Duration::from_secs(1), 2);
    let groups = group::Groups::new(Some(lane));
    let import = |upload_id| create::Import {
        upload_id,
        dataset: "handed",
        sheet: None,
        reading: Default::default(),
        mapping: None,
        dry_run: false,
        fixes: None,
        new_dataset: None,
    };
    let options = Options::default();
    let unused = std::path::Path::new("unused");
    let create = |upload_id| {
        create::import(
            &db.pool,
            unused,
            &groups,
            owner,
            (import(upload_id), None),
            &options,
        )
    };
    let handed = create(first).await.unwrap().job.id;
    let queued = create(second).await.unwrap().job.id;

    let leased = |job_id| {
        sqlx::query_scalar::<_, Option<String>>("select lease_owner from jobs where id = $1")
            .bind(job_id)
            .fetch_one(&db.pool)
    };
    assert!(
        leased(handed)
            .await
            .unwrap()
            .unwrap()
            .starts_with("gone-1-deadbeef/")
    );
    assert_eq!(tasks_of(&db, handed).await, Vec::<String>::new());
    // Behind the first in its dataset's line: not leased, queued with a message.
    assert_eq!(leased(queued).await.unwrap(), None);
    assert_eq!(tasks_of(&db, queued).await, ["plan"]);

    let _worker = WorkerProcess::start(&db, 100);
    let done = server.finished(handed).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 10));
    let done = server.finished(queued).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 20));
    // The handed run was ended as lost when its lease was rescued; a worker's run imported it.
    let runs: Vec<(String, i32, String)> = sqlx::query_as(
        "select split_part(run, '/', 1), attempt, outcome::text from job_runs
         where job_id = $1 order by id",
    )
    .bind(handed)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[0],
        ("gone-1-deadbeef".to_owned(), 1, "lost".to_owned())
    );
    assert_ne!(runs[1].0, "gone-1-deadbeef");
    assert_eq!((runs[1].1, runs[1].2.as_str()), (2, "ok"));
    assert_eq!(tasks_of(&db, handed).await, ["plan"]);
    server.stop().await;
}

/// A handed job that finds every run slot busy for a heartbeat is given back (its run ended
/// `stopped`, its attempt not counted) and queued, long before its lease could run out: it runs
/// once a slot frees, with its owner's turn.
#[tokio::test]
async fn a_handed_job_that_finds_no_slot_is_given_back_and_queued() {
    let db = TestDb::new().await;
    let mut args = worker_args(100);
    args.concurrency = 1;
    let server = TestServer::start(&db, Some(args)).await;
    // Each row takes 50 ms to write: the first import holds the one slot for a second.
    install_trigger(&db, "perform pg_sleep(0.05);").await;
    let busy = server.import("a.csv", csv(20), "busy").await;
    let waiting = server.import("b.csv", csv(20), "waiting").await;

    for job in [busy.id, waiting.id] {
        let done = server.finished(job).await;
        assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 20));
    }
    assert_eq!(tasks_of(&db, busy.id).await, Vec::<String>::new());
    assert_eq!(tasks_of(&db, waiting.id).await, ["plan"]);
    let runs: Vec<(i32, String)> =
        sqlx::query_as("select attempt, outcome::text from job_runs where job_id = $1 order by id")
            .bind(waiting.id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(runs, [(1, "stopped".to_owned()), (1, "ok".to_owned())]);
    server.stop().await;
}

/// A server whose one run slot the test holds: an import into the dataset `busy` waits, while
/// it writes its rows, for an advisory lock the returned connection holds until
/// [`let_go`]; `more` is run too for every row written. Its handed jobs wait for the slot for
/// up to a heartbeat, here 5 s.
async fn one_slot_held(
    db: &TestDb,
    more: &str,
) -> (TestServer, sqlx::pool::PoolConnection<sqlx::Postgres>) {
    let mut args = worker_args(100);
    args.concurrency = 1;
    (args.heartbeat_secs, args.lease_secs) = (5.0, 20.0);
    let server = TestServer::start(db, Some(args)).await;
    let busy = "if new.dataset_id = (select id from datasets where name = 'busy') then
                    perform pg_advisory_xact_lock_shared(4242);
                end if;";
    install_trigger(db, &format!("{busy} {more}")).await;
    let mut held = db.pool.acquire().await.unwrap();
    sqlx::query("select pg_advisory_lock(4242)")
        .execute(&mut *held)
        .await
        .unwrap();
    server.import("busy.csv", csv(5), "busy").await;
    until("the busy import waits for the lock", || async {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event = 'advisory'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        waiting == 1
    })
    .await;
    (server, held)
}

async fn let_go(mut held: sqlx::pool::PoolConnection<sqlx::Postgres>) {
    sqlx::query("select pg_advisory_unlock(4242)")
        .execute(&mut *held)
        .await
        .unwrap();
}

/// Small imports handed on while the run slot is busy wait together, and the run that takes
/// them imports those of one chunk in one transaction (`jobs::batch`); one of two chunks in the
/// same batch is planned by a run of its own, as any larger file.
#[tokio::test]
async fn small_imports_handed_on_together_are_imported_in_one_transaction() {
    let db = TestDb::new().await;
    let (server, held) = one_slot_held(&db, "").await;
    let mut together = Vec::new();
    for n in 0..2 {
        let rows = 10 + n;
        together.push(
            server
                .import("s.csv", csv(rows), &format!("set{n}"))
                .await
                .id,
        );
    }
    let larger = server.import("l.csv", csv(150), "larger").await.id;
    let all = [together[0], together[1], larger];
    let leased: i64 = sqlx::query_scalar(
        "select count(*) from jobs where id = any($1) and lease_owner is not null",
    )
    .bind(&all[..])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(leased, 3, "every import was handed on");
    let_go(held).await;

    for (job, rows) in together.iter().zip([10, 11]) {
        let done = server.finished(*job).await;
        assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, rows));
        assert_eq!(tasks_of(&db, *job).await, Vec::<String>::new());
    }
    let done = server.finished(larger).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 150));
    assert_eq!(tasks_of(&db, larger).await, ["chunk", "chunk"]);
    assert_eq!(writers(&db, &together).await, 1);
    assert_eq!(writers(&db, &all).await, 2);
    let runs: Vec<String> = sqlx::query_scalar(
        "select outcome::text from job_runs where job_id = any($1) order by outcome",
    )
    .bind(&together)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(runs, ["ok", "ok"]);
    server.stop().await;
}

/// A batch that fails is rolled back whole and each of its jobs runs alone: the one whose rows
/// cannot be written fails as any small import does (tried in the batch, alone, then as its
/// chunk's task), the others are imported once.
#[tokio::test]
async fn a_batch_that_fails_is_rolled_back_and_each_of_its_jobs_runs_alone() {
    let db = TestDb::new().await;
    // Counted outside any transaction: a sequence's numbers are not rolled back.
    sqlx::query("create sequence tries")
        .execute(&db.pool)
        .await
        .unwrap();
    let broken = "if new.dataset_id = (select id from datasets where name = 'broken') then
                      perform nextval('tries');
                      raise exception 'the disk is on fire';
                  end if;";
    let (server, held) = one_slot_held(&db, broken).await;
    let good = server.import("g.csv", csv(7), "good").await.id;
    let request = json!({ "dataset": "broken", "maxFailuresPerItem": 1 });
    let bad = server.import_with("b.csv", csv(5), request).await.id;
    let also_good = server.import("a.csv", csv(8), "also_good").await.id;
    let_go(held).await;

    for (job, rows) in [(good, 7), (also_good, 8)] {
        let done = server.finished(job).await;
        assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, rows));
    }
    assert_eq!(writers(&db, &[good, also_good]).await, 2);
    let failed = server.finished(bad).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.failed_parts.len(), 1);
    let tries: i64 = sqlx::query_scalar("select last_value from tries")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(tries, 3, "in the batch, alone, as its chunk's task");
    // Nothing of the batch stayed: each dataset holds its rows once, and counts them so.
    let held: Vec<(String, i64, i64)> = sqlx::query_as(
        "select d.name, d.row_count, (select count(*) from dataset_rows r where r.dataset_id = d.id)
         from datasets d where d.name in ('good', 'also_good') order by d.name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected = [("also_good".to_owned(), 8, 8), ("good".to_owned(), 7, 7)];
    assert_eq!(held, expected);
    server.stop().await;
}
