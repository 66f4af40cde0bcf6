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
