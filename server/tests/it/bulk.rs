//! Bulk actions (`POST /api/jobs/bulk`) and their audit log: by filter and by ids, only the jobs
//! the action applies to and the caller may change, racing jobs that complete meanwhile, a
//! member held to their limit of live jobs.

use std::collections::HashSet;

use app::{
    auth::Role,
    bulk::{AuditEntry, BulkAction, BulkOutcome},
    model::{JobKind, JobStatus},
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{TestDb, TestServer, account, json_of};

/// `n` jobs of `owner` in `status`, created a second apart in order; their ids, oldest first.
async fn jobs_in(db: &TestDb, owner: Uuid, status: JobStatus, kind: JobKind, n: i64) -> Vec<Uuid> {
    sqlx::query_scalar(
        "insert into jobs (id, kind, owner, status, created_at, finished_at)
         select gen_random_uuid(), $2, $1, $3,
                now() - interval '1 day' + make_interval(secs => i),
                case when $3 in ('failed', 'cancelled', 'completed') then now() end
         from generate_series(1, $4) i
         returning id",
    )
    .bind(owner)
    .bind(kind)
    .bind(status)
    .bind(n)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn statuses(db: &TestDb, ids: &[Uuid]) -> Vec<JobStatus> {
    let rows: Vec<(Uuid, JobStatus)> =
        sqlx::query_as("select id, status from jobs where id = any($1)")
            .bind(ids)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    ids.iter()
        .map(|id| rows.iter().find(|(r, _)| r == id).unwrap().1)
        .collect()
}

async fn bulk(server: &TestServer, client: &Client, body: Value) -> BulkOutcome {
    json_of(client.post(server.url("/api/jobs/bulk")).json(&body)).await
}

#[tokio::test]
async fn a_filter_retries_only_the_jobs_it_selects_and_the_log_says_so() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = account(&db, "a@example.com", Role::Member).await;
    let b = account(&db, "b@example.com", Role::Member).await;
    account(&db, "admin@example.com", Role::Admin).await;
    account(&db, "viewer@example.com", Role::Viewer).await;
    let admin = server.signed_in("admin@example.com").await;
    let a_failed = jobs_in(&db, a, JobStatus::Failed, JobKind::Import, 30).await;
    let a_done = jobs_in(&db, a, JobStatus::Completed, JobKind::Import, 5).await;
    let a_batch = jobs_in(&db, a, JobStatus::Failed, JobKind::Batch, 2).await;
    let b_failed = jobs_in(&db, b, JobStatus::Failed, JobKind::Import, 7).await;
    let b_waiting = jobs_in(&db, b, JobStatus::Waiting, JobKind::Import, 2).await;

    // The confirmation's count: the failed imports of A (a batch is not retried, its children are).
    let filter = "type=import,batch&owner=a@example.com&status=failed,completed";
    let preview = bulk(
        &server,
        &admin,
        json!({ "action": "retry", "filter": filter, "dryRun": true }),
    )
    .await;
    assert_eq!(
        (preview.matched, preview.changed, preview.audit_id),
        (30, 0, None)
    );
    assert!(
        statuses(&db, &a_failed)
            .await
            .iter()
            .all(|s| *s == JobStatus::Failed)
    );

    let done = bulk(
        &server,
        &admin,
        json!({ "action": "retry", "filter": filter }),
    )
    .await;
    assert_eq!((done.matched, done.changed), (30, 30));
    assert!(
        statuses(&db, &a_failed)
            .await
            .iter()
            .all(|s| *s == JobStatus::Waiting)
    );
    assert!(
        statuses(&db, &a_done)
            .await
            .iter()
            .all(|s| *s == JobStatus::Completed)
    );
    assert!(
        statuses(&db, &a_batch)
            .await
            .iter()
            .all(|s| *s == JobStatus::Failed)
    );
    assert!(
        statuses(&db, &b_failed)
            .await
            .iter()
            .all(|s| *s == JobStatus::Failed)
    );

    // The same again finds nothing left to retry.
    let again = bulk(
        &server,
        &admin,
        json!({ "action": "retry", "filter": filter }),
    )
    .await;
    assert_eq!((again.matched, again.changed), (0, 0));

    // Cancel by ids: B's waiting jobs are not A's to cancel.
    let a_member = server.signed_in("a@example.com").await;
    let mixed: Vec<Uuid> = a_failed[..3].iter().chain(&b_waiting).copied().collect();
    let cancelled = bulk(
        &server,
        &a_member,
        json!({ "action": "cancel", "ids": mixed }),
    )
    .await;
    assert_eq!((cancelled.matched, cancelled.changed), (3, 3));
    assert_eq!(statuses(&db, &mixed).await[3..], [JobStatus::Waiting; 2]);

    // The audit log: newest first, who, what, how many; admins only.
    let log: Value = json_of(admin.get(server.url("/api/audit"))).await;
    let entries: Vec<AuditEntry> = serde_json::from_value(log["entries"].clone()).unwrap();
    assert_eq!(entries.len(), 3, "a dry run is not an action");
    let (last, first) = (&entries[0], &entries[2]);
    assert_eq!(last.actor_email.as_deref(), Some("a@example.com"));
    assert_eq!(
        (last.action, last.matched, last.changed),
        (BulkAction::Cancel, 3, 3)
    );
    assert_eq!(last.selection["ids"].as_array().unwrap().len(), 5);
    assert_eq!(first.actor_email.as_deref(), Some("admin@example.com"));
    assert_eq!(
        (first.action, first.matched, first.changed),
        (BulkAction::Retry, 30, 30)
    );
    assert_eq!(
        first.selection["filter"],
        "status=failed%2Ccompleted&type=import%2Cbatch&owner=a%40example.com"
    );
    assert!(
        entries
            .iter()
            .all(|e| e.finished_at.is_some() && e.error.is_none())
    );
    let refused = a_member.get(server.url("/api/audit")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    // A viewer changes nothing; malformed requests are named.
    let viewer = server.signed_in("viewer@example.com").await;
    let body = json!({ "action": "cancel", "ids": a_failed });
    let refused = viewer.post(server.url("/api/jobs/bulk")).json(&body).send();
    assert_eq!(refused.await.unwrap().status(), StatusCode::FORBIDDEN);
    for body in [
        json!({ "action": "retry" }),
        json!({ "action": "retry", "ids": [], }),
        json!({ "action": "retry", "ids": [a], "filter": "" }),
        json!({ "action": "retry", "filter": "status=nope" }),
        json!({ "action": "delete", "ids": [a] }),
    ] {
        let answer = admin.post(server.url("/api/jobs/bulk")).json(&body).send();
        let answer = answer.await.unwrap();
        assert!(
            answer.status().is_client_error(),
            "{body}: {}",
            answer.status()
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_job_that_completes_meanwhile_is_never_retried() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = account(&db, "a@example.com", Role::Member).await;
    account(&db, "admin@example.com", Role::Admin).await;
    let admin = server.signed_in("admin@example.com").await;
    // More than one batch, so the race has room to meet the action mid-way.
    let failed = jobs_in(&db, a, JobStatus::Failed, JobKind::Import, 1800).await;

    // Meanwhile, newest first (the action goes oldest first), jobs of the newer half complete
    // elsewhere: each one only while it is still failed, as a run elsewhere would. The newest
    // fifty complete before the action begins.
    let complete = |id: Uuid| {
        let pool = db.pool.clone();
        async move {
            let moved = sqlx::query(
                "update jobs set status = 'completed', finished_at = now(),
                     version = version + 1
                 where id = $1 and status = 'failed'",
            )
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
            moved.rows_affected() == 1
        }
    };
    let mut early = Vec::new();
    for id in failed.iter().rev().take(50) {
        assert!(complete(*id).await);
        early.push(*id);
    }
    let racer = async {
        let mut completed = early;
        for id in failed.iter().rev().skip(50).take(850) {
            if complete(*id).await {
                completed.push(*id);
            }
        }
        completed
    };
    let action = bulk(
        &server,
        &admin,
        json!({ "action": "retry", "filter": "status=failed" }),
    );
    let (completed, outcome) = tokio::join!(racer, action);

    let now = statuses(&db, &completed).await;
    assert!(
        now.iter().all(|s| *s == JobStatus::Completed),
        "a job completed meanwhile was retried"
    );
    let completed: HashSet<Uuid> = completed.into_iter().collect();
    let waiting: Vec<Uuid> = failed
        .iter()
        .copied()
        .filter(|id| !completed.contains(id))
        .collect();
    assert!(
        statuses(&db, &waiting)
            .await
            .iter()
            .all(|s| *s == JobStatus::Waiting)
    );
    assert_eq!(outcome.changed, waiting.len() as i64);
    assert_eq!(waiting.len() + completed.len(), 1800);
    assert!(
        !completed.is_empty() && !waiting.is_empty(),
        "both sides moved jobs"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_member_retries_up_to_their_limit_an_admin_past_it() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = account(&db, "a@example.com", Role::Member).await;
    account(&db, "admin@example.com", Role::Admin).await;
    // Default limit: 200 live jobs per owner; A has 20 waiting already.
    jobs_in(&db, a, JobStatus::Waiting, JobKind::Import, 20).await;
    let failed = jobs_in(&db, a, JobStatus::Failed, JobKind::Import, 250).await;
    let member = server.signed_in("a@example.com").await;
    let own = bulk(
        &server,
        &member,
        json!({ "action": "retry", "filter": "status=failed" }),
    )
    .await;
    assert_eq!(
        (own.matched, own.changed, own.stopped_at_limit),
        (250, 180, Some(200))
    );
    let oldest_first = statuses(&db, &failed).await;
    assert!(oldest_first[..180].iter().all(|s| *s == JobStatus::Waiting));
    assert!(oldest_first[180..].iter().all(|s| *s == JobStatus::Failed));

    let admin = server.signed_in("admin@example.com").await;
    let by_admin = bulk(
        &server,
        &admin,
        json!({ "action": "retry", "filter": "status=failed" }),
    )
    .await;
    assert_eq!((by_admin.changed, by_admin.stopped_at_limit), (70, None));
    server.stop().await;
}
