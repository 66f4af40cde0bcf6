//! The browser's calls to the JSON API (uploading, starting and changing jobs, accounts). They
//! only run after hydration; on the server they are never reached and say so.

use serde_json::Value;

/// The API's answer (`null` for `204 No Content`), or the message of its JSON error
/// (`{"error":{"message"}}`) for the person.
#[cfg(feature = "hydrate")]
pub async fn send(
    request: Result<gloo_net::http::Request, gloo_net::Error>,
) -> Result<Value, String> {
    let response = request
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(|e| format!("The server could not be reached: {e}"))?;
    if response.status() == 204 {
        return Ok(Value::Null);
    }
    let ok = response.ok();
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    if ok {
        Ok(body)
    } else {
        Err(body["error"]["message"]
            .as_str()
            .unwrap_or("The request failed")
            .to_owned())
    }
}

/// `method path` with a JSON body (or none); the answer as JSON.
pub async fn call(method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
    #[cfg(feature = "hydrate")]
    {
        use gloo_net::http::RequestBuilder;
        let builder = RequestBuilder::new(path).method(match method {
            "POST" => gloo_net::http::Method::POST,
            "PATCH" => gloo_net::http::Method::PATCH,
            "DELETE" => gloo_net::http::Method::DELETE,
            _ => gloo_net::http::Method::GET,
        });
        send(match body {
            Some(body) => builder.json(&body),
            None => builder.build(),
        })
        .await
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (method, path, body);
        Err("This needs JavaScript".to_owned())
    }
}

/// `POST /api/jobs` with `body`; the new job's id.
pub async fn create_job(body: Value) -> Result<String, String> {
    let job = call("POST", "/api/jobs", Some(body)).await?;
    job["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "The server sent no job id".to_owned())
}

/// `POST /api/jobs/{id}/{action}` (`cancel` or `retry`); the job as it is now.
pub async fn job_action(id: uuid::Uuid, action: &str) -> Result<crate::model::JobView, String> {
    let job = call("POST", &format!("/api/jobs/{id}/{action}"), None).await?;
    serde_json::from_value(job).map_err(|e| e.to_string())
}

/// Loads `path` as a new page (after signing in or out, every part of the page changes).
pub fn reload_at(path: &str) {
    #[cfg(feature = "hydrate")]
    {
        let _ = leptos::prelude::window().location().assign(path);
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = path;
    }
}
