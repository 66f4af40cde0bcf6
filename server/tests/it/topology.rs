//! Many processes on one database (issue 15): two `serve --no-workers` processes and three
//! `server worker` processes, as real processes. Jobs are created through both servers and
//! watched through the other one; the worker running a part is killed with SIGKILL. Every job
//! ends complete with exactly its rows, the killed worker's part is taken over, and every
//! watcher sees its job end.

use app::{auth::Role, model::JobStatus};
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Events, Gate, TestDb, TestServer, WorkerProcess, account, csv, file_form, password_of,
    stored_rows, until,
};

const ROWS: usize = 600;
const CHUNK_ROWS: usize = 50;
const JOBS: usize = 6;

#[tokio::test]
async fn two_servers_and_three_workers_share_one_database_through_a_worker_killed_mid_run() {
    let db = TestDb::new().await;
    account(&db, "ada@example.com", Role::Member).await;
    // Text logs at `info` for the server, so that a test can read where it listens.
    let serving = [
        ("CONVEYOR_NO_WORKERS", "1"),
        ("RUST_LOG", "warn,server=info"),
    ];
    let servers = [
        WorkerProcess::serve(&db, CHUNK_ROWS, &serving),
        WorkerProcess::serve(&db, CHUNK_ROWS, &serving),
    ];
    let urls = [
        servers[0].listening_url().await,
        servers[1].listening_url().await,
    ];
    // One session for both: sessions live in the database, and cookies ignore ports.
    let client = TestServer::new_client();
    let signed_in = client
        .post(format!("{}/api/session", urls[0]))
        .json(&json!({ "email": "ada@example.com", "password": password_of("ada@example.com") }))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::OK);

    // Jobs created through each server in turn, before any worker runs: all are waiting.
    let mut jobs: Vec<(Uuid, usize)> = Vec::new();
    for n in 0..JOBS {
        let via = &urls[n % 2];
        let upload: Value = client
            .post(format!("{via}/api/uploads"))
            .multipart(file_form(&format!("part-{n}.csv"), csv(ROWS)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let created = client
            .post(format!("{via}/api/jobs"))
            .json(&json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": format!("d{n}") }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::ACCEPTED);
        let job: Value = created.json().await.unwrap();
        jobs.push((job["id"].as_str().unwrap().parse().unwrap(), n));
    }
    // Each watched through the server it was not created through.
    let mut watchers = Vec::new();
    for &(id, n) in &jobs {
        let other = &urls[(n + 1) % 2];
        let response = client
            .get(format!("{other}/api/jobs/{id}/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut events = Events::from_response(response);
        assert_eq!(events.next().await.job.status, JobStatus::Waiting);
        watchers.push(events);
    }

    // Every part's rows wait while the test holds an advisory lock: a part seen running cannot
    // commit before the worker running it is killed.
    let gate = Gate::close(&db).await;
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| WorkerProcess::start(&db, CHUNK_ROWS))
        .collect();
    // A worker vanishes in the middle of a part: the one running a part first seen.
    let pids: Vec<i32> = workers.iter().map(|w| w.pid() as i32).collect();
    let running: std::sync::Mutex<Option<(i32, String)>> = std::sync::Mutex::default();
    until("a worker to be running a part", || async {
        let found = sqlx::query_as(
            "select w.pid, w.process from job_runs r
             join worker_processes w on split_part(r.run, '/', 1) = w.process
             where r.ended_at is null and r.chunk_no is not null and w.pid = any($1)
             limit 1",
        )
        .bind(&pids)
        .fetch_optional(&db.pool)
        .await
        .unwrap();
        let is_some = found.is_some();
        *running.lock().unwrap() = found;
        is_some
    })
    .await;
    let (pid, process) = running.into_inner().unwrap().unwrap();
    // Workers give way to the servers on a shared machine: every thread of theirs is niced
    // (by 10, the default) from where this test runs.
    let here = niceness(std::process::id());
    let niced = here.iter().map(|nice| (nice + 10).min(19)).collect();
    for worker in &workers {
        assert_eq!(niceness(worker.pid()), niced, "a worker's threads");
    }
    for server in &servers {
        assert_eq!(niceness(server.pid()), here, "a server's threads");
    }
    let killed = workers.iter().position(|w| w.pid() as i32 == pid).unwrap();
    workers.remove(killed).kill_9();
    gate.open().await;

    let finished = join_all(watchers.iter_mut().map(Events::finished)).await;
    for ((id, _), job) in jobs.iter().zip(&finished) {
        assert_eq!(
            (job.id, job.status, job.rows_ok, job.rows_failed),
            (*id, JobStatus::Completed, ROWS as i64, 0),
            "{job:?}"
        );
        assert_eq!(
            stored_rows(&db.pool, *id).await,
            (ROWS as i64, ROWS as i64),
            "each row stored once"
        );
    }
    let lost: i64 = sqlx::query_scalar(
        "select count(*) from job_runs where split_part(run, '/', 1) = $1 and outcome = 'lost'",
    )
    .bind(&process)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(lost >= 1, "the killed worker's part was taken over");
}

/// The niceness of each of the threads of process `pid`, as a set.
fn niceness(pid: u32) -> std::collections::BTreeSet<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| {
            // A thread that ended meanwhile (an idle blocking thread) is skipped.
            let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            // After the name's closing parenthesis, the niceness is the 17th field.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields[16].parse().unwrap())
        })
        .collect()
}
