//! The probes a load balancer uses: `/healthz` answers whatever the database does, `/readyz`
//! says what keeps the process from working (a missing migration, a lost listener) and
//! recovers with it; both answer a probe by address (any `Host`) and without a session even
//! where every other path needs an account.

use crate::support::{TestDb, TestServer, admin_url, until};
use reqwest::{StatusCode, header::HOST};
use serde_json::{Value, json};
use server::config::{AuthArgs, AuthMode, ServeArgs};
use sqlx::{Connection, PgConnection};

/// `GET path` with this `Host`: the status and the body.
async fn probe(server: &TestServer, path: &str, host: &str) -> (StatusCode, String) {
    let response = server
        .client
        .get(server.url(path))
        .header(HOST, host)
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

async fn readiness(server: &TestServer) -> (StatusCode, Value) {
    let (status, body) = probe(server, "/readyz", "10.1.2.3:3000").await;
    (status, serde_json::from_str(&body).unwrap())
}

#[tokio::test]
async fn probes_answer_by_address_without_an_account_and_report_each_check() {
    let db = TestDb::new().await;
    let args = ServeArgs {
        no_workers: true,
        auth: AuthArgs {
            mode: AuthMode::Required,
            ..AuthArgs::default()
        },
        ..ServeArgs::default()
    };
    let server = TestServer::start_with_args(&db, args).await;

    assert_eq!(
        probe(&server, "/healthz", "10.1.2.3:3000").await,
        (StatusCode::OK, "ok\n".into())
    );
    // Credentials are not even looked at (a made-up token elsewhere is a 401).
    let with_token = server
        .client
        .get(server.url("/healthz"))
        .header("authorization", "Bearer cvt_made-up")
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), StatusCode::OK);
    // Every other path still refuses a Host it does not serve.
    assert_eq!(
        probe(&server, "/api/jobs", "10.1.2.3:3000").await.0,
        StatusCode::MISDIRECTED_REQUEST
    );
    let all_ok = json!({ "ready": true, "database": "ok", "migrations": "ok", "listener": "ok" });
    until("the process to be ready", || async {
        readiness(&server).await == (StatusCode::OK, all_ok.clone())
    })
    .await;

    // A database restored from before the latest migration.
    sqlx::query(
        "delete from _sqlx_migrations where version = (select max(version) from _sqlx_migrations)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // (Seen once the last answer, at most a second old, has expired.)
    let missing = json!({ "ready": false, "database": "ok", "migrations": "1 not applied",
                          "listener": "ok" });
    until("the missing migration to show", || async {
        readiness(&server).await == (StatusCode::SERVICE_UNAVAILABLE, missing.clone())
    })
    .await;
    assert_eq!(probe(&server, "/healthz", "x").await.0, StatusCode::OK);
}

#[tokio::test]
async fn readiness_follows_the_progress_listener() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let ready = || async { readiness(&server).await.0 == StatusCode::OK };
    until("the process to be ready", ready).await;

    // The database lets no new connection in (which only a connection to another database
    // may say), and the ones it has are cut.
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
    let allow = |allowed: bool| {
        sqlx::AssertSqlSafe(format!(
            "alter database \"{name}\" allow_connections {allowed}"
        ))
    };
    sqlx::query(allow(false)).execute(&mut admin).await.unwrap();
    // Every connection goes: the listener takes its new one from the server's pool.
    sqlx::query("select pg_terminate_backend(pid) from pg_stat_activity where datname = $1")
        .bind(&name)
        .execute(&mut admin)
        .await
        .unwrap();
    until("the lost listener to show", || async {
        let (status, body) = readiness(&server).await;
        status == StatusCode::SERVICE_UNAVAILABLE && body["listener"] == "not connected"
    })
    .await;
    assert_eq!(probe(&server, "/healthz", "x").await.0, StatusCode::OK);

    sqlx::query(allow(true)).execute(&mut admin).await.unwrap();
    until("the process to be ready again", ready).await;
}
