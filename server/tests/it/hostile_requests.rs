//! Hostile requests: callbacks aimed inside the network or at black holes, uploads that
//! trickle or stall, clients that take more than their share, and parameters out of range. Each
//! gets a clear answer, and nobody else waits for it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::support::*;
use app::model::{CallbackState, JobStatus, JobView};
use axum::{
    Router,
    http::{HeaderMap, StatusCode, header::LOCATION},
    routing::post,
};
use bytes::Bytes;
use futures::StreamExt;
use reqwest::{Client, multipart};
use serde_json::{Value, json};
use server::config::{CallbackArgs, LimitArgs, ServeArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A receiver answering every POST with `answer` (and `Location: location`), counting them.
async fn receiver(
    address: &str,
    answer: StatusCode,
    location: Option<String>,
) -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new().route(
        "/{*path}",
        post(move || {
            let counted = Arc::clone(&counted);
            let location = location.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut headers = HeaderMap::new();
                if let Some(location) = location {
                    headers.insert(LOCATION, location.parse().unwrap());
                }
                (answer, headers)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, hits)
}

/// A batch with this callback, sealed at once (so it completes and calls back).
async fn sealed_batch(server: &TestServer, callback_url: &str) -> Uuid {
    let created = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "batch", "callbackUrl": callback_url }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::ACCEPTED, "{callback_url}");
    let batch: JobView = created.json().await.unwrap();
    let sealed = server
        .post_json(&format!("/api/jobs/{}/seal", batch.id), json!({}))
        .await;
    assert_eq!(sealed.status(), StatusCode::OK);
    batch.id
}

/// Follows a job until its callback has been tried (`tries` of them).
async fn tried(server: &TestServer, id: Uuid, tries: usize) -> JobView {
    let mut events = server.events(id, None).await;
    let seen = events
        .until(|job| {
            job.callback
                .as_ref()
                .is_some_and(|c| c.tries.len() >= tries)
        })
        .await;
    seen.last().unwrap().job.clone()
}

#[tokio::test]
async fn callbacks_reach_public_addresses_only_and_black_holes_delay_nothing() {
    let db = TestDb::new().await;
    let mut workers = worker_args(100);
    workers.callbacks = CallbackArgs::default();
    let server = TestServer::start(&db, Some(workers)).await;

    // Addresses are refused when the job is created, however they are written.
    for url in [
        "http://127.0.0.1:9/",
        "http://[::1]:9/",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433:9/",
        "http://localhost:9/",
        "http://10.0.0.1/",
        "http://192.168.0.1/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
        "http://0.0.0.0:9/",
        "http://[::ffff:127.0.0.1]:9/",
    ] {
        let created = server
            .post_json(
                "/api/jobs",
                json!({ "jobType": "batch", "callbackUrl": url }),
            )
            .await;
        assert_eq!(created.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let body: Value = created.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("which callbacks may not reach"),
            "{message}"
        );
    }

    // A name is checked once resolved: this machine's own name leads inside.
    let (port, hits) = receiver("0.0.0.0:0", StatusCode::OK, None).await;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let batch = sealed_batch(&server, &format!("http://{}:{port}/hook", host.trim())).await;
    let job = tried(&server, batch, 1).await;
    let callback = job.callback.unwrap();
    assert_eq!(callback.state, CallbackState::Sending);
    let try_ = &callback.tries[0];
    assert_eq!(try_.status, None);
    assert!(
        try_.error
            .as_deref()
            .unwrap()
            .ends_with("which callbacks may not reach"),
        "{try_:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing inside was called");
    server.stop().await;

    // A deployment may allow its own network (the tests' loopback): redirects are still not
    // followed, to loopback or anywhere.
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let (inner, inner_hits) = receiver("127.0.0.2:0", StatusCode::OK, None).await;
    let target = format!("http://127.0.0.2:{inner}/stolen");
    let (port, _) = receiver("127.0.0.1:0", StatusCode::TEMPORARY_REDIRECT, Some(target)).await;
    let batch = sealed_batch(
        &server,
        &format!("http://127.0.0.1:{port}/hook?token=s3cret"),
    )
    .await;
    let job = tried(&server, batch, 1).await;
    let callback = job.callback.unwrap();
    // Its viewers see where it goes, not its secret.
    assert_eq!(callback.url, format!("http://127.0.0.1:{port}/…"));
    let try_ = &callback.tries[0];
    assert_eq!(
        (try_.status, try_.error.as_deref()),
        (Some(307), Some("answered 307 Temporary Redirect"))
    );
    assert_eq!(
        inner_hits.load(Ordering::SeqCst),
        0,
        "the redirect was not followed"
    );

    // Twenty callbacks into a black hole (connections accepted, never answered) hold the
    // callback loop's eight places, and nothing else.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_url = format!("http://{}/hook", hole.local_addr().unwrap());
    let held = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&held);
    tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = hole.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            sockets.push(socket);
        }
    });
    let mut holed = Vec::new();
    for _ in 0..20 {
        holed.push(sealed_batch(&server, &hole_url).await);
    }
    until(
        "the black hole holds the callback loop's places",
        || async { held.load(Ordering::SeqCst) >= 8 },
    )
    .await;
    // The reaper still settles batches, and imports still run, at once.
    let started = Instant::now();
    let batch = sealed_batch(
        &server,
        "https://example.com/not-called-before-it-completes",
    )
    .await;
    let settled = server.finished(batch).await;
    let reaper_round = started.elapsed();
    assert_eq!(settled.status, JobStatus::Completed);
    let import = server.import("during.csv", csv(500), "during").await;
    assert_eq!(
        server.finished(import.id).await.status,
        JobStatus::Completed
    );
    println!("a batch settled in {reaper_round:?} with 20 callbacks in a black hole");
    assert!(
        reaper_round < callbacks_timeout(),
        "the reaper waited on callbacks: {reaper_round:?}"
    );
    assert_eq!(
        held.load(Ordering::SeqCst),
        8,
        "at most eight callbacks at once"
    );
    // Each black-holed try ends at the timeout, recorded, and is tried again later.
    let job = tried(&server, holed[0], 1).await;
    let callback = job.callback.unwrap();
    assert_eq!(
        callback.tries[0].error.as_deref(),
        Some("no answer within 10 seconds")
    );
    assert!(callback.next_at.is_some());
    server.stop().await;
}

fn callbacks_timeout() -> Duration {
    server::jobs::callbacks::TIMEOUT
}

/// An upload whose body sends `head`, then a line every 200 ms until `stop` (then it ends, and
/// the upload completes); its answer.
fn trickle(
    client: Client,
    url: String,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let lines = futures::stream::once(async { Bytes::from_static(b"id\n") }).chain(
        futures::stream::unfold(stop, |stop| async move {
            tokio::select! {
                () = stop.cancelled() => None,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    Some((Bytes::from_static(b"1\n"), stop))
                }
            }
        }),
    );
    let part = multipart::Part::stream(reqwest::Body::wrap_stream(
        lines.map(Ok::<_, std::io::Error>),
    ))
    .file_name("slow.csv");
    tokio::spawn(async move { upload_part(&client, &url, part).await })
}

async fn receiving(db: &TestDb) -> i64 {
    sqlx::query_scalar("select count(*) from uploads where receiving")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn trickling_uploads_hold_no_connection_and_stalled_ones_are_cut_off() {
    let db = TestDb::new().await;
    let args = ServeArgs {
        no_workers: true,
        max_upload_bytes: 64 << 20,
        limits: LimitArgs {
            uploads_at_once: 100,
            body_timeout_secs: 1.0,
            ..LimitArgs::default()
        },
        ..ServeArgs::default()
    };
    let server = TestServer::start_with_args(&db, args).await;
    // One more trickling upload than the server's pool has connections.
    let many = db.pool.options().get_max_connections() as usize + 1;
    let stop = CancellationToken::new();
    let trickles: Vec<_> = (0..many)
        .map(|_| {
            trickle(
                server.client.clone(),
                server.url("/api/uploads"),
                stop.clone(),
            )
        })
        .collect();
    until("every trickling upload has begun", || async {
        receiving(&db).await == many as i64
    })
    .await;

    // Requests are answered at once meanwhile, and an import runs with its leases held.
    let job = server.import("steady.csv", csv(2000), "steady").await;
    let _worker = WorkerProcess::start(&db, 100);
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        let response = server
            .client
            .get(server.url("/api/jobs"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        slowest = slowest.max(started.elapsed());
    }
    println!("slowest GET /api/jobs with {many} trickling uploads: {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    let done = server.finished(job.id).await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 2000));
    let retried: i64 =
        sqlx::query_scalar("select count(*) from job_chunks where job_id = $1 and attempts > 1")
            .bind(job.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(retried, 0, "no lease was lost");

    // A body that stops sending is cut off, and nothing of it is kept.
    let stalled =
        futures::stream::once(async { Ok::<_, std::io::Error>(Bytes::from_static(b"id\n1\n")) })
            .chain(futures::stream::pending());
    let part =
        multipart::Part::stream(reqwest::Body::wrap_stream(stalled)).file_name("stalled.csv");
    let response = upload_part(&server.client, &server.url("/api/uploads"), part).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "The upload was cut off before the end of the file."
    );

    // The trickles finish: stored whole.
    stop.cancel();
    for trickle in trickles {
        assert_eq!(trickle.await.unwrap().status(), StatusCode::CREATED);
    }
    assert_eq!(receiving(&db).await, 0);
    server.stop().await;
}

/// A [`trickle`] begun while no other upload is being received, once it has begun; what stops
/// it, and its answer.
async fn trickle_one(
    server: &TestServer,
    db: &TestDb,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<reqwest::Response>,
) {
    let stop = CancellationToken::new();
    let answer = trickle(
        server.client.clone(),
        server.url("/api/uploads"),
        stop.clone(),
    );
    until("the upload has begun", || async {
        receiving(db).await == 1
    })
    .await;
    (stop, answer)
}

#[tokio::test]
async fn an_upload_still_arriving_outlives_the_retention_age_and_one_abandoned_does_not() {
    use server::jobs::maintenance::retention::{self, Kept};
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let kept = Kept {
        items: Duration::from_secs(3_600),
        jobs: Duration::from_secs(86_400),
    };
    let (stop, slow) = trickle_one(&server, &db).await;
    // Begun longer ago than files are kept, its last part as long ago (under a day: it is
    // still sending).
    sqlx::query(
        "update uploads set created_at = now() - interval '2 hours',
             alive_at = now() - interval '2 hours'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(pruned.uploads, 0, "a file still arriving is kept");
    stop.cancel();
    let answer = slow.await.unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED);
    let id: Value = answer.json().await.unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(
        pruned.uploads, 0,
        "received just now: kept as long as any file"
    );
    let preview = server
        .client
        .get(server.url(&format!(
            "/api/uploads/{}/preview",
            id["id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(preview.status(), StatusCode::OK);

    // One whose sender went quiet a day ago goes, however young the file.
    let (stop, abandoned) = trickle_one(&server, &db).await;
    sqlx::query("update uploads set alive_at = now() - interval '25 hours' where receiving")
        .execute(&db.pool)
        .await
        .unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(pruned.uploads, 1);
    assert_eq!(receiving(&db).await, 0);
    stop.cancel();
    let answer = abandoned.await.unwrap();
    assert_eq!(
        answer.status(),
        StatusCode::BAD_REQUEST,
        "its last part finds it gone"
    );
    let uploads: i64 = sqlx::query_scalar("select count(*) from uploads")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(uploads, 1, "only the slow one, received whole");
    server.stop().await;
}

#[tokio::test]
async fn retention_passes_over_an_old_file_that_a_job_being_made_names() {
    use server::jobs::maintenance::retention::{self, Kept};
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let kept = Kept {
        items: Duration::from_secs(3_600),
        jobs: Duration::from_secs(86_400),
    };
    let named = server.upload("named.csv", csv(2)).await;
    let named: Uuid = named["id"].as_str().unwrap().parse().unwrap();
    server.upload("unnamed.csv", csv(2)).await;
    sqlx::query("update uploads set alive_at = now() - interval '2 hours'")
        .execute(&db.pool)
        .await
        .unwrap();
    // A job naming the first file, its transaction still open while the round runs.
    let mut making = db.pool.begin().await.unwrap();
    sqlx::query(
        "with dataset as (
             insert into datasets (id, owner, name, state)
             select gen_random_uuid(), owner, 'named', 'provisional' from uploads where id = $1
             returning id, owner)
         insert into jobs (id, kind, owner, upload_id, dataset_id, source_filename)
         select gen_random_uuid(), 'import', owner, $1, id, 'named.csv' from dataset",
    )
    .bind(named)
    .execute(&mut *making)
    .await
    .unwrap();
    let round = tokio::time::timeout(Duration::from_secs(60), retention::round(&db.pool, kept));
    let pruned = round
        .await
        .expect("the round waited for the job being made")
        .unwrap();
    assert_eq!(pruned.uploads, 1, "only the file no job names");
    making.commit().await.unwrap();
    let pruned = retention::round(&db.pool, kept).await.unwrap();
    assert_eq!(pruned.uploads, 0, "a job names it");
    let left: Vec<Uuid> = sqlx::query_scalar("select id from uploads")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, [named]);
    server.stop().await;
}

#[tokio::test]
async fn a_job_made_as_retention_removes_its_file_is_told_the_file_is_gone() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let upload = server.upload("old.csv", csv(2)).await;
    let id: Uuid = upload["id"].as_str().unwrap().parse().unwrap();
    // Held as a retention round holds a file it is about to delete.
    let mut retention = db.pool.begin().await.unwrap();
    let holder: i32 =
        sqlx::query_scalar("select pg_backend_pid() from uploads where id = $1 for update")
            .bind(id)
            .fetch_one(&mut *retention)
            .await
            .unwrap();
    let request = json!({ "jobType": "import", "fileGuid": id, "dataset": "old" });
    let create = tokio::spawn(
        server
            .client
            .post(server.url("/api/jobs"))
            .json(&request)
            .send(),
    );
    // The only statement of a create that locks its file: the job's insert, checking the
    // job's reference to it.
    until("the job's insert to wait for the file", || async {
        sqlx::query_scalar::<_, bool>(
            "select exists (select from pg_stat_activity
                            where $1 = any(pg_blocking_pids(pid)))",
        )
        .bind(holder)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    })
    .await;
    sqlx::query("delete from uploads where id = $1")
        .bind(id)
        .execute(&mut *retention)
        .await
        .unwrap();
    retention.commit().await.unwrap();
    let answer = create.await.unwrap().unwrap();
    // As for any id that names no upload of theirs.
    assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = answer.json().await.unwrap();
    assert!(body.to_string().contains(&id.to_string()), "{body}");
    let jobs: i64 = sqlx::query_scalar("select count(*) from jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
    server.stop().await;
}

/// Reads what the server sends until it closes the connection (failing the test if it has not
/// within a minute).
async fn until_closed(stream: &mut tokio::net::TcpStream) -> String {
    let mut sent = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut sent));
    match read.await.expect("the server did not close the connection") {
        Ok(_) => {}
        // Closed with bytes unread on its side: a reset.
        Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}"),
    }
    String::from_utf8_lossy(&sent).into_owned()
}

#[tokio::test]
async fn a_head_not_sent_in_time_loses_its_connection() {
    let db = TestDb::new().await;
    let args = ServeArgs {
        no_workers: true,
        limits: LimitArgs {
            header_timeout_secs: 1.0,
            ..LimitArgs::default()
        },
        ..ServeArgs::default()
    };
    let server = TestServer::start_with_args(&db, args).await;
    let address = server.base.trim_start_matches("http://").to_owned();
    // An event stream opened now outlives the deadline: it applies to heads alone.
    server.upload("first.csv", csv(1)).await;
    let mut list = server.list_events().await;

    // A head trickled byte by byte (slowloris) is cut off at the deadline however it trickles.
    let mut trickling = tokio::net::TcpStream::connect(&address).await.unwrap();
    let trickle = async {
        for byte in b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-slow: "
            .iter()
            .cycle()
        {
            if trickling.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), trickle)
        .await
        .expect("the server still takes the trickled head");
    let answer = until_closed(&mut trickling).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );

    // A head sent in time is answered, and the connection, kept alive and then left idle,
    // is closed at the deadline too.
    let mut prompt = tokio::net::TcpStream::connect(&address).await.unwrap();
    prompt
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut prompt).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");

    // The stream opened before both deadlines passed still reports what happens.
    let job = server.import("later.csv", csv(3), "later").await;
    list.until(|view| view.id == job.id).await;
    server.stop().await;
}

/// The 429, its `Retry-After` and its message.
async fn limited(response: reqwest::Response) -> (u64, String) {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = response.json().await.unwrap();
    (
        retry_after,
        body["error"]["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn owners_over_their_limits_get_429_with_retry_after() {
    let db = TestDb::new().await;
    let args = ServeArgs {
        no_workers: true,
        max_upload_bytes: 64 << 20,
        limits: LimitArgs {
            uploads_at_once: 1,
            stored_bytes: 100_000,
            active_jobs: 2,
            streams: 2,
            ..LimitArgs::default()
        },
        ..ServeArgs::default()
    };
    let server = TestServer::start_with_args(&db, args).await;
    let upload = |client: &Client, bytes: Vec<u8>| {
        client
            .post(server.url("/api/uploads"))
            .multipart(file_form("data.csv", bytes))
            .send()
    };

    // Files at once.
    let first = server.upload("first.csv", csv(1)).await;
    let stop = CancellationToken::new();
    let sending = trickle(
        server.client.clone(),
        server.url("/api/uploads"),
        stop.clone(),
    );
    until("the slow upload has begun", || async {
        receiving(&db).await == 1
    })
    .await;
    let (retry_after, message) = limited(upload(&server.client, csv(1)).await.unwrap()).await;
    assert_eq!(retry_after, 10);
    assert_eq!(
        message,
        "You are already sending as many files as you may at once (1). Try again when one has \
         finished."
    );
    stop.cancel();
    assert_eq!(sending.await.unwrap().status(), StatusCode::CREATED);

    // Bytes stored.
    let file = vec![b'x'; 60_000];
    assert_eq!(
        upload(&server.client, file.clone()).await.unwrap().status(),
        StatusCode::CREATED
    );
    let (retry_after, message) = limited(upload(&server.client, file.clone()).await.unwrap()).await;
    assert_eq!(retry_after, 3600);
    assert!(
        message.starts_with("Your stored files would take more than 0.1 MB"),
        "{message}"
    );
    // A file sent with its job counts the same, and is refused the same: no job, no file.
    let job = json!({ "jobType": "import", "dataset": "over" });
    let form = multipart::Form::new()
        .part("job", multipart::Part::text(job.to_string()))
        .part(
            "file",
            multipart::Part::bytes(file.clone()).file_name("data.csv"),
        );
    let sent = server.client.post(server.url("/api/jobs")).multipart(form);
    let (retry_after, message) = limited(sent.send().await.unwrap()).await;
    assert_eq!(retry_after, 3600);
    assert!(
        message.starts_with("Your stored files would take more than 0.1 MB"),
        "{message}"
    );
    let (jobs, files): (i64, i64) =
        sqlx::query_as("select (select count(*) from jobs), (select count(*) from uploads)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((jobs, files), (0, 3));
    // Limits are per owner: someone else still may.
    let other = TestServer::new_client();
    assert_eq!(
        upload(&other, file).await.unwrap().status(),
        StatusCode::CREATED
    );
    // What the limit read (each owner's total, kept as uploads grow, fail and go) is what
    // their uploads hold.
    assert_stored_bytes_follow_uploads(&db).await;

    // Jobs waiting or running (an open batch runs until sealed; without workers an import
    // waits).
    let batch = json!({ "jobType": "batch", "dedupeKey": "the batch" });
    assert_eq!(
        server.post_json("/api/jobs", batch.clone()).await.status(),
        StatusCode::ACCEPTED
    );
    let import = server
        .post_json(
            "/api/jobs",
            json!({ "jobType": "import", "fileGuid": first["id"], "dataset": "d" }),
        )
        .await;
    assert_eq!(import.status(), StatusCode::ACCEPTED);
    let import: JobView = import.json().await.unwrap();
    let third = server
        .post_json("/api/jobs", json!({ "jobType": "batch" }))
        .await;
    let (retry_after, message) = limited(third).await;
    assert_eq!(retry_after, 30);
    assert!(
        message.starts_with("You have 2 jobs waiting or running"),
        "{message}"
    );
    // Asking again for a job already made is not a new job.
    let replayed = server.post_json("/api/jobs", batch).await;
    assert_eq!(replayed.status(), StatusCode::OK);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    // Nor can a retry make more live jobs than the limit.
    let cancel = format!("/api/jobs/{}/cancel", import.id);
    assert_eq!(
        server.post_json(&cancel, json!({})).await.status(),
        StatusCode::OK
    );
    let another = server
        .post_json("/api/jobs", json!({ "jobType": "batch" }))
        .await;
    assert_eq!(another.status(), StatusCode::ACCEPTED);
    let retry = format!("/api/jobs/{}/retry", import.id);
    let (_, message) = limited(server.post_json(&retry, json!({})).await).await;
    assert!(
        message.starts_with("You have 2 jobs waiting or running"),
        "{message}"
    );
    assert_eq!(server.job(import.id).await.status, JobStatus::Cancelled);

    // Live streams.
    let open = || server.client.get(server.url("/api/jobs/events")).send();
    let first = open().await.unwrap();
    let second = open().await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let (retry_after, message) = limited(open().await.unwrap()).await;
    assert_eq!(retry_after, 10);
    assert!(
        message.starts_with("You have 2 live views open"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test]
async fn out_of_range_and_flag_like_parameters_get_422_and_secrets_stay_hidden() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let upload = server
        .upload("données.csv", b"id,n\n1,2\n2\n".to_vec())
        .await;
    for (field, value) in [
        ("maxRowErrors", json!(18446744073709551615u64)),
        ("maxRowErrors", json!(-1)),
        ("maxRowErrors", json!("1e400%")),
        ("maxFailuresPerItem", json!(1_000_000)),
        ("sheet", json!("--help")),
        ("sheet", json!("s".repeat(300))),
        ("sheet", json!("a\u{0}b")),
        ("dedupeKey", json!("k".repeat(201))),
        (
            "callbackUrl",
            json!(format!("https://example.com/{}", "p".repeat(2000))),
        ),
    ] {
        let mut request = json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "d" });
        request[field] = value;
        let response = server.post_json("/api/jobs", request).await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}"
        );
    }

    // A download named in any script keeps its name, and an ASCII one for old clients.
    let job = server
        .import("données.csv", b"id,n\n1,2\n2\n".to_vec(), "names")
        .await;
    server.finished(job.id).await;

    // Parameters that do not parse, and an upload that is not a form, get the API's own
    // error, like every other refusal.
    let errors = format!("/api/jobs/{}/errors?limit=many", job.id);
    for (path, body) in [
        (errors.as_str(), None),
        ("/api/datasets/names?owner=me", None),
        ("/api/datasets/names/rows?limit=-", None),
        ("/api/uploads", Some("not a form")),
    ] {
        let request = match body {
            Some(body) => server.client.post(server.url(path)).body(body),
            None => server.client.get(server.url(path)),
        };
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{path}");
        let error: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(error["error"]["code"], "bad_request", "{path}: {error}");
    }
    let report = server
        .client
        .get(server.url(&format!("/api/jobs/{}/errors.csv", job.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        report.headers()["content-disposition"],
        "attachment; filename=\"donn_es-errors.csv\"; filename*=UTF-8''donn%C3%A9es-errors.csv"
    );
    // A byte order mark first, so Excel reads the report as UTF-8.
    let bytes = report.bytes().await.unwrap();
    assert!(
        bytes.starts_with(b"\xEF\xBB\xBF_row,_error,id,n\n"),
        "{bytes:?}"
    );
    server.stop().await;

    // `--help` names the settings, never their values.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_server"))
        .arg("--help")
        .env(
            "DATABASE_URL",
            "postgres://app:hunter2@db.internal/conveyor",
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("DATABASE_URL"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}
