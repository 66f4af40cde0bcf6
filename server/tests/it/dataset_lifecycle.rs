//! A dataset's life (issue 13): it comes into being when an import into it completes (or when
//! declared); a failed import leaves nothing, and the next import of that name starts afresh;
//! deleting one frees its name at once and removes its rows by a `delete` job with progress;
//! row counts are exact; an XLSX export of more rows than a sheet holds is refused up front.

use std::time::Duration;

use crate::support::{
    TestDb, TestServer, account, admin_url, csv, dataset_rows, migrate_before, worker_args,
};
use app::{
    auth::Role,
    model::{DatasetView, JobKind, JobStatus, JobView, MAX_XLSX_ROWS},
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

async fn datasets(server: &TestServer) -> Vec<DatasetView> {
    let list: Value = server.get_json("/api/datasets").await;
    serde_json::from_value(list["datasets"].clone()).unwrap()
}

async fn dataset_status(server: &TestServer, name: &str) -> StatusCode {
    let url = server.url(&format!("/api/datasets/{name}"));
    server.client.get(url).send().await.unwrap().status()
}

async fn delete(server: &TestServer, client: &Client, name: &str) -> reqwest::Response {
    let url = server.url(&format!("/api/datasets/{name}"));
    client.delete(url).send().await.unwrap()
}

#[tokio::test]
async fn a_failed_import_leaves_nothing_and_the_next_import_starts_afresh() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(2))).await;
    // The wrong file: its two columns are adopted, then every row is refused and the import
    // stops at once.
    let wrong = b"title,note\nonly,the\nwrong,\"sheet\",x\n".to_vec();
    let request = json!({ "dataset": "contacts", "maxRowErrors": 0 });
    let failed = server.import_with("cover.csv", wrong, request).await;
    let failed = server.finished(failed.id).await;
    assert_eq!(failed.status, JobStatus::Failed, "{failed:?}");
    assert!(datasets(&server).await.is_empty(), "nothing is listed");
    assert_eq!(
        dataset_status(&server, "contacts").await,
        StatusCode::NOT_FOUND
    );

    let right = server.import("contacts.csv", csv(5), "contacts").await;
    let right = server.finished(right.id).await;
    assert_eq!(right.status, JobStatus::Completed, "{right:?}");
    let listed = datasets(&server).await;
    assert_eq!(listed.len(), 1);
    let names: Vec<&str> = listed[0].columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["id", "name", "email", "amount"],
        "the right file's header"
    );
    assert_eq!(listed[0].row_count, 5);
    assert_eq!(
        dataset_rows(&db, "contacts").await,
        5,
        "only the new import's rows"
    );

    let retried = server
        .post_json(&format!("/api/jobs/{}/retry", failed.id), json!({}))
        .await;
    assert_eq!(
        retried.status(),
        StatusCode::CONFLICT,
        "the failed import's dataset is gone: it cannot be retried into it"
    );
    let message: Value = retried.json().await.unwrap();
    assert!(
        message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Its dataset has been deleted since"),
        "{message}"
    );
    assert!(server.job(failed.id).await.dataset_deleted);
    server.stop().await;
}

#[tokio::test]
async fn deleting_a_dataset_frees_its_name_and_a_job_removes_its_rows() {
    const ROWS: usize = 25_000;
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(5_000))).await;
    let import = server.import("big.csv", csv(ROWS), "big").await;
    assert_eq!(
        server.finished(import.id).await.status,
        JobStatus::Completed
    );
    let listed = datasets(&server).await;
    assert_eq!(listed[0].row_count, ROWS as i64, "the count is exact");

    // Each batch takes a moment, so progress is seen between the start and the end.
    for statement in [
        "create function slow_batch() returns trigger language plpgsql as $$
         begin perform pg_sleep(0.2); return null; end $$",
        "create trigger slow_batch before delete on dataset_rows
         for each statement execute function slow_batch()",
    ] {
        sqlx::query(statement).execute(&db.pool).await.unwrap();
    }

    let response = delete(&server, &server.client, "big").await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let job: JobView = response.json().await.unwrap();
    assert_eq!(job.job_type, JobKind::Delete);
    assert_eq!(job.item_count, Some(ROWS as i64));
    assert_eq!(job.title(), "Deletion of big");
    assert!(
        datasets(&server).await.is_empty(),
        "gone from the list at once"
    );
    assert_eq!(dataset_status(&server, "big").await, StatusCode::NOT_FOUND);
    let again = delete(&server, &server.client, "big").await;
    assert_eq!(again.status(), StatusCode::NOT_FOUND);

    let mut events = server.events(job.id, None).await;
    let seen = events.until(|job| job.status.is_finished()).await;
    let done = seen.last().unwrap().job.clone();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!(
        (done.rows_ok, done.item_progress),
        (ROWS as i64, ROWS as i64)
    );
    assert!(
        seen.iter()
            .any(|event| event.job.item_progress > 0 && event.job.item_progress < ROWS as i64),
        "progress is seen between the start and the end"
    );
    assert_eq!(dataset_rows(&db, "big").await, 0);

    let cancel = server
        .post_json(&format!("/api/jobs/{}/cancel", done.id), json!({}))
        .await;
    assert_eq!(cancel.status(), StatusCode::CONFLICT, "it has ended");

    // The name is free: a new import makes a new dataset, with its own header.
    let other = b"code,label\nA,first\n".to_vec();
    let reused = server.import("other.csv", other, "big").await;
    assert_eq!(
        server.finished(reused.id).await.status,
        JobStatus::Completed
    );
    let listed = datasets(&server).await;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].columns.len(), listed[0].row_count), (2, 1));
    server.stop().await;
}

#[tokio::test]
async fn only_its_owner_deletes_a_dataset_and_not_while_jobs_use_it() {
    let db = TestDb::new().await;
    // No workers: the second import waits.
    let server = TestServer::start(&db, None).await;
    let owner_id = account(&db, "owner@example.com", Role::Member).await;
    account(&db, "other@example.com", Role::Member).await;
    account(&db, "viewer@example.com", Role::Viewer).await;
    let owner = server.signed_in("owner@example.com").await;
    let other = server.signed_in("other@example.com").await;
    let viewer = server.signed_in("viewer@example.com").await;

    let declared = json!({ "name": "shared", "columns": [{ "name": "id" }] });
    let created = owner
        .post(server.url("/api/datasets"))
        .json(&declared)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    assert_eq!(
        delete(&server, &other, "shared").await.status(),
        StatusCode::NOT_FOUND,
        "another member's dataset is not theirs to see"
    );
    let as_viewer = viewer
        .delete(server.url(&format!("/api/datasets/shared?owner={owner_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(as_viewer.status(), StatusCode::FORBIDDEN);

    let waiting = server
        .import_as(
            &owner,
            "ids.csv",
            b"id\n1\n".to_vec(),
            json!({ "dataset": "shared" }),
        )
        .await;
    assert_eq!(waiting.status(), StatusCode::ACCEPTED);
    let busy = delete(&server, &owner, "shared").await;
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    let message: Value = busy.json().await.unwrap();
    assert!(
        message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 jobs waiting or running"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_keyed_dry_run_counts_the_rows_it_would_replace_as_the_import_does() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(3))).await;
    let declared = json!({
        "name": "people",
        "columns": [{ "name": "id", "type": "integer" }, { "name": "name" }],
        "key": "id"
    });
    assert_eq!(
        server.post_json("/api/datasets", declared).await.status(),
        StatusCode::CREATED
    );
    let first: String = (1..=10).map(|i| format!("{i},first {i}\n")).collect();
    let first = server
        .import(
            "first.csv",
            format!("id,name\n{first}").into_bytes(),
            "people",
        )
        .await;
    assert_eq!(server.finished(first.id).await.status, JobStatus::Completed);

    // Rows 6-10 are there already; 11-13, 20 and 21 are new; 12 and 20 come twice, in other
    // chunks (3 rows each) than their first.
    let second: String = (6..=13)
        .chain([12, 20, 21, 20])
        .map(|i| format!("{i},second {i}\n"))
        .collect();
    let second = format!("id,name\n{second}").into_bytes();
    let upload = server.upload("second.csv", second.clone()).await;
    let request = json!({ "dataset": "people", "jobType": "validate", "fileGuid": upload["id"] });
    let dry = server.post_json("/api/jobs", request).await;
    assert_eq!(dry.status(), StatusCode::ACCEPTED);
    let dry: JobView = dry.json().await.unwrap();
    let dry = server.finished(dry.id).await;
    assert!(dry.dry_run);
    assert_eq!((dry.rows_ok, dry.rows_updated), (12, 7), "{dry:?}");
    assert_eq!(
        dry.written_line().as_deref(),
        Some("12 rows ok, 7 would replace existing rows")
    );
    assert_eq!(
        dry.message(),
        "Dry run complete: 12 rows ok (7 would replace existing rows), 0 with errors; nothing \
         was written"
    );
    let real = server.import("second.csv", second, "people").await;
    let real = server.finished(real.id).await;
    assert_eq!(
        (real.rows_ok, real.rows_updated),
        (dry.rows_ok, dry.rows_updated)
    );
    let listed = datasets(&server).await;
    assert_eq!(listed[0].row_count, 15, "10, and 5 new");
    assert_eq!(dataset_rows(&db, "people").await, 15);
    server.stop().await;
}

#[tokio::test]
async fn an_xlsx_export_of_more_rows_than_a_sheet_holds_is_refused_before_it_starts() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let import = server.import("few.csv", csv(3), "huge").await;
    // The count is what decides: make it say more than a sheet holds.
    sqlx::query("update datasets set row_count = $1, state = 'ready' where name = 'huge'")
        .bind(MAX_XLSX_ROWS + 1)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("update jobs set status = 'cancelled' where id = $1")
        .bind(import.id)
        .execute(&db.pool)
        .await
        .unwrap();
    let export = |format: &str| {
        server.post_json(
            "/api/jobs",
            json!({ "jobType": "export", "dataset": "huge", "format": format }),
        )
    };
    let xlsx = export("xlsx").await;
    assert_eq!(xlsx.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let message: Value = xlsx.json().await.unwrap();
    assert!(
        message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("export it as CSV"),
        "{message}"
    );
    assert_eq!(export("csv").await.status(), StatusCode::ACCEPTED);
    server.stop().await;
}

#[tokio::test]
async fn retention_removes_deleted_and_abandoned_datasets_once_no_job_names_them() {
    use server::jobs::maintenance::retention::{self, Kept};
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let kept = server.import("kept.csv", csv(2), "kept").await;
    assert_eq!(server.finished(kept.id).await.status, JobStatus::Completed);
    let doomed = server.import("doomed.csv", csv(2), "doomed").await;
    assert_eq!(
        server.finished(doomed.id).await.status,
        JobStatus::Completed
    );
    let deletion: JobView = delete(&server, &server.client, "doomed")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        server.finished(deletion.id).await.status,
        JobStatus::Completed
    );
    let bad = b"a\n".to_vec();
    let abandoned = server.import("empty.csv", bad, "abandoned").await;
    assert_eq!(
        server.finished(abandoned.id).await.status,
        JobStatus::Failed
    );

    // What a failed import left rows in, once its jobs are gone (as retention removes them).
    let owner: uuid::Uuid = sqlx::query_scalar("select owner from datasets limit 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let orphan: uuid::Uuid = sqlx::query_scalar(
        "insert into datasets (id, owner, name, state, row_count)
         values (gen_random_uuid(), $1, 'orphaned', 'provisional', 2) returning id",
    )
    .bind(owner)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into dataset_rows (dataset_id, pos, record) values ($1, 1, 'a'), ($1, 2, 'b')",
    )
    .bind(orphan)
    .execute(&db.pool)
    .await
    .unwrap();

    let all = || async {
        sqlx::query_scalar::<_, String>("select name from datasets order by name")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(all().await, ["abandoned", "doomed", "kept", "orphaned"]);
    sqlx::query("update jobs set finished_at = now() - interval '100 days'")
        .execute(&db.pool)
        .await
        .unwrap();
    let kept_for = Kept {
        items: Duration::from_secs(7 * 86_400),
        jobs: Duration::from_secs(90 * 86_400),
    };
    let pruned = retention::round(&db.pool, kept_for).await.unwrap();
    assert_eq!(pruned.datasets, 3, "{pruned:?}");
    assert_eq!(all().await, ["kept"]);
    let left: i64 = sqlx::query_scalar("select count(*) from dataset_rows where dataset_id = $1")
        .bind(orphan)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "no row outlives its dataset");
    server.stop().await;
}

#[tokio::test]
async fn a_dry_run_into_a_new_dataset_makes_nothing_until_its_import_completes() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(2))).await;
    let upload = server.upload("people.csv", csv(4)).await;
    let new_dataset = json!({ "columns": [
        { "name": "id", "type": "integer" },
        { "name": "name" },
        { "name": "email", "type": "email" },
        { "name": "amount", "type": "decimal" }
    ], "key": "id" });
    let request = |job_type: &str| {
        json!({ "jobType": job_type, "fileGuid": upload["id"], "dataset": "people",
                "newDataset": new_dataset })
    };
    let dry = server.post_json("/api/jobs", request("validate")).await;
    assert_eq!(dry.status(), StatusCode::ACCEPTED);
    let dry: JobView = dry.json().await.unwrap();
    let dry = server.finished(dry.id).await;
    assert_eq!(
        (dry.status, dry.rows_ok),
        (JobStatus::Completed, 4),
        "{dry:?}"
    );
    assert!(
        datasets(&server).await.is_empty(),
        "a dry run makes no dataset"
    );

    let import = server
        .post_json(&format!("/api/jobs/{}/import", dry.id), json!({}))
        .await;
    assert_eq!(import.status(), StatusCode::ACCEPTED);
    let import: JobView = import.json().await.unwrap();
    let import = server.finished(import.id).await;
    assert_eq!(import.status, JobStatus::Completed, "{import:?}");
    let listed = datasets(&server).await;
    assert_eq!(listed.len(), 1);
    let people = &listed[0];
    assert_eq!(
        (people.key.as_deref(), people.row_count),
        (Some("id"), 4),
        "the declared key, and the rows"
    );
    let kinds: Vec<&str> = people.columns.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["integer", "text", "email", "decimal"],
        "the declared types"
    );
    let same: bool = sqlx::query_scalar(
        "select d.dataset_id = i.dataset_id from jobs d, jobs i where d.id = $1 and i.id = $2",
    )
    .bind(dry.id)
    .bind(import.id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        same,
        "the import writes into the dataset its dry run checked"
    );
    assert!(!server.job(dry.id).await.dataset_deleted);

    let again = server.post_json("/api/jobs", request("import")).await;
    assert_eq!(
        again.status(),
        StatusCode::CONFLICT,
        "a new dataset is not made over an existing one"
    );
    server.stop().await;
}

#[tokio::test]
async fn migration_22_hides_only_the_empty_datasets_failed_imports_made_and_counts_rows() {
    let db = TestDb::new_in_unmigrated(&admin_url()).await;
    migrate_before(&db, 20261123000022).await;
    let owner = account(&db, "old@example.com", Role::Member).await;
    // (dataset, made with its import, the import's status, rows)
    let cases = [
        ("left_by_failure", true, "failed", 0),
        ("declared_then_failed", false, "failed", 0),
        ("filled", true, "completed", 2),
        ("emptied_by_completion", true, "completed", 0),
    ];
    for (name, same_time, status, rows) in cases {
        let dataset: uuid::Uuid = sqlx::query_scalar(
            "insert into datasets (id, owner, name, created_at)
             values (gen_random_uuid(), $1, $2, now() - interval '1 hour') returning id",
        )
        .bind(owner)
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        sqlx::query(
            "insert into jobs (id, kind, owner, dataset_id, status, created_at)
             select gen_random_uuid(), 'import', $1, $2, $3::job_status,
                    case when $4 then d.created_at else now() end
             from datasets d where d.id = $2",
        )
        .bind(owner)
        .bind(dataset)
        .bind(status)
        .bind(same_time)
        .execute(&db.pool)
        .await
        .unwrap();
        for pos in 0..rows {
            sqlx::query("insert into dataset_rows (dataset_id, pos, record) values ($1, $2, 'x')")
                .bind(dataset)
                .bind(pos)
                .execute(&db.pool)
                .await
                .unwrap();
        }
    }
    server::db::migrate(&db.pool).await.unwrap();
    let states: Vec<(String, String, i64)> =
        sqlx::query_as("select name, state::text, row_count from datasets order by name")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        [
            ("declared_then_failed".into(), "ready".into(), 0),
            ("emptied_by_completion".into(), "ready".into(), 0),
            ("filled".into(), "ready".into(), 2),
            ("left_by_failure".into(), "provisional".into(), 0),
        ]
    );
}
