//! `GET /api/openapi.json`: an OpenAPI 3.1 document of every route of the router (and of none
//! it lacks), each operation with its own id, saying who may call it (in words, and as the
//! security its access means) and declaring its path's parameters, and every `$ref` in it leading to something in it. A route added without its
//! `#[utoipa::path]` fails here, by name.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::Value;
use server::http::{Access, route_table};

use crate::support::{TestDb, TestServer};

/// The keys of a path item that are operations.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every `$ref` in `value`.
fn refs<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => found.push(target),
                    _ => refs(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, found)),
        _ => {}
    }
}

#[tokio::test]
async fn the_openapi_document_describes_every_route_of_the_router() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let response = server
        .client
        .get(server.url("/api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let doc: Value = response.json().await.unwrap();
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.1"), "\"openapi\": {version:?}");
    assert_eq!(doc["info"]["title"], "Conveyor");

    let routed: BTreeSet<(String, String)> = route_table()
        .iter()
        .map(|(method, path, _)| (method.as_str().to_lowercase(), (*path).to_owned()))
        .collect();
    let paths = doc["paths"].as_object().expect("paths");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            let item = item.as_object().expect("a path item");
            METHODS
                .into_iter()
                .filter(|method| item.contains_key(*method))
                .map(|method| (method.to_owned(), path.clone()))
        })
        .collect();
    let named = |routes: Vec<&(String, String)>| -> Vec<String> {
        routes
            .into_iter()
            .map(|(method, path)| format!("{} {path}", method.to_uppercase()))
            .collect()
    };
    let missing = named(routed.difference(&documented).collect());
    assert!(
        missing.is_empty(),
        "routes of the router missing from /api/openapi.json (give the handler a \
         #[utoipa::path] and list it in server/src/http/openapi.rs): {missing:?}"
    );
    let extra = named(documented.difference(&routed).collect());
    assert!(
        extra.is_empty(),
        "/api/openapi.json has routes the router lacks: {extra:?}"
    );

    let mut operation_ids = BTreeSet::new();
    for (method, path, access) in route_table() {
        let method = method.as_str().to_lowercase();
        let route = format!("{} {path}", method.to_uppercase());
        let operation = &doc["paths"][path][&method];
        let id = operation["operationId"].as_str().unwrap_or_default();
        assert!(
            !id.is_empty() && operation_ids.insert(id),
            "{route}: operationId {id:?} is missing or not unique"
        );
        let description = operation["description"].as_str().unwrap_or_default();
        assert!(
            description.contains("Access: "),
            "{route} does not say who may call it: {description:?}"
        );
        // Each requirement names one scheme; `{}` (anonymous) names none.
        let security: Vec<&str> = operation["security"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|requirement| {
                let schemes = requirement.as_object().expect("a security requirement");
                schemes.keys().next().map_or("", String::as_str)
            })
            .collect();
        let expected: &[&str] = match access {
            _ if ["/healthz", "/readyz"].contains(&path) => &[],
            Access::Public | Access::Anyone => &["", "session", "apiToken"],
            Access::Scraper => &["session", "apiToken", "metricsToken"],
            Access::Account | Access::Admin | Access::Operator => &["session", "apiToken"],
            Access::Worker => &["workerToken"],
        };
        assert_eq!(security, expected, "{route}: the security of {access:?}");
        let declared: BTreeSet<&str> = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|parameter| parameter["in"] == "path")
            .filter_map(|parameter| parameter["name"].as_str())
            .collect();
        let in_path: BTreeSet<&str> = path
            .split('{')
            .skip(1)
            .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
            .collect();
        assert_eq!(declared, in_path, "{route}: its path parameters");
    }

    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty(), "the document refers to its components");
    for target in found {
        let resolved = target
            .strip_prefix('#')
            .and_then(|pointer| doc.pointer(pointer));
        assert!(resolved.is_some(), "\"$ref\": {target:?} leads nowhere");
    }
}
