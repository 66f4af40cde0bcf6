//! The queue health figures (`GET /api/queue`, the `/admin` page) from real worker processes:
//! a process is alive while it beats, with the task it runs now; gone when killed mid-chunk,
//! its run counted as rescued once another process takes the chunk over; stopped when it stops
//! cleanly. The backlog and the job waiting longest, and the rows and jobs ended that the hour's
//! and day's charts add up, exactly.

use crate::support::{
    Gate, TestDb, TestServer, WorkerProcess, account, csv, json_of, until, until_one,
};
use app::{
    auth::Role,
    model::{JobStatus, JobView},
    queue_health::{ProcessState, QueueHealth},
};
use reqwest::{Client, StatusCode};
use serde_json::json;

async fn health(server: &TestServer, admin: &Client) -> QueueHealth {
    json_of(admin.get(server.url("/api/queue"))).await
}

#[tokio::test]
async fn the_queue_shows_processes_backlog_and_throughput() {
    const ROWS: usize = 1_000;
    let db = TestDb::new().await;
    account(&db, "admin@example.com", Role::Admin).await;
    // No workers in the server: the processes are the ones started below.
    let server = TestServer::start(&db, None).await;
    let admin = server.signed_in("admin@example.com").await;

    let quiet = health(&server, &admin).await;
    assert!(quiet.processes.is_empty(), "{:?}", quiet.processes);
    assert_eq!(quiet.oldest_waiting, None);
    assert!(quiet.backlog.is_empty(), "{:?}", quiet.backlog);
    assert_eq!((quiet.hour.buckets.len(), quiet.hour.bucket_secs), (60, 60));
    assert_eq!((quiet.day.buckets.len(), quiet.day.bucket_secs), (96, 900));
    assert!(quiet.hour.from <= quiet.at && quiet.day.from <= quiet.hour.from);

    // Waiting with no worker: the job is the oldest waiting, its plan the backlog.
    let job = server.import("held.csv", csv(ROWS), "health").await;
    let cancelled = server.import("later.csv", csv(10), "health").await;
    let waiting = health(&server, &admin).await;
    assert_eq!(waiting.oldest_waiting.map(|w| w.id), Some(job.id));
    let plans: i64 = waiting
        .backlog
        .iter()
        .filter(|b| b.task == "plan")
        .map(|b| b.due)
        .sum();
    assert_eq!(plans, 2, "{:?}", waiting.backlog);
    let answer = server
        .post_json(
            &format!("/api/jobs/{}/cancel", cancelled.id),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(answer.status(), StatusCode::OK);
    // Another owner's job: owners take turns, so its plan ranks with the first job's first
    // chunk and, queued before it, runs before the worker is held in that chunk.
    let failing: JobView = server
        .import_as(
            &admin,
            "empty.csv",
            b"x\n".to_vec(),
            json!({ "dataset": "other" }),
        )
        .await
        .json()
        .await
        .unwrap();

    // Every chunk waits while the test holds an advisory lock, so the first worker is inside a
    // chunk's run when it is killed.
    let gate = Gate::close(&db).await;
    let first = WorkerProcess::start(&db, 100);
    let failed = server.finished_as(&admin, failing.id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    until_one(
        &db,
        "the first worker to be held in a chunk, at the gate",
        "select count(*) from pg_locks
         where locktype = 'advisory' and not granted
           and database = (select oid from pg_database where datname = current_database())",
    )
    .await;
    let busy = health(&server, &admin).await;
    assert_eq!(busy.processes.len(), 1, "{:?}", busy.processes);
    let p = &busy.processes[0];
    assert_eq!((p.state, p.running, p.slots), (ProcessState::Alive, 1, 1));
    let killed = busy.processes[0].process.clone();
    assert!(
        killed.starts_with(&busy.processes[0].host),
        "{:?}",
        busy.processes
    );
    first.kill_9();
    until("the killed worker to be gone", || async {
        health(&server, &admin)
            .await
            .processes
            .iter()
            .any(|p| p.process == killed && p.state == ProcessState::Gone)
    })
    .await;
    gate.open().await;

    let second = WorkerProcess::start(&db, 100);
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let after = health(&server, &admin).await;
    let states: Vec<_> = after.processes.iter().map(|p| p.state).collect();
    assert_eq!(
        states,
        [ProcessState::Alive, ProcessState::Gone],
        "{:?}",
        after.processes
    );
    for window in [&after.hour, &after.day] {
        let total = window.total();
        // Each chunk's rows once, though one was begun by the killed worker.
        assert_eq!(total.rows, ROWS as i64, "{window:?}");
        assert_eq!((total.completed, total.failed, total.cancelled), (1, 1, 1));
        assert!(total.rescued >= 1, "the killed worker's run: {window:?}");
        assert_eq!(total.failure_rate(), Some(0.5));
    }
    assert_eq!(after.oldest_waiting, None);

    // A clean stop is told apart from a crash.
    assert!(second.terminate().success());
    let stopped = health(&server, &admin).await;
    let states: Vec<_> = stopped.processes.iter().map(|p| p.state).collect();
    assert_eq!(states, [ProcessState::Stopped, ProcessState::Gone]);
    assert!(
        stopped.processes.iter().all(|p| p.running == 0),
        "{:?}",
        stopped.processes
    );

    // The page draws the same figures on the server.
    let page = admin.get(server.url("/admin")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert_eq!(
        text_of(&html, r#"data-testid="rows-total""#),
        "1,000",
        "{html}"
    );
    assert!(html.contains(r#"data-state="gone""#), "{html}");
    assert!(
        html.matches("<rect").count() >= 2,
        "bars for the rows and the jobs: {html}"
    );
    server.stop().await;
}

/// The text of the first element with `attribute`, without the comments Leptos marks
/// hydration points with.
fn text_of(html: &str, attribute: &str) -> String {
    let start = html.find(attribute).expect("the element") + attribute.len();
    let inner = &html[start..];
    let inner = &inner[inner.find('>').unwrap() + 1..];
    let inner = &inner[..inner.find("</").unwrap()];
    inner.replace("<!>", "").replace("<!---->", "")
}
