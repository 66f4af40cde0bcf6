//! Export jobs end to end: a typed dataset out as CSV and as XLSX with real cell types, chunked
//! with the same lifecycle as imports; formula-like text neutralised; the error report as XLSX.

use std::io::Cursor;

use crate::support::{
    TestDb, TestServer, assert_stored_bytes_follow_uploads, lease, run, worker_args,
};
use app::model::{JobStatus, JobView, Remedy};
use calamine::{Data, DataType, Reader, Xlsx};
use reqwest::{StatusCode, header};
use serde_json::{Value, json};
use uuid::Uuid;

const ROWS: usize = 250;

/// `ROWS` rows for the `ledger` dataset; row 7's note looks like a formula.
fn ledger_csv() -> Vec<u8> {
    let mut csv = String::from("id,note,amount,paid,due,at\n");
    for i in 1..=ROWS {
        let note = if i == 7 {
            "=HYPERLINK(\"http://x\")".to_owned()
        } else {
            format!("note {i}")
        };
        csv.push_str(&format!(
            "{i},\"{}\",{}.25,{},2024-03-{:02},2024-03-01T10:{:02}:00Z\n",
            note.replace('"', "\"\""),
            i as i64 - 100,
            i % 2 == 0,
            1 + i % 28,
            i % 60
        ));
    }
    csv.into_bytes()
}

/// Declares a dataset of the ledger's columns.
async fn declare_ledger(server: &TestServer, name: &str) {
    let created = server
        .post_json(
            "/api/datasets",
            json!({
                "name": name,
                "key": "id",
                "columns": [
                    { "name": "id", "type": "integer" },
                    { "name": "note", "type": "text" },
                    { "name": "amount", "type": "decimal" },
                    { "name": "paid", "type": "boolean" },
                    { "name": "due", "type": "date" },
                    { "name": "at", "type": "timestamp" }
                ]
            }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
}

async fn ledger(server: &TestServer) {
    declare_ledger(server, "ledger").await;
    let job = server.import("ledger.csv", ledger_csv(), "ledger").await;
    let done = server.finished(job.id).await;
    assert_eq!(
        (done.status, done.rows_ok),
        (JobStatus::Completed, ROWS as i64)
    );
}

async fn export(server: &TestServer, dataset: &str, format: &str) -> JobView {
    let response = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "export", "dataset": dataset, "format": format }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let job: JobView = response.json().await.unwrap();
    server.finished(job.id).await
}

async fn download(server: &TestServer, job: &JobView) -> (String, String, Vec<u8>) {
    let url = job
        .result_url
        .as_deref()
        .expect("a finished export has a file");
    let response = server.client.get(server.url(url)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let header = |name| response.headers()[name].to_str().unwrap().to_owned();
    let (kind, disposition) = (
        header(header::CONTENT_TYPE),
        header(header::CONTENT_DISPOSITION),
    );
    (kind, disposition, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn a_dataset_exports_as_csv_in_chunks_with_formulas_neutralised() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(40))).await;
    ledger(&server).await;

    let job = export(&server, "ledger", "csv").await;
    assert_eq!(job.status, JobStatus::Completed, "{:?}", job.error);
    assert_eq!(job.item_count, Some(ROWS as i64));
    assert_eq!((job.item_progress, job.chunks_total), (ROWS as i64, 7));
    assert_eq!(job.format, Some(app::model::ExportFormat::Csv));

    let (kind, disposition, bytes) = download(&server, &job).await;
    assert!(kind.starts_with("text/csv"), "{kind}");
    assert_eq!(disposition, "attachment; filename=\"ledger.csv\"");
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), ROWS + 1);
    assert_eq!(lines[0], "id,note,amount,paid,due,at");
    assert_eq!(
        lines[1],
        "1,note 1,-99.25,false,2024-03-02,2024-03-01T10:01:00Z"
    );
    assert_eq!(
        lines[7],
        "7,\"'=HYPERLINK(\"\"http://x\"\")\",-93.25,false,2024-03-08,2024-03-01T10:07:00Z"
    );
    let ids: Vec<usize> = lines[1..]
        .iter()
        .map(|line| line.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=ROWS).collect::<Vec<_>>(),
        "every row once, in order"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_dataset_exports_as_a_typed_xlsx_workbook() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    ledger(&server).await;

    let job = export(&server, "ledger", "xlsx").await;
    assert_eq!(job.status, JobStatus::Completed, "{:?}", job.error);
    let (kind, disposition, bytes) = download(&server, &job).await;
    assert_eq!(
        kind,
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    );
    assert_eq!(disposition, "attachment; filename=\"ledger.xlsx\"");

    let mut book = Xlsx::new(Cursor::new(bytes.clone())).unwrap();
    let sheet = book.worksheet_range("ledger").unwrap();
    assert_eq!(sheet.height(), ROWS + 1);
    assert_eq!(sheet.get((0, 1)), Some(&Data::String("note".into())));
    assert_eq!(sheet.get((1, 0)), Some(&Data::Float(1.0)));
    assert_eq!(sheet.get((1, 2)), Some(&Data::Float(-99.25)));
    assert_eq!(sheet.get((1, 3)), Some(&Data::Bool(false)));
    let due = sheet.get((1, 4)).unwrap().as_datetime().unwrap();
    assert_eq!(due.to_string(), "2024-03-02 00:00:00");
    let at = sheet.get((1, 5)).unwrap().as_datetime().unwrap();
    assert_eq!(at.to_string(), "2024-03-01 10:01:00");
    assert_eq!(
        sheet.get((7, 1)),
        Some(&Data::String("'=HYPERLINK(\"http://x\")".into()))
    );

    // Written by three chunks in parallel, it imports back as the same rows through our own
    // reader (the formula-like note stays inert).
    assert_eq!(job.chunks_total, 3);
    declare_ledger(&server, "ledger_again").await;
    let again = server.import("ledger.xlsx", bytes, "ledger_again").await;
    let done = server.finished(again.id).await;
    assert_eq!(
        (done.status, done.rows_ok, done.rows_failed),
        (JobStatus::Completed, ROWS as i64, 0)
    );
    let rows = |name: &str| format!("/api/datasets/{name}/rows?limit=500");
    let before: Value = server.get_json(&rows("ledger")).await;
    let mut after: Value = server.get_json(&rows("ledger_again")).await;
    assert_eq!(after["rows"][6]["note"], "'=HYPERLINK(\"http://x\")");
    after["rows"][6]["note"] = before["rows"][6]["note"].clone();
    assert_eq!(before["rows"], after["rows"]);
    server.stop().await;
}

#[tokio::test]
async fn decimals_stay_exact_from_file_to_rows_and_exports() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let created = server
        .post_json(
            "/api/datasets",
            json!({ "name": "sums", "columns": [{ "name": "n", "type": "decimal" }] }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let thirty = "123456789012345678901234567890";
    let tiny = "-0.000000000000000000000000000001";
    let file = format!("n\n10.50\n0.1\n{thirty}\n-0\n-0.00\n{tiny}\n+007.250\n");
    let job = server.import("sums.csv", file.into_bytes(), "sums").await;
    let done = server.finished(job.id).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 7));
    // As written, scale kept, zero unsigned: strings, since JSON numbers are read as floats.
    let exact = ["10.50", "0.1", thirty, "0", "0.00", tiny, "7.250"];
    let rows: Value = server.get_json("/api/datasets/sums/rows").await;
    let shown: Vec<Value> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["n"].clone())
        .collect();
    assert_eq!(shown, exact.map(|n| json!(n)));

    let (_, _, csv) = download(&server, &export(&server, "sums", "csv").await).await;
    assert_eq!(
        String::from_utf8(csv).unwrap(),
        format!("n\n{}\n", exact.join("\n"))
    );

    let (_, _, xlsx) = download(&server, &export(&server, "sums", "xlsx").await).await;
    let mut book = Xlsx::new(Cursor::new(xlsx.clone())).unwrap();
    let sheet = book.worksheet_range("sums").unwrap();
    let cells: Vec<Data> = (1..=7)
        .map(|r| sheet.get((r, 0)).unwrap().clone())
        .collect();
    // Numbers of at most 15 significant digits (what Excel holds) are numbers; longer ones
    // text rather than rounded.
    assert_eq!(
        cells,
        [
            Data::Float(10.5),
            Data::Float(0.1),
            Data::String(thirty.into()),
            Data::Float(0.0),
            Data::Float(0.0),
            Data::Float(-1e-30),
            Data::Float(7.25),
        ]
    );
    // Shown with the places they were written with.
    let mut zip = zip::ZipArchive::new(Cursor::new(xlsx)).unwrap();
    let mut styles = String::new();
    std::io::Read::read_to_string(&mut zip.by_name("xl/styles.xml").unwrap(), &mut styles).unwrap();
    for code in ["formatCode=\"0.00\"", "formatCode=\"0.000\""] {
        assert!(styles.contains(code), "{code} in {styles}");
    }
    server.stop().await;
}

#[tokio::test]
async fn empty_unknown_and_unfinished_exports_are_clear() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let created = server
        .post_json(
            "/api/datasets",
            json!({ "name": "blank", "columns": [{ "name": "a" }, { "name": "b" }] }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);

    let job = export(&server, "blank", "csv").await;
    assert_eq!(
        (job.status, job.item_count),
        (JobStatus::Completed, Some(0))
    );
    let (_, _, bytes) = download(&server, &job).await;
    assert_eq!(bytes, b"a,b\n");

    let unknown = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "export", "dataset": "nope", "format": "csv" }),
        )
        .await;
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = unknown.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no dataset")
    );
    let bad_format = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "export", "dataset": "blank", "format": "pdf" }),
        )
        .await;
    assert_eq!(bad_format.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // An import has no result file.
    let import = server
        .import("x.csv", b"a,b\n1,2\n".to_vec(), "blank")
        .await;
    let response = server
        .client
        .get(server.url(&format!("/api/jobs/{}/result", import.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn the_error_report_downloads_as_xlsx() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let created = server.post_json("/api/datasets",
        json!({ "name": "nums", "columns": [{ "name": "n", "type": "integer" }, { "name": "label" }] }),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let job = server
        .import("nums.csv", b"n,label\n1,a\nx,=bad\n3,c\n".to_vec(), "nums")
        .await;
    let done = server.finished(job.id).await;
    assert_eq!((done.rows_ok, done.rows_failed), (2, 1));

    let response = server
        .client
        .get(server.url(&format!("/api/jobs/{}/errors.xlsx", job.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_DISPOSITION],
        "attachment; filename=\"nums-errors.xlsx\""
    );
    let bytes = response.bytes().await.unwrap().to_vec();
    let mut book = Xlsx::new(Cursor::new(bytes)).unwrap();
    let sheet = book.worksheet_range("errors").unwrap();
    assert_eq!(sheet.height(), 2);
    assert_eq!(sheet.get((0, 1)), Some(&Data::String("_error".into())));
    // The sheet row as a number, then the row as it was.
    assert_eq!(sheet.get((1, 0)), Some(&Data::Float(3.0)));
    assert_eq!(sheet.get((1, 2)), Some(&Data::String("x".into())));
    assert_eq!(sheet.get((1, 3)), Some(&Data::String("'=bad".into())));
    server.stop().await;
}

#[tokio::test]
async fn an_export_fails_clearly_when_the_dataset_changes_under_it() {
    use server::jobs::{Engine, TaskError, export};
    let db = TestDb::new().await;
    // No workers: the test runs the export's tasks itself, with an import in between.
    let server = TestServer::start(&db, None).await;
    let mut importing = TestServer::start(&db, Some(worker_args(100))).await;
    // The same person on both servers: datasets are their owner's.
    importing.client = server.client.clone();
    ledger(&importing).await;
    importing.stop().await;

    let response = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "export", "dataset": "ledger", "format": "csv" }),
        )
        .await;
    let job: JobView = response.json().await.unwrap();
    let engine = Engine::new(db.pool.clone(), &worker_args(100)).unwrap();
    export::plan(&engine, job.id).await.unwrap();
    // A re-import moves a row of the first planned range to its own, newer key.
    sqlx::query("delete from dataset_rows where pos & 4294967295 = 50")
        .execute(&db.pool)
        .await
        .unwrap();
    // The chunks after the change run; the first one refuses (its runner then fails the job
    // with the reason, as `api_flow` shows for refusals).
    let mut refusals = Vec::new();
    for chunk_no in [1, 2, 0] {
        let held = lease(&db, job.id, chunk_no, "test").await.unwrap();
        match export::chunk(&engine, job.id, chunk_no, run(&held)).await {
            Ok(()) => {}
            Err(TaskError::Refused(refusal)) => refusals.push((chunk_no, refusal.reason)),
            Err(other) => panic!("chunk {chunk_no}: {other}"),
        }
    }
    assert_eq!(
        refusals,
        [(
            0,
            "The dataset changed while it was being exported (an import wrote to it). Export \
             it again."
                .to_owned()
        )]
    );
    server.stop().await;
}

#[tokio::test]
async fn export_ranges_and_row_pages_span_several_imports() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    for part in 0..3 {
        let csv: String = std::iter::once("n\n".to_owned())
            .chain((0..70).map(|i| format!("{}\n", part * 70 + i)))
            .collect();
        let job = server.import("part.csv", csv.into_bytes(), "multi").await;
        assert_eq!(server.finished(job.id).await.rows_ok, 70);
    }
    let job = export(&server, "multi", "csv").await;
    assert_eq!((job.status, job.chunks_total), (JobStatus::Completed, 3));
    let (_, _, bytes) = download(&server, &job).await;
    let expected: String = std::iter::once("n\n".to_owned())
        .chain((0..210).map(|n| format!("{n}\n")))
        .collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);

    // The rows API pages through the same order with its cursor.
    let mut seen = Vec::new();
    let mut path = "/api/datasets/multi/rows?limit=50".to_owned();
    loop {
        let page: Value = server.get_json(&path).await;
        seen.extend(
            page["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["n"].clone()),
        );
        match page["next"].as_str() {
            Some(next) => path = format!("/api/datasets/multi/rows?limit=50&after={next}"),
            None => break,
        }
    }
    let numbers: Vec<Value> = (0..210).map(|n| Value::String(n.to_string())).collect();
    assert_eq!(seen, numbers);
    server.stop().await;
}

#[tokio::test]
async fn any_text_comes_back_as_it_went_in() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    // Line breaks, tabs, backslashes, quotes, the record separators, empty and non-ASCII text.
    let values = [
        "two\nlines\r\nand a tab\t",
        "back\\slash \"quoted\"",
        "\u{1f}unit\u{1e}record\u{1e}0",
        "",
        "é 漢字 🙂",
    ];
    let mut csv = String::from("n,text\n");
    for (n, value) in values.iter().enumerate() {
        csv.push_str(&format!("{n},\"{}\"\n", value.replace('"', "\"\"")));
    }
    let job = server.import("text.csv", csv.into_bytes(), "text").await;
    let done = server.finished(job.id).await;
    assert_eq!(done.rows_ok, values.len() as i64, "{:?}", done.error);

    let rows: Value = server.get_json("/api/datasets/text/rows").await;
    let stored: Vec<&Value> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["text"])
        .collect();
    // A schemaless dataset keeps an empty cell as null.
    let expected: Vec<Value> = values
        .iter()
        .map(|v| if v.is_empty() { Value::Null } else { json!(v) })
        .collect();
    assert_eq!(stored, expected.iter().collect::<Vec<_>>());

    let job = export(&server, "text", "csv").await;
    let (_, _, bytes) = download(&server, &job).await;
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let exported: Vec<String> = reader
        .records()
        .map(|record| record.unwrap()[1].to_owned())
        .collect();
    assert_eq!(exported, values);
    server.stop().await;
}

#[tokio::test]
async fn an_xlsx_export_over_a_sheets_rows_offers_csv_instead_of_retry() {
    let db = TestDb::new().await;
    // The export is accepted with no workers running; the rows grow before it plans.
    let server = TestServer::start(&db, None).await;
    let mut importing = TestServer::start(&db, Some(worker_args(100_000))).await;
    importing.client = server.client.clone();
    let one = importing
        .import("big.csv", b"id,name\n1,Ada\n".to_vec(), "big")
        .await;
    assert_eq!(
        importing.finished(one.id).await.status,
        JobStatus::Completed
    );
    importing.stop().await;
    let response = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "export", "dataset": "big", "format": "xlsx" }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let job: JobView = response.json().await.unwrap();
    // One row more than an Excel sheet holds (its header takes a row), copied in SQL and
    // counted as an import counts them.
    sqlx::query(
        "with copied as (
             insert into dataset_rows (dataset_id, record, pos)
             select dataset_id, record, pos + i from dataset_rows, generate_series(1, 1048575) i
             returning dataset_id)
         update datasets set row_count = row_count + (select count(*) from copied)
         where id = (select dataset_id from copied limit 1)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut working = TestServer::start(&db, Some(worker_args(100_000))).await;
    working.client = server.client.clone();
    let job = working.finished(job.id).await;
    working.stop().await;
    assert_eq!(job.status, JobStatus::Failed);
    assert!(
        job.error
            .as_deref()
            .unwrap()
            .contains("Export it as CSV instead")
    );
    assert_eq!(job.remedy, Some(Remedy::ExportCsv));
    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(retried.status(), StatusCode::CONFLICT);
    let body: Value = retried.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "Retrying would fail the same way: Export as CSV instead."
    );
    server.stop().await;
}

#[tokio::test]
async fn wide_rows_export_a_part_at_a_time_and_the_file_goes_with_its_job() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    // 12 rows of ~300 KB: one export chunk (100 rows), written as several parts of about
    // 1 MiB each rather than held whole.
    let wide = |i: usize| {
        format!(
            "{i},{}",
            char::from(b'a' + i as u8).to_string().repeat(300_000)
        )
    };
    let csv: String = std::iter::once("id,text".to_owned())
        .chain((1..=12).map(wide))
        .map(|line| line + "\n")
        .collect();
    let job = server
        .import("wide.csv", csv.clone().into_bytes(), "wide")
        .await;
    assert_eq!(server.finished(job.id).await.rows_ok, 12);

    let job = export(&server, "wide", "csv").await;
    assert_eq!((job.status, job.chunks_total), (JobStatus::Completed, 1));
    let (_, _, bytes) = download(&server, &job).await;
    assert_eq!(String::from_utf8(bytes).unwrap(), csv);
    let (file, parts): (Uuid, i64) = sqlx::query_as(
        "select j.result_upload_id, (select count(*) from upload_parts p
                                     where p.upload_id = j.result_upload_id)
         from jobs j where j.id = $1 and j.output_upload_id is null",
    )
    .bind(job.id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(parts, 4, "the header's part, then three of the chunk's");
    assert_stored_bytes_follow_uploads(&db).await;

    // The file is the export's: it goes when the job is deleted.
    let deleted = server
        .client
        .delete(server.url(&format!("/api/jobs/{}", job.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let left: i64 = sqlx::query_scalar("select count(*) from uploads where id = $1")
        .bind(file)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_stored_bytes_follow_uploads(&db).await;
    server.stop().await;
}

#[tokio::test]
async fn many_small_imports_export_in_chunks_of_counted_rows() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    // Each import's rows are a range of positions of their own: twelve imports of five rows
    // would make twelve chunks of five; counted, they make one.
    for part in 0..12 {
        let csv: String = std::iter::once("n\n".to_owned())
            .chain((0..5).map(|i| format!("{}\n", part * 5 + i)))
            .collect();
        let job = server.import("part.csv", csv.into_bytes(), "small").await;
        assert_eq!(server.finished(job.id).await.rows_ok, 5);
    }
    let job = export(&server, "small", "csv").await;
    assert_eq!((job.status, job.chunks_total), (JobStatus::Completed, 1));
    let (_, _, bytes) = download(&server, &job).await;
    let expected: String = std::iter::once("n\n".to_owned())
        .chain((0..60).map(|n| format!("{n}\n")))
        .collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
    server.stop().await;
}
