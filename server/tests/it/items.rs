//! Jobs of registered types (issue 14): created with items, filled in batches, sealed, paged.

use crate::support::{TestDb, TestServer, account};
use app::{
    auth::Role,
    model::{JobKind, JobStatus, JobView},
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use server::config::{LimitArgs, ServeArgs};

async fn register(server: &TestServer, admin: &Client, body: Value) {
    let response = admin
        .post(server.url("/api/job-types"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
}

async fn post(server: &TestServer, client: &Client, path: &str, body: Value) -> reqwest::Response {
    client
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn get(server: &TestServer, client: &Client, path: &str) -> reqwest::Response {
    client.get(server.url(path)).send().await.unwrap()
}

/// A server without workers whose owners have these limits, an admin and a member, Ada.
async fn limited(db: &TestDb, limits: LimitArgs) -> (TestServer, Client, Client) {
    let args = ServeArgs {
        no_workers: true,
        limits,
        ..ServeArgs::default()
    };
    let server = TestServer::start_with_args(db, args).await;
    account(db, "admin@example.com", Role::Admin).await;
    account(db, "ada@example.com", Role::Member).await;
    let admin = server.signed_in("admin@example.com").await;
    let ada = server.signed_in("ada@example.com").await;
    (server, admin, ada)
}

#[tokio::test]
async fn a_job_of_a_registered_type_takes_items_in_batches_until_it_is_sealed() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    account(&db, "admin@example.com", Role::Admin).await;
    account(&db, "ada@example.com", Role::Member).await;
    account(&db, "bob@example.com", Role::Member).await;
    let admin = server.signed_in("admin@example.com").await;
    let ada = server.signed_in("ada@example.com").await;
    let bob = server.signed_in("bob@example.com").await;
    register(
        &server,
        &admin,
        json!({ "name": "render", "maxFailuresPerItem": 3 }),
    )
    .await;

    let body = json!({ "jobType": "render", "items": [
        { "payload": { "frame": 1 }, "dedupeKey": "f1" },
        { "payload": { "frame": 2 } }
    ] });
    let created = post(&server, &ada, "/api/jobs", body).await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let job: JobView = created.json().await.unwrap();
    assert_eq!(
        (
            job.job_type,
            job.item_type.as_deref(),
            job.status,
            job.item_count
        ),
        (JobKind::Items, Some("render"), JobStatus::Waiting, Some(2))
    );
    assert_eq!(job.title(), "render job");
    assert_eq!(job.rows_line().as_deref(), Some("0 of 2 items so far"));
    let attempts: i32 = sqlx::query_scalar("select max_failures_per_item from jobs where id = $1")
        .bind(job.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 3, "the type's attempts per item");

    let history: Value = get(&server, &ada, &format!("/api/jobs/{}/history", job.id))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        history["waiting"],
        json!({ "reason": "claim", "items": 2, "sealed": false }),
        "it waits for a worker of its type, not for a queue"
    );

    let items = format!("/api/jobs/{}/items", job.id);
    let batch = json!({ "items": [
        { "payload": { "frame": 3 } },
        { "payload": { "frame": 1 }, "dedupeKey": "f1" },
        { "payload": { "frame": 4 }, "dedupeKey": "f4" }
    ] });
    let added = post(&server, &ada, &items, batch.clone()).await;
    assert_eq!(added.status(), StatusCode::OK);
    let added: Value = added.json().await.unwrap();
    assert_eq!(
        (added["added"].as_i64(), added["duplicates"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(added["job"]["itemCount"], 4);
    assert_eq!(
        post(&server, &bob, &items, batch).await.status(),
        StatusCode::NOT_FOUND,
        "another member's job does not exist for them"
    );

    let page: Value = get(&server, &ada, &format!("{items}?limit=3"))
        .await
        .json()
        .await
        .unwrap();
    let frames: Vec<i64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["payload"]["frame"].as_i64().unwrap())
        .collect();
    assert_eq!(frames, [1, 2, 3], "in the order they were added");
    assert_eq!(page["items"][0]["state"], "pending");
    assert_eq!(page["items"][0]["dedupeKey"], "f1");
    let next = page["next"].as_i64().unwrap();
    let rest: Value = get(&server, &ada, &format!("{items}?limit=3&after={next}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["items"][0]["payload"]["frame"], 4);
    assert!(rest.get("next").is_none());
    let done: Value = get(&server, &ada, &format!("{items}?state=done"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(done["items"], json!([]));
    assert_eq!(
        get(&server, &ada, &format!("{items}?state=soon"))
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&server, &bob, &items).await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(get(&server, &admin, &items).await.status(), StatusCode::OK);

    let sealed = post(
        &server,
        &ada,
        &format!("/api/jobs/{}/seal", job.id),
        json!({}),
    )
    .await;
    assert_eq!(sealed.status(), StatusCode::OK);
    let sealed: JobView = sealed.json().await.unwrap();
    assert!(sealed.sealed);
    assert_eq!(
        sealed.status,
        JobStatus::Waiting,
        "its items are still to do"
    );
    assert_eq!(sealed.rows_line().as_deref(), Some("0 of 4 items"));
    let late = post(
        &server,
        &ada,
        &items,
        json!({ "items": [{ "payload": 5 }] }),
    )
    .await;
    assert_eq!(late.status(), StatusCode::CONFLICT);
    server.stop().await;
}

#[tokio::test]
async fn item_jobs_refuse_unknown_types_large_payloads_and_ended_jobs() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    account(&db, "admin@example.com", Role::Admin).await;
    let admin = server.signed_in("admin@example.com").await;
    register(
        &server,
        &admin,
        json!({ "name": "tiny", "maxPayloadBytes": 16 }),
    )
    .await;

    let unknown = post(&server, &admin, "/api/jobs", json!({ "jobType": "nope" })).await;
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let message: Value = unknown.json().await.unwrap();
    assert!(
        message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("registered job type"),
        "{message}"
    );
    let large = json!({ "jobType": "tiny", "items": [{ "payload": "a payload of more than 16" }] });
    let large = post(&server, &admin, "/api/jobs", large).await;
    assert_eq!(large.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let nul = json!({ "jobType": "tiny", "items": [{ "payload": "a\u{0}" }] });
    assert_eq!(
        post(&server, &admin, "/api/jobs", nul).await.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "PostgreSQL stores no NUL"
    );
    // Nor half of a UTF-16 surrogate pair, which JSON text can spell.
    let lone = admin
        .post(server.url("/api/jobs"))
        .header("content-type", "application/json")
        .body(r#"{"jobType":"tiny","items":[{"payload":"\udcff"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(lone.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let odd_type = post(
        &server,
        &admin,
        "/api/jobs",
        json!({ "jobType": "ti\u{0}ny" }),
    )
    .await;
    assert_eq!(odd_type.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // A payload is kept as it was sent: a number past 64 bits stays exact.
    register(&server, &admin, json!({ "name": "roomy" })).await;
    let exact = json!({ "jobType": "roomy" });
    let exact: JobView = post(&server, &admin, "/api/jobs", exact)
        .await
        .json()
        .await
        .unwrap();
    let items = format!("/api/jobs/{}/items", exact.id);
    let body = r#"{"items":[{"payload":123456789012345678901234567890}]}"#;
    let added = admin
        .post(server.url(&items))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), StatusCode::OK);
    let stored: String =
        sqlx::query_scalar("select payload::text from job_items where job_id = $1")
            .bind(exact.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, "123456789012345678901234567890");
    let too_many: Vec<Value> = (0..10_001).map(|i| json!({ "payload": i })).collect();
    let too_many = json!({ "jobType": "tiny", "items": too_many });
    assert_eq!(
        post(&server, &admin, "/api/jobs", too_many).await.status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Sealed without items, a job has nothing to do: it completes at once.
    let empty: JobView = post(&server, &admin, "/api/jobs", json!({ "jobType": "tiny" }))
        .await
        .json()
        .await
        .unwrap();
    let sealed: JobView = post(
        &server,
        &admin,
        &format!("/api/jobs/{}/seal", empty.id),
        json!({}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(sealed.status, JobStatus::Completed, "{sealed:?}");

    let cancelled: JobView = post(&server, &admin, "/api/jobs", json!({ "jobType": "tiny" }))
        .await
        .json()
        .await
        .unwrap();
    let cancel = post(
        &server,
        &admin,
        &format!("/api/jobs/{}/cancel", cancelled.id),
        json!({}),
    )
    .await;
    assert_eq!(cancel.status(), StatusCode::OK);
    let late = post(
        &server,
        &admin,
        &format!("/api/jobs/{}/items", cancelled.id),
        json!({ "items": [{ "payload": 1 }] }),
    )
    .await;
    assert_eq!(
        late.status(),
        StatusCode::CONFLICT,
        "a cancelled job takes no items"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_owners_items_count_against_their_stored_bytes_until_their_job_is_deleted() {
    let db = TestDb::new().await;
    let limits = LimitArgs {
        stored_bytes: 2_000,
        ..LimitArgs::default()
    };
    let (server, admin, ada) = limited(&db, limits).await;
    register(&server, &admin, json!({ "name": "blob" })).await;
    let items = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({ "payload": { "text": format!("{i:0>80}") } }))
            .collect()
    };
    let body = json!({ "jobType": "blob", "items": items(15) });
    let created = post(&server, &ada, "/api/jobs", body).await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let job: JobView = created.json().await.unwrap();
    // 15 items of ~93 bytes: 1,400 kept; 10 more would pass 2,000.
    let more = json!({ "items": items(10) });
    let refused = post(
        &server,
        &ada,
        &format!("/api/jobs/{}/items", job.id),
        more.clone(),
    )
    .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    let body = json!({ "jobType": "blob", "items": items(10) });
    let refused = post(&server, &ada, "/api/jobs", body).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another owner is not held back by Ada's items.
    let body = json!({ "jobType": "blob", "items": items(10) });
    assert_eq!(
        post(&server, &admin, "/api/jobs", body).await.status(),
        StatusCode::ACCEPTED
    );
    // Her job, cancelled and deleted, frees its bytes.
    let cancel = post(
        &server,
        &ada,
        &format!("/api/jobs/{}/cancel", job.id),
        json!({}),
    )
    .await;
    assert_eq!(cancel.status(), StatusCode::OK);
    let deleted = ada
        .delete(server.url(&format!("/api/jobs/{}", job.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let body = json!({ "jobType": "blob", "items": items(10) });
    assert_eq!(
        post(&server, &ada, "/api/jobs", body).await.status(),
        StatusCode::ACCEPTED
    );
    server.stop().await;
}

#[tokio::test]
async fn a_bulk_fill_refreshes_the_planners_statistics_of_the_items_table() {
    use server::store::items::analyze_if_grown;
    let db = TestDb::new().await;
    // Only the server's refresh counts here, not autovacuum's.
    sqlx::query("alter table job_items set (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    let counted = async || -> f32 {
        sqlx::query_scalar("select reltuples from pg_class where oid = 'job_items'::regclass")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert!(counted().await < 1.0, "never counted yet");
    let server = TestServer::start(&db, None).await;
    account(&db, "admin@example.com", Role::Admin).await;
    let admin = server.signed_in("admin@example.com").await;
    register(&server, &admin, json!({ "name": "bulk" })).await;
    let items: Vec<Value> = (0..3_000).map(|n| json!({ "payload": n })).collect();
    let created = post(
        &server,
        &admin,
        "/api/jobs",
        json!({ "jobType": "bulk", "items": items }),
    )
    .await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    crate::support::until("the items' statistics to count the bulk fill", || async {
        counted().await >= 3_000.0
    })
    .await;
    assert!(
        !analyze_if_grown(&db.pool, 0).await.unwrap(),
        "counted: no refresh until the table doubles"
    );
    let small: Vec<Value> = (0..10).map(|n| json!({ "payload": n })).collect();
    let job: JobView = created.json().await.unwrap();
    let path = format!("/api/jobs/{}/items", job.id);
    assert_eq!(
        post(&server, &admin, &path, json!({ "items": small }))
            .await
            .status(),
        StatusCode::OK
    );
    assert!(
        analyze_if_grown(&db.pool, 3_500).await.unwrap(),
        "past double what was counted (the batch just added included), refreshed"
    );
    assert!(counted().await >= 3_010.0);
    server.stop().await;
}

#[tokio::test]
async fn the_live_job_limit_counts_a_jobs_follow_up_chain() {
    let db = TestDb::new().await;
    let limits = LimitArgs {
        active_jobs: 2,
        ..LimitArgs::default()
    };
    let (server, admin, ada) = limited(&db, limits).await;
    register(&server, &admin, json!({ "name": "encode" })).await;
    register(
        &server,
        &admin,
        json!({ "name": "render", "followUp": "encode" }),
    )
    .await;

    let one = post(&server, &ada, "/api/jobs", json!({ "jobType": "encode" })).await;
    assert_eq!(one.status(), StatusCode::ACCEPTED);
    // A render makes an encode after it: two live jobs more, one past the limit.
    let chain = post(&server, &ada, "/api/jobs", json!({ "jobType": "render" })).await;
    assert_eq!(chain.status(), StatusCode::TOO_MANY_REQUESTS);
    let live: i64 =
        sqlx::query_scalar("select count(*) from jobs where status in ('waiting', 'running')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(live, 1);
    // Alone, the chain fits.
    let sealed = format!("/api/jobs/{}/seal", one.json::<JobView>().await.unwrap().id);
    assert!(
        post(&server, &ada, &sealed, json!({}))
            .await
            .status()
            .is_success()
    );
    let chain = post(&server, &ada, "/api/jobs", json!({ "jobType": "render" })).await;
    assert_eq!(chain.status(), StatusCode::ACCEPTED);
}
