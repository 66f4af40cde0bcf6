//! Server-sent events: the seed's three states in order, and `Last-Event-ID` on reconnect.

use crate::support::{TestDb, TestServer, csv, plan_job, worker_args};
use app::model::JobStatus;
use server::jobs::Engine;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn events_go_waiting_then_running_then_completed() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("seq.csv", csv(3000), "seq").await;

    let mut events = server.events(job.id, None).await;
    let first = events.next().await;
    assert_eq!(first.job.status, JobStatus::Waiting);
    assert_eq!(first.id, first.job.version);

    // Plan the job by hand: it is then running, and stays so until chunks run, so the running
    // state is certain to be pushed (a whole fast import could fit in one coalescing window).
    let engine = Engine::new(db.pool.clone(), &worker_args(200)).unwrap();
    plan_job(&engine, job.id).await.unwrap();
    // The start and the sealed plan commit apart: a reader may see the running job before its
    // rows are counted.
    let mut rest = events.until(|job| job.item_count.is_some()).await;
    assert_eq!(rest.last().unwrap().job.status, JobStatus::Running);
    assert_eq!(rest.last().unwrap().job.item_count, Some(3000));

    // Only now do workers run the chunks.
    let stop_workers = CancellationToken::new();
    let workers = tokio::spawn(server::work(
        db.pool.clone(),
        worker_args(200),
        stop_workers.clone(),
    ));
    rest.extend(events.until(|job| job.status.is_finished()).await);

    let statuses: Vec<JobStatus> = rest.iter().map(|e| e.job.status).collect();
    assert_eq!(statuses.last(), Some(&JobStatus::Completed));
    assert!(
        statuses[..statuses.len() - 1]
            .iter()
            .all(|s| *s == JobStatus::Running),
        "{statuses:?}"
    );
    let mut versions = vec![first.id];
    versions.extend(rest.iter().map(|e| e.id));
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "versions increase: {versions:?}"
    );
    let progress: Vec<i64> = rest.iter().map(|e| e.job.item_progress).collect();
    assert!(
        progress.windows(2).all(|w| w[0] <= w[1]),
        "progress never goes back: {progress:?}"
    );
    let done = &rest.last().unwrap().job;
    assert_eq!(
        (done.item_count, done.item_progress, done.percent()),
        (Some(3000), 3000, 100)
    );

    // A reconnecting browser sends the last id it saw and gets only what is newer.
    let mut again = server.events(job.id, Some(first.id)).await;
    let resumed = again.next().await;
    assert_eq!(resumed.id, done.version);
    assert_eq!(resumed.job, *done);

    stop_workers.cancel();
    workers.await.unwrap().unwrap();
    server.stop().await;
}

#[tokio::test]
async fn the_job_list_stream_reports_new_jobs() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // A stream shows what its reader owned when it opened: a visitor becomes a guest first.
    server.upload("first.csv", csv(1)).await;
    let mut list = server.list_events().await;
    let job = server.import("list.csv", csv(10), "listed").await;
    let seen = list.until(|view| view.id == job.id).await;
    assert_eq!(seen.last().unwrap().job.status, JobStatus::Waiting);
    server.stop().await;
}
