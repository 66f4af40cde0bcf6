//! What an operator's log collector gets from a real `server serve` process with
//! `CONVEYOR_LOG_FORMAT=json`: one JSON object per line; every request's lines carry its
//! `request_id` (the caller's when it is fit to log, else one of ours, echoed in
//! `x-request-id`), and every line a task run writes carries its `job_id` and `task`.

use crate::support::{TestDb, TestServer, WorkerProcess, csv, file_form, install_trigger, until};
use serde_json::{Value, json};

/// The process's complete log lines so far, each parsed (every one must be JSON).
fn lines(process: &WorkerProcess) -> Vec<Value> {
    process
        .log()
        .split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect()
}

#[tokio::test]
async fn json_logs_carry_the_request_id_and_the_task_being_run() {
    let db = TestDb::new().await;
    // Row 50 cannot be written: the first chunk's run fails, and says so in the log.
    install_trigger(
        &db,
        "if new.pos & 4294967295 = 50 then raise exception 'the disk is on fire'; end if;",
    )
    .await;
    let process = WorkerProcess::serve(
        &db,
        100,
        &[
            ("CONVEYOR_LOG_FORMAT", "json"),
            ("RUST_LOG", "info,sqlx=warn,apalis=warn"),
        ],
    );
    let mut base = String::new();
    until("the server to listen", || {
        let found = lines(&process).iter().find_map(|line| {
            line["fields"]["message"]
                .as_str()?
                .strip_prefix("listening on ")
                .map(str::to_owned)
        });
        base = found.unwrap_or_default();
        std::future::ready(!base.is_empty())
    })
    .await;
    let client = TestServer::new_client();

    // The caller's id is kept and echoed; a hostile one is replaced by ours.
    let upload = client
        .post(format!("{base}/api/uploads"))
        .header("x-request-id", "probe-42")
        .multipart(file_form("fire.csv", csv(100)))
        .send()
        .await
        .unwrap();
    assert_eq!(upload.headers()["x-request-id"], "probe-42");
    let upload: Value = upload.json().await.unwrap();
    let hostile_id = "\"}{\"level\":\"ERROR";
    let hostile = client
        .get(format!("{base}/api/jobs"))
        .header("x-request-id", hostile_id)
        .send()
        .await
        .unwrap();
    let ours = hostile.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(uuid::Uuid::parse_str(&ours).is_ok(), "{ours}");

    let job: Value = client
        .post(format!("{base}/api/jobs"))
        .json(
            &json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "fire",
                       "maxFailuresPerItem": 1 }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job_id = job["id"].as_str().unwrap().to_owned();

    until("the failed run to be logged", || {
        std::future::ready(lines(&process).iter().any(|line| {
            line["level"] == "WARN"
                && line["span"]["job_id"] == job_id.as_str()
                && line["span"]["task"] == "chunk"
                && line["span"]["chunk_no"] == 0
                && line["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("the disk is on fire"))
        }))
    })
    .await;
    let log = lines(&process);
    let answered = |id: &str| {
        log.iter().any(|line| {
            line["span"]["request_id"] == id
                && line["fields"]["message"] == "finished processing request"
        })
    };
    assert!(answered("probe-42"), "the upload's access line");
    assert!(answered(&ours), "the list's access line");
    assert!(
        !log.iter()
            .any(|line| line["span"]["request_id"] == hostile_id),
        "the hostile id never reaches the log"
    );
}
