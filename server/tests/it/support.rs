//! Test harness: a database per test, cloned from a migrated template and dropped when the test
//! ends, in the throwaway cluster `make test` starts; the real server on port 0, real worker
//! processes, and an SSE reader to wait on events (never sleeps).

use std::{
    collections::HashMap,
    future::Future,
    process::{Child, Command, Stdio},
    sync::{Arc, LazyLock, Mutex},
    time::Duration,
};

use app::model::{JobStatus, JobView};
use futures::StreamExt;
use reqwest::{Client, StatusCode, multipart};
use serde_json::{Value, json};
use server::{
    config::{CallbackArgs, ServeArgs, WorkerArgs},
    jobs::{Done, Engine, Run, TaskError, plan},
    store::leases::{self, Item, Lease},
};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::{net::TcpListener, sync::OnceCell};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The longest any single wait in a test may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Every test's HTTP client: one that gives up on a response that has not begun within
/// [`PATIENCE`] of the request (its upload included), or whose body then sends nothing for as
/// long, so a request the server never answers fails its test (naming the URL, when the
/// answer never began) rather than hanging the whole run.
pub fn patient_client() -> reqwest::ClientBuilder {
    Client::builder().read_timeout(PATIENCE)
}

/// A client without a cookie jar: every request comes from a new visitor.
pub fn cookieless() -> Client {
    patient_client().build().unwrap()
}

/// The longest dropping a test's database may take before the test goes on without it.
const DROP_PATIENCE: Duration = Duration::from_secs(30);

/// The URL of the cluster tests make their databases in (`postgres` database).
pub fn admin_url() -> String {
    std::env::var("CONVEYOR_TEST_DATABASE_URL").expect(
        "CONVEYOR_TEST_DATABASE_URL is not set: run the tests with `make test`, which starts a \
         throwaway PostgreSQL, or point it at a cluster you may create databases in",
    )
}

/// A database of its own, dropped (connections and all) when this is dropped, unless
/// `CONVEYOR_TEST_KEEP_DB` is set (then its URL is printed, to look at after a failure).
pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    admin_url: String,
    name: String,
}

impl TestDb {
    /// A migrated database in the test cluster.
    pub async fn new() -> Self {
        Self::new_in(&admin_url()).await
    }

    /// A migrated database in the cluster at `admin_url`: a copy of that cluster's template.
    pub async fn new_in(admin_url: &str) -> Self {
        let template = template(admin_url).await;
        Self::create(admin_url, &format!("template {template}")).await
    }

    /// An empty database in the cluster at `admin_url`, for tests of the migrations.
    pub async fn new_in_unmigrated(admin_url: &str) -> Self {
        Self::create(admin_url, "template template0").await
    }

    async fn create(admin_url: &str, from: &str) -> Self {
        let name = format!("test_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url)
            .await
            .expect("connect to the test cluster");
        execute(&mut admin, &format!("create database {name} {from}"))
            .await
            .expect("create a test database");
        let _ = admin.close().await;
        let url = with_database(admin_url, &name);
        let pool = server::db::connect(&url, 10)
            .await
            .expect("connect to the test database");
        Self {
            pool,
            url,
            admin_url: admin_url.to_owned(),
            name,
        }
    }
}

impl Drop for TestDb {
    /// Drops the database. `Drop` cannot wait on the test's runtime, so a thread of its own
    /// does it with its own connection, forcing off whatever is still connected (the pool, a
    /// server still running, a worker process); after [`DROP_PATIENCE`] the test goes on
    /// without it. Never panics: this also runs while a failed test unwinds.
    fn drop(&mut self) {
        // Marks the pool closed at once; the rest of closing would need the runtime.
        drop(self.pool.close());
        if std::env::var_os("CONVEYOR_TEST_KEEP_DB").is_some() {
            eprintln!("kept the test database: {}", self.url);
            return;
        }
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let (done, finished) = std::sync::mpsc::channel();
        let dropper = std::thread::Builder::new()
            .name(format!("drop {name}"))
            .spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|err| err.to_string())
                    .and_then(|runtime| {
                        runtime.block_on(async {
                            let mut admin = PgConnection::connect(&admin_url)
                                .await
                                .map_err(|err| err.to_string())?;
                            let sql = format!("drop database if exists {name} with (force)");
                            let dropped = execute(&mut admin, &sql).await;
                            let _ = admin.close().await;
                            dropped.map_err(|err| err.to_string())
                        })
                    });
                let _ = done.send(result);
            });
        let outcome = match dropper {
            Ok(_) => finished
                .recv_timeout(DROP_PATIENCE)
                .unwrap_or_else(|_| Err(format!("not done within {DROP_PATIENCE:?}"))),
            Err(err) => Err(format!("cannot start a thread: {err}")),
        };
        if let Err(err) = outcome {
            eprintln!("could not drop the test database {}: {err}", self.name);
        }
    }
}

/// Runs one statement built at run time (database names cannot be bound as parameters).
async fn execute(conn: &mut PgConnection, sql: &str) -> sqlx::Result<()> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .map(drop)
}

/// The name of a migrated template database in the cluster at `admin_url`, made the first time
/// a process asks. Its name carries a hash of every migration (ours and apalis's), so a changed
/// migration gets a new template; it is made under an advisory lock, so test processes running
/// at once make it once; and it is marked a template (which also refuses connections to it)
/// only once migrated, so one left half-made by a killed process is made again.
async fn template(admin_url: &str) -> String {
    static TEMPLATES: LazyLock<Mutex<HashMap<String, Arc<OnceCell<String>>>>> =
        LazyLock::new(Default::default);
    let cell = TEMPLATES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(admin_url.to_owned())
        .or_default()
        .clone();
    cell.get_or_init(|| make_template(admin_url)).await.clone()
}

/// The advisory lock key under which templates are made (any fixed number).
const TEMPLATE_LOCK: i64 = 0x636f_6e76_6579_6f72; // "conveyor"

async fn make_template(admin_url: &str) -> String {
    let name = format!("conveyor_template_{}", &migrations_hash()[..16]);
    let mut admin = PgConnection::connect(admin_url)
        .await
        .expect("connect to the test cluster");
    sqlx::query("select pg_advisory_lock($1)")
        .bind(TEMPLATE_LOCK)
        .execute(&mut admin)
        .await
        .expect("take the template lock");
    let ready: Option<bool> =
        sqlx::query_scalar("select datistemplate from pg_database where datname = $1")
            .bind(&name)
            .fetch_optional(&mut admin)
            .await
            .expect("look for the template");
    if ready != Some(true) {
        // Absent, or half-made by a process that died while migrating it.
        execute(
            &mut admin,
            &format!("drop database if exists {name} with (force)"),
        )
        .await
        .expect("drop a half-made template");
        execute(
            &mut admin,
            &format!("create database {name} template template0"),
        )
        .await
        .expect("create the template database");
        let pool = server::db::connect(&with_database(admin_url, &name), 2)
            .await
            .expect("connect to the template database");
        server::db::migrate(&pool)
            .await
            .expect("migrate the template");
        pool.close().await;
        execute(
            &mut admin,
            &format!("alter database {name} with is_template true allow_connections false"),
        )
        .await
        .expect("mark the template ready");
    }
    // Closing the connection releases the lock.
    let _ = admin.close().await;
    name
}

/// A hash of every migration a database gets (versions and checksums), in hex.
fn migrations_hash() -> String {
    let ours = sqlx::migrate!("../migrations");
    let apalis = apalis_postgres::PostgresStorage::<()>::migrations();
    let mut hash = Sha256::new();
    for migration in ours.iter().chain(apalis.iter()) {
        hash.update(migration.version.to_le_bytes());
        hash.update(&*migration.checksum);
    }
    hash.finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A PostgreSQL cluster of the test's own (`.ci/pg.sh`), for tests that stop or restart it;
/// stopped and removed when dropped.
pub struct Cluster {
    dir: std::path::PathBuf,
    pub admin_url: String,
}

impl Cluster {
    pub fn start() -> Self {
        // Short: the socket path must fit in 107 bytes.
        let dir =
            std::env::temp_dir().join(format!("cpg-{}", &Uuid::new_v4().simple().to_string()[..8]));
        let mut cluster = Self {
            admin_url: String::new(),
            dir,
        };
        cluster.pg(&["start"]);
        cluster.admin_url = cluster.pg(&["url", "postgres"]).trim().to_owned();
        cluster
    }

    /// Stops PostgreSQL (fast: every connection is cut) and starts it again.
    pub fn restart(&self) {
        self.pg(&["stop"]);
        self.pg(&["start"]);
    }

    fn pg(&self, args: &[&str]) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/pg.sh");
        let dir = self.dir.to_str().expect("a UTF-8 temp dir");
        let out = Command::new("bash")
            .arg(script)
            .arg(args[0])
            .arg(dir)
            .args(&args[1..])
            .env("PG_FAST", "1")
            .output()
            .expect("run .ci/pg.sh");
        assert!(
            out.status.success(),
            "pg.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("pg.sh prints text")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/pg.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `url` with its database name replaced.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// A stop signal that never fires, for tasks a test runs itself.
pub fn never_stop() -> &'static CancellationToken {
    static NEVER: std::sync::LazyLock<CancellationToken> =
        std::sync::LazyLock::new(CancellationToken::new);
    &NEVER
}

/// A chunk run under `lease`, never told to stop.
pub fn run(lease: &Lease) -> Run<'_> {
    Run {
        lease,
        stop: never_stop(),
    }
}

/// Runs a job's plan under the lease of the job's step, as a worker takes it, and gives the
/// lease back after unless the plan's own transaction did (a small file imported at once).
/// Unlike a worker it records no failed attempt and leaves open a run the plan did not end:
/// the test reads what the plan itself did.
pub async fn plan_job(engine: &Engine, job_id: Uuid) -> Result<Done, TaskError> {
    let owner = format!("test/{}", Uuid::new_v4().simple());
    let lease = leases::acquire(
        &engine.pool,
        Item::Step(job_id),
        &owner,
        Duration::from_secs(60),
    )
    .await
    .unwrap()
    .expect("the plan is due and nobody holds its lease");
    let done = plan::run(engine, job_id, run(&lease)).await;
    if !matches!(done, Ok(Done::RunEnded)) {
        leases::release(&engine.pool, &lease).await.unwrap();
    }
    done
}

/// Takes a chunk's lease for a minute, as a worker would before running it.
pub async fn lease(db: &TestDb, job_id: Uuid, chunk_no: i32, owner: &str) -> Option<Lease> {
    let item = Item::Chunk { job_id, chunk_no };
    leases::acquire(&db.pool, item, owner, Duration::from_secs(60))
        .await
        .unwrap()
}

pub fn worker_args(chunk_rows: usize) -> WorkerArgs {
    WorkerArgs {
        concurrency: 2,
        chunk_rows,
        export_chunk_rows: chunk_rows,
        heartbeat_secs: 0.2,
        lease_secs: 1.0,
        shutdown_secs: 10.0,
        retain_items_days: 7.0,
        retain_jobs_days: 90.0,
        // The test binary is not the server: workbooks are converted by the real one.
        converter: Some(env!("CARGO_BIN_EXE_server").into()),
        // Tests' callback receivers listen on loopback.
        callbacks: CallbackArgs {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            ..CallbackArgs::default()
        },
    }
}

/// The real server, on a free port, with a cookie-keeping client.
pub struct TestServer {
    pub base: String,
    pub client: Client,
    pub shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl TestServer {
    /// Starts the server; with `workers: None` it runs no workers (the test controls them).
    pub async fn start(db: &TestDb, workers: Option<WorkerArgs>) -> Self {
        Self::start_with_upload_limit(db, workers, 64 << 20).await
    }

    pub async fn start_with_upload_limit(
        db: &TestDb,
        workers: Option<WorkerArgs>,
        max_upload_bytes: usize,
    ) -> Self {
        let args = ServeArgs {
            no_workers: workers.is_none(),
            max_upload_bytes,
            worker: workers.unwrap_or_default(),
            ..ServeArgs::default()
        };
        Self::start_with_args(db, args).await
    }

    /// Starts the server with these settings (accounts, limits, workers).
    pub async fn start_with_args(db: &TestDb, mut args: ServeArgs) -> Self {
        // Previews read workbooks with the real converter, as workers do (not this test binary).
        args.worker
            .converter
            .get_or_insert_with(|| env!("CARGO_BIN_EXE_server").into());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(server::serve(
            db.pool.clone(),
            args,
            listener,
            shutdown.clone(),
        ));
        let client = Self::new_client();
        Self {
            base,
            client,
            shutdown,
            handle,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A client with a cookie jar of its own: a visitor until it signs in or makes something.
    pub fn new_client() -> Client {
        patient_client().cookie_store(true).build().unwrap()
    }

    /// A new client signed in as `email` (made by [`account`]).
    pub async fn signed_in(&self, email: &str) -> Client {
        let client = Self::new_client();
        let response = client
            .post(self.url("/api/session"))
            .json(&json!({ "email": email, "password": password_of(email) }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "sign in as {email}");
        client
    }

    /// `POST /api/uploads`; the JSON answer.
    pub async fn upload(&self, filename: &str, bytes: Vec<u8>) -> Value {
        self.upload_as(&self.client, filename, bytes).await
    }

    /// `POST /api/uploads` as `client`; the JSON answer.
    pub async fn upload_as(&self, client: &Client, filename: &str, bytes: Vec<u8>) -> Value {
        let request = client.post(self.url("/api/uploads"));
        let response = request
            .multipart(file_form(filename, bytes))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "upload answered {}",
            response.status()
        );
        response.json().await.unwrap()
    }

    /// Uploads a file as `client` and asks for its import with the given request fields
    /// (`fileGuid` and `jobType` are added); the answer, whatever it is.
    pub async fn import_as(
        &self,
        client: &Client,
        filename: &str,
        bytes: Vec<u8>,
        mut request: Value,
    ) -> reqwest::Response {
        let upload = self.upload_as(client, filename, bytes).await;
        request["jobType"] = json!("import");
        request["fileGuid"] = upload["id"].clone();
        let create = client.post(self.url("/api/jobs")).json(&request);
        create.send().await.unwrap()
    }

    /// Uploads and starts an import; the job as `POST /api/jobs` answered.
    pub async fn import(&self, filename: &str, bytes: Vec<u8>, dataset: &str) -> JobView {
        self.import_sheet(filename, bytes, dataset, None).await
    }

    /// Uploads a file and imports it, naming the workbook sheet to read.
    pub async fn import_sheet(
        &self,
        filename: &str,
        bytes: Vec<u8>,
        dataset: &str,
        sheet: Option<&str>,
    ) -> JobView {
        let request = json!({ "dataset": dataset, "sheet": sheet });
        self.import_with(filename, bytes, request).await
    }

    /// Uploads a file and imports it with the given request fields (`fileGuid` and
    /// `jobType` are added).
    pub async fn import_with(&self, filename: &str, bytes: Vec<u8>, request: Value) -> JobView {
        let response = self.import_as(&self.client, filename, bytes, request).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        // With workers running, the job may have moved on by the time the answer is read.
        response.json().await.unwrap()
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn job(&self, id: Uuid) -> JobView {
        self.get_json(&format!("/api/jobs/{id}")).await
    }

    /// `GET path` as JSON.
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        response.json().await.unwrap()
    }

    /// `GET path` as text.
    pub async fn get_text(&self, path: &str) -> String {
        self.client
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Follows the job's events until it has finished; its last state.
    pub async fn finished(&self, id: Uuid) -> JobView {
        self.events(id, None).await.finished().await
    }

    /// Follows the job's events, as `client`, until it has finished; its last state.
    pub async fn finished_as(&self, client: &Client, id: Uuid) -> JobView {
        self.events_as(client, id, None).await.finished().await
    }

    /// Opens the job's event stream.
    pub async fn events(&self, id: Uuid, last_event_id: Option<i64>) -> Events {
        self.events_as(&self.client, id, last_event_id).await
    }

    /// Opens the job's event stream as `client`.
    pub async fn events_as(&self, client: &Client, id: Uuid, last_event_id: Option<i64>) -> Events {
        let mut request = client.get(self.url(&format!("/api/jobs/{id}/events")));
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last.to_string());
        }
        Self::opened(request).await
    }

    /// Opens the job list's event stream.
    pub async fn list_events(&self) -> Events {
        Self::opened(self.client.get(self.url("/api/jobs/events"))).await
    }

    async fn opened(request: reqwest::RequestBuilder) -> Events {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events::from_response(response)
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(PATIENCE, self.handle)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}

/// A reader of `event: job` server-sent events.
pub struct Events {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

/// One parsed event.
#[derive(Debug, Clone)]
pub struct JobEvent {
    pub id: i64,
    pub job: JobView,
}

impl Events {
    pub fn from_response(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next `job` event; fails the test after [`PATIENCE`].
    pub async fn next(&mut self) -> JobEvent {
        tokio::time::timeout(PATIENCE, self.next_inner())
            .await
            .expect("an SSE event in time")
    }

    async fn next_inner(&mut self) -> JobEvent {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (None, None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if event.as_deref() == Some("job") {
                    return JobEvent {
                        id: id.expect("job events carry an id"),
                        job: serde_json::from_str(&data).expect("job events carry a JobView"),
                    };
                }
            }
            let bytes = self
                .body
                .next()
                .await
                .expect("the stream stays open")
                .expect("read the stream");
            self.buffer.push_str(&String::from_utf8_lossy(&bytes));
        }
    }

    /// Reads until the server ends the stream; fails the test after [`PATIENCE`].
    pub async fn ended(&mut self) {
        let end = async {
            while let Some(bytes) = self.body.next().await {
                if bytes.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(PATIENCE, end)
            .await
            .expect("the server ends the stream");
    }

    /// Reads events until the job has finished; its last state.
    pub async fn finished(&mut self) -> JobView {
        self.until(|job| job.status.is_finished())
            .await
            .pop()
            .expect("`until` returns at least the matching event")
            .job
    }

    /// Reads events until one matches; returns every event read, the match last.
    pub async fn until(&mut self, done: impl Fn(&JobView) -> bool) -> Vec<JobEvent> {
        let mut seen = Vec::new();
        loop {
            let event = self.next().await;
            let finished = done(&event.job);
            seen.push(event);
            if finished {
                return seen;
            }
        }
    }
}

/// A `server worker` process, killed when dropped. Its log (stdout) goes to a file.
pub struct WorkerProcess(Child, std::path::PathBuf);

impl WorkerProcess {
    pub fn start(db: &TestDb, chunk_rows: usize) -> Self {
        Self::start_with(db, chunk_rows, &[])
    }

    /// With extra `CONVEYOR_…` settings.
    pub fn start_with(db: &TestDb, chunk_rows: usize, settings: &[(&str, &str)]) -> Self {
        Self::spawn("worker", db, chunk_rows, settings)
    }

    /// `server serve` on a free port of 127.0.0.1 (its log says which), with its in-process
    /// workers.
    pub fn serve(db: &TestDb, chunk_rows: usize, settings: &[(&str, &str)]) -> Self {
        let on_any_port = [("LEPTOS_SITE_ADDR", "127.0.0.1:0")];
        let settings: Vec<_> = on_any_port.iter().chain(settings).copied().collect();
        Self::spawn("serve", db, chunk_rows, &settings)
    }

    fn spawn(command: &str, db: &TestDb, chunk_rows: usize, settings: &[(&str, &str)]) -> Self {
        let log = std::env::temp_dir().join(format!("conveyor-{command}-{}.log", Uuid::new_v4()));
        let child = Command::new(env!("CARGO_BIN_EXE_server"))
            .arg(command)
            .env("DATABASE_URL", &db.url)
            .env("CONVEYOR_CHUNK_ROWS", chunk_rows.to_string())
            .env("CONVEYOR_WORKER_CONCURRENCY", "1")
            .env("CONVEYOR_HEARTBEAT_SECS", "0.2")
            .env("CONVEYOR_LEASE_SECS", "1")
            .env("CONVEYOR_DB_POOL", "6")
            .env("RUST_LOG", "warn")
            .envs(settings.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("create the worker's log"))
            .spawn()
            .expect("start a worker process");
        Self(child, log)
    }

    /// The address a `serve` process listens on, once its log says (it logs at `info`).
    pub async fn listening_url(&self) -> String {
        let mut url = String::new();
        until("the server to listen", || {
            url = self
                .log()
                .lines()
                .find_map(|line| {
                    let after = line.split_once("listening on ")?.1;
                    after.split_whitespace().next().map(str::to_owned)
                })
                .unwrap_or_default();
            std::future::ready(!url.is_empty())
        })
        .await;
        url
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// The most memory the worker has held so far (its peak resident set), in bytes.
    pub fn peak_rss(&self) -> u64 {
        peak_rss_of(&format!("/proc/{}/status", self.0.id()))
    }

    /// What the worker has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }

    /// SIGKILL: no chance to clean up, like a machine that vanishes.
    pub fn kill_9(mut self) {
        self.0.kill().expect("kill -9 the worker");
        self.0.wait().expect("reap the worker");
    }

    /// SIGTERM, as a deploy or `docker stop` sends; waits for the process to exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "SIGTERM the worker");
        self.0.wait().expect("wait for the worker to exit")
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            eprintln!("the worker's log:\n{}", self.log());
        }
        let _ = std::fs::remove_file(&self.1);
    }
}

/// Starts this process's peak resident set (`VmHWM`) over from what it holds now (Linux's
/// `/proc/self/clear_refs`), and returns what it holds now (`VmRSS`), in bytes. A test that
/// measures its own process shares it with the tests the binary ran before (whose freed memory
/// the allocator may keep) and the one running beside it: it measures how far the peak grows
/// from here.
pub fn reset_own_peak_rss() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset this process's peak RSS");
    status_bytes("/proc/self/status", "VmRSS:")
}

/// The peak resident set (`VmHWM`) in a `/proc/…/status` file, in bytes.
pub fn peak_rss_of(status: &str) -> u64 {
    status_bytes(status, "VmHWM:")
}

/// A `kB` field of a `/proc/…/status` file, in bytes.
fn status_bytes(status: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(status).expect("read the process's status");
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in the status"));
    kb * 1024
}

/// Sends `part` (a file, perhaps streamed) to `url` as `POST /api/uploads` takes it.
pub async fn upload_part(client: &Client, url: &str, part: multipart::Part) -> reqwest::Response {
    client
        .post(url)
        .multipart(multipart::Form::new().part("file", part))
        .send()
        .await
        .expect("send the upload")
}

/// A multipart form holding one file, as `POST /api/uploads` takes it.
pub fn file_form(filename: &str, bytes: impl Into<Vec<u8>>) -> multipart::Form {
    multipart::Form::new().part(
        "file",
        multipart::Part::bytes(bytes.into()).file_name(filename.to_owned()),
    )
}

/// Sends `request` and reads its JSON answer.
pub async fn json_of<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    request.send().await.unwrap().json().await.unwrap()
}

/// The password [`account`] gives `email`.
pub fn password_of(email: &str) -> String {
    format!("pw-{email}")
}

/// Creates an account as `server user add` does; its id. The password is [`password_of`].
pub async fn account(db: &TestDb, email: &str, role: app::auth::Role) -> Uuid {
    server::auth::accounts::add_or_reset(&db.pool, email, role, &password_of(email))
        .await
        .unwrap();
    sqlx::query_scalar("select id from users where email = $1")
        .bind(email)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// A CSV with a header and `rows` rows: `id,name,email,amount`.
pub fn csv(rows: usize) -> Vec<u8> {
    let mut out = String::from("id,name,email,amount\n");
    for i in 1..=rows {
        out.push_str(&format!(
            "{i},\"Name {i}, Jr.\",user{i}@example.com,{}.{:02}\n",
            i * 3,
            i % 100
        ));
    }
    out.into_bytes()
}

/// Rows stored for a job, and how many distinct source rows they are.
pub async fn stored_rows(pool: &PgPool, job_id: Uuid) -> (i64, i64) {
    // A row's position holds its job's sequence number in the high 32 bits.
    sqlx::query_as(
        "select count(*), count(distinct r.pos) from dataset_rows r
         join jobs j on r.pos >> 32 = j.seq where j.id = $1",
    )
    .bind(job_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Every row stored under a dataset name, whichever job wrote it (and whichever dataset of
/// that name, deleted ones too).
pub async fn dataset_rows(db: &TestDb, dataset: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from dataset_rows r join datasets d on d.id = r.dataset_id
         where d.name = $1",
    )
    .bind(dataset)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Runs the project's migrations older than `version` on an unmigrated database: what a
/// database was before that migration, to fill with old data and then migrate.
pub async fn migrate_before(db: &TestDb, version: i64) {
    let mut before = sqlx::migrate!("../migrations");
    before.migrations = std::borrow::Cow::Owned(
        before
            .migrations
            .iter()
            .filter(|m| m.version < version)
            .cloned()
            .collect(),
    );
    before.run(&db.pool).await.unwrap();
}

/// The job completed, with every one of `rows` rows counted and stored once.
pub async fn completed_exactly(db: &TestDb, done: &JobView, rows: usize) {
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let rows = rows as i64;
    assert_eq!((done.rows_ok, done.item_progress), (rows, rows), "{done:?}");
    assert_eq!(
        stored_rows(&db.pool, done.id).await,
        (rows, rows),
        "rows stored, and distinct positions"
    );
}

/// Polls `condition` (state that changes without a notification) until it holds; fails the
/// test after [`PATIENCE`].
pub async fn until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `count` (a `select count(*)` of the test's own) until it is 1: how a test waits for
/// a statement of another connection or process to block on a lock the test holds.
pub async fn until_one(db: &TestDb, what: &str, count: &'static str) {
    until(what, || async {
        sqlx::query_scalar::<_, i64>(count)
            .fetch_one(&db.pool)
            .await
            .unwrap()
            == 1
    })
    .await;
}

/// Every part's rows held at a gate: an advisory lock the test holds, which a trigger on
/// `dataset_rows` waits for. A part seen running cannot commit until the gate is opened: how a
/// test kills a worker inside a part, never just after it.
pub struct Gate(sqlx::pool::PoolConnection<sqlx::Postgres>);

impl Gate {
    pub async fn close(db: &TestDb) -> Self {
        let mut held = db.pool.acquire().await.unwrap();
        sqlx::query("select pg_advisory_lock(42)")
            .execute(&mut *held)
            .await
            .unwrap();
        install_trigger(
            db,
            "perform pg_advisory_lock_shared(42); perform pg_advisory_unlock_shared(42);",
        )
        .await;
        Self(held)
    }

    pub async fn open(mut self) {
        sqlx::query("select pg_advisory_unlock(42)")
            .execute(&mut *self.0)
            .await
            .unwrap();
    }
}

/// How many transactions last wrote these jobs' rows (their `xmin`): those that made them,
/// for jobs never run since.
pub async fn writers(db: &TestDb, jobs: &[Uuid]) -> i64 {
    sqlx::query_scalar("select count(distinct xmin::text) from jobs where id = any($1)")
        .bind(jobs)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Makes every insert into `dataset_rows` run `body` (PL/pgSQL, the calling test's own
/// constant) first: how tests make chunks slow or failing while the worker under test is the
/// real binary, unchanged.
pub async fn install_trigger(db: &TestDb, body: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "create or replace function test_fault() returns trigger language plpgsql as $$
         begin {body} return new; end $$"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "create or replace trigger test_fault before insert on dataset_rows
         for each row execute function test_fault()",
    )
    .execute(&db.pool)
    .await
    .unwrap();
}

pub async fn drop_trigger(db: &TestDb) {
    sqlx::query("drop trigger test_fault on dataset_rows")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Each owner's total in `upload_bytes` (kept by a trigger, read by the stored-bytes limit)
/// is what their uploads hold.
pub async fn assert_stored_bytes_follow_uploads(db: &TestDb) {
    let drift: Vec<(Uuid, i64, i64)> = sqlx::query_as(
        "select coalesce(u.owner, b.owner), coalesce(b.stored, 0), coalesce(u.held, 0)::int8
         from (select owner, sum(size) as held from uploads group by owner) u
         full join (select owner, sum(stored)::int8 as stored from upload_bytes group by owner) b
             on b.owner = u.owner
         where coalesce(b.stored, 0) <> coalesce(u.held, 0)",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        drift.is_empty(),
        "owner, kept total, uploads' sum: {drift:?}"
    );
}
