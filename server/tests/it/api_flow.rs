//! The import flow through the real HTTP API, with in-process workers.

use crate::support::{TestDb, TestServer, csv, stored_rows, worker_args};
use app::model::{JobKind, JobStatus};
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test]
async fn a_multi_chunk_csv_is_imported_with_exact_counts_and_rows() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(250))).await;

    // 2,000 good rows and one with a missing field, as row 1,002 of the sheet.
    let mut bytes = csv(2000);
    let at = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(1000)
        .unwrap()
        .0
        + 1;
    bytes.splice(at..at, b"oops,only-two\n".iter().copied());

    let upload = server.upload("people.csv", bytes.clone()).await;
    assert_eq!(upload["filename"], "people.csv");
    assert_eq!(upload["size"], bytes.len() as u64);

    let response = server
        .client
        .post(server.url("/api/jobs"))
        .json(&serde_json::json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "people" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let created: app::model::JobView = response.json().await.unwrap();
    assert_eq!(location, format!("/api/jobs/{}", created.id));
    assert_eq!(created.job_type, JobKind::Import);

    server.finished(created.id).await;
    let job = server.job(created.id).await;
    assert_eq!(job.status, JobStatus::Completed, "{job:?}");
    assert_eq!(job.item_count, Some(2001));
    assert_eq!(job.item_progress, 2001);
    assert_eq!(job.rows_ok, 2000);
    assert_eq!(job.rows_failed, 1);
    assert_eq!((job.chunks_total, job.chunks_done), (9, 9));
    assert!(job.started_at.is_some() && job.finished_at.is_some());
    assert_eq!(stored_rows(&db.pool, job.id).await, (2000, 2000));

    let (row, message): (i64, String) =
        sqlx::query_as("select row_no, message from job_errors where job_id = $1")
            .bind(job.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (row, message.as_str()),
        (1002, "expected 4 fields, found 2")
    );

    // Every row comes back through the API, in file order, across pages.
    let mut rows = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let mut path = "/api/datasets/people/rows?limit=700".to_owned();
        if let Some(after) = &next {
            path.push_str(&format!("&after={after}"));
        }
        let page: Value = server.get_json(&path).await;
        rows.extend(page["rows"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(after) => next = Some(after.to_owned()),
            None => break,
        }
    }
    assert_eq!(rows.len(), 2000);
    assert_eq!(
        rows[0],
        serde_json::json!({ "id": "1", "name": "Name 1, Jr.", "email": "user1@example.com", "amount": "3.01" })
    );
    assert_eq!(rows[1999]["id"], "2000");
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, (1..=2000).collect::<Vec<_>>());

    // The list shows it, and the server-rendered page shows the finished state.
    let list: Value = server.get_json("/api/jobs").await;
    assert_eq!(list["jobs"][0]["id"], job.id.to_string());
    let html = server.get_text(&format!("/jobs/{}", job.id)).await;
    assert!(html.contains("Completed with 1 error<"), "{html}");
    assert!(html.contains("2,001 of 2,001 rows"), "{html}");

    server.stop().await;
}

#[tokio::test]
async fn unknown_ids_and_bad_requests_get_json_errors() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let get = |path: &str| server.client.get(server.url(path)).send();

    for path in [
        format!("/api/jobs/{}", uuid::Uuid::new_v4()),
        "/api/jobs/not-a-uuid".to_owned(),
        format!("/api/jobs/{}/events", uuid::Uuid::new_v4()),
        "/api/datasets/nope/rows".to_owned(),
        "/api/nothing-here".to_owned(),
    ] {
        let response = get(&path).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{path}");
        assert!(body["error"]["message"].as_str().unwrap().len() > 5);
    }
    let page = get(&format!("/jobs/{}", uuid::Uuid::new_v4()))
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::NOT_FOUND);

    let post = |body: Value| {
        server
            .client
            .post(server.url("/api/jobs"))
            .json(&body)
            .send()
    };
    let missing_upload = post(serde_json::json!({
        "jobType": "import", "fileGuid": uuid::Uuid::new_v4(), "dataset": "x"
    }))
    .await
    .unwrap();
    assert_eq!(missing_upload.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let upload = server.upload("a.csv", b"a\n1\n".to_vec()).await;
    let bad_name = post(
        serde_json::json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "a b/c" }),
    )
    .await
    .unwrap();
    assert_eq!(bad_name.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = bad_name.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dataset name")
    );
    let not_json = server
        .client
        .post(server.url("/api/jobs"))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        not_json.json::<Value>().await.unwrap()["error"]["code"],
        "bad_request"
    );

    let empty = server
        .client
        .post(server.url("/api/uploads"))
        .multipart(reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(Vec::new()).file_name("e.csv"),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), StatusCode::UNPROCESSABLE_ENTITY);
    server.stop().await;
}

#[tokio::test]
async fn files_that_are_not_csv_fail_the_job_with_a_reason() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let wide = format!(
        "{}\n{}\n",
        vec!["c"; 20_000].join(","),
        vec!["1"; 20_000].join(",")
    )
    .into_bytes();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "image.csv",
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(),
            "neither a spreadsheet nor text",
        ),
        (
            "book.csv",
            b"PK\x03\x04\x14\0\x06\0".to_vec(),
            "workbook could not be read",
        ),
        ("header.csv", b"a,b,c\n".to_vec(), "no data rows"),
        ("wide.csv", wide, "20000 columns; at most 1000"),
    ];
    for (i, (name, bytes, reason)) in cases.into_iter().enumerate() {
        let job = server.import(name, bytes, &format!("bad{i}")).await;
        let last = server.finished(job.id).await;
        assert_eq!(last.status, JobStatus::Failed, "{name}");
        let error = last.error.unwrap();
        assert!(error.contains(reason), "{name}: {error}");
        let html = server.get_text(&format!("/jobs/{}", job.id)).await;
        assert!(html.contains("Job failed"), "{name}");
    }
    server.stop().await;
}

#[tokio::test]
async fn tab_and_semicolon_separated_and_windows_1252_files_are_recognised() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(2))).await;
    let files: [(&str, &[u8]); 3] = [
        ("list.tsv", b"id\tnote\n1\ta, b\n2\tc; d\n3\te\n"),
        ("euro.csv", b"id;note\r\n1;\"a; b\"\r\n2;1,5\r\n3;e\r\n"),
        // As Excel on a French or German Windows saves "CSV": `;` and Windows-1252.
        (
            "excel.csv",
            b"id;note\r\n1;Jos\xe9\r\n2;K\xf6ln \x80\r\n3;e\r\n",
        ),
    ];
    for (i, (name, bytes)) in files.into_iter().enumerate() {
        let dataset = format!("sep{i}");
        let job = server.import(name, bytes.to_vec(), &dataset).await;
        let done = server.finished(job.id).await;
        assert_eq!(
            (done.status, done.rows_ok, done.rows_failed),
            (JobStatus::Completed, 3, 0),
            "{name}"
        );
        let page: Value = server
            .get_json(&format!("/api/datasets/{dataset}/rows"))
            .await;
        let notes: Vec<&str> = page["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["note"].as_str().unwrap())
            .collect();
        let expected: [&str; 3] = match i {
            0 => ["a, b", "c; d", "e"],
            1 => ["a; b", "1,5", "e"],
            _ => ["José", "Köln €", "e"],
        };
        assert_eq!(notes, expected, "{name}");
    }
    server.stop().await;
}

#[tokio::test]
async fn stored_files_read_back_by_any_byte_range() {
    use server::store::uploads;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // Two and a half parts of bytes that tell their own position.
    let bytes: Vec<u8> = (0..uploads::PART_BYTES * 5 / 2)
        .map(|i| (i % 251) as u8)
        .collect();
    let upload = server.upload("positions.bin", bytes.clone()).await;
    let id: uuid::Uuid = upload["id"].as_str().unwrap().parse().unwrap();
    let part = uploads::PART_BYTES as u64;
    let len = bytes.len() as u64;
    for (start, end) in [
        (0, 10),
        (part - 3, part + 5),
        (part, 2 * part),
        (10, len),
        (2 * part + 1, len),
        (5, 5),
    ] {
        let read = uploads::read_range(&db.pool, id, start, end).await.unwrap();
        assert!(
            read == bytes[start as usize..end as usize],
            "bytes {start}..{end} read back wrong"
        );
    }
    // A file of whole parts is finished by a statement of its own, any other by its last part
    // (and this one by its first): each ends received, with its size and digest.
    for len in [2 * part, part + 1, 3] {
        use sha2::{Digest, Sha256};
        let bytes = vec![7u8; len as usize];
        let upload = server.upload("whole.bin", bytes.clone()).await;
        let id: uuid::Uuid = upload["id"].as_str().unwrap().parse().unwrap();
        let stored: (i64, Vec<u8>, bool) =
            sqlx::query_as("select size, sha256, receiving from uploads where id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(stored, (len as i64, Sha256::digest(&bytes).to_vec(), false));
        let read = uploads::read_range(&db.pool, id, 0, len).await.unwrap();
        assert!(read == bytes, "a file of {len} bytes read back wrong");
    }
    server.stop().await;
}

#[tokio::test]
async fn uploads_over_the_limit_get_a_413_and_huge_cells_are_row_errors() {
    let db = TestDb::new().await;
    let server = TestServer::start_with_upload_limit(&db, Some(worker_args(100)), 1 << 20).await;
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(vec![b'x'; 2 << 20]).file_name("big.csv"),
    );
    let response = server
        .client
        .post(server.url("/api/uploads"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(
        body["error"]["message"],
        "The file is larger than the upload limit of 1.0 MB."
    );
    server.stop().await;

    // A 2 MB cell, and a 10 MB row, are bad rows, not a failed job.
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let huge = format!(
        "id,note\n1,ok\n2,{}\n3,{}\n4,ok\n",
        "x".repeat(2 << 20),
        "y".repeat(10 << 20)
    );
    let job = server.import("huge.csv", huge.into_bytes(), "huge").await;
    let done = server.finished(job.id).await;
    assert_eq!(
        (done.status, done.rows_ok, done.rows_failed),
        (JobStatus::Completed, 2, 2)
    );
    let errors: Value = server
        .get_json(&format!("/api/jobs/{}/errors", job.id))
        .await;
    assert_eq!(errors["errors"][0]["rowNo"], 3);
    assert_eq!(
        errors["errors"][0]["message"],
        "note: the value is larger than 1 MiB"
    );
    assert_eq!(errors["errors"][1]["rowNo"], 4);
    assert_eq!(
        errors["errors"][1]["message"],
        format!(
            "the row is {} bytes long; at most 8 MiB is read per row",
            (10 << 20) + 3
        )
    );
    server.stop().await;
}
