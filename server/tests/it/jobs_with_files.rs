//! An import sent with its file: `POST /api/jobs` with a form of the job's JSON, then the file.

use app::model::{JobStatus, JobView};
use reqwest::{StatusCode, multipart};
use serde_json::{Value, json};

use crate::support::{TestDb, TestServer, csv, stored_rows, worker_args};

/// A form of `job` (as JSON), then `file` named `filename`.
fn form(job: &Value, filename: &str, file: Vec<u8>) -> multipart::Form {
    multipart::Form::new()
        .part("job", multipart::Part::text(job.to_string()))
        .part(
            "file",
            multipart::Part::bytes(file).file_name(filename.to_owned()),
        )
}

async fn send(server: &TestServer, form: multipart::Form) -> reqwest::Response {
    let request = server.client.post(server.url("/api/jobs")).multipart(form);
    request.send().await.unwrap()
}

async fn uploads(db: &TestDb) -> i64 {
    sqlx::query_scalar("select count(*) from uploads")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_import_sent_with_its_file_is_made_in_one_request() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(250))).await;

    // A small file (stored whole) and one of several chunks and upload parts (streamed),
    // each with its own job.
    for (rows, dataset) in [(20, "small"), (30_000, "large")] {
        let job = json!({ "jobType": "import", "dataset": dataset, "maxRowErrors": 0 });
        let response = send(&server, form(&job, "people.csv", csv(rows))).await;
        assert_eq!(
            response.status(),
            StatusCode::ACCEPTED,
            "{:?}",
            response.text().await
        );
        let location = response.headers()["location"].to_str().unwrap().to_owned();
        let created: JobView = response.json().await.unwrap();
        assert_eq!(location, format!("/api/jobs/{}", created.id));
        assert_eq!(created.dataset.as_deref(), Some(dataset));
        assert_eq!(created.filename.as_deref(), Some("people.csv"));

        let job = server.finished(created.id).await;
        assert_eq!(job.status, JobStatus::Completed, "{job:?}");
        assert_eq!(job.rows_ok, rows as i64);
        assert_eq!(
            stored_rows(&db.pool, job.id).await,
            (rows as i64, rows as i64)
        );
    }
    assert_eq!(uploads(&db).await, 2, "each job keeps its own file");

    // A dry run too, and its import after it.
    let job = json!({ "jobType": "validate", "dataset": "small" });
    let response = send(&server, form(&job, "people.csv", csv(5))).await;
    assert_eq!(
        response.status(),
        StatusCode::ACCEPTED,
        "{:?}",
        response.text().await
    );
    let created: JobView = response.json().await.unwrap();
    let checked = server.finished(created.id).await;
    assert!(
        checked.dry_run && checked.status == JobStatus::Completed,
        "{checked:?}"
    );
    let imported = server
        .post_json(&format!("/api/jobs/{}/import", checked.id), json!({}))
        .await;
    assert_eq!(imported.status(), StatusCode::ACCEPTED);
    let imported: JobView = imported.json().await.unwrap();
    assert_eq!(server.finished(imported.id).await.rows_ok, 5);
    server.stop().await;
}

#[tokio::test]
async fn a_form_that_makes_no_job_keeps_no_file() {
    let db = TestDb::new().await;
    let server = TestServer::start_with_upload_limit(&db, None, 4 << 20).await;
    let import = json!({ "jobType": "import", "dataset": "people" });

    // Fields out of order, missing, or not what a job sent with its file can be: refused
    // before the file is stored.
    let file_first = multipart::Form::new()
        .part("file", multipart::Part::bytes(csv(3)).file_name("a.csv"))
        .part("job", multipart::Part::text(import.to_string()));
    let file_only =
        multipart::Form::new().part("file", multipart::Part::bytes(csv(3)).file_name("a.csv"));
    let job_only = multipart::Form::new().part("job", multipart::Part::text(import.to_string()));
    let not_json = multipart::Form::new()
        .part("job", multipart::Part::text("{\"jobType\": "))
        .part("file", multipart::Part::bytes(csv(3)).file_name("a.csv"));
    let export = json!({ "jobType": "export", "dataset": "people" });
    let both = json!({ "jobType": "import", "dataset": "people",
                       "fileGuid": "00000000-0000-0000-0000-000000000001" });
    let bad_name = json!({ "jobType": "import", "dataset": "" });
    let bad_delimiter = json!({ "jobType": "import", "dataset": "people", "delimiter": "x" });
    let cases = [
        (file_first, StatusCode::UNPROCESSABLE_ENTITY, "\"job\""),
        (file_only, StatusCode::UNPROCESSABLE_ENTITY, "\"job\""),
        (job_only, StatusCode::UNPROCESSABLE_ENTITY, "\"file\""),
        (not_json, StatusCode::BAD_REQUEST, "not a job's JSON"),
        (
            form(&export, "a.csv", csv(3)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "dry run",
        ),
        (
            form(&both, "a.csv", csv(3)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not both",
        ),
        (
            form(&bad_name, "a.csv", csv(3)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "dataset",
        ),
        (
            form(&bad_delimiter, "a.csv", csv(3)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "delimiter",
        ),
        // Past the upload limit (4 MiB here), and a job field past 2 MiB.
        (
            form(&import, "a.csv", csv(100_000)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "upload limit",
        ),
        (
            multipart::Form::new().part("job", multipart::Part::text(" ".repeat(3 << 20))),
            StatusCode::PAYLOAD_TOO_LARGE,
            "\"job\" field is larger",
        ),
        (
            form(&import, "a.csv", Vec::new()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty",
        ),
    ];
    for (form, status, says) in cases {
        let response = send(&server, form).await;
        let answered = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(answered, status, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    // JSON that is not a form is still held to 2 MiB, though the route takes larger files.
    let big = json!({ "jobType": "import", "dataset": "x".repeat(3 << 20) });
    let response = server.post_json("/api/jobs", big).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.text().await.unwrap().contains("length limit"));
    assert_eq!(uploads(&db).await, 0);

    // A visitor's form naming what only an account can have is refused before the visitor
    // becomes a guest.
    let accounts = || async {
        let count = sqlx::query_scalar("select count(*) from users").fetch_one(&db.pool);
        count.await.unwrap()
    };
    let before: i64 = accounts().await;
    let visitor = TestServer::new_client();
    let doomed = [
        json!({ "jobType": "import", "dataset": "people",
                "parentId": "00000000-0000-0000-0000-000000000001" }),
        json!({ "jobType": "import", "dataset": "people",
                "fixes": "00000000-0000-0000-0000-000000000001" }),
        json!({ "jobType": "validate", "dataset": "people" }),
    ];
    for job in doomed {
        let request = visitor.post(server.url("/api/jobs"));
        let response = request
            .multipart(form(&job, "a.csv", csv(3)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{job}");
    }
    assert_eq!(accounts().await, before, "no guest was made");
    assert_eq!(uploads(&db).await, 0);

    // A request that is good until its job is made (a declared dataset that exists): its file
    // is stored, then removed.
    let columns = json!([{ "name": "id" }, { "name": "name" }, { "name": "email" },
                         { "name": "amount" }]);
    let declared = json!({ "jobType": "import", "dataset": "people",
                           "newDataset": { "columns": columns } });
    let response = send(&server, form(&declared, "a.csv", csv(3))).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let response = send(&server, form(&declared, "a.csv", csv(3))).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(uploads(&db).await, 1, "only the made job's file is kept");

    // A request replaying an earlier job keeps no second file.
    let keyed = json!({ "jobType": "import", "dataset": "keyed", "dedupeKey": "k-1" });
    let first = send(&server, form(&keyed, "a.csv", csv(3))).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: JobView = first.json().await.unwrap();
    // Its file is not stored: not even one past the upload limit is refused.
    let again = send(&server, form(&keyed, "a.csv", csv(100_000))).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<JobView>().await.unwrap().id, first.id);
    assert_eq!(uploads(&db).await, 2);
    server.stop().await;
}
