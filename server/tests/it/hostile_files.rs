//! Hostile files: crafted CSVs and workbooks end in a clear error (a row error, or the job
//! failed with a reason), with memory bounded in the process doing the work, measured as its
//! peak resident set (`VmHWM`), and nothing lost: the good rows around a bad one are imported.

use std::io::Write;

use crate::support::*;
use app::model::JobStatus;
use bytes::Bytes;
use futures::stream;
use reqwest::multipart;
use serde_json::{Value, json};
use uuid::Uuid;
use zip::write::{SimpleFileOptions, ZipWriter};

const MIB: usize = 1 << 20;

/// What a worker may hold whatever the file: its caps (a chunk of 16 MiB and a row of 8 MiB,
/// read and parsed) and its baseline, with room to spare; the files below are up to 1 GiB.
const WORKER_MEMORY: u64 = 192 << 20;

/// Uploads `head`, then `len` bytes of `fill`, then `tail`, generated as they are sent (the
/// test never holds the file).
async fn upload_generated(
    server: &TestServer,
    filename: &str,
    head: &[u8],
    fill: u8,
    len: usize,
    tail: &[u8],
) -> Value {
    let block = Bytes::from(vec![fill; MIB]);
    let blocks = (0..len / MIB)
        .map(move |_| block.clone())
        .chain((!len.is_multiple_of(MIB)).then(|| Bytes::from(vec![fill; len % MIB])));
    let parts = stream::iter(
        std::iter::once(Bytes::copy_from_slice(head))
            .chain(blocks)
            .chain(std::iter::once(Bytes::copy_from_slice(tail)))
            .map(Ok::<_, std::io::Error>),
    );
    let total = (head.len() + len + tail.len()) as u64;
    let part = multipart::Part::stream_with_length(reqwest::Body::wrap_stream(parts), total)
        .file_name(filename.to_owned());
    let response = upload_part(&server.client, &server.url("/api/uploads"), part).await;
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

async fn import_upload(server: &TestServer, upload: &Value, request: Value) -> Uuid {
    let mut request = request;
    request["jobType"] = json!("import");
    request["fileGuid"] = upload["id"].clone();
    let response = server.post_json("/api/jobs", request).await;
    assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().parse().unwrap()
}

/// The messages of a job's row errors, in row order.
async fn row_errors(server: &TestServer, job: Uuid) -> Vec<(i64, String)> {
    let errors: Value = server.get_json(&format!("/api/jobs/{job}/errors")).await;
    errors["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["rowNo"].as_i64().unwrap(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn huge_fields_headers_and_rows_cost_no_more_than_the_caps() {
    let before = reset_own_peak_rss();
    let db = TestDb::new().await;
    let server = TestServer::start_with_upload_limit(&db, None, 2 << 30).await;

    // A 200 MiB quoted field in the second row, among good rows.
    let field = upload_generated(
        &server,
        "field.csv",
        b"id,note\n1,ok\n2,\"",
        b'x',
        200 * MIB,
        b"\"\n3,ok\n",
    )
    .await;
    let field_job = import_upload(&server, &field, json!({ "dataset": "field" })).await;
    // A 1 GiB header cell.
    let header = upload_generated(&server, "header.csv", b"", b'h', 1024 * MIB, b"\n1\n").await;
    let header_job = import_upload(&server, &header, json!({ "dataset": "header" })).await;
    // A row of ten million fields, a NUL, bytes that are not UTF-8 (in a file its first row
    // shows to be UTF-8).
    let mut mixed = "a,b\n1,oké\n".as_bytes().to_vec();
    mixed.extend(b"1,".repeat(10_000_000));
    mixed.extend(b"\n2,x\0y\n3,\xff\xfe\n4,ok\n");
    let mixed_job = server.import("mixed.csv", mixed, "mixed").await.id;

    let worker = WorkerProcess::start(&db, 1000);
    let done = server.finished(field_job).await;
    assert_eq!(
        (done.status, done.rows_ok, done.rows_failed),
        (JobStatus::Completed, 2, 1)
    );
    assert_eq!(
        row_errors(&server, field_job).await,
        [(
            3,
            format!(
                "the row is {} bytes long; at most 8 MiB is read per row",
                200 * MIB + 5
            )
        )]
    );

    let failed = server.finished(header_job).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(
        failed.error.as_deref(),
        Some("The header row is not usable: it is larger than 8 MiB")
    );

    let done = server.finished(mixed_job).await;
    assert_eq!(
        (done.status, done.rows_ok, done.rows_failed),
        (JobStatus::Completed, 2, 3)
    );
    assert_eq!(
        row_errors(&server, mixed_job).await,
        [
            (
                3,
                "the row is 20000001 bytes long; at most 8 MiB is read per row".to_owned()
            ),
            (4, "b: contains a NUL character".to_owned()),
            (5, "b: not UTF-8 text".to_owned()),
        ]
    );

    let peak = worker.peak_rss();
    println!("worker peak RSS: {} MiB", peak >> 20);
    assert!(
        peak < WORKER_MEMORY,
        "the worker held {} MiB at its peak",
        peak >> 20
    );
    // This process served the uploads (1.2 GiB) as well as sending them, and runs another test
    // (the binary runs two at once), with its own server and files, at the same time.
    let own = peak_rss_of("/proc/self/status").saturating_sub(before);
    println!(
        "test process (servers and clients) peak RSS: {} MiB above the {} MiB it held before",
        own >> 20,
        before >> 20
    );
    assert!(own < 512 << 20, "the server held {} MiB", own >> 20);
    server.stop().await;
}

/// An XLSX package with these shared strings (`<sst>` content) and sheet data (`<sheetData>`
/// content), compressed as any writer would.
fn xlsx(shared_strings: &[u8], sheet_data: &[u8]) -> Vec<u8> {
    let mut zip = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let mut add = |name: &str, parts: &[&[u8]]| {
        zip.start_file(name, options).unwrap();
        for part in parts {
            zip.write_all(part).unwrap();
        }
    };
    add(
        "[Content_Types].xml",
        &[br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>"#],
    );
    add(
        "xl/workbook.xml",
        &[br#"<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>"#],
    );
    add(
        "xl/_rels/workbook.xml.rels",
        &[br#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="sharedStrings.xml"/></Relationships>"#],
    );
    add(
        "xl/sharedStrings.xml",
        &[
            br#"<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">"#,
            shared_strings,
            b"</sst>",
        ],
    );
    add(
        "xl/worksheets/sheet1.xml",
        &[
            br#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>"#,
            sheet_data,
            b"</sheetData></worksheet>",
        ],
    );
    zip.finish().unwrap().into_inner()
}

/// A header row `A1…` of inline strings `c1…`, `width` wide.
fn header_row(width: usize) -> String {
    let cells: String = (0..width)
        .map(|i| {
            format!(
                r#"<c r="{}1" t="inlineStr"><is><t>c{}</t></is></c>"#,
                column(i),
                i + 1
            )
        })
        .collect();
    format!(r#"<row r="1">{cells}</row>"#)
}

/// `A`, `B`, … `Y` (enough here).
fn column(i: usize) -> char {
    (b'A' + i as u8) as char
}

#[tokio::test]
async fn crafted_workbooks_end_in_clear_errors_with_bounded_memory() {
    let db = TestDb::new().await;
    let server = TestServer::start_with_upload_limit(&db, None, 256 << 20).await;
    let mut jobs = Vec::new();
    let mut import = async |name: &str, bytes: Vec<u8>| {
        let job = server.import(&format!("{name}.xlsx"), bytes, name).await.id;
        jobs.push((name.to_owned(), job));
    };

    // A 4 MiB shared string (4 KiB compressed) in all 25 cells of a row: 100 MiB of text.
    let shared_string = |len: usize| {
        let mut string = b"<si><t>".to_vec();
        string.extend(vec![b'a'; len]);
        string.extend(b"</t></si>");
        string
    };
    let cells: String = (0..25)
        .map(|i| format!(r#"<c r="{}2" t="s"><v>0</v></c>"#, column(i)))
        .collect();
    let rows = format!(
        r#"{}<row r="2">{cells}</row><row r="3"><c r="A3"><v>7</v></c></row>"#,
        header_row(25)
    );
    import("shared", xlsx(&shared_string(4 * MIB), rows.as_bytes())).await;
    // One 64 MiB shared string (64 KiB compressed).
    import(
        "huge_string",
        xlsx(&shared_string(64 * MIB), rows.as_bytes()),
    )
    .await;
    // Ten million empty shared strings.
    let rows = format!(
        r#"{}<row r="2"><c r="A2"><v>1</v></c></row>"#,
        header_row(1)
    );
    import(
        "empty_strings",
        xlsx(&b"<si/>".repeat(10_000_000), rows.as_bytes()),
    )
    .await;
    // References past the last column, past the last row, past u32; a style index past u32;
    // rows out of order.
    let bad_cell = |cell: &str| format!(r#"{}<row r="2">{cell}</row>"#, header_row(1));
    import(
        "past_xfd",
        xlsx(b"", bad_cell(r#"<c r="XFE2"><v>1</v></c>"#).as_bytes()),
    )
    .await;
    import(
        "past_last_row",
        xlsx(b"", bad_cell(r#"<c r="A1048577"><v>1</v></c>"#).as_bytes()),
    )
    .await;
    import(
        "past_u32",
        xlsx(
            b"",
            bad_cell(r#"<c r="A4294967297"><v>1</v></c>"#).as_bytes(),
        ),
    )
    .await;
    import(
        "style_past_u32",
        xlsx(
            b"",
            bad_cell(r#"<c r="A2" s="4294967296"><v>1</v></c>"#).as_bytes(),
        ),
    )
    .await;
    let rows = format!(
        r#"{}<row r="3"><c r="A3"><v>1</v></c></row><row r="2"><c r="A2"><v>2</v></c></row>"#,
        header_row(1)
    );
    import("out_of_order", xlsx(b"", rows.as_bytes())).await;
    // A zip of a million entries.
    let mut zip = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..1_000_000 {
        zip.start_file(format!("{i}"), stored).unwrap();
    }
    import("many_entries", zip.finish().unwrap().into_inner()).await;
    // A zip whose sheet says it unpacks to 100 bytes and unpacks to 8 MiB.
    let rows = format!(
        r#"{}{}"#,
        header_row(1),
        (2..200_000)
            .map(|r| format!(r#"<row r="{r}"><c r="A{r}"><v>{r}</v></c></row>"#))
            .collect::<String>()
    );
    import(
        "lying_sizes",
        lie_about_sizes(xlsx(b"", rows.as_bytes()), "xl/worksheets/sheet1.xml", 100),
    )
    .await;

    let worker = WorkerProcess::start(&db, 1000);
    let mut outcomes = Vec::new();
    for (name, job) in &jobs {
        let done = server.finished(*job).await;
        outcomes.push((
            name.clone(),
            done.status,
            done.rows_ok,
            done.rows_failed,
            done.error,
        ));
    }
    let damaged = |what: &str| {
        Some(format!(
            "The workbook could not be read; it may be damaged or incomplete ({what})."
        ))
    };
    let expected = [
        ("shared", JobStatus::Completed, 1, 1, None),
        (
            "huge_string",
            JobStatus::Failed,
            0,
            0,
            damaged("a single XML token is larger than 64 MB"),
        ),
        ("empty_strings", JobStatus::Completed, 1, 0, None),
        ("past_xfd", JobStatus::Failed, 0, 0, damaged("a cell lies past the last row or column a sheet can have")),
        ("past_last_row", JobStatus::Failed, 0, 0, damaged("a cell lies past the last row or column a sheet can have")),
        ("past_u32", JobStatus::Failed, 0, 0, damaged("a cell has a malformed reference")),
        ("style_past_u32", JobStatus::Failed, 0, 0, damaged("a number in the sheet's structure is not a number")),
        ("out_of_order", JobStatus::Failed, 0, 0, Some("The sheet's rows are out of order. Open it in a spreadsheet program, save it again and upload that.".to_owned())),
        ("many_entries", JobStatus::Failed, 0, 0, Some("The workbook unpacks to far more data, or holds far more parts, than a spreadsheet does (a zip bomb?), so it was not opened.".to_owned())),
    ];
    for (want, got) in expected.iter().zip(&outcomes) {
        assert_eq!(
            (want.0, want.1, want.2, want.3, want.4.as_deref()),
            (got.0.as_str(), got.1, got.2, got.3, got.4.as_deref())
        );
    }
    let (_, status, _, _, error) = &outcomes[9];
    assert_eq!(*status, JobStatus::Failed, "lying sizes: {error:?}");
    assert!(
        error.as_deref().unwrap().starts_with("The workbook"),
        "lying sizes: {error:?}"
    );
    let shared = row_errors(&server, jobs[0].1).await;
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0].0, 2);
    assert!(
        shared[0]
            .1
            .ends_with("bytes long; at most 8 MiB is read per row"),
        "{shared:?}"
    );

    let peak = worker.peak_rss();
    println!("worker peak RSS: {} MiB", peak >> 20);
    assert!(
        peak < WORKER_MEMORY,
        "the worker held {} MiB at its peak",
        peak >> 20
    );
    server.stop().await;
}

/// Rewrites the sizes `name`'s zip headers declare (local and central) as `size`.
fn lie_about_sizes(mut zip: Vec<u8>, name: &str, size: u32) -> Vec<u8> {
    let lie = size.to_le_bytes();
    let mut at = 0;
    while let Some(found) = find(&zip[at..], name.as_bytes()) {
        let name_at = at + found;
        // A local header's name is at 30, a central header's at 46; the uncompressed size at
        // 22 and 24 respectively.
        if name_at >= 30 && zip[name_at - 30..name_at - 26] == [0x50, 0x4b, 0x03, 0x04] {
            zip[name_at - 8..name_at - 4].copy_from_slice(&lie);
        } else if name_at >= 46 && zip[name_at - 46..name_at - 42] == [0x50, 0x4b, 0x01, 0x02] {
            zip[name_at - 22..name_at - 18].copy_from_slice(&lie);
        }
        at = name_at + name.len();
    }
    zip
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
