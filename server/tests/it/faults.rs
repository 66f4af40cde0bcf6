//! Fault tests with real `server worker` processes against a real PostgreSQL: graceful
//! shutdown, cancel, transient failures with retries and a retry of what failed, and the row
//! error budget. (SIGKILL at random points is in `exactly_once.rs`.)
//!
//! Slow or failing chunks are made with a trigger on `dataset_rows`, in the test's own
//! database: the worker under test is the real binary, unchanged.

use std::time::Duration;

use crate::support::{
    Cluster, TestDb, TestServer, WorkerProcess, assert_stored_bytes_follow_uploads,
    completed_exactly, csv, drop_trigger, install_trigger, stored_rows, until, worker_args,
};
use app::{
    history::{JobHistory, RunOutcome},
    model::JobStatus,
};
use reqwest::StatusCode;
use serde_json::json;
use server::jobs::maintenance::retention::{self, Kept};
use uuid::Uuid;

/// The deployment's default retention: items a week, summaries 90 days.
const KEPT: Kept = Kept {
    items: Duration::from_secs(7 * 86_400),
    jobs: Duration::from_secs(90 * 86_400),
};

/// Chunks of the job whose lease is held.
async fn leased_chunks(db: &TestDb, job_id: Uuid) -> i64 {
    sqlx::query_scalar(
        "select count(*) from job_chunks where job_id = $1 and lease_owner is not null",
    )
    .bind(job_id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn sigterm_gives_back_running_chunks_and_another_worker_finishes() {
    const ROWS: usize = 2_000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // Each row takes 5 ms to write: a 100-row chunk runs for half a second, longer than the
    // worker's shutdown grace.
    install_trigger(&db, "perform pg_sleep(0.005);").await;
    let job = server.import("slow.csv", csv(ROWS), "slow").await;
    let mut events = server.events(job.id, None).await;

    let worker = WorkerProcess::start_with(&db, 100, &[("CONVEYOR_SHUTDOWN_SECS", "0.1")]);
    events.until(|job| job.chunks_done >= 1).await;
    let status = worker.terminate();
    assert!(status.success(), "a stopped worker exits 0, not {status}");
    assert_eq!(
        leased_chunks(&db, job.id).await,
        0,
        "the stopped worker gave its chunk back"
    );
    let stopped = server.job(job.id).await;
    assert_eq!(stopped.status, JobStatus::Running);
    assert!(stopped.chunks_done < stopped.chunks_total);

    drop_trigger(&db).await;
    let _next = WorkerProcess::start(&db, 100);
    let done = events.finished().await;
    completed_exactly(&db, &done, ROWS).await;
    server.stop().await;
}

#[tokio::test]
async fn cancel_stops_running_chunks_and_retry_resumes_exactly() {
    const ROWS: usize = 3_000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    install_trigger(&db, "perform pg_sleep(0.002);").await;
    let job = server.import("cancel.csv", csv(ROWS), "cancelled").await;
    let mut events = server.events(job.id, None).await;
    let _worker = WorkerProcess::start_with(&db, 100, &[("CONVEYOR_WORKER_CONCURRENCY", "2")]);
    events.until(|job| job.chunks_done >= 2).await;

    let response = server
        .post_json(&format!("/api/jobs/{}/cancel", job.id), json!({}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let cancelled: app::model::JobView = response.json().await.unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    // Running chunks notice at their next heartbeat and stop without committing.
    until("no chunk leased", || async {
        leased_chunks(&db, job.id).await == 0
    })
    .await;
    let after = server.job(job.id).await;
    assert_eq!(after.status, JobStatus::Cancelled);
    assert_eq!(
        after.chunks_done, cancelled.chunks_done,
        "no chunk committed after the cancel"
    );
    assert_eq!(stored_rows(&db.pool, job.id).await.0, after.rows_ok);
    let again = server
        .post_json(&format!("/api/jobs/{}/cancel", job.id), json!({}))
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);

    drop_trigger(&db).await;
    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(retried.status(), StatusCode::OK);
    let done = server.finished(job.id).await;
    completed_exactly(&db, &done, ROWS).await;
    server.stop().await;
}

#[tokio::test]
async fn a_part_that_keeps_failing_is_retried_then_failed_and_retry_runs_only_it() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // Row 250 (in the third part of 100 rows) cannot be written until the trigger goes.
    install_trigger(
        &db,
        "if new.pos & 4294967295 = 250 then raise exception 'the disk is on fire'; end if;",
    )
    .await;
    let job = server
        .import_with(
            "flaky.csv",
            csv(1000),
            json!({ "dataset": "flaky", "maxFailuresPerItem": 3 }),
        )
        .await;
    let worker = WorkerProcess::start(&db, 100);
    let failed = server.finished(job.id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!((failed.chunks_done, failed.rows_ok), (9, 900));
    let error = failed.error.clone().unwrap();
    assert!(
        error.contains("1 of 10 parts could not be processed (each was tried 3 times)"),
        "{error}"
    );
    let [part] = failed.failed_parts.as_slice() else {
        panic!("one failed part: {:?}", failed.failed_parts)
    };
    assert_eq!(
        (part.part, part.first_row, part.row_count, part.attempts),
        (3, 201, 100, 3)
    );
    // The database's words stay in the worker's log, under the reference people are shown.
    let shown = part.error.as_deref().unwrap();
    let reference = shown
        .strip_prefix("Something went wrong on our side (reference ")
        .and_then(|rest| rest.strip_suffix(")."))
        .unwrap_or_else(|| panic!("a plain message with a reference: {shown}"));
    assert!(!shown.contains("fire"), "{shown}");
    let log = worker.log();
    assert!(
        log.lines()
            .any(|line| line.contains(reference) && line.contains("the disk is on fire")),
        "the reference {reference} and the cause are in the log:\n{log}"
    );
    // Its history: three failed runs of part 3, each with what people were told.
    let history: JobHistory = server
        .get_json(&format!("/api/jobs/{}/history", job.id))
        .await;
    let part_3: Vec<_> = history.runs.iter().filter(|r| r.part == Some(3)).collect();
    assert_eq!(part_3.len(), 3, "{:?}", history.runs);
    for (n, run) in part_3.iter().enumerate() {
        assert_eq!(run.attempt, n as i32 + 1);
        assert_eq!(run.outcome, Some(RunOutcome::Retry));
        assert!(
            run.error
                .as_deref()
                .is_some_and(|e| e.contains("reference "))
        );
    }
    assert_eq!(part_3[2].error.as_deref(), Some(shown));
    let [chunk] = history.chunks.notable.as_slice() else {
        panic!("part 3 alone is worth a look: {:?}", history.chunks)
    };
    assert_eq!(
        (chunk.part, chunk.state.as_str(), chunk.attempts),
        (3, "failed", 3)
    );
    assert_eq!(history.chunks.failed, 1);
    assert_eq!(
        history.transitions.last().map(|t| t.to),
        Some(JobStatus::Failed)
    );

    drop_trigger(&db).await;
    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(retried.status(), StatusCode::OK);
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);
    assert_eq!((done.rows_ok, done.chunks_done), (1000, 10));
    assert!(done.failed_parts.is_empty());
    assert_eq!(stored_rows(&db.pool, job.id).await, (1000, 1000));
    let retry_done = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(retry_done.status(), StatusCode::CONFLICT);
    server.stop().await;
}

/// 1,000 rows of which every tenth has a field too many.
fn one_in_ten_bad() -> Vec<u8> {
    let mut text = String::from("id,name\n");
    for i in 1..=1000 {
        if i % 10 == 0 {
            text.push_str(&format!("{i},x,extra\n"));
        } else {
            text.push_str(&format!("{i},x\n"));
        }
    }
    text.into_bytes()
}

#[tokio::test]
async fn a_file_past_its_row_error_budget_stops_with_that_reason() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    for (budget, dataset) in [(json!(5), "count"), (json!("5%"), "percent")] {
        let job = server
            .import_with(
                "bad.csv",
                one_in_ten_bad(),
                json!({ "dataset": dataset, "maxRowErrors": budget }),
            )
            .await;
        let done = server.finished(job.id).await;
        assert_eq!(done.status, JobStatus::Failed, "{budget}");
        let error = done.error.unwrap();
        assert!(error.starts_with("Stopped after "), "{error}");
        assert!(done.chunks_done < 10, "stopped early: {}", done.chunks_done);
    }
    // A file of one chunk: its only chunk is also its last.
    let small = "id,name\n1,a\n2\n3,c\n".as_bytes().to_vec();
    let request = json!({ "dataset": "small", "maxRowErrors": 0 });
    let one_chunk = server.import_with("small.csv", small, request).await;
    let done = server.finished(one_chunk.id).await;
    assert_eq!(done.status, JobStatus::Failed);
    assert!(done.error.unwrap().starts_with("Stopped after 1 rows"));

    let request = json!({ "dataset": "within", "maxRowErrors": "20%" });
    let within = server
        .import_with("ok.csv", one_in_ten_bad(), request)
        .await;
    let done = server.finished(within.id).await;
    assert_eq!((done.status, done.rows_failed), (JobStatus::Completed, 100));
    let bad = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "import", "fileGuid": Uuid::nil(), "dataset": "x", "maxRowErrors": "lots" }),
        )
        .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    server.stop().await;
}

#[tokio::test]
async fn a_repeated_create_with_the_same_key_returns_the_first_job() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let upload = server.upload("once.csv", csv(10)).await;
    let body = json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "once" });
    let create = |key: &'static str| {
        server
            .client
            .post(server.url("/api/jobs"))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let first = create("order-42").await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: app::model::JobView = first.json().await.unwrap();
    let again = create("order-42").await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: app::model::JobView = again.json().await.unwrap();
    assert_eq!(again.id, first.id);
    // The same key in the body works the same way; another key makes another job.
    let mut keyed = body.clone();
    keyed["dedupeKey"] = json!("order-42");
    let by_body: app::model::JobView = server
        .post_json("/api/jobs", keyed)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(by_body.id, first.id);
    let other: app::model::JobView = create("order-43").await.unwrap().json().await.unwrap();
    assert_ne!(other.id, first.id);
    let jobs: i64 = sqlx::query_scalar("select count(*) from jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 2);
    server.stop().await;
}

#[tokio::test]
async fn jobs_with_the_same_serialize_key_run_one_at_a_time_in_order() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // Three imports into one dataset (its name is the default key), queued at once; a fourth,
    // into another dataset, may run alongside. A worker process running two tasks at once.
    let mut queued = Vec::new();
    for n in 0..3 {
        queued.push(
            server
                .import(&format!("{n}.csv"), csv(1500), "ordered")
                .await,
        );
    }
    let elsewhere = server.import("x.csv", csv(1500), "elsewhere").await;
    let _worker = WorkerProcess::start_with(&db, 100, &[("CONVEYOR_WORKER_CONCURRENCY", "2")]);
    let mut done = Vec::new();
    for job in &queued {
        done.push(server.finished(job.id).await);
    }
    assert_eq!(
        server.finished(elsewhere.id).await.status,
        JobStatus::Completed
    );
    for pair in done.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        assert_eq!(earlier.status, JobStatus::Completed);
        assert!(
            later.started_at.unwrap() >= earlier.finished_at.unwrap(),
            "{later:?} started before {earlier:?} finished"
        );
    }
    server.stop().await;
}

/// A backlog larger than a round (here finished queue messages, 10,000 a round) is worked off
/// by rounds one after the other, not one round every 10 minutes.
#[tokio::test]
async fn retention_works_off_a_backlog_larger_than_a_round_at_once() {
    use tokio_util::sync::CancellationToken;
    let db = TestDb::new().await;
    // `count` finished messages, done 8 days ago (their first `skip` numbers taken already).
    let done_long_ago = |skip: i64, count: i64| {
        sqlx::query(
            "insert into apalis.jobs (job, id, job_type, status, attempts, done_at)
             select '\\x00', 'old-' || n, 'conveyor', 'Done', 1, now() - interval '8 days'
             from generate_series($1 + 1, $1 + $2) n",
        )
        .bind(skip)
        .bind(count)
        .execute(&db.pool)
    };
    done_long_ago(0, 10_001).await.unwrap();
    let kept = KEPT;
    let one = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!((one.messages, one.more_left), (10_000, true));
    done_long_ago(10_001, 10_000).await.unwrap();
    let all = retention::catch_up(&db.pool, kept, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((all.messages, all.more_left), (10_001, false));
    let left: i64 = sqlx::query_scalar("select count(*) from apalis.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

/// apalis records every worker it starts and never forgets one; retention forgets those silent
/// for a day that no message names.
#[tokio::test]
async fn retention_forgets_queue_workers_a_day_silent_that_no_message_names() {
    use server::store::queue::{self, Priority, TaskMsg};
    let db = TestDb::new().await;
    for (name, silent_hours) in [("gone", 25), ("holding", 25), ("quiet", 1)] {
        sqlx::query(
            "insert into apalis.workers (id, worker_type, storage_name, layers, last_seen)
             values ($1, 'conveyor', 'PostgresStorage', '', now() - make_interval(hours => $2))",
        )
        .bind(name)
        .bind(silent_hours)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    // A message its worker took before it went silent (not queued again yet) still names it.
    let ticket = Uuid::new_v4();
    let task = TaskMsg::Plan {
        job_id: Uuid::new_v4(),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    queue::push(&mut conn, &[(task, ticket)], Priority::Turn { ahead: 0 })
        .await
        .unwrap();
    sqlx::query(
        "update apalis.jobs set status = 'Queued', lock_by = 'holding', lock_at = now()
         where idempotency_key = $1",
    )
    .bind(ticket.to_string())
    .execute(&mut *conn)
    .await
    .unwrap();
    let kept = KEPT;
    assert_eq!(
        retention::round(&db.pool, kept)
            .await
            .unwrap()
            .queue_workers,
        1
    );
    let left: Vec<String> = sqlx::query_scalar("select id from apalis.workers order by id")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    assert_eq!(left, ["holding", "quiet"]);
}

#[tokio::test]
async fn finished_jobs_items_then_summaries_are_pruned_after_their_age() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let bad = "id,name\n1,a\n2\n3,c\n".as_bytes().to_vec();
    let old = server
        .finished(server.import("old.csv", bad.clone(), "kept").await.id)
        .await;
    let recent = server
        .finished(server.import("new.csv", bad, "kept").await.id)
        .await;
    let stray = server.upload("never-imported.csv", csv(3)).await;
    let kept = KEPT;
    let age = |days: i64, id: Uuid| {
        sqlx::query("update jobs set finished_at = now() - make_interval(days => $1::integer) where id = $2")
            .bind(days)
            .bind(id)
            .execute(&db.pool)
    };
    let count = |sql: &'static str, id: Uuid| {
        sqlx::query_scalar::<_, i64>(sql)
            .bind(id)
            .fetch_one(&db.pool)
    };
    const CHUNKS: &str = "select count(*) from job_chunks where job_id = $1";
    const ERRORS: &str = "select count(*) from job_errors where job_id = $1";

    age(8, old.id).await.unwrap();
    sqlx::query(
        "update uploads set created_at = now() - interval '8 days',
             alive_at = now() - interval '8 days'
         where id = $1",
    )
    .bind(Uuid::parse_str(stray["id"].as_str().unwrap()).unwrap())
    .execute(&db.pool)
    .await
    .unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!((pruned.job_items, pruned.jobs), (1, 0));
    assert_eq!(
        pruned.uploads, 1,
        "the stray upload; the old job's file is still new"
    );
    assert_stored_bytes_follow_uploads(&db).await;
    assert_eq!(count(CHUNKS, old.id).await.unwrap(), 0);
    assert_eq!(count(ERRORS, old.id).await.unwrap(), 0);
    assert_eq!(
        count(ERRORS, recent.id).await.unwrap(),
        1,
        "a recent job keeps its items"
    );
    let summary = server.job(old.id).await;
    assert_eq!(
        (summary.status, summary.rows_ok, summary.filename.as_deref()),
        (JobStatus::Completed, 2, Some("old.csv"))
    );

    age(91, old.id).await.unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(pruned.jobs, 1);
    let gone = server
        .client
        .get(server.url(&format!("/api/jobs/{}", old.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    assert_eq!(server.job(recent.id).await.rows_ok, 2);

    // A job of a type that keeps its jobs 30 days keeps its items past the deployment's 7.
    sqlx::query("insert into job_types (name, lease_seconds, max_failures_per_item, backoff_seconds, ordered, retain_days, max_payload_bytes) values ('kept', 60, 5, 5, false, 30, 1000)")
        .execute(&db.pool)
        .await
        .unwrap();
    let typed = server
        .post_json(
            "/api/jobs",
            serde_json::json!({ "jobType": "kept", "items": [{ "payload": 1 }] }),
        )
        .await
        .json::<app::model::JobView>()
        .await
        .unwrap();
    sqlx::query("update jobs set status = 'cancelled', finished_at = now() - interval '8 days' where id = $1")
        .bind(typed.id)
        .execute(&db.pool)
        .await
        .unwrap();
    const ITEMS: &str = "select count(*) from job_items where job_id = $1";
    retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(count(ITEMS, typed.id).await.unwrap(), 1, "kept 30 days");
    age(31, typed.id).await.unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(
        (pruned.job_items, pruned.jobs),
        (1, 1),
        "items and summary, after 30 days"
    );
    assert_eq!(count(ITEMS, typed.id).await.unwrap(), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_job_completes_across_a_postgres_restart_and_streams_resync() {
    const ROWS: usize = 3_000;
    let cluster = Cluster::start();
    let db = TestDb::new_in(&cluster.admin_url).await;
    let server = TestServer::start(&db, None).await;
    // 2 ms a row: the job takes a few seconds, so the restart lands in the middle of it.
    install_trigger(&db, "perform pg_sleep(0.002);").await;
    let job = server.import("restart.csv", csv(ROWS), "restarted").await;
    let mut events = server.events(job.id, None).await;
    let _worker = WorkerProcess::start(&db, 100);
    events.until(|job| job.chunks_done >= 2).await;

    cluster.restart();
    // The same event stream, still open: the server's listener reconnects and resyncs it.
    let done = events.finished().await;
    completed_exactly(&db, &done, ROWS).await;
    server.stop().await;
}
