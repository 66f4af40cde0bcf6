//! Completion callbacks: once a job with a `callbackUrl` has ended, its final state (the
//! `JobView` JSON) is POSTed there, with `Idempotency-Key: <job id>`, until an answer in the
//! 2xx range is recorded; after that, never again. A try claims the job for a while first, so
//! two processes never send it at the same time. The one gap is a process dying between a 2xx
//! and recording it: the next try sends the same body with the same key, which the receiver can
//! drop.

use std::time::Duration;

use sqlx::PgPool;

use crate::{
    auth::Sees,
    store::{callbacks, jobs},
};

/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Sends the callbacks that are due; returns how many were delivered.
pub async fn deliver_due(pool: &PgPool, client: &reqwest::Client) -> sqlx::Result<usize> {
    let due = callbacks::claim_due(pool, 10, 3 * TIMEOUT).await?;
    let mut delivered = 0;
    for (job_id, url, attempt) in due {
        let Some(mut job) = jobs::find(pool, job_id, Sees::Everything).await? else {
            continue;
        };
        // The callback's receiver is told whose job it was by id, not by email.
        job.owner_email = None;
        let sent = client
            .post(&url)
            .timeout(TIMEOUT)
            .header("Idempotency-Key", job_id.to_string())
            .json(&job)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                callbacks::delivered(pool, job_id).await?;
                delivered += 1;
            }
            outcome => {
                let error = match outcome {
                    Ok(response) => format!("the callback answered {}", response.status()),
                    Err(err) => format!("the callback could not be sent: {err}"),
                };
                tracing::warn!(%job_id, attempt, "{error}");
                callbacks::failed(pool, job_id, &error, backoff(attempt)).await?;
            }
        }
    }
    Ok(delivered)
}

/// 2 s, 4 s, 8 s, … at most 10 minutes.
fn backoff(attempt: i32) -> Duration {
    Duration::from_secs(2u64.pow(attempt.clamp(1, 20) as u32).min(600))
}
