//! Accounts and sessions through the real HTTP API: cookies the server never issued, sessions
//! rotated at sign-in and ended by a password change or their expiry, guests who sign up and
//! keep their jobs, API tokens running the whole import flow without a cookie, `required`
//! mode, sign-up switched off, the last admin, and `server user add`.

use std::{
    io::Write,
    process::{Command, Stdio},
};

use crate::support::{
    Events, TestDb, TestServer, account, admin_url, cookieless, csv, file_form, json_of,
    migrate_before, password_of, patient_client, worker_args,
};
use app::{
    auth::Role,
    model::{JobStatus, JobView},
};
use reqwest::{Client, StatusCode, header::SET_COOKIE};
use serde_json::{Value, json};
use server::config::{AuthArgs, AuthMode, ServeArgs};

/// The session cookie's value a response sets (`""` when it removes it).
fn set_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("conveyor_session="))
        .map(|v| v.split(';').next().unwrap_or_default().to_owned())
}

/// Who the server thinks `client` is: `GET /api/session`'s `me`.
async fn me(server: &TestServer, client: &Client) -> Value {
    let session: Value = json_of(client.get(server.url("/api/session"))).await;
    session["me"].clone()
}

#[tokio::test]
async fn cookies_the_server_never_issued_are_replaced_and_sign_in_rotates_sessions() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let plain = cookieless();

    // A made-up session id (well-formed or not) is nobody, and the answer removes it.
    for forged in ["0b6e1c1e-3f5d-4f5e-9a3e-5d1f4b2c7a10", &"A".repeat(43)] {
        let response = plain
            .get(server.url("/api/session"))
            .header("cookie", format!("conveyor_session={forged}"))
            .send()
            .await
            .unwrap();
        assert_eq!(set_cookie(&response).as_deref(), Some(""), "{forged}");
        let session: Value = response.json().await.unwrap();
        assert_eq!(session["me"], Value::Null);
    }
    // Making something with a forged cookie makes a new guest with a new, different cookie.
    let forged = "B".repeat(43);
    let response = plain
        .post(server.url("/api/datasets"))
        .header("cookie", format!("conveyor_session={forged}"))
        .json(&json!({ "name": "mine", "columns": [{ "name": "x" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let issued = set_cookie(&response).unwrap();
    assert!(issued.len() == 43 && issued != forged, "{issued}");
    let stored: i64 = sqlx::query_scalar("select count(*) from sessions where token_hash = $1")
        .bind(server::auth::secret::hash(&issued))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 1, "only the token's hash is stored");
    let raw: i64 = sqlx::query_scalar("select count(*) from sessions where token_hash = $1")
        .bind(issued.as_bytes())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(raw, 0);

    // Signing in replaces the guest's session: the old token is nobody from then on.
    account(&db, "ada@example.com", Role::Member).await;
    let response = plain
        .post(server.url("/api/session"))
        .header("cookie", format!("conveyor_session={issued}"))
        .json(&json!({ "email": " Ada@Example.com ", "password": password_of("ada@example.com") }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let signed_in = set_cookie(&response).unwrap();
    assert_ne!(signed_in, issued);
    let old = plain
        .get(server.url("/api/session"))
        .header("cookie", format!("conveyor_session={issued}"))
        .send()
        .await
        .unwrap();
    assert_eq!(old.json::<Value>().await.unwrap()["me"], Value::Null);

    // A wrong password and an unknown email get the same answer.
    for (email, password) in [("ada@example.com", "nope nope"), ("who@example.com", "x")] {
        let response = plain
            .post(server.url("/api/session"))
            .json(&json!({ "email": email, "password": password }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], "The email or password is wrong.");
    }

    // An expired session is nobody, however recently it was used.
    sqlx::query("update sessions set expires_at = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .unwrap();
    let expired = plain
        .get(server.url("/api/session"))
        .header("cookie", format!("conveyor_session={signed_in}"))
        .send()
        .await
        .unwrap();
    assert_eq!(expired.json::<Value>().await.unwrap()["me"], Value::Null);
    server.stop().await;
}

#[tokio::test]
async fn a_guest_who_signs_up_keeps_their_jobs_and_a_new_password_ends_every_session() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let job = server.import("mine.csv", csv(5), "mine").await;
    server.finished(job.id).await;
    let guest = me(&server, &server.client).await;
    assert_eq!(guest["role"], "guest");

    let signed_up = server
        .post_json(
            "/api/account",
            json!({ "email": "grace@example.com", "password": "a long password" }),
        )
        .await;
    assert_eq!(signed_up.status(), StatusCode::CREATED);
    let member = me(&server, &server.client).await;
    assert_eq!(
        (&member["id"], &member["role"], &member["email"]),
        (&guest["id"], &json!("member"), &json!("grace@example.com"))
    );
    assert_eq!(server.job(job.id).await.status, JobStatus::Completed);
    let rows: Value = server.get_json("/api/datasets/mine/rows").await;
    assert_eq!(rows["rows"].as_array().unwrap().len(), 5);

    // The email is taken now, whatever its case; a short password is refused.
    for (email, password, status) in [
        (
            "GRACE@example.com",
            "another long one",
            StatusCode::CONFLICT,
        ),
        ("new@example.com", "short", StatusCode::UNPROCESSABLE_ENTITY),
        (
            "not an email",
            "a long password",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let response = TestServer::new_client()
            .post(server.url("/api/account"))
            .json(&json!({ "email": email, "password": password }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{email}");
    }

    // A second browser signed in; changing the password (from the first) ends it.
    let other = TestServer::new_client();
    let signed_in = other
        .post(server.url("/api/session"))
        .json(&json!({ "email": "grace@example.com", "password": "a long password" }))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::OK);
    let wrong = server
        .post_json(
            "/api/account/password",
            json!({ "current": "not it", "new": "a newer password" }),
        )
        .await;
    assert_eq!(wrong.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let changed = server
        .post_json(
            "/api/account/password",
            json!({ "current": "a long password", "new": "a newer password" }),
        )
        .await;
    assert_eq!(changed.status(), StatusCode::NO_CONTENT);
    assert_eq!(me(&server, &other).await, Value::Null);
    assert_eq!(
        me(&server, &server.client).await["email"],
        "grace@example.com"
    );
    let old_password = other
        .post(server.url("/api/session"))
        .json(&json!({ "email": "grace@example.com", "password": "a long password" }))
        .send()
        .await
        .unwrap();
    assert_eq!(old_password.status(), StatusCode::UNAUTHORIZED);

    // Signing out ends the session.
    let out = server
        .client
        .delete(server.url("/api/session"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    assert_eq!(me(&server, &server.client).await, Value::Null);
    server.stop().await;
}

#[tokio::test]
async fn an_api_token_runs_upload_create_and_follow_without_a_cookie_until_revoked() {
    let db = TestDb::new().await;
    account(&db, "bot@example.com", Role::Member).await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let browser = server.signed_in("bot@example.com").await;
    let created = browser
        .post(server.url("/api/account/tokens"))
        .json(&json!({ "name": "nightly" }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("cvt_"), "{secret}");
    let listed: Value = json_of(browser.get(server.url("/api/account/tokens"))).await;
    assert!(
        !listed.to_string().contains(&secret),
        "the secret is shown once"
    );

    // A script: no cookie jar, a token, and even a foreign Origin (tokens are not browsers).
    let script = cookieless();
    let bearer = format!("Bearer {secret}");
    let form = file_form("nightly.csv", csv(20));
    let upload: Value = json_of(
        script
            .post(server.url("/api/uploads"))
            .header("authorization", &bearer)
            .header("origin", "https://elsewhere.example")
            .multipart(form),
    )
    .await;
    let response = script
        .post(server.url("/api/jobs"))
        .header("authorization", &bearer)
        .json(&json!({ "jobType": "import", "fileGuid": upload["id"], "dataset": "nightly" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert!(
        set_cookie(&response).is_none(),
        "token requests get no cookie"
    );
    let job: JobView = response.json().await.unwrap();
    let events = script
        .get(server.url(&format!("/api/jobs/{}/events", job.id)))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let done = Events::from_response(events).finished().await;
    assert_eq!((done.status, done.rows_ok), (JobStatus::Completed, 20));
    // The browser signed in as the same person sees the script's job.
    let seen = browser
        .get(server.url(&format!("/api/jobs/{}", job.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(seen.status(), StatusCode::OK);

    let revoked = browser
        .delete(server.url(&format!(
            "/api/account/tokens/{}",
            created["id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    // A revoked or made-up token is refused; another scheme is not ours: a visitor.
    for (token, status) in [
        (bearer.as_str(), StatusCode::UNAUTHORIZED),
        ("Bearer cvt_made-up", StatusCode::UNAUTHORIZED),
        ("Basic Ym90OnB3", StatusCode::NOT_FOUND),
    ] {
        let refused = script
            .get(server.url(&format!("/api/jobs/{}", job.id)))
            .header("authorization", token)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), status, "{token}");
    }
    server.stop().await;
}

fn serve_args(auth: AuthArgs) -> ServeArgs {
    ServeArgs {
        no_workers: true,
        max_upload_bytes: 1 << 20,
        auth,
        ..ServeArgs::default()
    }
}

#[tokio::test]
async fn required_mode_admits_only_accounts_and_sign_up_can_be_switched_off() {
    let db = TestDb::new().await;
    account(&db, "ada@example.com", Role::Member).await;
    let required = AuthArgs {
        mode: AuthMode::Required,
        sign_up: false,
        ..AuthArgs::default()
    };
    let server = TestServer::start_with_args(&db, serve_args(required)).await;
    let visitor = TestServer::new_client();
    let no_redirects = patient_client()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    for (method, path) in [
        ("GET", "/api/jobs"),
        ("POST", "/api/uploads"),
        ("GET", "/api/jobs/events"),
        // A program, not a page: no sign-in redirect.
        ("GET", "/metrics"),
    ] {
        let response = visitor
            .request(method.parse().unwrap(), server.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
    }
    let page = no_redirects
        .get(server.url("/jobs?status=failed"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        page.headers()["location"],
        "/login?next=%2Fjobs%3Fstatus%3Dfailed"
    );
    let rpc = no_redirects
        .post(server.url("/rpc/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(rpc.status(), StatusCode::UNAUTHORIZED);
    for open in ["/login", "/signup"] {
        let response = no_redirects.get(server.url(open)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{open}");
    }
    let session: Value = json_of(visitor.get(server.url("/api/session"))).await;
    assert_eq!(
        (session["guests"].clone(), session["signUp"].clone()),
        (json!(false), json!(false))
    );
    let sign_up = visitor
        .post(server.url("/api/account"))
        .json(&json!({ "email": "new@example.com", "password": "a long password" }))
        .send()
        .await
        .unwrap();
    assert_eq!(sign_up.status(), StatusCode::FORBIDDEN);

    let ada = server.signed_in("ada@example.com").await;
    let listed = ada.get(server.url("/api/jobs")).send().await.unwrap();
    assert_eq!(listed.status(), StatusCode::OK);
    let form = file_form("a.csv", csv(1));
    let upload = ada
        .post(server.url("/api/uploads"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), StatusCode::CREATED);
    server.stop().await;
}

#[tokio::test]
async fn admins_change_roles_but_never_remove_the_last_admin() {
    let db = TestDb::new().await;
    let root = account(&db, "root@example.com", Role::Admin).await;
    let ada = account(&db, "ada@example.com", Role::Member).await;
    let server = TestServer::start(&db, None).await;
    let admin = server.signed_in("root@example.com").await;
    let member = server.signed_in("ada@example.com").await;
    let patch = |client: &Client, id: uuid::Uuid, role: &str| {
        client
            .patch(server.url(&format!("/api/users/{id}")))
            .json(&json!({ "role": role }))
            .send()
    };

    let last = patch(&admin, root, "member").await.unwrap();
    assert_eq!(last.status(), StatusCode::CONFLICT);
    let bad = patch(&admin, ada, "guest").await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let promoted = patch(&admin, ada, "viewer").await.unwrap();
    assert_eq!(promoted.status(), StatusCode::OK);
    // It holds from the next request: the viewer sees everything and changes nothing.
    assert_eq!(me(&server, &member).await["role"], "viewer");
    let refused = member
        .post(server.url("/api/datasets"))
        .json(&json!({ "name": "x", "columns": [{ "name": "x" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let made_admin = patch(&admin, ada, "admin").await.unwrap();
    assert_eq!(made_admin.status(), StatusCode::OK);
    let demoted = patch(&member, root, "member").await.unwrap();
    assert_eq!(demoted.status(), StatusCode::OK, "two admins: one may go");
    let users: Value = json_of(member.get(server.url("/api/users"))).await;
    let roles: Vec<_> = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["email"].as_str().unwrap(), u["role"].as_str().unwrap()))
        .collect();
    assert_eq!(
        roles,
        [("root@example.com", "member"), ("ada@example.com", "admin")]
    );
    server.stop().await;
}

#[tokio::test]
async fn server_user_add_creates_the_first_admin_and_resets_passwords() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
            .args(["user", "add"])
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (ok, out, err) = run(&["--email", "Root@Example.com", "--role", "admin"], None);
    assert!(ok, "{err}");
    assert!(out.contains("created admin root@example.com"), "{out}");
    let generated = out
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .unwrap()
        .to_owned();
    let root = TestServer::new_client();
    let signed_in = root
        .post(server.url("/api/session"))
        .json(&json!({ "email": "root@example.com", "password": generated }))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::OK);
    assert_eq!(me(&server, &root).await["role"], "admin");
    let hashes: Vec<String> = sqlx::query_scalar("select password_hash from users")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(
        hashes
            .iter()
            .all(|h| h.starts_with("$argon2id$") && !h.contains(&generated))
    );

    // A reset from stdin: the new password works, the old sessions end, nothing is printed.
    let (ok, out, err) = run(
        &[
            "--email",
            "root@example.com",
            "--role",
            "admin",
            "--password-stdin",
        ],
        Some("chosen by the operator\n"),
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("reset root@example.com") && !out.contains("password:"),
        "{out}"
    );
    assert_eq!(me(&server, &root).await, Value::Null);
    let again = root
        .post(server.url("/api/session"))
        .json(&json!({ "email": "root@example.com", "password": "chosen by the operator" }))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let (ok, _, err) = run(&["--email", "x@example.com", "--role", "guest"], None);
    assert!(!ok && err.contains("admin, viewer, member"), "{err}");
    let (ok, _, err) = run(&["--email", "root@example.com", "--role", "member"], None);
    assert!(
        !ok && err.contains("no admin"),
        "the last admin stays: {err}"
    );
    server.stop().await;
}

#[tokio::test]
async fn open_streams_end_with_their_session_and_required_mode_ignores_guests() {
    let db = TestDb::new().await;
    account(&db, "ada@example.com", Role::Member).await;
    let server = TestServer::start(&db, None).await;
    let ada = server.signed_in("ada@example.com").await;
    let created = server.import_as(&ada, "a.csv", csv(1), json!({ "dataset": "a" }));
    let job = created.await.json::<JobView>().await.unwrap().id;
    let mut list = Events::from_response(
        ada.get(server.url("/api/jobs/events"))
            .send()
            .await
            .unwrap(),
    );
    let mut one = server.events_as(&ada, job, None).await;
    list.until(|view| view.id == job).await;
    one.next().await;
    // A new password, set from another browser, ends this browser's session and its streams.
    let other = server.signed_in("ada@example.com").await;
    let changed = other
        .post(server.url("/api/account/password"))
        .json(&json!({ "current": password_of("ada@example.com"), "new": "a brand new one" }))
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), StatusCode::NO_CONTENT);
    list.ended().await;
    one.ended().await;

    // A guest's session from guest mode counts for nothing once accounts are required.
    let guest = TestServer::new_client();
    let made = guest
        .post(server.url("/api/datasets"))
        .json(&json!({ "name": "g", "columns": [{ "name": "x" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let required = AuthArgs {
        mode: AuthMode::Required,
        ..AuthArgs::default()
    };
    let strict = TestServer::start_with_args(&db, serve_args(required)).await;
    let refused = guest.get(strict.url("/api/datasets")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        set_cookie(&refused).as_deref(),
        Some(""),
        "the guest cookie is removed"
    );
    strict.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn owners_from_before_accounts_claim_their_things_with_their_old_cookie() {
    // A database as it was before accounts: owners were browser-session UUIDs (the cookie).
    let db = TestDb::new_in_unmigrated(&admin_url()).await;
    migrate_before(&db, 20261122000013).await;
    let (plain, secure) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for (owner, name) in [(plain, "old"), (secure, "older")] {
        sqlx::query(
            "insert into datasets (id, owner, name, columns) values (gen_random_uuid(), $1, $2,
                 '[{\"name\":\"x\",\"type\":\"text\",\"required\":false}]')",
        )
        .bind(owner.to_string())
        .bind(name)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    server::db::migrate(&db.pool).await.unwrap();
    let owners: Vec<uuid::Uuid> = sqlx::query_scalar("select owner from datasets")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(
        !owners.contains(&plain) && !owners.contains(&secure),
        "guests get new ids: the old cookie stays a secret"
    );

    let server = TestServer::start(&db, None).await;
    let open = |cookie: String| {
        let request = cookieless()
            .get(server.url("/api/datasets/old"))
            .header("cookie", cookie)
            .send();
        async move { request.await.unwrap() }
    };
    let first = open(format!("conveyor_session={plain}")).await;
    assert_eq!(
        first.status(),
        StatusCode::OK,
        "the old cookie still opens it"
    );
    let session = set_cookie(&first).unwrap();
    assert_eq!(session.len(), 43, "and is swapped for a real session");
    let with_session = open(format!("conveyor_session={session}")).await;
    assert_eq!(with_session.status(), StatusCode::OK);
    // A tab racing the first gets in too; once the claim has lapsed, the old value is nothing.
    assert_eq!(
        open(format!("conveyor_session={plain}")).await.status(),
        StatusCode::OK
    );
    sqlx::query(
        "update legacy_owners set claimed_at = now() - interval '6 minutes'
         where cookie_hash = sha256(convert_to($1, 'UTF8'))",
    )
    .bind(plain.to_string())
    .execute(&db.pool)
    .await
    .unwrap();
    let lapsed = open(format!("conveyor_session={plain}")).await;
    assert_eq!(lapsed.status(), StatusCode::NOT_FOUND);
    assert_eq!(set_cookie(&lapsed).as_deref(), Some(""));
    server.stop().await;

    // Over HTTPS the cookie has a new name; the old one, under the plain name, still claims.
    let https = AuthArgs {
        https: true,
        ..AuthArgs::default()
    };
    let server = TestServer::start_with_args(&db, serve_args(https)).await;
    let response = cookieless()
        .get(server.url("/api/datasets/older"))
        .header("cookie", format!("conveyor_session={secure}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cookies: Vec<&str> = response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("__Host-conveyor_session=") && c.contains("Secure")),
        "{cookies:?}"
    );
    assert!(
        cookies.iter().any(|c| c.starts_with("conveyor_session=;")),
        "{cookies:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_visitor_becomes_a_guest_only_for_a_request_that_can_succeed() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let users = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from users")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let visitor = cookieless();
    for body in [
        json!({ "jobType": "import", "fileGuid": uuid::Uuid::new_v4(), "dataset": "x" }),
        json!({ "jobType": "import", "fileGuid": uuid::Uuid::new_v4(), "dataset": "a b" }),
        json!({ "jobType": "export", "dataset": "x" }),
        json!({ "jobType": "export", "dataset": "x", "format": "pdf" }),
        json!({ "jobType": "batch", "parentId": uuid::Uuid::new_v4() }),
        json!({ "jobType": "nonsense" }),
    ] {
        let response = visitor
            .post(server.url("/api/jobs"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        assert!(set_cookie(&response).is_none(), "{body}");
    }
    assert_eq!(users().await, 0);
    let batch = visitor
        .post(server.url("/api/jobs"))
        .json(&json!({ "jobType": "batch" }))
        .send()
        .await
        .unwrap();
    assert_eq!(batch.status(), StatusCode::ACCEPTED);
    assert!(set_cookie(&batch).is_some_and(|c| c.len() == 43));
    assert_eq!(users().await, 1);
    server.stop().await;
}
