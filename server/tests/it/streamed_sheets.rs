//! Streamed workbook imports, with real `server worker` processes (and their real `server
//! convert` children) against a real PostgreSQL: a worker killed with SIGKILL while a sheet
//! streams leaves a job that the next worker finishes with every row counted and stored once
//! (the chunks recorded before the kill are skipped, not written again); a header that does not
//! fit the dataset's schema fails the job before any chunk or row is written; and a cancel while
//! streaming stops the stream with exact counts, after which a retry writes only the chunks not
//! yet done and ends with exact counts.
//!
//! And the edges, with the plan run directly (some with a shell script as the converter): a
//! converter that dies mid-row leaves its last chunk unwritten; one stopped by SIGTERM is an
//! error of the run (tried again), not of the file; a chunk cut differently by an earlier run
//! fails the job rather than miscount; two runs recording the same chunk record it once; and a
//! retried sheet over its error percentage fails again instead of staying running.

use std::{os::unix::fs::PermissionsExt, path::PathBuf};

use crate::support::{
    TestDb, TestServer, WorkerProcess, completed_exactly, dataset_rows, plan_job, stored_rows,
    until, until_one, worker_args,
};
use app::model::{JobStatus, JobView};
use reqwest::StatusCode;
use rust_xlsxwriter::Workbook;
use serde_json::json;
use server::{
    config::WorkerArgs,
    jobs::{Engine, TaskError},
    spreadsheet::ChunkSpan,
    store::chunks::{self, Recorded},
};
use uuid::Uuid;

/// Rows per chunk: small, so a sheet of a few thousand rows streams as many chunks.
const CHUNK_ROWS: usize = 200;

/// A worker that loses its lease quickly once it is gone: the reaper frees the plan of a
/// killed worker about a second later.
const SHORT_LEASE: &[(&str, &str)] = &[
    ("CONVEYOR_LEASE_SECS", "1"),
    ("CONVEYOR_HEARTBEAT_SECS", "0.2"),
];

/// An XLSX workbook of one sheet: the header `id,name,email,amount` and `rows` rows, each
/// different from every other.
fn sheet_xlsx(rows: u32) -> Vec<u8> {
    sheet_with_header(&["id", "name", "email", "amount"], rows)
}

/// An XLSX workbook of one sheet: `header`, then `rows` rows whose cells are numbers in the
/// first and last columns and text in the others.
fn sheet_with_header(header: &[&str], rows: u32) -> Vec<u8> {
    let mut book = Workbook::new();
    let sheet = book.add_worksheet().set_name("Data").unwrap();
    let last = header.len() - 1;
    for (col, name) in header.iter().enumerate() {
        sheet.write_string(0, col as u16, *name).unwrap();
    }
    for i in 1..=rows {
        for (col, name) in header.iter().enumerate() {
            let col16 = col as u16;
            if col == 0 {
                sheet.write_number(i, col16, i).unwrap();
            } else if col == last {
                sheet
                    .write_number(i, col16, f64::from(i) * 1.25 + 0.5)
                    .unwrap();
            } else {
                sheet
                    .write_string(i, col16, format!("{name}{i}@example.com"))
                    .unwrap();
            }
        }
    }
    book.save_to_buffer().unwrap()
}

/// The chunks recorded for a job, by number, with when each was recorded done.
async fn recorded_chunks(db: &TestDb, job_id: Uuid) -> Vec<(i32, String)> {
    sqlx::query_as(
        "select chunk_no, done_at::text from job_chunks where job_id = $1 and state = 'done'
         order by chunk_no",
    )
    .bind(job_id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// The job's rows in `job_chunks` (a streamed chunk gets one only with its rows).
async fn job_chunks(db: &TestDb, job_id: Uuid) -> i64 {
    sqlx::query_scalar("select count(*) from job_chunks where job_id = $1")
        .bind(job_id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Rows of the job stored with distinct contents (each row of the sheets here differs).
async fn distinct_records(db: &TestDb, job_id: Uuid) -> i64 {
    sqlx::query_scalar(
        "select count(distinct r.record) from dataset_rows r
         join jobs j on r.pos >> 32 = j.seq where j.id = $1",
    )
    .bind(job_id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Whether the job's plan is sealed: for a streamed sheet, once every chunk was written.
async fn sealed(db: &TestDb, job_id: Uuid) -> bool {
    sqlx::query_scalar("select sealed from jobs where id = $1")
        .bind(job_id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Whether a worker holds the lease of the job's own step (its plan, which streams the sheet).
async fn plan_leased(db: &TestDb, job_id: Uuid) -> bool {
    sqlx::query_scalar("select lease_owner is not null from jobs where id = $1")
        .bind(job_id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The job completed with each of `rows` rows counted once, its chunks all recorded, and each
/// row stored once.
async fn completed_in_chunks(db: &TestDb, done: &JobView, rows: usize) {
    completed_exactly(db, done, rows).await;
    let chunks = rows.div_ceil(CHUNK_ROWS) as i64;
    let rows = rows as i64;
    assert_eq!(
        (
            done.item_count,
            done.item_progress,
            done.rows_ok,
            done.rows_failed
        ),
        (Some(rows), rows, rows, 0),
        "{done:?}"
    );
    assert_eq!(
        (done.chunks_total, done.chunks_done),
        (chunks as i32, chunks as i32),
        "{done:?}"
    );
    assert_eq!(job_chunks(db, done.id).await, chunks, "job_chunks rows");
    assert_eq!(distinct_records(db, done.id).await, rows, "distinct rows");
}

/// The chunks recorded before an interruption were left as they were (skipped by the next run,
/// not recorded, nor their rows written, again).
async fn kept(db: &TestDb, job_id: Uuid, before: &[(i32, String)]) {
    let after = recorded_chunks(db, job_id).await;
    for chunk in before {
        assert!(
            after.contains(chunk),
            "chunk {} recorded before the interruption was recorded again",
            chunk.0
        );
    }
}

#[tokio::test]
async fn a_workbook_import_killed_mid_stream_counts_every_row_once() {
    const ROWS: usize = 30_000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server
        .import("killed.xlsx", sheet_xlsx(ROWS as u32), "killed")
        .await;
    let mut events = server.events(job.id, None).await;

    let worker = WorkerProcess::start_with(&db, CHUNK_ROWS, SHORT_LEASE);
    // Chunks are counted as they are written, long before the job knows its total.
    until("3 chunks recorded", || async {
        job_chunks(&db, job.id).await >= 3
    })
    .await;
    worker.kill_9();
    let at_kill = server.job(job.id).await;
    assert_eq!(
        at_kill.status,
        JobStatus::Running,
        "the job must still be streaming when its worker dies (make the sheet bigger): \
         {at_kill:?}"
    );
    assert!(
        !sealed(&db, job.id).await,
        "the sheet was still streaming: the job is not sealed"
    );
    let before = recorded_chunks(&db, job.id).await;
    assert!(before.len() >= 3, "{before:?}");
    assert!(
        before.len() < ROWS / CHUNK_ROWS,
        "not every chunk was written before the kill"
    );
    assert_eq!(at_kill.chunks_done as usize, before.len());
    assert_eq!(at_kill.rows_ok as usize, before.len() * CHUNK_ROWS);

    // The dead worker's lease on the plan runs out; the reaper queues the plan again and the
    // second worker converts the sheet again, skipping what was recorded.
    let _survivor = WorkerProcess::start_with(&db, CHUNK_ROWS, SHORT_LEASE);
    let done = events.finished().await;
    completed_in_chunks(&db, &done, ROWS).await;
    kept(&db, job.id, &before).await;
    server.stop().await;
}

#[tokio::test]
async fn a_workbook_whose_header_does_not_fit_fails_before_any_row() {
    const ROWS: u32 = 5_000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(CHUNK_ROWS))).await;
    let created = server
        .post_json(
            "/api/datasets",
            json!({
                "name": "typed",
                "key": "id",
                "columns": [
                    { "name": "id", "type": "integer" },
                    { "name": "email", "type": "email", "required": true },
                    { "name": "amount", "type": "decimal" }
                ]
            }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);

    // No `email` (required), and a `colour` the dataset does not have.
    let wrong = sheet_with_header(&["id", "colour", "amount"], ROWS);
    let job = server.import("wrong.xlsx", wrong, "typed").await;
    let failed = server.finished(job.id).await;
    assert_eq!(failed.status, JobStatus::Failed, "{failed:?}");
    let error = failed.error.clone().unwrap();
    assert!(error.contains("missing required columns: email"), "{error}");
    assert!(
        error.contains("columns the dataset does not have: colour"),
        "{error}"
    );
    assert_eq!(
        (
            failed.chunks_done,
            failed.rows_ok,
            failed.rows_failed,
            failed.item_progress
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(job_chunks(&db, job.id).await, 0, "no chunk recorded");
    assert_eq!(stored_rows(&db.pool, job.id).await, (0, 0));
    assert_eq!(dataset_rows(&db, "typed").await, 0);

    // The same sheet with a header that fits streams into the same dataset.
    let fits = sheet_with_header(&["id", "email", "amount"], ROWS);
    let job = server.import("fits.xlsx", fits, "typed").await;
    let done = server.finished(job.id).await;
    completed_in_chunks(&db, &done, ROWS as usize).await;
    assert_eq!(dataset_rows(&db, "typed").await, i64::from(ROWS));
    server.stop().await;
}

#[tokio::test]
async fn a_cancelled_workbook_import_retries_to_exact_counts() {
    const ROWS: usize = 30_000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server
        .import("cancelled.xlsx", sheet_xlsx(ROWS as u32), "cancelled")
        .await;
    let _worker = WorkerProcess::start_with(&db, CHUNK_ROWS, SHORT_LEASE);
    until("a chunk recorded", || async {
        job_chunks(&db, job.id).await >= 1
    })
    .await;

    let response = server
        .post_json(&format!("/api/jobs/{}/cancel", job.id), json!({}))
        .await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the job must still be streaming when it is cancelled (make the sheet bigger)"
    );
    let cancelled: JobView = response.json().await.unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert!(!sealed(&db, job.id).await, "cancelled while streaming");
    // The plan notices at its next heartbeat, stops the stream and gives its lease back.
    until("the plan to stop and give back its lease", || async {
        !plan_leased(&db, job.id).await
    })
    .await;
    let after = server.job(job.id).await;
    assert_eq!(after.status, JobStatus::Cancelled);
    assert_eq!(
        after.chunks_done, cancelled.chunks_done,
        "no chunk committed after the cancel"
    );
    let before = recorded_chunks(&db, job.id).await;
    assert!(!before.is_empty());
    assert_eq!(
        before.len(),
        after.chunks_done as usize,
        "every recorded chunk is counted, and only those"
    );
    assert!(before.len() < ROWS / CHUNK_ROWS, "stopped before the end");
    assert_eq!(after.rows_ok as usize, before.len() * CHUNK_ROWS);
    assert_eq!(
        stored_rows(&db.pool, job.id).await,
        (after.rows_ok, after.rows_ok)
    );

    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(retried.status(), StatusCode::OK);
    let done = server.finished(job.id).await;
    completed_in_chunks(&db, &done, ROWS).await;
    kept(&db, job.id, &before).await;
    server.stop().await;
}

/// An engine whose converter is `script` (a shell script standing in for `server convert`).
fn engine_converting_with(db: &TestDb, script: &str, chunk_rows: usize) -> (Engine, PathBuf) {
    let path = std::env::temp_dir().join(format!("conveyor-converter-{}.sh", Uuid::new_v4()));
    std::fs::write(&path, format!("#!/bin/sh\ncat > /dev/null\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = WorkerArgs {
        converter: Some(path.clone()),
        ..worker_args(chunk_rows)
    };
    (Engine::new(db.pool.clone(), &args).unwrap(), path)
}

/// The announcement and CSV a converter writes for [`sheet_xlsx`], cut short in the middle of
/// its third row.
const CUT_SHORT: &str =
    r#"printf '{"sheet":"Data","headerRow":1}\nid,name,email,amount\n1,n,e,1\n2,n,e,2\n3,n'"#;

#[tokio::test]
async fn a_converter_that_dies_mid_row_leaves_its_last_chunk_unwritten() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("cut.xlsx", sheet_xlsx(3), "cut").await;
    let (engine, script) = engine_converting_with(&db, &format!("{CUT_SHORT}\nexit 1"), 2);

    // Refused: the worker running the plan fails the job with the reason.
    let refused = plan_job(&engine, job.id).await;
    assert!(
        matches!(&refused, Err(TaskError::Refused(refusal)) if refusal.reason.contains("could not be read")),
        "{refused:?}"
    );
    // The first chunk (rows 1 and 2) was whole and went in; the last one ("3,n") did not.
    assert_eq!(stored_rows(&db.pool, job.id).await, (2, 2));
    std::fs::remove_file(script).unwrap();
    server.stop().await;
}

#[tokio::test]
async fn a_converter_stopped_by_sigterm_is_retried_not_failed() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server
        .import("stopped.xlsx", sheet_xlsx(3), "stopped")
        .await;
    let (engine, script) = engine_converting_with(&db, &format!("{CUT_SHORT}\nkill -TERM $$"), 2);

    let run = plan_job(&engine, job.id).await;
    assert!(
        matches!(run, Err(TaskError::Retry(_))),
        "a stopped converter is an error of the run, to try again: {run:?}"
    );
    let after = server.job(job.id).await;
    assert_eq!(after.status, JobStatus::Running, "{after:?}");
    assert_eq!(stored_rows(&db.pool, job.id).await.0, 2);

    // The next run (here with the real converter) finishes the job, skipping the chunk written.
    let engine = Engine::new(db.pool.clone(), &worker_args(2)).unwrap();
    plan_job(&engine, job.id).await.unwrap();
    let done = server.job(job.id).await;
    assert_eq!(
        (done.status, done.rows_ok),
        (JobStatus::Completed, 3),
        "{done:?}"
    );
    assert_eq!(stored_rows(&db.pool, job.id).await, (3, 3));
    std::fs::remove_file(script).unwrap();
    server.stop().await;
}

#[tokio::test]
async fn a_chunk_cut_differently_by_an_earlier_run_fails_the_job_instead_of_miscounting() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("recut.xlsx", sheet_xlsx(1000), "recut").await;
    // As if a worker with 150 rows per chunk had written the first chunk before dying.
    sqlx::query(
        "insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end,
                                 state, done_at)
         values ($1, 0, 1, 150, 0, 0, 'done', now())",
    )
    .bind(job.id)
    .execute(&db.pool)
    .await
    .unwrap();

    let engine = Engine::new(db.pool.clone(), &worker_args(CHUNK_ROWS)).unwrap();
    let refused = plan_job(&engine, job.id).await;
    assert!(
        matches!(&refused, Err(TaskError::Refused(refusal)) if refusal.reason.contains("cut differently")),
        "{refused:?}"
    );
    assert_eq!(stored_rows(&db.pool, job.id).await, (0, 0));
    server.stop().await;
}

#[tokio::test]
async fn two_runs_writing_the_same_chunk_record_it_once() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("race.xlsx", sheet_xlsx(10), "race").await;
    let span = ChunkSpan {
        first_row: 1,
        row_count: 10,
        byte_start: 0,
        byte_end: 100,
    };
    let mut first = db.pool.begin().await.unwrap();
    let recorded = chunks::record_done(&mut first, job.id, 0, &span).await;
    assert_eq!(recorded.unwrap(), Recorded::New);
    // A second run (a stalled worker's, say) records the same chunk: it waits on the first's
    // insert, and once that commits, finds the chunk done by it.
    let pool = db.pool.clone();
    let second = tokio::spawn(async move {
        let mut second = pool.begin().await.unwrap();
        chunks::record_done(&mut second, job.id, 0, &span).await
    });
    until_one(
        &db,
        "the second run waiting on the first",
        "select count(*) from pg_stat_activity where datname = current_database()
         and wait_event_type = 'Lock' and query like 'insert into job_chunks%'",
    )
    .await;
    first.commit().await.unwrap();
    assert_eq!(second.await.unwrap().unwrap(), Recorded::Before);
    server.stop().await;
}

#[tokio::test]
async fn a_retried_sheet_over_its_error_percentage_fails_again_instead_of_hanging() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(CHUNK_ROWS))).await;
    let created = server
        .post_json(
            "/api/datasets",
            json!({"name": "all_bad", "columns": [
                {"name": "id", "type": "integer"}, {"name": "name", "type": "integer"},
                {"name": "email", "type": "email"}, {"name": "amount", "type": "decimal"}]}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    // Every row's "name" is text, not the integer the dataset wants: every row is in error,
    // which only the real row count, at the end of the sheet, puts over the percentage.
    let request = json!({ "dataset": "all_bad", "maxRowErrors": "5%" });
    let job = server
        .import_with("bad.xlsx", sheet_xlsx(1000), request)
        .await;
    let failed = server.finished(job.id).await;
    assert_eq!(failed.status, JobStatus::Failed, "{failed:?}");
    assert!(failed.error.unwrap().contains("Stopped after"));

    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", job.id), json!({}))
        .await;
    assert_eq!(retried.status(), StatusCode::OK);
    let again = server.finished(job.id).await;
    assert_eq!(again.status, JobStatus::Failed, "{again:?}");
    server.stop().await;
}
