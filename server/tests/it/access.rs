//! Who sees and changes what. One test walks the router's whole route table (every API
//! endpoint of `server::http::route_table`, every page, every server function under `/rpc`)
//! as two members, a viewer, an admin, a guest and a stranger, against things member A owns:
//! a route added later without a probe here fails it. Someone else's thing must answer exactly
//! as a missing one does, and what A owns must not appear in anyone else's answers.

use std::collections::BTreeSet;

use crate::support::{
    Events, TestDb, TestServer, account, cookieless, file_form, json_of, worker_args,
};
use app::{auth::Role, model::JobView};
use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};
use server::http::{Access, page_paths, route_table, rpc_paths};
use uuid::Uuid;

/// Who asks, in the order of every expectation below.
const WHO: [&str; 6] = [
    "member A", "member B", "viewer", "admin", "guest", "stranger",
];
const A: usize = 0;
const ADMIN: usize = 3;
const STRANGER: usize = 5;

/// Who may see what member A owns.
const SEES_A: [bool; 6] = [true, false, true, true, false, false];

/// In everything A owns: the file name, a good row and a bad row.
const MARK: &str = "zzsecretzz";

/// Reads of A's things: A, the viewer and the admin; for anyone else it does not exist.
const READ: [u16; 6] = [200, 404, 200, 200, 404, 404];
/// Changes to A's things: A and the admin; the viewer may not; for others it does not exist.
const CHANGE: [u16; 6] = [200, 404, 403, 200, 404, 404];
const EVERYONE: [u16; 6] = [200; 6];
/// Who sees the queue: the viewer and the admin.
const OPERATORS: [bool; 6] = [false, false, true, true, false, false];

/// What member A owns, and everyone's clients.
struct World {
    server: TestServer,
    clients: Vec<Client>,
    a_id: Uuid,
    b_id: Uuid,
    import: JobView,
    export: JobView,
    upload_id: String,
    /// A job type the admin registered.
    job_type: String,
    /// A job of A's of that type, with an item.
    items_job: Uuid,
}

/// What a probe expects: the status for each of [`WHO`], and text that only some may find in
/// a successful answer.
struct Expect {
    status: [u16; 6],
    marker: Option<(String, [bool; 6])>,
}

fn expect(status: [u16; 6]) -> Expect {
    Expect {
        status,
        marker: None,
    }
}

fn expect_seen(status: [u16; 6], marker: &str, seen_by: [bool; 6]) -> Expect {
    Expect {
        status,
        marker: Some((marker.to_owned(), seen_by)),
    }
}

impl World {
    async fn new(db: &TestDb) -> Self {
        let mut ids = Vec::new();
        for (email, role) in [
            ("a@example.com", Role::Member),
            ("b@example.com", Role::Member),
            ("viewer@example.com", Role::Viewer),
            ("admin@example.com", Role::Admin),
        ] {
            ids.push(account(db, email, role).await);
        }
        let (a_id, b_id) = (ids[0], ids[1]);

        // A's things are made with workers running; the walk runs without, so new jobs wait.
        let workers = TestServer::start(db, Some(worker_args(100))).await;
        let a = workers.signed_in("a@example.com").await;
        let created = a
            .post(workers.url("/api/datasets"))
            .json(&json!({ "name": "contacts", "columns": [
                { "name": "name" }, { "name": "n", "type": "integer" } ] }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        let csv = format!("name,n\n{MARK} Ada,1\nBad,{MARK}\n");
        let upload = workers
            .upload_as(&a, &format!("{MARK}.csv"), csv.into_bytes())
            .await;
        let upload_id = upload["id"].as_str().unwrap().to_owned();
        let body = json!({ "jobType": "import", "fileGuid": upload_id, "dataset": "contacts" });
        let job: JobView = json_of(a.post(workers.url("/api/jobs")).json(&body)).await;
        let import = workers.finished_as(&a, job.id).await;
        assert_eq!((import.rows_ok, import.rows_failed), (1, 1), "{import:?}");
        let body = json!({ "jobType": "export", "dataset": "contacts" });
        let job: JobView = json_of(a.post(workers.url("/api/jobs")).json(&body)).await;
        let export = workers.finished_as(&a, job.id).await;
        assert!(export.result_url.is_some(), "{export:?}");
        let token = a
            .post(workers.url("/api/account/tokens"))
            .json(&json!({ "name": "zz-token-of-a" }))
            .send()
            .await
            .unwrap();
        assert_eq!(token.status(), StatusCode::CREATED);
        workers.stop().await;

        let server = TestServer::start(db, None).await;
        let guest = TestServer::new_client();
        // A visitor becomes a guest by uploading.
        server.upload_as(&guest, "g.csv", b"x\n1\n".to_vec()).await;
        let clients = vec![
            a,
            server.signed_in("b@example.com").await,
            server.signed_in("viewer@example.com").await,
            server.signed_in("admin@example.com").await,
            guest,
            // No cookie jar: every request comes from a new visitor.
            cookieless(),
        ];
        let job_type = "access.walk".to_owned();
        let registered = clients[3]
            .post(server.url("/api/job-types"))
            .json(&json!({ "name": job_type }))
            .send()
            .await
            .unwrap();
        assert_eq!(registered.status(), StatusCode::CREATED);
        let body = json!({ "jobType": job_type, "items": [{ "payload": { "note": MARK } }] });
        let items_job: JobView =
            json_of(clients[A].post(server.url("/api/jobs")).json(&body)).await;
        Self {
            server,
            clients,
            a_id,
            b_id,
            import,
            export,
            upload_id,
            job_type,
            items_job: items_job.id,
        }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    fn a(&self) -> &Client {
        &self.clients[A]
    }

    /// A new job of A's, waiting (no workers run during the walk).
    async fn waiting_job(&self) -> Uuid {
        new_job(&self.server, self.a(), "later").await
    }

    /// A new job of A's, cancelled.
    async fn cancelled_job(&self) -> Uuid {
        let id = self.waiting_job().await;
        let cancelled = self
            .a()
            .post(self.url(&format!("/api/jobs/{id}/cancel")))
            .send()
            .await
            .unwrap();
        assert_eq!(cancelled.status(), StatusCode::OK);
        id
    }

    /// A new dataset of A's, declared (no job on it); its name.
    async fn a_dataset(&self) -> String {
        let name = format!("doomed_{}", Uuid::new_v4().simple());
        let create = self.a().post(self.url("/api/datasets"));
        let body = json!({ "name": name, "columns": [{ "name": "x" }] });
        let created = create.json(&body).send().await.unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        name
    }

    /// A new open batch of A's.
    async fn open_batch(&self) -> Uuid {
        let batch = self.a().post(self.url("/api/jobs"));
        json_of::<JobView>(batch.json(&json!({ "jobType": "batch" })))
            .await
            .id
    }

    /// A new API token of A's; its id.
    async fn a_token(&self) -> String {
        let create = self.a().post(self.url("/api/account/tokens"));
        let token: Value = json_of(create.json(&json!({ "name": "to revoke" }))).await;
        token["id"].as_str().unwrap().to_owned()
    }

    /// A new worker token for the walk's job type: its id and secret.
    async fn worker_token(&self) -> (String, String) {
        let body = json!({ "name": "walker", "types": [self.job_type] });
        let create = self.clients[ADMIN].post(self.url("/api/worker-tokens"));
        let token: Value = json_of(create.json(&body)).await;
        let secret = token["secret"].as_str().unwrap().to_owned();
        (token["id"].as_str().unwrap().to_owned(), secret)
    }

    /// A new item of A's job of the walk's type, claimed with `token`: its assignment's id.
    async fn assignment(&self, token: &str) -> String {
        let url = self.url(&format!("/api/jobs/{}/items", self.items_job));
        let body = json!({ "items": [{ "payload": { "n": 2 } }] });
        let added = self.a().post(url).json(&body).send().await.unwrap();
        assert_eq!(added.status(), StatusCode::OK);
        let claim = cookieless()
            .post(self.url("/api/workers/walker/claims"))
            .bearer_auth(token)
            .json(&json!({}));
        let claimed: Value = json_of(claim).await;
        claimed["assignments"][0]["id"].as_str().unwrap().to_owned()
    }

    /// Sends the probe of one API route with a worker token: worker routes answer, every other
    /// route refuses it (only the health probes, which look at no credentials, answer anyone).
    async fn probe_as_worker(&self, method: &str, path: &str, token: &str) -> (u16, String) {
        let client = cookieless();
        let (url, body) = match path {
            "/api/workers/{worker}/claims" => {
                // A's item, with its marker: workers of a type read its items' payloads.
                (self.url("/api/workers/walker/claims"), json!({}))
            }
            "/api/assignments/{id}/heartbeat" | "/api/assignments/{id}/result" => {
                let id = self.assignment(token).await;
                (self.url(&path.replace("{id}", &id)), json!({}))
            }
            "/api/assignments/{id}/failure" => {
                let id = self.assignment(token).await;
                (
                    self.url(&path.replace("{id}", &id)),
                    json!({ "message": "x" }),
                )
            }
            "/api/assignments/endings" => {
                let id = self.assignment(token).await;
                let body = json!({ "results": [{ "id": id, "result": 1 }] });
                (self.url(path), body)
            }
            _ => {
                let filled = path
                    .replace("{id}", &self.import.id.to_string())
                    .replace("{name}", "contacts");
                (self.url(&filled), json!({}))
            }
        };
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let answer = client
            .request(method, url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.text().await.unwrap_or_default())
    }

    /// Another session of the same person (or a new visitor), to end without ending theirs.
    async fn second_session(&self, who: usize) -> Client {
        match who {
            0..=3 => {
                let email = ["a", "b", "viewer", "admin"][who];
                self.server.signed_in(&format!("{email}@example.com")).await
            }
            _ => TestServer::new_client(),
        }
    }

    /// Sends the probe of one API route as `who`, and says what it must answer.
    async fn probe_api(&self, method: &str, path: &str, who: usize) -> (Response, Expect) {
        let c = &self.clients[who];
        let import = self.import.id;
        let response =
            |request: reqwest::RequestBuilder| async move { request.send().await.unwrap() };
        match (method, path) {
            ("POST", "/api/uploads") => (
                response(
                    c.post(self.url(path))
                        .multipart(file_form("u.csv", "x\n1\n")),
                )
                .await,
                expect([201, 201, 403, 201, 201, 201]),
            ),
            ("GET", "/api/uploads/{id}/preview") => {
                // Only its owner previews an upload: to anyone else it does not exist.
                let url = self.url(&format!("/api/uploads/{}/preview", self.upload_id));
                let only_a = [true, false, false, false, false, false];
                let status = [200, 404, 404, 404, 404, 404];
                (
                    response(c.get(url)).await,
                    expect_seen(status, MARK, only_a),
                )
            }
            ("POST", "/api/jobs") => {
                let body = json!({ "jobType": "import", "fileGuid": self.upload_id,
                                   "dataset": "contacts" });
                // An upload is used only by its owner: to anyone else it does not exist.
                let answer = response(c.post(self.url(path)).json(&body)).await;
                (answer, expect([202, 422, 403, 422, 422, 422]))
            }
            ("GET", "/api/jobs") => (
                response(c.get(self.url(path))).await,
                expect_seen(EVERYONE, MARK, SEES_A),
            ),
            ("GET", "/api/jobs/events") => {
                (response(c.get(self.url(path))).await, expect(EVERYONE))
            }
            ("GET", "/api/jobs/{id}") => (
                response(c.get(self.url(&format!("/api/jobs/{import}")))).await,
                expect_seen(READ, MARK, SEES_A),
            ),
            ("DELETE", "/api/jobs/{id}") => {
                let id = self.cancelled_job().await;
                let url = self.url(&format!("/api/jobs/{id}"));
                (
                    response(c.delete(url)).await,
                    expect([204, 404, 403, 204, 404, 404]),
                )
            }
            ("GET", "/api/jobs/{id}/history") => (
                response(c.get(self.url(&format!("/api/jobs/{import}/history")))).await,
                expect_seen(READ, "transitions", SEES_A),
            ),
            ("GET", "/api/jobs/{id}/events") => (
                response(c.get(self.url(&format!("/api/jobs/{import}/events")))).await,
                expect(READ),
            ),
            ("POST", "/api/jobs/{id}/cancel") => {
                let id = self.waiting_job().await;
                let url = self.url(&format!("/api/jobs/{id}/cancel"));
                (response(c.post(url)).await, expect(CHANGE))
            }
            ("POST", "/api/jobs/{id}/retry") => {
                let id = self.cancelled_job().await;
                let url = self.url(&format!("/api/jobs/{id}/retry"));
                (response(c.post(url)).await, expect(CHANGE))
            }
            ("POST", "/api/jobs/bulk") => {
                // Only the jobs the caller may change are changed; a viewer may not act.
                let id = self.waiting_job().await;
                let body = json!({ "action": "cancel", "ids": [id] });
                let answer = response(c.post(self.url(path)).json(&body)).await;
                let changed = [true, false, false, true, false, false];
                let status = [200, 200, 403, 200, 200, 200];
                (answer, expect_seen(status, "\"changed\":1", changed))
            }
            ("GET", "/metrics") => (
                response(c.get(self.url(path))).await,
                expect_seen(
                    [403, 403, 403, 200, 403, 401],
                    "conveyor_jobs",
                    [false, false, false, true, false, false],
                ),
            ),
            ("GET", "/api/audit") => (
                response(c.get(self.url(path))).await,
                expect([403, 403, 403, 200, 403, 401]),
            ),
            ("POST", "/api/jobs/{id}/import") => {
                // A's import is not a dry run (409 to A); nobody else may import A's.
                let url = self.url(&format!("/api/jobs/{import}/import"));
                (
                    response(c.post(url)).await,
                    expect([409, 404, 403, 404, 404, 404]),
                )
            }
            ("POST", "/api/jobs/{id}/seal") => {
                let id = self.open_batch().await;
                let url = self.url(&format!("/api/jobs/{id}/seal"));
                (response(c.post(url)).await, expect(CHANGE))
            }
            ("GET", "/api/jobs/{id}/errors") | ("GET", "/api/jobs/{id}/errors.csv") => {
                let url = self.url(&path.replace("{id}", &import.to_string()));
                (response(c.get(url)).await, expect_seen(READ, MARK, SEES_A))
            }
            ("GET", "/api/jobs/{id}/errors.xlsx") => {
                let url = self.url(&format!("/api/jobs/{import}/errors.xlsx"));
                (response(c.get(url)).await, expect(READ))
            }
            ("GET", "/api/jobs/{id}/result") => {
                let url = self.url(&format!("/api/jobs/{}/result", self.export.id));
                (response(c.get(url)).await, expect_seen(READ, MARK, SEES_A))
            }
            ("POST", "/api/datasets") => {
                // Names are per owner: A has a `contacts`, everyone else may make theirs.
                let body = json!({ "name": "contacts", "columns": [{ "name": "x" }] });
                let answer = response(c.post(self.url(path)).json(&body)).await;
                (answer, expect([409, 201, 403, 201, 201, 201]))
            }
            ("GET", "/api/datasets") => (
                response(c.get(self.url(path))).await,
                expect_seen(EVERYONE, &self.a_id.to_string(), SEES_A),
            ),
            ("GET", "/api/datasets/{name}") => {
                let url = self.url(&format!("/api/datasets/contacts?owner={}", self.a_id));
                let seen = self.a_id.to_string();
                (response(c.get(url)).await, expect_seen(READ, &seen, SEES_A))
            }
            ("DELETE", "/api/datasets/{name}") => {
                let name = self.a_dataset().await;
                let url = self.url(&format!("/api/datasets/{name}?owner={}", self.a_id));
                (
                    response(c.delete(url)).await,
                    expect([202, 404, 403, 202, 404, 404]),
                )
            }
            ("GET", "/api/datasets/{name}/rows") => {
                let url = self.url(&format!("/api/datasets/contacts/rows?owner={}", self.a_id));
                (response(c.get(url)).await, expect_seen(READ, MARK, SEES_A))
            }
            ("POST", "/api/jobs/{id}/items") => {
                let url = self.url(&format!("/api/jobs/{}/items", self.items_job));
                let body = json!({ "items": [{ "payload": { "n": 1 } }] });
                (response(c.post(url).json(&body)).await, expect(CHANGE))
            }
            ("GET", "/api/jobs/{id}/items") => {
                let url = self.url(&format!("/api/jobs/{}/items", self.items_job));
                (response(c.get(url)).await, expect_seen(READ, MARK, SEES_A))
            }
            ("POST", "/api/job-types") => {
                // Only admins register types (a new name each time).
                let name = format!("t{}", Uuid::new_v4().simple());
                let body = json!({ "name": name });
                (
                    response(c.post(self.url(path)).json(&body)).await,
                    expect([403, 403, 403, 201, 403, 401]),
                )
            }
            ("GET", "/api/job-types") => (response(c.get(self.url(path))).await, expect(EVERYONE)),
            ("GET", "/api/job-types/{name}") => {
                let url = self.url(&format!("/api/job-types/{}", self.job_type));
                (response(c.get(url)).await, expect(EVERYONE))
            }
            ("POST", "/api/worker-tokens") => {
                let body = json!({ "name": "probe", "types": [self.job_type] });
                (
                    response(c.post(self.url(path)).json(&body)).await,
                    expect([403, 403, 403, 201, 403, 401]),
                )
            }
            ("GET", "/api/worker-tokens") => (
                response(c.get(self.url(path))).await,
                expect([403, 403, 403, 200, 403, 401]),
            ),
            ("DELETE", "/api/worker-tokens/{id}") => {
                let (id, _) = self.worker_token().await;
                let url = self.url(&format!("/api/worker-tokens/{id}"));
                (
                    response(c.delete(url)).await,
                    expect([403, 403, 403, 204, 403, 401]),
                )
            }
            // Only workers, with a worker token: people (even admins) are refused.
            ("POST", "/api/workers/{worker}/claims") => {
                let url = self.url("/api/workers/w/claims");
                (
                    response(c.post(url).json(&json!({}))).await,
                    expect([403, 403, 403, 403, 403, 401]),
                )
            }
            ("POST", "/api/assignments/{id}/heartbeat")
            | ("POST", "/api/assignments/{id}/result")
            | ("POST", "/api/assignments/{id}/failure")
            | ("POST", "/api/assignments/endings") => {
                let url = self.url(&path.replace("{id}", &Uuid::new_v4().to_string()));
                (
                    response(c.post(url).json(&json!({ "message": "x" }))).await,
                    expect([403, 403, 403, 403, 403, 401]),
                )
            }
            ("GET", "/api/session") => (response(c.get(self.url(path))).await, expect(EVERYONE)),
            ("GET", "/api/openapi.json") => {
                (response(c.get(self.url(path))).await, expect(EVERYONE))
            }
            ("POST", "/api/session") => {
                let body = json!({ "email": "a@example.com", "password": "wrong password" });
                (
                    response(c.post(self.url(path)).json(&body)).await,
                    expect([401; 6]),
                )
            }
            ("DELETE", "/api/session") => {
                let other = self.second_session(who).await;
                (
                    response(other.delete(self.url(path))).await,
                    expect([204; 6]),
                )
            }
            ("POST", "/api/account") => {
                // Signing up starts a new session: done by a new visitor each time.
                let body = json!({ "email": format!("new-{}@example.com", Uuid::new_v4()),
                                   "password": "a long password" });
                let answer = response(TestServer::new_client().post(self.url(path)).json(&body));
                (answer.await, expect([201; 6]))
            }
            ("POST", "/api/account/password") => {
                let body = json!({ "current": "wrong", "new": "another long one" });
                let answer = response(c.post(self.url(path)).json(&body)).await;
                (answer, expect([422, 422, 422, 422, 403, 401]))
            }
            ("GET", "/api/account/tokens") => (
                response(c.get(self.url(path))).await,
                expect_seen(
                    [200, 200, 200, 200, 403, 401],
                    "zz-token-of-a",
                    [true, false, false, false, false, false],
                ),
            ),
            ("POST", "/api/account/tokens") => {
                let answer = response(c.post(self.url(path)).json(&json!({ "name": "probe" })));
                (answer.await, expect([201, 201, 201, 201, 403, 401]))
            }
            ("DELETE", "/api/account/tokens/{id}") => {
                let url = self.url(&format!("/api/account/tokens/{}", self.a_token().await));
                (
                    response(c.delete(url)).await,
                    expect([204, 404, 404, 404, 403, 401]),
                )
            }
            ("GET", "/api/users") => (
                response(c.get(self.url(path))).await,
                expect_seen(
                    [403, 403, 403, 200, 403, 401],
                    "b@example.com",
                    [false, false, false, true, false, false],
                ),
            ),
            ("PATCH", "/api/users/{id}") => {
                let url = self.url(&format!("/api/users/{}", self.b_id));
                let answer = response(c.patch(url).json(&json!({ "role": "member" }))).await;
                (answer, expect([403, 403, 403, 200, 403, 401]))
            }
            ("GET", "/api/queue") => (
                response(c.get(self.url(path))).await,
                expect_seen([403, 403, 200, 200, 403, 401], "oldestWaiting", OPERATORS),
            ),
            ("GET", "/healthz") | ("GET", "/readyz") => {
                (response(c.get(self.url(path))).await, expect(EVERYONE))
            }
            _ => panic!("no probe for {method} {path}: add one to tests/access.rs"),
        }
    }

    /// Requests one page as `who`, and says what it must answer.
    async fn probe_page(&self, path: &str, who: usize) -> (Response, Expect) {
        let c = &self.clients[who];
        let get = |url: String| async move { c.get(url).send().await.unwrap() };
        let a_id = self.a_id.to_string();
        match path {
            "/" | "/login" | "/signup" | "/account" => {
                (get(self.url(path)).await, expect(EVERYONE))
            }
            "/jobs" => (
                get(self.url(path)).await,
                expect_seen(EVERYONE, MARK, SEES_A),
            ),
            // The review's shell: the upload is read by the browser, from the API, as its
            // owner (`GET /api/uploads/{id}/preview`); the page itself holds nothing of it.
            "/uploads/{id}" | "/uploads/:id" => (
                get(self.url(&format!("/uploads/{}", self.upload_id))).await,
                expect_seen(EVERYONE, MARK, [false; 6]),
            ),
            "/jobs/{id}" | "/jobs/:id" => (
                get(self.url(&format!("/jobs/{}", self.import.id))).await,
                expect_seen(READ, MARK, SEES_A),
            ),
            "/datasets" => (
                get(self.url(path)).await,
                expect_seen(EVERYONE, &a_id, SEES_A),
            ),
            "/datasets/{name}" | "/datasets/:name" => (
                get(self.url(&format!("/datasets/contacts?owner={a_id}"))).await,
                expect_seen(READ, MARK, SEES_A),
            ),
            "/admin" => (
                get(self.url(path)).await,
                expect_seen(
                    [403, 403, 200, 200, 403, 403],
                    "Worker processes",
                    OPERATORS,
                ),
            ),
            "/users" => (
                get(self.url(path)).await,
                expect_seen(
                    [403, 403, 403, 200, 403, 403],
                    "b@example.com",
                    [false, false, false, true, false, false],
                ),
            ),
            _ => panic!("no probe for the page {path}: add one to tests/access.rs"),
        }
    }

    /// Calls one server function as `who` (as the pages do: a form-encoded POST), and says
    /// what it must answer.
    async fn probe_rpc(&self, path: &str, who: usize) -> (Response, Expect) {
        let c = &self.clients[who];
        let call = |args: String| async move {
            c.post(self.url(path))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "application/json")
                .body(args)
                .send()
                .await
                .unwrap()
        };
        let a_id = self.a_id.to_string();
        match path {
            "/rpc/job" => (
                call(format!("id={}", self.import.id)).await,
                expect_seen(EVERYONE, MARK, SEES_A),
            ),
            "/rpc/job_history" => (
                call(format!("id={}", self.import.id)).await,
                expect_seen(EVERYONE, "transitions", SEES_A),
            ),
            "/rpc/jobs" => (
                call("query=".to_owned()).await,
                expect_seen(EVERYONE, MARK, SEES_A),
            ),
            "/rpc/datasets" => (
                call(String::new()).await,
                expect_seen(EVERYONE, &a_id, SEES_A),
            ),
            "/rpc/dataset" => (
                call(format!("name=contacts&owner={a_id}")).await,
                expect_seen(EVERYONE, MARK, SEES_A),
            ),
            "/rpc/session" => (call(String::new()).await, expect(EVERYONE)),
            "/rpc/queue_health" => (
                call(String::new()).await,
                expect_seen([403, 403, 200, 200, 403, 403], "oldestWaiting", OPERATORS),
            ),
            "/rpc/users" => (
                call(String::new()).await,
                expect_seen(
                    [403, 403, 403, 200, 403, 403],
                    "b@example.com",
                    [false, false, false, true, false, false],
                ),
            ),
            "/rpc/tokens" => (
                call(String::new()).await,
                expect_seen(
                    [200, 200, 200, 200, 403, 403],
                    "zz-token-of-a",
                    [true, false, false, false, false, false],
                ),
            ),
            _ => panic!("no probe for the server function {path}: add one to tests/access.rs"),
        }
    }
}

/// A new import by `client` into `dataset`; its id.
async fn new_job(server: &TestServer, client: &Client, dataset: &str) -> Uuid {
    let request = json!({ "dataset": dataset });
    let created = server.import_as(client, "new.csv", b"x\n1\n".to_vec(), request);
    created.await.json::<JobView>().await.unwrap().id
}

/// Asks, as `client`, for an import into `contacts` with these request fields.
async fn into_contacts(server: &TestServer, client: &Client, mut request: Value) -> Response {
    request["dataset"] = json!("contacts");
    server
        .import_as(client, "k.csv", b"x\n1\n".to_vec(), request)
        .await
}

/// Checks one answer against its expectation; a failure names the route and who asked.
async fn check(route: &str, who: usize, response: Response, expect: Expect) {
    let status = response.status().as_u16();
    let streaming = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    let body = if streaming {
        String::new()
    } else {
        response.text().await.unwrap()
    };
    assert_eq!(
        status, expect.status[who],
        "{route} as {}: {body}",
        WHO[who]
    );
    if let Some((marker, seen_by)) = expect.marker
        && (200..300).contains(&status)
    {
        assert_eq!(
            body.contains(&marker),
            seen_by[who],
            "{route} as {}: {marker:?} {} in {body}",
            WHO[who],
            if seen_by[who] { "missing" } else { "leaked" }
        );
    }
}

#[tokio::test]
async fn every_route_answers_each_role_as_it_should() {
    let db = TestDb::new().await;
    let world = World::new(&db).await;

    let table = route_table();
    let listed: BTreeSet<_> = table.iter().map(|(m, p, _)| (m.to_string(), *p)).collect();
    assert_eq!(listed.len(), table.len(), "each route is listed once");
    for (method, path, access) in &table {
        // Only signing in, up and out (and asking who one is) and the health probes need no
        // session.
        assert_eq!(
            *access == Access::Public,
            ["/api/session", "/api/account", "/healthz", "/readyz"].contains(path),
            "{method} {path} is {access:?}"
        );
        for who in 0..WHO.len() {
            let (response, expect) = world.probe_api(method.as_str(), path, who).await;
            check(&format!("{method} {path}"), who, response, expect).await;
        }
    }

    // A worker token opens the worker routes, and nothing else.
    let (_, token) = world.worker_token().await;
    for (method, path, access) in &table {
        let (status, body) = world.probe_as_worker(method.as_str(), path, &token).await;
        let expected = match access {
            Access::Worker => 200,
            _ if ["/healthz", "/readyz"].contains(path) => 200,
            _ => 403,
        };
        assert_eq!(
            status, expected,
            "{method} {path} with a worker token: {body}"
        );
        assert!(
            *access == Access::Worker || !body.contains(MARK),
            "{method} {path} leaked to a worker: {body}"
        );
    }

    for path in page_paths().iter().chain(&rpc_paths()) {
        let path = path.replace("{id}", &world.import.id.to_string());
        let answer = cookieless()
            .get(world.url(&path))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(
            answer.status(),
            StatusCode::FORBIDDEN,
            "{path} with a worker token"
        );
    }

    let pages = page_paths();
    assert!(pages.len() >= 9, "{pages:?}");
    for path in &pages {
        for who in 0..WHO.len() {
            let (response, expect) = world.probe_page(path, who).await;
            check(&format!("page {path}"), who, response, expect).await;
        }
    }

    let functions = rpc_paths();
    assert_eq!(functions.len(), 9, "{functions:?}");
    for path in &functions {
        for who in 0..WHO.len() {
            let (response, expect) = world.probe_rpc(path, who).await;
            check(&format!("server function {path}"), who, response, expect).await;
        }
    }

    // After everything above, A's session still works and the stranger still has none.
    let me: Value = json_of(world.clients[A].get(world.url("/api/session"))).await;
    assert_eq!(me["me"]["email"], "a@example.com");
    let nobody: Value = json_of(world.clients[STRANGER].get(world.url("/api/session"))).await;
    assert_eq!(nobody["me"], Value::Null);
    world.server.stop().await;
}

#[tokio::test]
async fn the_list_stream_carries_only_the_jobs_its_reader_may_see() {
    let db = TestDb::new().await;
    account(&db, "a@example.com", Role::Member).await;
    account(&db, "b@example.com", Role::Member).await;
    account(&db, "viewer@example.com", Role::Viewer).await;
    let server = TestServer::start(&db, None).await;
    let a = server.signed_in("a@example.com").await;
    let b = server.signed_in("b@example.com").await;
    let viewer = server.signed_in("viewer@example.com").await;
    let open = |client: &Client| {
        let request = client.get(server.url("/api/jobs/events")).send();
        async move { Events::from_response(request.await.unwrap()) }
    };
    let a_before = new_job(&server, &a, "s").await;
    let (mut a_stream, mut b_stream, mut viewer_stream) =
        (open(&a).await, open(&b).await, open(&viewer).await);
    // A's job changes first, then B's: B's stream, in order, must reach B's job having shown
    // none of A's (its snapshot included).
    let a_job = new_job(&server, &a, "s").await;
    let b_job = new_job(&server, &b, "s").await;
    let seen = b_stream.until(|job| job.id == b_job).await;
    assert!(
        seen.iter()
            .all(|event| ![a_before, a_job].contains(&event.job.id)),
        "{seen:?}"
    );
    let seen = a_stream.until(|job| job.id == a_job).await;
    assert!(seen.iter().all(|event| event.job.id != b_job), "{seen:?}");
    // The viewer sees both.
    let seen = viewer_stream.until(|job| job.id == b_job).await;
    let ids: BTreeSet<Uuid> = seen.iter().map(|event| event.job.id).collect();
    assert!(ids.contains(&a_job) && ids.contains(&a_before), "{ids:?}");
    server.stop().await;
}

#[tokio::test]
async fn names_and_keys_belong_to_their_owner() {
    use server::store::leases::{self, Item};
    let db = TestDb::new().await;
    account(&db, "a@example.com", Role::Member).await;
    account(&db, "b@example.com", Role::Member).await;
    let server = TestServer::start(&db, None).await;
    let a = server.signed_in("a@example.com").await;
    let b = server.signed_in("b@example.com").await;
    let create = |client: &Client, body: Value| {
        let request = client.post(server.url("/api/jobs")).json(&body).send();
        async move { request.await.unwrap() }
    };

    // Both may have a `contacts`.
    for client in [&a, &b] {
        let made = client
            .post(server.url("/api/datasets"))
            .json(&json!({ "name": "contacts", "columns": [{ "name": "x" }] }))
            .send()
            .await
            .unwrap();
        assert_eq!(made.status(), StatusCode::CREATED);
    }

    // The same serialize key: B's job is not behind A's waiting one, A's second one is.
    let key = json!({ "serializeKey": "shared" });
    let a_first: JobView = into_contacts(&server, &a, key.clone())
        .await
        .json()
        .await
        .unwrap();
    let b_job: JobView = into_contacts(&server, &b, key.clone())
        .await
        .json()
        .await
        .unwrap();
    let a_second: JobView = into_contacts(&server, &a, key).await.json().await.unwrap();
    let may_start = |id| {
        leases::acquire(
            &db.pool,
            Item::Step(id),
            "test",
            std::time::Duration::from_secs(60),
        )
    };
    assert!(
        may_start(b_job.id).await.unwrap().is_some(),
        "B is first in B's line"
    );
    assert!(
        may_start(a_second.id).await.unwrap().is_none(),
        "A's second waits for A's first"
    );
    assert!(may_start(a_first.id).await.unwrap().is_some());

    // The same dedupe key: two people, two jobs; the same person, one.
    let dedupe = json!({ "dedupeKey": "nightly-1" });
    let a_once = into_contacts(&server, &a, dedupe.clone()).await;
    let b_once = into_contacts(&server, &b, dedupe.clone()).await;
    let a_twice = into_contacts(&server, &a, dedupe).await;
    assert_eq!(
        (a_once.status(), b_once.status(), a_twice.status()),
        (StatusCode::ACCEPTED, StatusCode::ACCEPTED, StatusCode::OK)
    );
    let (a_once, b_once, a_twice): (JobView, JobView, JobView) = (
        a_once.json().await.unwrap(),
        b_once.json().await.unwrap(),
        a_twice.json().await.unwrap(),
    );
    assert_ne!(a_once.id, b_once.id);
    assert_eq!(a_once.id, a_twice.id);

    // A's batch takes only A's jobs.
    let batch: JobView = create(&a, json!({ "jobType": "batch" }))
        .await
        .json()
        .await
        .unwrap();
    let joined = into_contacts(&server, &b, json!({ "parentId": batch.id })).await;
    assert_eq!(joined.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let own = into_contacts(&server, &a, json!({ "parentId": batch.id })).await;
    assert_eq!(own.status(), StatusCode::ACCEPTED);
    // An export of B's `contacts` by B reads B's, not A's.
    let export: JobView = create(&b, json!({ "jobType": "export", "dataset": "contacts" }))
        .await
        .json()
        .await
        .unwrap();
    let dataset_of: Uuid = sqlx::query_scalar(
        "select d.owner from jobs j join datasets d on d.id = j.dataset_id where j.id = $1",
    )
    .bind(export.id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(dataset_of, export.owner);
    server.stop().await;
}
