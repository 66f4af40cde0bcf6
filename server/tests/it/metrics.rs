//! `GET /metrics`: who may read it (admins, a scraper with the metrics token, anyone on the
//! metrics address, nobody else), and that it reports what happened: an import's rows and
//! chunk runs, the jobs per status, the requests that made them, an open event stream, the
//! pools and the queue.

use app::{auth::Role, model::JobStatus};
use reqwest::{StatusCode, header::HOST};
use server::config::{MetricsArgs, ServeArgs};

use crate::support::{TestDb, TestServer, account, cookieless, csv, until, worker_args};

const TOKEN: &str = "scrape-secret-for-tests";

/// The body of a `GET`, which must answer 200 in Prometheus's text format.
async fn scrape(request: reqwest::RequestBuilder) -> String {
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    response.text().await.unwrap()
}

/// The value of one series (`name{labels}` exactly as rendered), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test]
async fn metrics_report_an_import_to_admins_the_token_and_the_metrics_address() {
    let db = TestDb::new().await;
    let addr = free_addr();
    let args = ServeArgs {
        worker: worker_args(50),
        metrics: MetricsArgs {
            metrics_token: Some(TOKEN.into()),
            metrics_addr: Some(addr),
        },
        ..ServeArgs::default()
    };
    let server = TestServer::start_with_args(&db, args).await;
    account(&db, "ops@example.com", Role::Admin).await;
    account(&db, "m@example.com", Role::Member).await;
    let admin = server.signed_in("ops@example.com").await;
    let url = server.url("/metrics");

    // Counters are the process's (other tests run in it too): compared before and after.
    let before = scrape(admin.get(&url)).await;
    let imported = |text: &str| value(text, "conveyor_rows_imported_total").unwrap_or(0.0);
    let job = server.import("people.csv", csv(120), "people").await;
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed);
    let _stream = server.events(job.id, None).await;

    // Gauges read from the database when scraped (retried: another test's scrape of its own
    // database may set them between this one's read and render).
    let completed = r#"conveyor_jobs{kind="import",status="completed"}"#;
    until("the scrape counts the completed import", || {
        let request = admin.get(&url);
        async move { value(&scrape(request).await, completed) == Some(1.0) }
    })
    .await;
    let text = scrape(admin.get(&url)).await;
    assert!(imported(&text) - imported(&before) >= 120.0, "{text}");
    for series in [
        r#"conveyor_task_runs_total{task="chunk",outcome="ok"}"#,
        r#"conveyor_task_duration_seconds_count{task="chunk"}"#,
        r#"conveyor_task_duration_seconds_bucket{task="plan",le="600"}"#,
        r#"conveyor_http_requests_total{method="POST",route="/api/jobs",status="202"}"#,
        r#"conveyor_http_request_duration_seconds_count{method="GET",route="/api/jobs/{id}/events"}"#,
        r#"conveyor_queue_backlog{task="chunk"}"#,
        r#"conveyor_queue_lag_seconds{task="chunk"}"#,
        r#"conveyor_db_connections{pool="http",state="idle"}"#,
        r#"conveyor_db_connections{pool="workers",state="in_use"}"#,
    ] {
        assert!(
            value(&text, series).is_some(),
            "{series} missing from\n{text}"
        );
    }
    assert!(value(&text, "conveyor_sse_clients").unwrap() >= 1.0);
    assert!(text.contains("# HELP conveyor_rows_failed_total"));
    // A path no route knows counts as `unmatched`, not as itself.
    let _ = admin
        .get(server.url("/no/such/thing/42"))
        .send()
        .await
        .unwrap();
    let text = scrape(admin.get(&url)).await;
    assert!(!text.contains("/no/such/thing"));

    // The token needs no account, and any Host reaches it (a scraper uses the address).
    let scraper = cookieless();
    let by_token = scraper
        .get(&url)
        .bearer_auth(TOKEN)
        .header(HOST, "10.0.0.9:3000");
    assert!(scrape(by_token).await.contains("conveyor_jobs"));
    let wrong = scraper
        .get(&url)
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    // …and opens nothing else.
    let elsewhere = scraper
        .get(server.url("/api/jobs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), StatusCode::UNAUTHORIZED);
    let member = server.signed_in("m@example.com").await;
    assert_eq!(
        member.get(&url).send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );

    // The metrics address answers anyone, and only `/metrics`.
    let plain = format!("http://{addr}");
    assert!(
        scrape(scraper.get(format!("{plain}/metrics")))
            .await
            .contains("conveyor_jobs")
    );
    let other = scraper
        .get(format!("{plain}/api/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}
