//! Workbook imports end to end: XLSX, XLS and ODS sheets into typed datasets, the sheet chosen
//! by name or by default, sheet row numbers in errors, and damaged, protected and hostile
//! workbooks failing their own job while others run on (conversion runs in a memory-limited
//! child process: the real `server convert`).

use crate::support::{TestDb, TestServer, worker_args};
use app::model::{JobStatus, JobView, Remedy};
use reqwest::StatusCode;
use rust_xlsxwriter::{ExcelDateTime, Format, Workbook};
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

/// An "Orders" sheet after a cover sheet of one sentence (which the import passes over: it
/// holds no table): the header on sheet row 3 (two empty rows above it), 250 good rows and one
/// bad row (sheet row 100).
fn orders_xlsx() -> Vec<u8> {
    let mut book = Workbook::new();
    book.add_worksheet()
        .set_name("Cover")
        .unwrap()
        .write_string(0, 0, "Orders of March. Read me first: totals are in euros.")
        .unwrap();
    let sheet = book.add_worksheet().set_name("Orders").unwrap();
    let date = Format::new().set_num_format("dd/mm/yyyy");
    for (col, name) in ["order", "placed", "total", "paid"].into_iter().enumerate() {
        sheet.write_string(2, col as u16, name).unwrap();
    }
    for i in 1..=251u32 {
        let row = 2 + i;
        sheet.write_number(row, 0, i).unwrap();
        let day = ExcelDateTime::from_ymd(2024, 3, 1 + (i % 28) as u8).unwrap();
        sheet
            .write_datetime_with_format(row, 1, &day, &date)
            .unwrap();
        if row == 99 {
            sheet.write_string(row, 2, "twelve").unwrap();
        } else {
            sheet.write_number(row, 2, f64::from(i) * 1.25).unwrap();
        }
        sheet.write_boolean(row, 3, i % 2 == 0).unwrap();
    }
    book.save_to_buffer().unwrap()
}

async fn create_dataset(server: &TestServer, body: Value) {
    let response = server.post_json("/api/datasets", body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn an_xlsx_sheet_imports_into_a_typed_dataset_with_sheet_row_numbers() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(40))).await;
    create_dataset(
        &server,
        json!({
            "name": "orders",
            "key": "order",
            "columns": [
                { "name": "order", "type": "integer" },
                { "name": "placed", "type": "date", "required": true },
                { "name": "total", "type": "decimal" },
                { "name": "paid", "type": "boolean" }
            ]
        }),
    )
    .await;

    let job = server.import("orders.xlsx", orders_xlsx(), "orders").await;
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);
    assert_eq!((done.rows_ok, done.rows_failed), (250, 1));
    assert_eq!(done.item_count, Some(251));
    assert_eq!(done.filename.as_deref(), Some("orders.xlsx"));
    // The sheet chosen for it (past the cover sheet) is on the job.
    assert_eq!(done.sheet.as_deref(), Some("Orders"));
    let page = server.get_text(&format!("/jobs/{}", job.id)).await;
    assert!(page.contains("data-testid=\"job-sheet\""), "{page}");

    let errors: Value = server
        .get_json(&format!("/api/jobs/{}/errors", job.id))
        .await;
    let error = &errors["errors"][0];
    assert_eq!(error["rowNo"], 100, "{errors}");
    assert_eq!(error["column"], "total");
    assert_eq!(error["value"], "twelve");

    let rows: Value = server.get_json("/api/datasets/orders/rows").await;
    assert_eq!(
        rows["rows"][0],
        json!({ "order": 1, "placed": "2024-03-02", "total": "1.25", "paid": false })
    );
    server.stop().await;
}

#[tokio::test]
async fn xls_and_ods_import_and_sheets_are_chosen_by_name() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;

    let xls = server
        .import_sheet(
            "people.xls",
            fixture("people.xls"),
            "people",
            Some("people"),
        )
        .await;
    let ods = server
        .import("scores.ods", fixture("scores.ods"), "scores")
        .await;
    let missing = server
        .import_sheet("people.xls", fixture("people.xls"), "nope", Some("Staff"))
        .await;

    let xls = server.finished(xls.id).await;
    assert_eq!((xls.status, xls.rows_ok), (JobStatus::Completed, 2));
    let rows: Value = server.get_json("/api/datasets/people/rows").await;
    assert_eq!(
        rows["rows"][1],
        json!({ "name": "Rui", "age": "42", "joined": "2023-06-01" })
    );

    // The empty row between header and data is skipped, not imported as an empty row.
    let ods = server.finished(ods.id).await;
    assert_eq!(
        (ods.status, ods.rows_ok, ods.rows_failed),
        (JobStatus::Completed, 1, 0)
    );
    let rows: Value = server.get_json("/api/datasets/scores/rows").await;
    assert_eq!(
        rows["rows"][0],
        json!({ "name": "Ana", "score": "9.5", "on": "2024-02-29" })
    );

    let missing = server.finished(missing.id).await;
    assert_eq!(missing.status, JobStatus::Failed);
    let error = missing.error.unwrap();
    assert!(error.contains("no sheet named \"Staff\""), "{error}");
    assert!(error.contains("Empty, People"), "{error}");
    // Retrying would fail the same way: refused, pointing at the fix, which the job carries.
    let Some(Remedy::OtherSheet { sheets, file_guid }) = missing.remedy.clone() else {
        panic!("another sheet fixes it: {:?}", missing.remedy)
    };
    assert_eq!(sheets, ["Empty", "People"]);
    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", missing.id), json!({}))
        .await;
    assert_eq!(retried.status(), StatusCode::CONFLICT);
    let body: Value = retried.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "Retrying would fail the same way: Choose another sheet instead."
    );
    let bulk = server
        .post_json(
            "/api/jobs/bulk",
            json!({ "action": "retry", "ids": [missing.id] }),
        )
        .await;
    let bulk: Value = bulk.json().await.unwrap();
    assert_eq!(bulk["changed"], 0, "{bulk}");
    // The fix: the same upload, another sheet.
    let fixed = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "import", "fileGuid": file_guid, "dataset": "nope", "sheet": "People" }),
        )
        .await;
    assert_eq!(fixed.status(), StatusCode::ACCEPTED);
    let fixed: JobView = fixed.json().await.unwrap();
    let fixed = server.finished(fixed.id).await;
    assert_eq!(
        (fixed.status, fixed.rows_ok, fixed.remedy),
        (JobStatus::Completed, 2, None)
    );
    server.stop().await;
}

#[tokio::test]
async fn damaged_protected_and_hostile_workbooks_fail_alone() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(50))).await;
    let book = orders_xlsx();
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "truncated.xlsx",
            book[..book.len() / 2].to_vec(),
            "could not be read",
        ),
        (
            "password.xlsx",
            fixture("password.xlsx"),
            "password-protected",
        ),
        ("bomb.xlsx", fixture("bomb.xlsx"), "zip bomb"),
        // Would make calamine allocate terabytes: the converter's process is limited, dies
        // alone, and the job says why.
        ("huge.xls", fixture("huge_dimensions.xls"), "more memory"),
        ("renamed.xlsx", b"id,name\n1,Ana\n".to_vec(), ""),
    ];
    let mut jobs = Vec::new();
    for (i, (name, bytes, reason)) in cases.into_iter().enumerate() {
        jobs.push((
            name,
            reason,
            server.import(name, bytes, &format!("bad{i}")).await,
        ));
    }
    // A good import at the same time is not held up by the bad ones.
    let good = server.import("orders.xlsx", book, "good").await;
    for (name, reason, job) in jobs {
        let last = server.finished(job.id).await;
        if reason.is_empty() {
            // The type comes from the bytes, not the name: this "xlsx" is CSV.
            assert_eq!(last.status, JobStatus::Completed, "{name}");
            continue;
        }
        assert_eq!(last.status, JobStatus::Failed, "{name}");
        let error = last.error.unwrap();
        assert!(error.contains(reason), "{name}: {error}");
    }
    let good = server.finished(good.id).await;
    assert_eq!((good.status, good.rows_ok), (JobStatus::Completed, 251));
    server.stop().await;
}
