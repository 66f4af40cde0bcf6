//! Job types (issue 14): registered by admins with their defaults, read by anyone who may
//! create jobs; names, values and follow-ups checked.

use crate::support::{TestDb, TestServer, account};
use app::{auth::Role, job_types::JobTypeView};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn admins_register_job_types_with_defaults_and_everyone_reads_them() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    account(&db, "admin@example.com", Role::Admin).await;
    account(&db, "member@example.com", Role::Member).await;
    let admin = server.signed_in("admin@example.com").await;
    let member = server.signed_in("member@example.com").await;
    let register = |client: &reqwest::Client, body: Value| {
        client.post(server.url("/api/job-types")).json(&body).send()
    };

    let render = register(&admin, json!({ "name": "video-render" }))
        .await
        .unwrap();
    assert_eq!(render.status(), StatusCode::CREATED);
    let render: JobTypeView = render.json().await.unwrap();
    assert_eq!(
        (
            render.lease_seconds,
            render.max_failures_per_item,
            render.backoff_seconds,
            render.ordered,
            render.retain_days,
            render.follow_up.as_deref(),
            render.max_payload_bytes,
        ),
        (60, 5, 5, false, None, None, 65_536),
        "the defaults"
    );
    let body = json!({ "name": "payroll.run", "leaseSeconds": 300, "maxFailuresPerItem": 2,
                       "backoffSeconds": 0, "ordered": true, "retainDays": 30,
                       "followUp": "video-render", "maxPayloadBytes": 1024 });
    let payroll = register(&admin, body).await.unwrap();
    assert_eq!(payroll.status(), StatusCode::CREATED);
    let payroll: JobTypeView = payroll.json().await.unwrap();
    assert_eq!(
        (
            payroll.lease_seconds,
            payroll.ordered,
            payroll.follow_up.as_deref()
        ),
        (300, true, Some("video-render"))
    );

    let again = register(
        &admin,
        json!({ "name": "video-render", "leaseSeconds": 10 }),
    )
    .await
    .unwrap();
    assert_eq!(
        again.status(),
        StatusCode::CONFLICT,
        "a type does not change"
    );
    let as_member = register(&member, json!({ "name": "mine" })).await.unwrap();
    assert_eq!(as_member.status(), StatusCode::FORBIDDEN);

    let listed: Value = member
        .get(server.url("/api/job-types"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = listed["jobTypes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["payroll.run", "video-render"]);
    let one: JobTypeView = member
        .get(server.url("/api/job-types/payroll.run"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one, payroll);
    let missing = member
        .get(server.url("/api/job-types/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn a_job_type_with_a_bad_name_value_or_follow_up_is_refused() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    account(&db, "admin@example.com", Role::Admin).await;
    let admin = server.signed_in("admin@example.com").await;
    for (body, why) in [
        (json!({ "name": "Upper" }), "must be 1 to 63 characters"),
        (json!({ "name": "9lives" }), "must be 1 to 63 characters"),
        (json!({ "name": "a b" }), "must be 1 to 63 characters"),
        (
            json!({ "name": "x".repeat(64) }),
            "must be 1 to 63 characters",
        ),
        (json!({ "name": "import" }), "built-in kind"),
        (json!({ "name": "validate" }), "built-in kind"),
        (
            json!({ "name": "t", "leaseSeconds": 4 }),
            "\"leaseSeconds\" must be between 5 and 3600",
        ),
        (
            json!({ "name": "t", "maxFailuresPerItem": 0 }),
            "\"maxFailuresPerItem\"",
        ),
        (
            json!({ "name": "t", "backoffSeconds": -1 }),
            "\"backoffSeconds\"",
        ),
        (json!({ "name": "t", "retainDays": 0 }), "\"retainDays\""),
        (
            json!({ "name": "t", "maxPayloadBytes": 2_000_000 }),
            "\"maxPayloadBytes\"",
        ),
        (json!({ "name": "t", "followUp": "t" }), "its own follow-up"),
        (
            json!({ "name": "t", "followUp": "nowhere" }),
            "no type is named \"nowhere\"",
        ),
    ] {
        let response = admin
            .post(server.url("/api/job-types"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{body}: {message}");
    }
    let unknown_field = admin
        .post(server.url("/api/job-types"))
        .json(&json!({ "name": "t", "leaseSecs": 10 }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        unknown_field.status(),
        StatusCode::BAD_REQUEST,
        "a misspelt field"
    );
    server.stop().await;
}
