//! The browser's own defences on a real server: cross-site writes refused (a form on another
//! site cannot cancel a job or upload), a `Host` we do not serve refused, the security headers
//! (a Content-Security-Policy whose nonce is the one on the page's scripts), and hostile names
//! escaped in server-rendered pages.

use crate::support::{TestDb, TestServer, cookieless, csv, file_form, worker_args};
use app::model::JobStatus;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn cross_site_writes_are_refused_and_same_site_ones_pass() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("mine.csv", csv(3), "mine").await;
    let cancel = server.url(&format!("/api/jobs/{}/cancel", job.id));
    let host = server.base.trim_start_matches("http://").to_owned();

    // A form on another site posts with the victim's cookie: refused, and nothing changes.
    for (header, value) in [
        ("origin", "https://evil.example".to_owned()),
        ("origin", "null".to_owned()),
        ("sec-fetch-site", "cross-site".to_owned()),
        ("sec-fetch-site", "same-site".to_owned()),
    ] {
        let response = server
            .client
            .post(&cancel)
            .header(header, &value)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{header}: {value}"
        );
    }
    let form = file_form("x.csv", csv(1));
    let upload = server
        .client
        .post(server.url("/api/uploads"))
        .header("sec-fetch-site", "cross-site")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), StatusCode::FORBIDDEN);
    assert_eq!(server.job(job.id).await.status, JobStatus::Waiting);

    // Reading is not a write; and our own pages' requests pass.
    let read = server
        .client
        .get(server.url(&format!("/api/jobs/{}", job.id)))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    // Another scheme's credentials (a proxy's Basic authentication) are not ours: ignored, and
    // no way around the origin check.
    let basic = server
        .client
        .post(&cancel)
        .header("authorization", "Basic dXNlcjpwdw==")
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), StatusCode::FORBIDDEN);
    let behind_proxy = server
        .client
        .get(server.url(&format!("/api/jobs/{}", job.id)))
        .header("authorization", "Basic dXNlcjpwdw==")
        .send()
        .await
        .unwrap();
    assert_eq!(
        behind_proxy.status(),
        StatusCode::OK,
        "the cookie still counts"
    );
    let ours = server
        .client
        .post(&cancel)
        .header("origin", format!("http://{host}"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(ours.status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn a_host_we_do_not_serve_is_refused() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let client = cookieless();
    for host in [
        "attacker.example",
        "attacker.example:3000",
        "127.0.0.1.nip.io",
    ] {
        let response = client
            .get(server.url("/api/jobs"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST, "{host}");
    }
    let port = server.base.rsplit(':').next().unwrap();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let response = client
            .get(server.url("/api/jobs"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{host}");
    }
    server.stop().await;
}

#[tokio::test]
async fn every_response_carries_the_security_headers_and_pages_a_nonce_policy() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let client = cookieless();

    let page = client.get(server.url("/jobs")).send().await.unwrap();
    let headers = page.headers().clone();
    let html = page.text().await.unwrap();
    let policy = headers["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(policy.contains("'wasm-unsafe-eval'") && !policy.contains("unsafe-inline"));
    let nonce = policy
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("a nonce in the policy");
    let tags: Vec<&str> = html
        .split("<script")
        .skip(1)
        .map(|rest| rest.split('>').next().unwrap_or_default())
        .collect();
    assert!(!tags.is_empty(), "{html}");
    for tag in tags {
        assert!(
            tag.contains(&format!("nonce=\"{nonce}\"")),
            "a script without the response's nonce: <script{tag}>"
        );
    }
    let again = client.get(server.url("/jobs")).send().await.unwrap();
    assert_ne!(
        again.headers()["content-security-policy"],
        headers["content-security-policy"],
        "a new nonce per response"
    );

    for response in [
        &headers,
        client
            .get(server.url("/api/jobs"))
            .send()
            .await
            .unwrap()
            .headers(),
        client
            .get(server.url("/no/such/page"))
            .send()
            .await
            .unwrap()
            .headers(),
    ] {
        assert_eq!(response["x-content-type-options"], "nosniff");
        assert_eq!(response["x-frame-options"], "DENY");
        assert_eq!(response["referrer-policy"], "same-origin");
        assert!(
            response["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert!(
            response.get("strict-transport-security").is_none(),
            "no TLS here"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn hostile_names_are_escaped_in_server_rendered_pages() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, Some(worker_args(100))).await;
    let evil = "</script><img src=x onerror=alert(1)>";
    let file = format!("{evil}\n1\n").into_bytes();
    let job = server.import(&format!("{evil}.csv"), file, "hostile").await;
    let done = server.finished(job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let dataset = server
        .post_json(
            "/api/datasets",
            json!({ "name": "</script>", "columns": [{ "name": "x" }] }),
        )
        .await;
    assert_eq!(
        dataset.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "names are plain"
    );

    for path in [
        format!("/jobs/{}", job.id),
        "/jobs".to_owned(),
        "/datasets/hostile".to_owned(),
    ] {
        let html = server.get_text(&path).await;
        assert!(!html.contains("<img src=x"), "{path}: {html}");
        assert_eq!(
            html.matches("</script>").count(),
            html.matches("<script").count(),
            "{path}: a name closed a script: {html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{path}: shown as text: {html}"
        );
    }
    server.stop().await;
}
