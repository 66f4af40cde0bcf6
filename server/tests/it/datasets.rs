//! Datasets with declared schemas: typed rows, row errors that say what was expected, header
//! checks at planning, and re-imports that update rows by key.

use crate::support::{TestDb, TestServer, worker_args};
use app::model::JobStatus;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn people_schema() -> Value {
    json!({
        "name": "people",
        "key": "id",
        "columns": [
            { "name": "id", "type": "integer" },
            { "name": "email", "type": "email", "required": true },
            { "name": "born", "type": "date" },
            { "name": "active", "type": "boolean" },
            { "name": "amount", "type": "decimal" }
        ]
    })
}

#[tokio::test]
async fn a_declared_schema_types_rows_and_a_key_updates_them() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(2))).await;
    let post = |body: Value| server.post_json("/api/datasets", body);

    let created = post(people_schema()).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let dataset: Value = server.get_json("/api/datasets/people").await;
    assert_eq!(dataset["key"], "id");
    assert_eq!(
        dataset["columns"][0],
        json!({ "name": "id", "type": "integer", "required": true })
    );
    assert_eq!(post(people_schema()).await.status(), StatusCode::CONFLICT);
    let bad_key = post(json!({ "name": "x", "key": "nope", "columns": [{ "name": "a" }] })).await;
    assert_eq!(bad_key.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let list: Value = server.get_json("/api/datasets").await;
    assert_eq!(list["datasets"][0]["name"], "people");

    // Columns in another order than the schema; three bad rows.
    let first = "email,id,born,active,amount\n\
                 a@example.com,1,1990-01-31,yes,10.50\n\
                 b@example.com,2,,no,\n\
                 not-an-email,3,1990-01-01,true,1\n\
                 d@example.com,4,1990-02-30,true,1\n\
                 e@example.com,,1990-01-01,true,1\n\
                 f@example.com,5,1985-05-05,false,-0.25\n";
    let job = server
        .import("first.csv", first.as_bytes().to_vec(), "people")
        .await;
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!(
        (done.rows_ok, done.rows_failed, done.rows_updated),
        (3, 3, 0)
    );
    let report: Value = server
        .get_json(&format!("/api/jobs/{}/errors", job.id))
        .await;
    let messages: Vec<(i64, &str)> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["rowNo"].as_i64().unwrap(), e["message"].as_str().unwrap()))
        .collect();
    assert_eq!(
        messages,
        [
            (4, "email: \"not-an-email\" is not an email address"),
            (5, "born: \"1990-02-30\" is not a date like 2024-12-31"),
            (6, "id: a value is required"),
        ]
    );
    let rows: Value = server.get_json("/api/datasets/people/rows").await;
    assert_eq!(
        rows["rows"],
        json!([
            { "id": 1, "email": "a@example.com", "born": "1990-01-31", "active": true, "amount": "10.50" },
            { "id": 2, "email": "b@example.com", "born": null, "active": false, "amount": null },
            { "id": 5, "email": "f@example.com", "born": "1985-05-05", "active": false, "amount": "-0.25" }
        ])
    );

    // A re-import: ids 2 and 5 exist (updated), 6 is new and appears twice (the last wins).
    let second =
        "id,email\n2,b2@example.com\n6,old@example.com\n5,f2@example.com\n6,new@example.com\n";
    let job = server
        .import("second.csv", second.as_bytes().to_vec(), "people")
        .await;
    let done = server.finished(job.id).await;
    assert_eq!(
        (done.rows_ok, done.rows_failed, done.rows_updated),
        (4, 0, 3)
    );
    let rows: Value = server.get_json("/api/datasets/people/rows").await;
    let mut emails: Vec<(i64, &str)> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r["email"].as_str().unwrap()))
        .collect();
    emails.sort();
    assert_eq!(
        emails,
        [
            (1, "a@example.com"),
            (2, "b2@example.com"),
            (5, "f2@example.com"),
            (6, "new@example.com")
        ]
    );

    // The pages, rendered on the server.
    let list = server.get_text("/datasets").await;
    assert!(list.contains("href=\"/datasets/people\""), "{list}");
    let page = server.get_text("/datasets/people").await;
    for text in [
        "email",
        "(key)",
        "decimal",
        "b2@example.com",
        "new@example.com",
    ] {
        assert!(page.contains(text), "{text} in {page}");
    }
    let missing = server
        .client
        .get(server.url("/datasets/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    // A header that does not fit fails the job at planning, naming the columns.
    let job = server
        .import("wrong.csv", b"id,colour\n7,red\n".to_vec(), "people")
        .await;
    let failed = server.finished(job.id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(
        failed.error.as_deref(),
        Some(
            "The header does not match the dataset (missing required columns: email; columns the dataset does not have: colour). The file's columns: id, colour. The dataset's: id, email, born, active, amount."
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn concurrent_keyed_imports_end_with_the_newest_rows_and_exact_counts() {
    const ROWS: i64 = 2000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(50))).await;
    let created = server
        .client
        .post(server.url("/api/datasets"))
        .json(&json!({ "name": "keyed", "key": "id", "columns": [{ "name": "id", "type": "integer" }, { "name": "src" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    // The same keys, in opposite orders, imported at the same time (each with its own
    // serialize key: by default imports into one dataset run one after the other): the chunks
    // of both jobs interleave and lock overlapping keys.
    let file = |src: &str, ids: Vec<i64>| {
        let mut text = String::from("id,src\n");
        for id in ids {
            text.push_str(&format!("{id},{src}\n"));
        }
        text.into_bytes()
    };
    let at_once = |key: &str| json!({ "dataset": "keyed", "serializeKey": key });
    let older = server
        .import_with("a.csv", file("a", (1..=ROWS).collect()), at_once("a"))
        .await;
    let newer = server
        .import_with("b.csv", file("b", (1..=ROWS).rev().collect()), at_once("b"))
        .await;
    let (a, b) = tokio::join!(server.finished(older.id), server.finished(newer.id));
    assert_eq!(
        (a.status, b.status),
        (JobStatus::Completed, JobStatus::Completed)
    );
    assert_eq!((a.rows_ok, b.rows_ok), (ROWS, ROWS));
    assert_eq!(
        a.rows_updated + b.rows_updated,
        ROWS,
        "every key was written twice, once new"
    );

    let (count, from_newer): (i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where split_part(record, E'\\x1f', 2) = 'b') from dataset_rows r
         join datasets d on d.id = r.dataset_id where d.name = 'keyed'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (count, from_newer),
        (ROWS, ROWS),
        "one row per key, each from the newer import"
    );
    server.stop().await;
}
