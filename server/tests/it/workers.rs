//! External workers (issue 14): worker tokens, claims, heartbeats, results and failures over
//! HTTP, with the reference worker (`examples/worker.py`) run as real processes.

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use crate::support::{TestDb, TestServer, account, cookieless, worker_args};
use app::{
    auth::Role,
    model::{JobStatus, JobView},
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::mpsc,
};
use uuid::Uuid;

/// An admin's client, a member's, and a server.
struct Setup {
    db: TestDb,
    server: TestServer,
    admin: Client,
    member: Client,
}

impl Setup {
    /// A server with its own workers (they run lease rescue, every 0.2 s).
    async fn new() -> Self {
        let db = TestDb::new().await;
        let server = TestServer::start(&db, Some(worker_args(100))).await;
        account(&db, "admin@example.com", Role::Admin).await;
        account(&db, "ada@example.com", Role::Member).await;
        let admin = server.signed_in("admin@example.com").await;
        let member = server.signed_in("ada@example.com").await;
        Self {
            db,
            server,
            admin,
            member,
        }
    }

    async fn register(&self, body: Value) {
        let answer = self.post(&self.admin, "/api/job-types", body).await;
        assert_eq!(answer.status(), StatusCode::CREATED);
    }

    /// A new worker token for `types`: its secret.
    async fn token(&self, types: &[&str]) -> String {
        let body = json!({ "name": "test workers", "types": types });
        let answer = self.post(&self.admin, "/api/worker-tokens", body).await;
        assert_eq!(answer.status(), StatusCode::CREATED);
        let token: Value = answer.json().await.unwrap();
        token["secret"].as_str().unwrap().to_owned()
    }

    async fn post(&self, client: &Client, path: &str, body: Value) -> reqwest::Response {
        client
            .post(self.server.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// `POST` as a worker with `token`: the status and the JSON answer.
    async fn as_worker(&self, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let answer = cookieless()
            .post(self.server.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    /// The member's new job of `job_type` with these payloads, sealed if `sealed`.
    async fn job(&self, job_type: &str, payloads: &[Value], sealed: bool) -> Uuid {
        let items: Vec<Value> = payloads.iter().map(|p| json!({ "payload": p })).collect();
        let body = json!({ "jobType": job_type, "items": items });
        let answer = self.post(&self.member, "/api/jobs", body).await;
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
        let job: JobView = answer.json().await.unwrap();
        if sealed {
            let path = format!("/api/jobs/{}/seal", job.id);
            let answer = self.post(&self.member, &path, json!({})).await;
            assert_eq!(
                answer.status(),
                StatusCode::OK,
                "{}",
                answer.text().await.unwrap()
            );
        }
        job.id
    }

    async fn items(&self, job: Uuid) -> Vec<Value> {
        let mut items = Vec::new();
        let mut after = 0;
        loop {
            let path = format!("/api/jobs/{job}/items?after={after}&limit=1000");
            let page: Value = self
                .member
                .get(self.server.url(&path))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            items.extend(page["items"].as_array().unwrap().iter().cloned());
            match page["next"].as_i64() {
                Some(next) => after = next,
                None => return items,
            }
        }
    }

    async fn job_view(&self, job: Uuid) -> JobView {
        let url = self.server.url(&format!("/api/jobs/{job}"));
        self.member
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn finished(&self, job: Uuid) -> JobView {
        self.server.finished_as(&self.member, job).await
    }

    /// Starts reference workers with `token` as they are added.
    fn workers(&self, token: &str) -> Workers {
        let (tx, events) = mpsc::unbounded_channel();
        Workers {
            base: self.server.base.clone(),
            token: token.to_owned(),
            children: Vec::new(),
            tx,
            events,
        }
    }
}

/// Reference workers (`examples/worker.py`), real processes, and their events (one JSON line
/// each, with the worker's name).
struct Workers {
    base: String,
    token: String,
    children: Vec<(String, Child)>,
    tx: mpsc::UnboundedSender<Value>,
    events: mpsc::UnboundedReceiver<Value>,
}

impl Workers {
    fn add(&mut self, name: &str, extra: &[&str]) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/worker.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--url", &self.base, "--token", &self.token, "--name", name])
            .args(["--wait", "5", "--heartbeat-seconds", "0.5"])
            .args(extra)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the reference worker");
        let stdout = child.stdout.take().unwrap();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(event) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(event);
                }
            }
        });
        self.children.push((name.to_owned(), child));
    }

    /// The next event of this kind from any of them (others before it are passed over).
    async fn event(&mut self, kind: &str) -> Value {
        self.until(kind, 1).await.pop().unwrap()
    }

    /// Every event until the `n`th of this kind, that one included.
    async fn until(&mut self, kind: &str, n: usize) -> Vec<Value> {
        let wait = async {
            let mut seen = Vec::new();
            let mut found = 0;
            while found < n {
                let event = self.events.recv().await.expect("the workers are running");
                found += usize::from(event["event"] == kind);
                seen.push(event);
            }
            seen
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("not {n} {kind} events within a minute"))
    }

    async fn kill_9(&mut self, name: &str) {
        let at = self.children.iter().position(|(n, _)| n == name).unwrap();
        let (_, mut child) = self.children.remove(at);
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
}

#[tokio::test]
async fn a_worker_claims_renews_and_ends_items_and_each_counts_once() {
    let s = Setup::new().await;
    s.register(json!({ "name": "render", "backoffSeconds": 0, "maxFailuresPerItem": 2 }))
        .await;
    s.register(json!({ "name": "other" })).await;
    let token = s.token(&["render"]).await;
    let other = s.token(&["other"]).await;
    let frames: Vec<Value> = (1..=3).map(|n| json!({ "frame": n })).collect();
    let job = s.job("render", &frames, true).await;

    // A claim takes items in order, and starts the job.
    let (status, claimed) = s
        .as_worker(&token, "/api/workers/w-1/claims", json!({ "max": 2 }))
        .await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let taken = claimed["assignments"].as_array().unwrap().clone();
    assert_eq!(taken.len(), 2);
    assert_eq!(
        (taken[0]["itemNo"].as_i64(), taken[1]["itemNo"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(taken[0]["payload"], json!({ "frame": 1 }));
    assert_eq!(taken[0]["attempt"], 1);
    assert_eq!(s.job_view(job).await.status, JobStatus::Running);
    let (first, second) = (
        taken[0]["id"].as_str().unwrap(),
        taken[1]["id"].as_str().unwrap(),
    );

    // Heartbeats renew a current assignment.
    let (status, beat) = s
        .as_worker(
            &token,
            &format!("/api/assignments/{first}/heartbeat"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, &beat["cancelled"]),
        (StatusCode::OK, &json!(false)),
        "{beat}"
    );

    // Another type's token sees none of it.
    let (status, _) = s
        .as_worker(
            &other,
            &format!("/api/assignments/{first}/result"),
            json!({ "result": 1 }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = s
        .as_worker(
            &other,
            "/api/workers/w-2/claims",
            json!({ "types": ["render"] }),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // A result counts once; the same result sent again changes nothing.
    let path = format!("/api/assignments/{first}/result");
    let (status, done) = s
        .as_worker(&token, &path, json!({ "result": { "ok": 1 } }))
        .await;
    assert_eq!(
        (status, &done["state"]),
        (StatusCode::OK, &json!("done")),
        "{done}"
    );
    let (status, again) = s
        .as_worker(&token, &path, json!({ "result": { "ok": 1 } }))
        .await;
    assert_eq!(
        (status, &again["alreadyRecorded"]),
        (StatusCode::OK, &json!(true))
    );
    let failure = format!("/api/assignments/{first}/failure");
    let (status, _) = s
        .as_worker(&token, &failure, json!({ "message": "late" }))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A failure with attempts left frees the item for another claim (no backoff here).
    let path = format!("/api/assignments/{second}/failure");
    let (status, failed) = s
        .as_worker(&token, &path, json!({ "message": "GPU busy" }))
        .await;
    assert_eq!(
        (status, &failed["state"]),
        (StatusCode::OK, &json!("pending")),
        "{failed}"
    );
    let (_, claimed) = s
        .as_worker(&token, "/api/workers/w-2/claims", json!({ "max": 5 }))
        .await;
    let taken = claimed["assignments"].as_array().unwrap().clone();
    let numbers: Vec<i64> = taken
        .iter()
        .map(|a| a["itemNo"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [2, 3]);
    assert_eq!(taken[0]["attempt"], 2);
    // The first assignment of item 2 is not current any more.
    let (status, _) = s
        .as_worker(
            &token,
            &format!("/api/assignments/{second}/result"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A late result, once the lease ran out, is refused and changes nothing.
    let third = taken[1]["id"].as_str().unwrap();
    sqlx::query(
        "update job_items set lease_expires_at = now() - interval '1 second' where assignment = $1",
    )
    .bind(Uuid::parse_str(third).unwrap())
    .execute(&s.db.pool)
    .await
    .unwrap();
    let (status, refused) = s
        .as_worker(
            &token,
            &format!("/api/assignments/{third}/result"),
            json!({ "result": 3 }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let (status, _) = s
        .as_worker(
            &token,
            &format!("/api/assignments/{third}/heartbeat"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Out of attempts, item 2 fails; lease rescue frees item 3 for its second attempt.
    let path = format!(
        "/api/assignments/{}/failure",
        taken[0]["id"].as_str().unwrap()
    );
    let (_, failed) = s
        .as_worker(&token, &path, json!({ "message": "still busy" }))
        .await;
    assert_eq!(failed["state"], "failed");
    let (_, claimed) = s
        .as_worker(
            &token,
            "/api/workers/w-3/claims",
            json!({ "waitSeconds": 10 }),
        )
        .await;
    let retaken = &claimed["assignments"][0];
    assert_eq!(
        (retaken["itemNo"].as_i64(), retaken["attempt"].as_i64()),
        (Some(3), Some(2))
    );
    let path = format!(
        "/api/assignments/{}/result",
        retaken["id"].as_str().unwrap()
    );
    let (status, _) = s.as_worker(&token, &path, json!({ "result": [3] })).await;
    assert_eq!(status, StatusCode::OK);

    let ended = s.finished(job).await;
    assert_eq!(ended.status, JobStatus::Failed, "{ended:?}");
    assert_eq!(
        (ended.rows_ok, ended.rows_failed, ended.item_progress),
        (2, 1, 3)
    );
    let items = s.items(job).await;
    assert_eq!(items[0]["result"], json!({ "ok": 1 }));
    assert_eq!(items[1]["state"], "failed");
    let messages: Vec<&str> = items[1]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["GPU busy", "still busy"]);
    assert_eq!(items[2]["attempts"], 2);
    assert_eq!(items[2]["failures"][0]["worker"], "w-2");
    s.server.stop().await;
}

#[tokio::test]
async fn a_worker_token_opens_the_worker_routes_and_nothing_else() {
    let s = Setup::new().await;
    s.register(json!({ "name": "render" })).await;
    let token = s.token(&["render"]).await;
    let (status, _) = s
        .as_worker(&token, "/api/jobs", json!({ "jobType": "render" }))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = s
        .as_worker(&token, "/api/workers/bad%20name/claims", json!({}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = s
        .as_worker(
            &token,
            "/api/workers/w/claims",
            json!({ "waitSeconds": 61 }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // People, even admins, do not claim.
    let answer = s.post(&s.admin, "/api/workers/w/claims", json!({})).await;
    assert_eq!(answer.status(), StatusCode::FORBIDDEN);
    // Tokens for unknown types are refused; a revoked token opens nothing.
    let body = json!({ "name": "x", "types": ["nope"] });
    let answer = s.post(&s.admin, "/api/worker-tokens", body).await;
    assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let list: Value = s
        .admin
        .get(s.server.url("/api/worker-tokens"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = list["workerTokens"][0]["id"].as_str().unwrap();
    assert!(
        !list.to_string().contains(&token),
        "secrets are never listed"
    );
    let revoked = s
        .admin
        .delete(s.server.url(&format!("/api/worker-tokens/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let (status, _) = s
        .as_worker(&token, "/api/workers/w/claims", json!({}))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    s.server.stop().await;
}

#[tokio::test]
async fn a_waiting_claim_answers_as_soon_as_items_are_added() {
    let s = Setup::new().await;
    s.register(json!({ "name": "render" })).await;
    let token = s.token(&["render"]).await;
    let job = s.job("render", &[], false).await;
    let url = s.server.url("/api/workers/w/claims");
    let claim = tokio::spawn({
        let token = token.clone();
        async move {
            let started = Instant::now();
            let answer: Value = cookieless()
                .post(url)
                .bearer_auth(token)
                .json(&json!({ "max": 10, "waitSeconds": 30 }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (answer, started.elapsed())
        }
    });
    // The claim is waiting (it found nothing); then items come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let body = json!({ "items": [{ "payload": 1 }, { "payload": 2 }] });
    let added = s
        .post(&s.member, &format!("/api/jobs/{job}/items"), body)
        .await;
    assert_eq!(added.status(), StatusCode::OK);
    let (answer, waited) = claim.await.unwrap();
    let taken = answer["assignments"].as_array().unwrap();
    assert_eq!(taken.len(), 2, "{answer}");
    // It waited for them, and was woken: not left to its 30 s (nor the 5 s recheck).
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    s.server.stop().await;
}

#[tokio::test]
async fn many_worker_processes_share_a_job_and_no_item_is_claimed_twice() {
    let s = Setup::new().await;
    s.register(json!({ "name": "noop" })).await;
    let token = s.token(&["noop"]).await;
    // Each takes a little while, so every worker is up before the work runs out.
    let payloads: Vec<Value> = (0..300)
        .map(|n| json!({ "n": n, "sleepSeconds": 0.01 }))
        .collect();
    let job = s.job("noop", &payloads, true).await;
    let mut workers = s.workers(&token);
    for n in 0..4 {
        workers.add(&format!("w{n}"), &["--max", "7"]);
    }
    let ended = s.finished(job).await;
    assert_eq!(ended.status, JobStatus::Completed, "{ended:?}");
    assert_eq!((ended.rows_ok, ended.item_progress), (300, 300));
    let items = s.items(job).await;
    assert!(
        items.iter().all(|i| i["attempts"] == 1),
        "an item was claimed twice"
    );
    let by: std::collections::BTreeSet<String> = sqlx::query_scalar("select worker from job_items")
        .fetch_all(&s.db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert!(by.len() > 1, "the work was shared: {by:?}");
    assert_eq!(items[7]["result"]["echo"]["n"], 7);
    s.server.stop().await;
}

#[tokio::test]
async fn an_item_of_a_killed_worker_goes_to_another_after_its_lease_and_counts_once() {
    let s = Setup::new().await;
    s.register(json!({ "name": "slow", "leaseSeconds": 5 }))
        .await;
    let token = s.token(&["slow"]).await;
    let job = s
        .job("slow", &[json!({ "sleepSeconds": 3600 })], true)
        .await;
    let mut workers = s.workers(&token);
    workers.add("doomed", &[]);
    workers.event("claimed").await;
    workers.kill_9("doomed").await;
    // Its lease runs out; lease rescue frees the item, and another worker takes it. This one
    // is told (by the payload it reads on its second attempt) to finish at once.
    sqlx::query("update job_items set payload = '{\"result\": \"second try\"}'")
        .execute(&s.db.pool)
        .await
        .unwrap();
    workers.add("survivor", &[]);
    let done = workers.event("done").await;
    assert_eq!(
        (&done["worker"], &done["state"]),
        (&json!("survivor"), &json!("done"))
    );
    let ended = s.finished(job).await;
    assert_eq!(ended.status, JobStatus::Completed);
    assert_eq!((ended.rows_ok, ended.item_progress), (1, 1));
    let items = s.items(job).await;
    assert_eq!(items[0]["attempts"], 2);
    assert_eq!(items[0]["failures"][0]["worker"], "doomed");
    assert_eq!(items[0]["result"], "second try");
    s.server.stop().await;
}

#[tokio::test]
async fn failed_attempts_are_retried_after_a_doubling_backoff_up_to_the_limit() {
    let s = Setup::new().await;
    s.register(json!({ "name": "flaky", "backoffSeconds": 1, "maxFailuresPerItem": 3 }))
        .await;
    let token = s.token(&["flaky"]).await;
    let job = s
        .job(
            "flaky",
            &[
                json!({ "failUntilAttempt": 3 }),
                json!({ "fail": "always" }),
            ],
            true,
        )
        .await;
    let mut workers = s.workers(&token);
    workers.add("w", &["--max", "1"]);
    let ended = s.finished(job).await;
    assert_eq!(ended.status, JobStatus::Failed);
    assert_eq!((ended.rows_ok, ended.rows_failed), (1, 1));
    let items = s.items(job).await;
    assert_eq!(
        (items[0]["state"].as_str(), items[0]["attempts"].as_i64()),
        (Some("done"), Some(3))
    );
    assert_eq!(
        (items[1]["state"].as_str(), items[1]["attempts"].as_i64()),
        (Some("failed"), Some(3))
    );
    // The waits between attempts: at least 1 s, then at least 2 s.
    let times: Vec<chrono::DateTime<chrono::Utc>> = items[1]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["at"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(times.len(), 3);
    assert!(
        (times[1] - times[0]).num_milliseconds() >= 1000,
        "{times:?}"
    );
    assert!(
        (times[2] - times[1]).num_milliseconds() >= 2000,
        "{times:?}"
    );
    let error = ended.error.as_deref().unwrap_or_default();
    assert!(error.contains("1 of 2 items"), "{ended:?}");
    s.server.stop().await;
}

#[tokio::test]
async fn the_items_of_an_ordered_type_run_one_at_a_time_in_order() {
    let s = Setup::new().await;
    s.register(json!({ "name": "ledger", "ordered": true }))
        .await;
    let token = s.token(&["ledger"]).await;
    let payloads: Vec<Value> = (1..=20).map(|n| json!({ "entry": n })).collect();
    let job = s.job("ledger", &payloads, true).await;
    let mut workers = s.workers(&token);
    for n in 0..3 {
        workers.add(&format!("w{n}"), &["--max", "5"]);
    }
    let events = workers.until("finishing", 20).await;
    let ended = s.finished(job).await;
    assert_eq!(ended.status, JobStatus::Completed);
    // Each item was claimed only after the one before it was being reported done.
    let at = |kind: &str, item: i64| {
        let event = events
            .iter()
            .find(|e| e["event"] == kind && e["item"] == item);
        event.unwrap()["at"].as_f64().unwrap()
    };
    for item in 2..=20 {
        assert!(
            at("claimed", item) >= at("finishing", item - 1),
            "item {item} was claimed before item {} ended",
            item - 1
        );
    }
    s.server.stop().await;
}

#[tokio::test]
async fn a_cancelled_job_is_seen_at_the_next_heartbeat() {
    let s = Setup::new().await;
    s.register(json!({ "name": "slow" })).await;
    let token = s.token(&["slow"]).await;
    let job = s
        .job("slow", &[json!({ "sleepSeconds": 3600 })], true)
        .await;
    let mut workers = s.workers(&token);
    workers.add("w", &[]);
    let claimed = workers.event("claimed").await;
    let cancel = s
        .post(&s.member, &format!("/api/jobs/{job}/cancel"), json!({}))
        .await;
    assert_eq!(cancel.status(), StatusCode::OK);
    let cancelled = workers.event("cancelled").await;
    assert_eq!(cancelled["assignment"], claimed["assignment"]);
    workers.event("dropped").await;
    s.server.stop().await;
}

/// A callback receiver that answers 200 and reports each POST's job.
async fn callback_receiver() -> (String, mpsc::UnboundedReceiver<JobView>) {
    use axum::{Json, Router, extract::State, routing::post};
    let (tx, rx) = mpsc::unbounded_channel();
    let hook = |State(tx): State<mpsc::UnboundedSender<JobView>>, Json(job): Json<JobView>| async move {
        tx.send(job).unwrap();
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/done", listener.local_addr().unwrap());
    let app = Router::new().route("/done", post(hook)).with_state(tx);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

#[tokio::test]
async fn a_three_level_chain_completes_with_one_callback() {
    let s = Setup::new().await;
    s.register(json!({ "name": "thumbs" })).await;
    s.register(json!({ "name": "encode", "followUp": "thumbs", "maxPayloadBytes": 100 }))
        .await;
    s.register(json!({ "name": "ingest", "followUp": "encode" }))
        .await;
    let token = s.token(&["ingest", "encode", "thumbs"]).await;

    // A result larger than the follow-up type takes is refused, and changes nothing.
    let big = s.job("ingest", &[json!({ "n": 0 })], true).await;
    let (_, claimed) = s
        .as_worker(
            &token,
            "/api/workers/w/claims",
            json!({ "types": ["ingest"] }),
        )
        .await;
    let id = claimed["assignments"][0]["id"].as_str().unwrap().to_owned();
    let result = json!({ "result": "x".repeat(200) });
    let (status, _) = s
        .as_worker(&token, &format!("/api/assignments/{id}/result"), result)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let failure = json!({ "message": "too big", "retry": false });
    let (_, failed) = s
        .as_worker(&token, &format!("/api/assignments/{id}/failure"), failure)
        .await;
    assert_eq!(failed["state"], "failed");
    assert_eq!(s.finished(big).await.status, JobStatus::Failed);

    let (hook, mut calls) = callback_receiver().await;
    let items: Vec<Value> = (1..=5).map(|n| json!({ "payload": n })).collect();
    let body = json!({ "jobType": "ingest", "items": items, "callbackUrl": hook });
    let root: JobView = s
        .post(&s.member, "/api/jobs", body)
        .await
        .json()
        .await
        .unwrap();
    let chain: Vec<(Uuid, String)> = sqlx::query_as(
        "with recursive tree as (select id, job_type, 0 as depth from jobs where id = $1
                                 union all
                                 select j.id, j.job_type, t.depth + 1 from jobs j
                                 join tree t on j.parent_id = t.id)
         select id, job_type from tree order by depth",
    )
    .bind(root.id)
    .fetch_all(&s.db.pool)
    .await
    .unwrap();
    let types: Vec<&str> = chain.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(types, ["ingest", "encode", "thumbs"]);

    let mut workers = s.workers(&token);
    workers.add("w1", &["--max", "3"]);
    workers.add("w2", &["--max", "3"]);
    // Each level's items are done as they come; the root is not sealed yet, so nothing ends.
    workers.until("done", 15).await;
    for (id, _) in &chain {
        assert_eq!(s.job_view(*id).await.status, JobStatus::Running);
    }
    // A follow-up job is the chain's: its owner cannot cancel, seal or fill it alone.
    let child = chain[1].0;
    for action in ["cancel", "seal"] {
        let answer = s
            .post(&s.member, &format!("/api/jobs/{child}/{action}"), json!({}))
            .await;
        assert_eq!(answer.status(), StatusCode::CONFLICT, "{action}");
    }
    let body = json!({ "items": [{ "payload": 1 }] });
    let answer = s
        .post(&s.member, &format!("/api/jobs/{child}/items"), body)
        .await;
    assert_eq!(answer.status(), StatusCode::CONFLICT);
    let sealed = s
        .post(&s.member, &format!("/api/jobs/{}/seal", root.id), json!({}))
        .await;
    assert_eq!(sealed.status(), StatusCode::OK);

    let called = calls.recv().await.unwrap();
    assert_eq!((called.id, called.status), (root.id, JobStatus::Completed));
    for (id, _) in &chain {
        let job = s.job_view(*id).await;
        assert_eq!(
            (job.status, job.rows_ok),
            (JobStatus::Completed, 5),
            "{job:?}"
        );
        assert!(job.sealed);
    }
    let leaves = s.items(chain[2].0).await;
    let payloads: Vec<&Value> = leaves.iter().map(|i| &i["payload"]).collect();
    assert!(
        payloads.contains(&&json!({ "echo": { "echo": 3 } })),
        "{payloads:?}"
    );
    assert!(leaves[0]["result"]["echo"]["echo"]["echo"].is_i64());
    // Only the root calls back: one POST for the whole tree.
    let with_callbacks: i64 =
        sqlx::query_scalar("select count(*) from jobs where callback_url is not null")
            .fetch_one(&s.db.pool)
            .await
            .unwrap();
    assert_eq!(with_callbacks, 1);
    // Deleted from its root only, the whole chain with it.
    let delete = |id: Uuid| {
        s.member
            .delete(s.server.url(&format!("/api/jobs/{id}")))
            .send()
    };
    assert_eq!(delete(child).await.unwrap().status(), StatusCode::CONFLICT);
    assert_eq!(
        delete(root.id).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    for (id, _) in &chain {
        let gone = s
            .member
            .get(s.server.url(&format!("/api/jobs/{id}")))
            .send()
            .await;
        assert_eq!(gone.unwrap().status(), StatusCode::NOT_FOUND);
    }
    s.server.stop().await;
}

#[tokio::test]
async fn a_failed_chain_retried_from_its_root_runs_what_failed_and_completes() {
    let s = Setup::new().await;
    s.register(json!({ "name": "publish" })).await;
    s.register(json!({ "name": "render", "followUp": "publish" }))
        .await;
    let token = s.token(&["render", "publish"]).await;
    let root = s.job("render", &[json!(1), json!(2)], true).await;
    let claim = |types: &'static str| {
        let body = json!({ "types": [types], "max": 10 });
        let s = &s;
        let token = &token;
        async move {
            let (_, claimed) = s.as_worker(token, "/api/workers/w/claims", body).await;
            claimed["assignments"].as_array().unwrap().clone()
        }
    };
    let end = |id: &Value, outcome: &str, body: Value| {
        let path = format!("/api/assignments/{}/{outcome}", id.as_str().unwrap());
        let s = &s;
        let token = &token;
        async move {
            let (status, answer) = s.as_worker(token, &path, body).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
        }
    };
    // Item 1 of the root succeeds; item 2 fails for good.
    let taken = claim("render").await;
    end(&taken[0]["id"], "result", json!({ "result": "one" })).await;
    let no_retry = json!({ "message": "bad frame", "retry": false });
    end(&taken[1]["id"], "failure", no_retry.clone()).await;
    // Its follow-up fails too: the whole chain ends failed.
    let follow = claim("publish").await;
    assert_eq!(follow[0]["payload"], "one");
    end(&follow[0]["id"], "failure", no_retry).await;
    let failed = s.finished(root).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert!(failed.error.unwrap().contains("1 of 2 items failed"));

    let retried = s
        .post(&s.member, &format!("/api/jobs/{root}/retry"), json!({}))
        .await;
    let delete = |id: Uuid| {
        let url = s.server.url(&format!("/api/jobs/{id}"));
        let member = &s.member;
        async move { member.delete(url).send().await.unwrap().status() }
    };
    // A live job is not deleted.
    assert_eq!(delete(root).await, StatusCode::CONFLICT);
    assert_eq!(retried.status(), StatusCode::OK);
    let job = s.job_view(root).await;
    assert_eq!(
        (job.status, job.rows_ok, job.rows_failed),
        (JobStatus::Waiting, 1, 0)
    );
    // Only what failed runs again, with fresh attempts; what was done stays done.
    let taken = claim("render").await;
    let numbers: Vec<i64> = taken
        .iter()
        .map(|a| a["itemNo"].as_i64().unwrap())
        .collect();
    assert_eq!((numbers, &taken[0]["attempt"]), (vec![2], &json!(1)));
    end(&taken[0]["id"], "result", json!({ "result": "two" })).await;
    let follow = claim("publish").await;
    let payloads: Vec<&Value> = follow.iter().map(|a| &a["payload"]).collect();
    assert_eq!(payloads, [&json!("one"), &json!("two")]);
    for a in &follow {
        end(&a["id"], "result", json!({})).await;
    }
    let done = s.finished(root).await;
    assert_eq!(
        (done.status, done.rows_ok),
        (JobStatus::Completed, 2),
        "{done:?}"
    );
    let items = s.items(root).await;
    assert_eq!(items[1]["failures"][0]["message"], "bad frame");

    // Deleted once finished: the job, its items, and its chain.
    assert_eq!(delete(root).await, StatusCode::NO_CONTENT);
    let left: i64 = sqlx::query_scalar("select count(*) from jobs where job_type is not null")
        .fetch_one(&s.db.pool)
        .await
        .unwrap();
    let items_left: i64 = sqlx::query_scalar("select count(*) from job_items")
        .fetch_one(&s.db.pool)
        .await
        .unwrap();
    assert_eq!((left, items_left), (0, 0));
    assert_eq!(delete(root).await, StatusCode::NOT_FOUND);
    s.server.stop().await;
}

#[tokio::test]
async fn endings_in_a_batch_are_each_answered_and_counted_once() {
    let s = Setup::new().await;
    s.register(json!({ "name": "render", "backoffSeconds": 0 }))
        .await;
    let token = s.token(&["render"]).await;
    let job = s
        .job("render", &[json!(1), json!(2), json!(3), json!(4)], true)
        .await;
    let (_, claimed) = s
        .as_worker(&token, "/api/workers/w/claims", json!({ "max": 4 }))
        .await;
    let ids: Vec<String> = claimed["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    let body = json!({
        "results": [
            { "id": ids[0], "result": "one" },
            { "id": ids[1], "result": "two" },
            // Never issued: refused alone.
            { "id": Uuid::new_v4(), "result": "stray" },
            // The same assignment twice: the first counts.
            { "id": ids[0], "result": "one again" },
            // A result that cannot be stored: refused alone.
            { "id": Uuid::new_v4(), "result": "\u{0}" },
        ],
        "failures": [
            { "id": ids[2], "message": "later", "retry": true },
            { "id": ids[3], "message": "never", "retry": false },
            // Done in this very batch: not a failure now.
            { "id": ids[1], "message": "too late" },
        ],
    });
    let (status, answer) = s
        .as_worker(&token, "/api/assignments/endings", body.clone())
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let states: Vec<Value> = answer["endings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e.get("state")
                .cloned()
                .unwrap_or_else(|| e["error"]["code"].clone())
        })
        .collect();
    assert_eq!(
        states,
        [
            json!("done"),
            json!("done"),
            json!("conflict"),
            json!("done"),
            json!("invalid"),
            json!("pending"),
            json!("failed"),
            json!("conflict"),
        ]
    );
    assert_eq!(answer["endings"][3]["alreadyRecorded"], true);
    // Sent again, nothing changes: each is recognised.
    let (_, again) = s.as_worker(&token, "/api/assignments/endings", body).await;
    assert_eq!(again["endings"][0]["alreadyRecorded"], true);
    assert_eq!(again["endings"][5]["alreadyRecorded"], true);
    let job = s.job_view(job).await;
    assert_eq!(
        (job.status, job.rows_ok, job.rows_failed, job.item_progress),
        (JobStatus::Running, 2, 1, 3)
    );
    s.server.stop().await;
}

#[tokio::test]
async fn jobs_with_one_serialize_key_give_out_their_items_one_job_after_the_other() {
    let s = Setup::new().await;
    s.register(json!({ "name": "sync" })).await;
    let token = s.token(&["sync"]).await;
    let mut jobs = Vec::new();
    for n in 0..2 {
        let body = json!({ "jobType": "sync", "serializeKey": "account-7",
                           "items": [{ "payload": n }, { "payload": n }] });
        let job: JobView = s
            .post(&s.member, "/api/jobs", body)
            .await
            .json()
            .await
            .unwrap();
        let path = format!("/api/jobs/{}/seal", job.id);
        assert_eq!(
            s.post(&s.member, &path, json!({})).await.status(),
            StatusCode::OK
        );
        jobs.push(job.id);
    }
    let claim = || s.as_worker(&token, "/api/workers/w/claims", json!({ "max": 10 }));
    // Only the first job's items: the second waits behind it.
    let (_, first) = claim().await;
    let taken = first["assignments"].as_array().unwrap().clone();
    assert!(
        taken.iter().all(|a| a["jobId"] == json!(jobs[0])),
        "{first}"
    );
    assert_eq!(taken.len(), 2);
    let (_, none) = claim().await;
    assert_eq!(none["assignments"], json!([]));
    let results: Vec<Value> = taken
        .iter()
        .map(|a| json!({ "id": a["id"], "result": 1 }))
        .collect();
    let (status, _) = s
        .as_worker(
            &token,
            "/api/assignments/endings",
            json!({ "results": results }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s.job_view(jobs[0]).await.status, JobStatus::Completed);
    let (_, second) = claim().await;
    let taken = second["assignments"].as_array().unwrap();
    assert_eq!(taken.len(), 2);
    assert!(
        taken.iter().all(|a| a["jobId"] == json!(jobs[1])),
        "{second}"
    );
    s.server.stop().await;
}
