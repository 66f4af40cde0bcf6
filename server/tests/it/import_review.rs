//! The review between upload and import (issue 13): the preview of an upload (sheets, header
//! row past title rows, delimiter and encoding, first rows, a suggested mapping), and imports
//! that take a header row, delimiter, encoding and mapping, checked before the job is queued.

use crate::support::{TestDb, TestServer, worker_args};
use app::{
    model::{JobStatus, JobView},
    preview::UploadPreview,
};
use reqwest::StatusCode;
use rust_xlsxwriter::Workbook;
use serde_json::{Value, json};

/// A workbook as people send them: a "Read me" cover sheet, a hidden sheet of drop-down lists,
/// then "Contacts" with two title rows and a blank row above a header whose names are not the
/// dataset's ("Full name", "E-mail", "Signed up") and a column it does not want ("Notes").
fn contacts_xlsx(rows: u32) -> Vec<u8> {
    let mut book = Workbook::new();
    book.add_worksheet()
        .set_name("Read me")
        .unwrap()
        .write_string(
            0,
            0,
            "Contacts from the spring fair. Import the second sheet.",
        )
        .unwrap();
    let lists = book.add_worksheet().set_name("Lists").unwrap();
    lists.write_string(0, 0, "yes").unwrap();
    lists.write_string(1, 0, "no").unwrap();
    lists.set_hidden(true);
    let sheet = book.add_worksheet().set_name("Contacts").unwrap();
    sheet.write_string(0, 0, "Spring fair contacts").unwrap();
    sheet.write_string(1, 0, "Exported 2024-05-01").unwrap();
    for (col, name) in ["Full name", "E-mail", "Signed up", "Notes"]
        .iter()
        .enumerate()
    {
        sheet.write_string(3, col as u16, *name).unwrap();
    }
    for i in 1..=rows {
        let row = 3 + i;
        sheet.write_string(row, 0, format!("Person {i}")).unwrap();
        sheet
            .write_string(row, 1, format!("p{i}@example.com"))
            .unwrap();
        sheet.write_string(row, 2, "2024-04-30").unwrap();
        sheet.write_string(row, 3, "met at the stand").unwrap();
    }
    book.save_to_buffer().unwrap()
}

async fn create_contacts(server: &TestServer) {
    let body = json!({
        "name": "contacts",
        "columns": [
            { "name": "name", "required": true },
            { "name": "email", "type": "email" },
            { "name": "signed_up", "type": "date" }
        ]
    });
    let response = server.post_json("/api/datasets", body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
}

async fn upload(server: &TestServer, name: &str, bytes: Vec<u8>) -> String {
    let upload = server.upload_as(&server.client, name, bytes).await;
    upload["id"].as_str().unwrap().to_owned()
}

async fn preview(server: &TestServer, upload: &str, query: &str) -> UploadPreview {
    let path = format!("/api/uploads/{upload}/preview{query}");
    let response = server.client.get(server.url(&path)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.json().await.unwrap()
}

async fn create(server: &TestServer, body: Value) -> reqwest::Response {
    server.post_json("/api/jobs", body).await
}

#[tokio::test]
async fn a_workbook_is_previewed_mapped_and_imported_past_its_cover_and_title_rows() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    create_contacts(&server).await;
    let id = upload(&server, "contacts.xlsx", contacts_xlsx(30)).await;

    // Nothing chosen: the data sheet, its header past the titles, the first 20 rows.
    let seen = preview(&server, &id, "?dataset=contacts").await;
    let sheets: Vec<(&str, bool, Option<i64>)> = seen
        .sheets
        .iter()
        .map(|s| (s.name.as_str(), s.hidden, s.rows))
        .collect();
    assert_eq!(
        sheets,
        [
            ("Read me", false, Some(1)),
            ("Lists", true, Some(2)),
            ("Contacts", false, Some(34))
        ]
    );
    assert_eq!(seen.sheet.as_deref(), Some("Contacts"));
    assert_eq!((seen.header_row, seen.detected_header_row), (4, 4));
    assert_eq!(seen.columns, ["Full name", "E-mail", "Signed up", "Notes"]);
    assert_eq!(seen.rows.len(), 20);
    assert_eq!(seen.rows[0].row, 5);
    assert_eq!(seen.rows[0].cells[1], "p1@example.com");
    assert_eq!(seen.above.len(), 2);
    assert_eq!(seen.problem, None);
    // Spellings match once normalised; "Full name" is not "name": the required column is
    // shown missing before anything runs.
    let fit = seen.dataset.expect("the dataset asked about");
    assert!(fit.exists);
    assert_eq!(
        fit.mapping,
        [None, Some("email".into()), Some("signed_up".into()), None]
    );
    assert_eq!(fit.missing_required, ["name"]);

    // An import whose mapping leaves the required column empty is refused before it is queued.
    let mut body = json!({
        "jobType": "import", "fileGuid": id, "dataset": "contacts", "headerRow": 4,
        "mapping": { "E-mail": "email", "Signed up": "signed_up", "Notes": null }
    });
    let refused = create(&server, body.clone()).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let message = refused.text().await.unwrap();
    assert!(
        message.contains("missing required columns: name"),
        "{message}"
    );
    let jobs: Value = server.get_json("/api/jobs").await;
    assert_eq!(
        jobs["jobs"].as_array().unwrap().len(),
        0,
        "nothing was queued"
    );

    // Mapped by hand, it imports every row into the dataset's columns, Notes ignored.
    body["mapping"]["Full name"] = json!("name");
    let created = create(&server, body).await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let job: JobView = created.json().await.unwrap();
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);
    assert_eq!((done.rows_ok, done.rows_failed), (30, 0));
    assert_eq!(done.sheet.as_deref(), Some("Contacts"));
    let mapping = done.mapping.expect("the mapping it used");
    assert_eq!(mapping["Full name"].as_deref(), Some("name"));
    assert_eq!(mapping["Notes"], None);
    let rows: Value = server.get_json("/api/datasets/contacts/rows").await;
    assert_eq!(
        rows["rows"][0],
        json!({ "name": "Person 1", "email": "p1@example.com", "signed_up": "2024-04-30" })
    );

    // The next file from the same place gets the mapping used before.
    let again = upload(&server, "contacts.xlsx", contacts_xlsx(3)).await;
    let seen = preview(&server, &again, "?dataset=contacts").await;
    let fit = seen.dataset.unwrap();
    assert_eq!(
        fit.mapping,
        [
            Some("name".into()),
            Some("email".into()),
            Some("signed_up".into()),
            None
        ]
    );
    assert!(fit.missing_required.is_empty());

    // Another sheet, and a header row asked for, are read as asked.
    let cover = preview(&server, &again, "?sheet=Read%20me").await;
    assert_eq!(cover.sheet.as_deref(), Some("Read me"));
    assert_eq!(
        cover.problem.as_deref(),
        Some("The file has a header row but no data rows.")
    );
    let high = preview(&server, &again, "?headerRow=1").await;
    assert_eq!((high.header_row, high.detected_header_row), (1, 4));
    assert_eq!(high.columns, ["Spring fair contacts"]);
    let missing = preview(&server, &again, "?sheet=Orders").await;
    assert!(
        missing
            .problem
            .unwrap()
            .contains("no sheet named \"Orders\"")
    );
    assert_eq!(
        missing.sheets.len(),
        3,
        "the sheets are listed to choose from"
    );
    server.stop().await;
}

/// A CSV as European Excel saves it: Windows-1252, semicolons, a title row and a blank row.
fn european_csv() -> Vec<u8> {
    let mut text = b"Adh\xe9rents 2024;;\r\n;;\r\nNom;Ville;Cotisation\r\n".to_vec();
    text.extend_from_slice(b"Jos\xe9 M\xfcller;K\xf6ln;12,50 \x80\r\n");
    text.extend_from_slice(b"Ana;S\xe3o Paulo;8 \x80\r\n");
    text
}

#[tokio::test]
async fn a_semicolon_windows_1252_csv_with_title_rows_is_previewed_and_imported() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let id = upload(&server, "adherents.csv", european_csv()).await;

    let seen = preview(&server, &id, "?dataset=members").await;
    assert_eq!(seen.delimiter.as_deref(), Some(";"));
    assert_eq!(seen.encoding.as_deref(), Some("windows-1252"));
    assert_eq!(seen.header_row, 3);
    assert_eq!(seen.columns, ["Nom", "Ville", "Cotisation"]);
    assert_eq!(seen.rows[0].cells, ["José Müller", "Köln", "12,50 €"]);
    assert!(seen.sheets.is_empty() && seen.sheet.is_none());
    let fit = seen.dataset.unwrap();
    assert!(!fit.exists, "a new dataset");
    assert_eq!(
        fit.mapping,
        [
            Some("Nom".into()),
            Some("Ville".into()),
            Some("Cotisation".into())
        ]
    );

    // Read as the preview says, into a new dataset whose columns the mapping names.
    let body = json!({
        "jobType": "import", "fileGuid": id, "dataset": "members", "headerRow": 3,
        "delimiter": ";", "encoding": "windows-1252",
        "mapping": { "Nom": "name", "Ville": "city", "Cotisation": null }
    });
    let created = create(&server, body).await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let job: JobView = created.json().await.unwrap();
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);
    assert_eq!((done.rows_ok, done.rows_failed), (2, 0));
    let rows: Value = server.get_json("/api/datasets/members/rows").await;
    assert_eq!(
        rows["rows"][0],
        json!({ "name": "José Müller", "city": "Köln" })
    );
    assert_eq!(
        rows["rows"][1],
        json!({ "name": "Ana", "city": "São Paulo" })
    );

    // Read as UTF-8 when told, the accents are what the person asked for: row errors.
    let forced = preview(&server, &id, "?encoding=utf-8&delimiter=%3B").await;
    assert_eq!(forced.encoding.as_deref(), Some("utf-8"));
    assert_eq!(forced.rows[0].cells[0], "Jos\u{fffd} M\u{fffd}ller");
    server.stop().await;
}

#[tokio::test]
async fn previews_and_mappings_refuse_what_cannot_be() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    create_contacts(&server).await;
    let id = upload(
        &server,
        "c.csv",
        b"name,E-mail,Notes\nAna,a@x.pt,\n".to_vec(),
    )
    .await;
    let status = |path: String| {
        let request = server.client.get(server.url(&path));
        async move { request.send().await.unwrap().status() }
    };
    for query in [
        "?headerRow=0",
        "?headerRow=x",
        "?delimiter=%3A",
        "?encoding=ebcdic",
        "?dataset=no%20spaces",
        "?sheet=--head",
    ] {
        let answered = status(format!("/api/uploads/{id}/preview{query}")).await;
        assert!(answered.is_client_error(), "{query}: {answered}");
    }
    // Someone else's upload, and no upload at all, do not exist.
    let other = TestServer::new_client();
    let theirs = other
        .get(server.url(&format!("/api/uploads/{id}/preview")))
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND);
    let none = status("/api/uploads/not-an-id/preview".into()).await;
    assert_eq!(none, StatusCode::NOT_FOUND);

    let job = |mapping: Value| json!({ "jobType": "import", "fileGuid": id, "dataset": "contacts", "mapping": mapping });
    for (mapping, says) in [
        (
            json!({ "E-mail": "phone" }),
            "not one of the dataset's columns",
        ),
        (json!({ "E-mail": "name" }), "would fill the dataset column"),
        (
            json!({ "name": null, "E-mail": null, "Notes": null }),
            "missing required columns: name",
        ),
        (
            json!({ "Notes": "email" }),
            "columns the dataset does not have: E-mail",
        ),
    ] {
        let refused = create(&server, job(mapping.clone())).await;
        assert_eq!(
            refused.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{mapping}"
        );
        let message = refused.text().await.unwrap();
        assert!(message.contains(says), "{mapping}: {message}");
    }
    let accepted = create(&server, job(json!({ "E-mail": "email", "Notes": null }))).await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    server.stop().await;
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_counts_what_the_import_then_does() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(7))).await;
    create_contacts(&server).await;
    let mut csv = String::from("Full name,E-mail,Signed up\n");
    for i in 1..=40 {
        let signed_up = if i % 10 == 0 { "soon" } else { "2024-01-02" };
        let email = if i % 8 == 0 {
            "nobody"
        } else {
            "x@example.com"
        };
        csv.push_str(&format!("P{i},{email},{signed_up}\n"));
    }
    let id = upload(&server, "c.csv", csv.into_bytes()).await;
    let mapping = json!({ "Full name": "name", "E-mail": "email", "Signed up": "signed_up" });
    let request = |job_type: &str| json!({ "jobType": job_type, "fileGuid": id, "dataset": "contacts", "mapping": mapping });

    let created = create(&server, request("validate")).await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let dry: JobView = created.json().await.unwrap();
    assert!(dry.dry_run);
    let dry = server.finished(dry.id).await;
    assert_eq!(dry.status, JobStatus::Completed, "{:?}", dry.error);
    // Rows 10, 20, 30, 40 have a bad date; 8, 16, 24, 32 (and 40) a bad email.
    assert_eq!((dry.rows_ok, dry.rows_failed), (32, 8));
    assert_eq!(
        dry.message(),
        "Dry run complete: 32 rows ok, 8 with errors; nothing was written"
    );
    assert_eq!(dry.title(), "Dry run of c.csv");
    let rows: Value = server.get_json("/api/datasets/contacts/rows").await;
    assert_eq!(rows["rows"], json!([]), "a dry run writes no row");
    let report = server
        .get_text(&format!("/api/jobs/{}/errors.csv", dry.id))
        .await;
    assert_eq!(report.lines().count(), 9, "{report}");

    // "Import these rows": the same upload, read and mapped the same way.
    let path = format!("/api/jobs/{}/import", dry.id);
    let created = server.client.post(server.url(&path)).send().await.unwrap();
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let real: JobView = created.json().await.unwrap();
    assert_eq!(real.mapping, dry.mapping);
    let real = server.finished(real.id).await;
    assert!(!real.dry_run);
    assert_eq!(
        (real.rows_ok, real.rows_failed),
        (dry.rows_ok, dry.rows_failed)
    );
    let rows: Value = server
        .get_json("/api/datasets/contacts/rows?limit=1000")
        .await;
    assert_eq!(rows["rows"].as_array().unwrap().len(), 32);

    // A dry run checks rows against a dataset's columns: it needs one, and creates none.
    let mut nowhere = request("validate");
    nowhere["dataset"] = json!("nowhere");
    let refused = create(&server, nowhere).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let datasets: Value = server.get_json("/api/datasets").await;
    assert_eq!(datasets["datasets"].as_array().unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_fixed_error_report_imports_its_rows_and_every_row_is_there_once() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(6))).await;
    create_contacts(&server).await;
    let mut csv = String::from("Full name,E-mail,Signed up\n");
    for i in 1..=20 {
        let line = match i {
            5 | 12 => format!("P{i},p{i}@example.com,yesterday"),
            // Two problems in one row: both are reported.
            9 => format!("P{i},nobody,someday"),
            // A field too many: the report keeps it.
            15 => format!("P{i},p{i}@example.com,2024-01-02,=extra"),
            _ => format!("P{i},p{i}@example.com,2024-01-02"),
        };
        csv.push_str(&line);
        csv.push('\n');
    }
    let mapping = json!({ "Full name": "name", "E-mail": "email", "Signed up": "signed_up" });
    let request = json!({ "dataset": "contacts", "mapping": mapping });
    let first = server
        .import_with("fair.csv", csv.into_bytes(), request)
        .await;
    let first = server.finished(first.id).await;
    assert_eq!((first.rows_ok, first.rows_failed), (16, 4));

    let errors: Value = server
        .get_json(&format!("/api/jobs/{}/errors", first.id))
        .await;
    let row_9 = &errors["errors"][1];
    assert_eq!(row_9["rowNo"], 10, "sheet rows count the header");
    assert_eq!(row_9["column"], "email");
    let problems: Vec<&str> = row_9["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["column"].as_str().unwrap())
        .collect();
    assert_eq!(problems, ["email", "signed_up"]);
    assert!(row_9["message"].as_str().unwrap().contains("; signed_up:"));

    // The report: the sheet row and errors, then each row exactly as it was.
    let report = server
        .get_text(&format!("/api/jobs/{}/errors.csv", first.id))
        .await;
    let report = report.trim_start_matches('\u{feff}');
    let mut lines = report.lines();
    assert_eq!(lines.next(), Some("_row,_error,Full name,E-mail,Signed up"));
    let records: Vec<Vec<String>> = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(report.as_bytes())
        .records()
        .map(|r| r.unwrap().iter().map(str::to_owned).collect())
        .collect();
    assert_eq!(records.len(), 4);
    assert_eq!(records[3][0], "16");
    assert_eq!(
        records[3][2..],
        ["P15", "p15@example.com", "2024-01-02", "'=extra"]
    );

    // Fixed in a spreadsheet (the extra field dropped, the dates and the email put right)
    // and imported again: just those rows go in, and the job links back.
    let mut fixed = csv::Writer::from_writer(Vec::new());
    fixed
        .write_record(["_row", "_error", "Full name", "E-mail", "Signed up"])
        .unwrap();
    for record in &records {
        let name = &record[2];
        let email = format!("{}@example.com", name.to_lowercase());
        fixed
            .write_record([&record[0], &record[1], name, &email, "2024-02-03"])
            .unwrap();
    }
    let fixed = fixed.into_inner().unwrap();
    let request = json!({ "dataset": "contacts", "mapping": mapping, "fixes": first.id });
    let second = server.import_with("fair-errors.csv", fixed, request).await;
    assert_eq!(second.fixes, Some(first.id));
    let second = server.finished(second.id).await;
    assert_eq!(second.status, JobStatus::Completed, "{:?}", second.error);
    assert_eq!((second.rows_ok, second.rows_failed), (4, 0));

    let rows: Value = server
        .get_json("/api/datasets/contacts/rows?limit=100")
        .await;
    let mut names: Vec<&str> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["name"].as_str().unwrap())
        .collect();
    names.sort_by_key(|name| name[1..].parse::<u32>().unwrap());
    let expected: Vec<String> = (1..=20).map(|i| format!("P{i}")).collect();
    assert_eq!(names, expected, "every row once");

    // Only one of your own imports can be fixed.
    let other = TestServer::new_client();
    let stranger = server
        .import_as(
            &other,
            "x.csv",
            b"name\nx\n".to_vec(),
            json!({ "dataset": "d", "fixes": first.id }),
        )
        .await;
    assert_eq!(stranger.status(), StatusCode::UNPROCESSABLE_ENTITY);
    server.stop().await;
}

#[tokio::test]
async fn a_filter_on_many_errors_reads_a_window_at_a_time_and_says_where_it_stopped() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(5_000))).await;
    let body = json!({ "name": "numbers", "columns": [{ "name": "n", "type": "integer" }] });
    assert_eq!(
        server.post_json("/api/datasets", body).await.status(),
        StatusCode::CREATED
    );
    // 25,000 rows in error; one of them, far down, says something else.
    let mut csv = String::from("n\n");
    for i in 1..=25_000 {
        csv.push_str(if i == 24_000 { "needle\n" } else { "x\n" });
    }
    let job = server.import("n.csv", csv.into_bytes(), "numbers").await;
    let done = server.finished(job.id).await;
    assert_eq!(done.rows_failed, 25_000);

    let first: Value = server
        .get_json(&format!("/api/jobs/{}/errors?q=needle", job.id))
        .await;
    assert_eq!(first["errors"], json!([]), "not in the first 20,000 errors");
    // It stopped at the 20,000th error (sheet row 20,001) and says so.
    assert_eq!(first["next"], 20_001);
    let second: Value = server
        .get_json(&format!("/api/jobs/{}/errors?q=needle&after=20001", job.id))
        .await;
    assert_eq!(second["errors"][0]["rowNo"], 24_001);
    assert!(second.get("next").is_none());
    server.stop().await;
}
