//! A job's history (`GET /api/jobs/{id}/history`): what a waiting job waits for, its changes
//! of status, and each run of its plan and parts by a real worker process. Failed and lost runs
//! are checked where those faults are made (`faults`, `exactly_once`).

use app::{
    auth::Role,
    history::{JobHistory, RunOutcome, Waiting},
    model::JobStatus,
};
use std::time::Duration;

use reqwest::StatusCode;
use server::{
    jobs::Engine,
    store::{
        history,
        leases::{self, Item},
    },
};

use crate::support::{
    TestDb, TestServer, WorkerProcess, account, csv, json_of, lease, plan_job, until_one,
    worker_args,
};

#[tokio::test]
async fn history_shows_what_a_job_waits_for_then_its_runs_and_changes_of_status() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // Two imports into one dataset: the second waits for the first (one serialize key).
    let first = server.import("a.csv", csv(250), "people").await;
    let second = server.import("b.csv", csv(10), "people").await;
    let history = |id: uuid::Uuid| {
        let server = &server;
        async move {
            server
                .get_json::<JobHistory>(&format!("/api/jobs/{id}/history"))
                .await
        }
    };

    let waits = history(second.id).await;
    assert_eq!(
        waits.waiting,
        Some(Waiting::BehindJob {
            id: first.id,
            key: "dataset:people".into()
        })
    );
    assert!(waits.runs.is_empty() && waits.transitions.is_empty());
    // The first waits for a worker: its plan is due in the queue. How many tasks the whole
    // deployment has due is for operators.
    assert_eq!(
        history(first.id).await.waiting,
        Some(Waiting::Queue { due: None })
    );
    account(&db, "ops@example.com", Role::Admin).await;
    let admin = server.signed_in("ops@example.com").await;
    let as_admin = |id: uuid::Uuid| {
        let (server, admin) = (&server, &admin);
        async move {
            json_of::<JobHistory>(admin.get(server.url(&format!("/api/jobs/{id}/history")))).await
        }
    };
    match as_admin(first.id).await.waiting {
        Some(Waiting::Queue { due: Some(due) }) => assert!(due >= 1, "{due}"),
        other => panic!("waiting for a worker: {other:?}"),
    }
    // Nobody else sees it.
    let stranger = TestServer::new_client();
    let refused = stranger
        .get(server.url(&format!("/api/jobs/{}/history", first.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);

    let _worker = WorkerProcess::start(&db, 100);
    assert_eq!(server.finished(first.id).await.status, JobStatus::Completed);
    assert_eq!(
        server.finished(second.id).await.status,
        JobStatus::Completed
    );
    let done = history(first.id).await;
    assert_eq!(done.waiting, None);
    let moves: Vec<_> = done.transitions.iter().map(|t| (t.from, t.to)).collect();
    assert_eq!(
        moves,
        [
            (JobStatus::Waiting, JobStatus::Running),
            (JobStatus::Running, JobStatus::Completed)
        ]
    );
    assert!(done.transitions[0].at <= done.transitions[1].at);
    // The plan, then its three parts, each once, by the worker, all done.
    let mut items: Vec<_> = done.runs.iter().map(|run| run.part).collect();
    items.sort();
    assert_eq!(items, [None, Some(1), Some(2), Some(3)]);
    for run in &done.runs {
        assert_eq!(
            (run.attempt, run.outcome),
            (1, Some(RunOutcome::Ok)),
            "{run:?}"
        );
        assert!(run.ended_at.is_some_and(|end| end >= run.started_at));
        assert_eq!(run.worker, None, "which worker ran it is for operators");
        assert_eq!(run.error, None);
    }
    assert_eq!(
        (done.chunks.done, done.chunks.pending, done.chunks.failed),
        (3, 0, 0)
    );
    assert!(done.chunks.notable.is_empty());
    for run in as_admin(first.id).await.runs {
        let worker = run.worker.unwrap();
        assert!(!worker.is_empty() && !worker.contains('/'), "{worker}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_run_giving_its_lease_back_as_another_takes_it_over_is_not_called_lost() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // Two chunks, so the plan queues them (a file of one chunk it imports itself).
    let job = server.import("race.csv", csv(150), "race").await;
    let engine = Engine::new(db.pool.clone(), &worker_args(100)).unwrap();
    plan_job(&engine, job.id).await.unwrap();
    let held = lease(&db, job.id, 0, "slow").await.unwrap();
    sqlx::query(
        "update job_chunks set lease_expires_at = now() - interval '1 second' where job_id = $1",
    )
    .bind(job.id)
    .execute(&db.pool)
    .await
    .unwrap();
    // The slow worker gives the lease back (as `leases::release` does) while another worker's
    // acquire of the expired lease waits for the row.
    let mut giving_back = db.pool.begin().await.unwrap();
    sqlx::query(
        "update job_chunks set lease_owner = null, lease_expires_at = null where job_id = $1",
    )
    .bind(job.id)
    .execute(&mut *giving_back)
    .await
    .unwrap();
    let pool = db.pool.clone();
    let item = Item::Chunk {
        job_id: job.id,
        chunk_no: 0,
    };
    let taking_over =
        tokio::spawn(
            async move { leases::acquire(&pool, item, "next", Duration::from_secs(60)).await },
        );
    until_one(
        &db,
        "the acquire waits for the row",
        "select count(*) from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock'
           and query like '%with taken as%'",
    )
    .await;
    giving_back.commit().await.unwrap();
    // The holder changed while it waited: it takes nothing, and ends nobody's run.
    assert_eq!(taking_over.await.unwrap().unwrap(), None);
    history::end_run(&db.pool, &held.owner, RunOutcome::Stopped, None)
        .await
        .unwrap();
    let runs: Vec<(String, Option<String>)> = sqlx::query_as(
        "select run, outcome::text from job_runs where job_id = $1 and chunk_no = 0",
    )
    .bind(job.id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(runs, [("slow".into(), Some("stopped".into()))]);
    server.stop().await;
}
