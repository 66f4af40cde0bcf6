//! Job trees and completion callbacks: a batch completes once sealed and its children have
//! completed; its final state is POSTed to its callback URL until a 2xx, then never again.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use crate::support::{TestDb, TestServer, csv, until, worker_args};
use app::model::{JobKind, JobStatus, JobView};
use axum::{Json, Router, extract::State, http::HeaderMap, routing::post};
use reqwest::StatusCode;
use serde_json::json;
use server::jobs::callbacks;
use tokio::sync::mpsc;

/// A receiver that answers 500 to the first POST and 200 after, reporting each one.
async fn receiver() -> (String, mpsc::UnboundedReceiver<(String, JobView)>) {
    #[derive(Clone)]
    struct Seen {
        calls: Arc<AtomicUsize>,
        tx: mpsc::UnboundedSender<(String, JobView)>,
    }
    async fn hook(
        State(seen): State<Seen>,
        headers: HeaderMap,
        Json(job): Json<JobView>,
    ) -> StatusCode {
        let key = headers["idempotency-key"].to_str().unwrap().to_owned();
        seen.tx.send((key, job)).unwrap();
        if seen.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let seen = Seen {
        calls: Arc::new(AtomicUsize::new(0)),
        tx,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/done", listener.local_addr().unwrap());
    let app = Router::new().route("/done", post(hook)).with_state(seen);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

#[tokio::test]
async fn a_sealed_batch_completes_with_its_children_and_calls_back_once() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let (hook, mut calls) = receiver().await;

    let created = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "batch", "callbackUrl": hook }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let batch: JobView = created.json().await.unwrap();
    assert_eq!(
        (batch.job_type, batch.status),
        (JobKind::Batch, JobStatus::Running)
    );

    let child = |n: usize| json!({ "dataset": format!("part_{n}"), "parentId": batch.id });
    let a = server.import_with("a.csv", csv(300), child(1)).await;
    let b = server.import_with("b.csv", csv(200), child(2)).await;
    assert_eq!(a.parent_id, Some(batch.id));
    for job in [&a, &b] {
        assert_eq!(server.finished(job.id).await.status, JobStatus::Completed);
    }
    // Not sealed: more children may come, so it is still running.
    assert_eq!(server.job(batch.id).await.status, JobStatus::Running);

    let sealed = server
        .post_json(&format!("/api/jobs/{}/seal", batch.id), json!({}))
        .await;
    assert_eq!(sealed.status(), StatusCode::OK);
    let done = server.finished(batch.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);

    // A sealed batch takes no more children and cannot be sealed again.
    let upload = server.upload("late.csv", csv(5)).await;
    let late = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "late", "parentId": batch.id }),
        )
        .await;
    assert_eq!(late.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let again = server
        .post_json(&format!("/api/jobs/{}/seal", batch.id), json!({}))
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);

    // The first POST gets a 500, the retry (after a backoff) a 200; both carry the final state.
    for _ in 0..2 {
        let (key, job) = calls.recv().await.unwrap();
        assert_eq!(key, batch.id.to_string());
        assert_eq!((job.id, job.status), (batch.id, JobStatus::Completed));
    }
    // The 200 is recorded just after it arrives (no notification to wait on).
    until("the 200 is recorded", || async {
        sqlx::query_scalar("select callback_delivered_at is not null from jobs where id = $1")
            .bind(batch.id)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    })
    .await;
    let args = worker_args(100).callbacks;
    let client = callbacks::client(callbacks::address::Policy::new(args.allow.clone()));
    assert_eq!(
        callbacks::deliver_due(&db.pool, &client, &args)
            .await
            .unwrap(),
        0
    );
    assert!(
        calls.try_recv().is_err(),
        "delivered callbacks are never sent again"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_batch_with_a_failed_child_fails_and_cancelling_it_cancels_its_children() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let new_batch = || async {
        let response = server
            .post_json("/api/jobs", json!({ "jobType": "batch" }))
            .await;
        response.json::<JobView>().await.unwrap()
    };

    // Cancelling a batch cancels its waiting children (no workers: they never start).
    let batch = new_batch().await;
    let child = server
        .import_with(
            "c.csv",
            csv(10),
            json!({ "dataset": "c", "parentId": batch.id }),
        )
        .await;
    let cancelled = server
        .post_json(&format!("/api/jobs/{}/cancel", batch.id), json!({}))
        .await;
    assert_eq!(cancelled.status(), StatusCode::OK);
    assert_eq!(server.job(child.id).await.status, JobStatus::Cancelled);

    // A child that fails fails its sealed batch.
    let workers = TestServer::start(&db, Some(worker_args(100))).await;
    let batch = new_batch().await;
    let header_only = server
        .import_with(
            "header.csv",
            b"id,name\n".to_vec(),
            json!({ "dataset": "e", "parentId": batch.id }),
        )
        .await;
    assert_eq!(
        server.finished(header_only.id).await.status,
        JobStatus::Failed
    );
    server
        .post_json(&format!("/api/jobs/{}/seal", batch.id), json!({}))
        .await;
    let done = server.finished(batch.id).await;
    assert_eq!(done.status, JobStatus::Failed);
    assert_eq!(
        done.error.as_deref(),
        Some("1 of its jobs did not complete.")
    );
    let bad = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "batch", "callbackUrl": "ftp://x" }),
        )
        .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    workers.stop().await;
    server.stop().await;
}
