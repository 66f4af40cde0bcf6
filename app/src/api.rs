//! The browser's calls to the JSON API (uploading, starting jobs). They only run after
//! hydration; on the server they are never reached and say so.

use serde_json::Value;

/// The API's answer, or the message of its JSON error (`{"error":{"message"}}`) for the person.
#[cfg(feature = "hydrate")]
pub async fn send(
    request: Result<gloo_net::http::Request, gloo_net::Error>,
) -> Result<Value, String> {
    let response = request
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(|e| format!("The server could not be reached: {e}"))?;
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

/// `POST /api/jobs` with `body`; the new job's id.
pub async fn create_job(body: Value) -> Result<String, String> {
    #[cfg(feature = "hydrate")]
    {
        let job = send(gloo_net::http::Request::post("/api/jobs").json(&body)).await?;
        job["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "The server sent no job id".to_owned())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = body;
        Err("Starting a job needs JavaScript".to_owned())
    }
}

/// `POST /api/jobs/{id}/{action}` (`cancel` or `retry`); the job as it is now.
pub async fn job_action(id: uuid::Uuid, action: &str) -> Result<crate::model::JobView, String> {
    #[cfg(feature = "hydrate")]
    {
        let url = format!("/api/jobs/{id}/{action}");
        let job = send(gloo_net::http::Request::post(&url).build()).await?;
        serde_json::from_value(job).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (id, action);
        Err("Changing a job needs JavaScript".to_owned())
    }
}
