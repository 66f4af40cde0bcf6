//! Completion callbacks: once a job with a `callbackUrl` has ended, its final state (the
//! `JobView` JSON) is POSTed there, with `Idempotency-Key: <job id>`, until an answer in the
//! 2xx range, backing off between tries, for a horizon after the job ended
//! (`CONVEYOR_CALLBACK_HORIZON_HOURS`). Every try is recorded and shown with the job. A try
//! claims the job for a while first, so two processes never send it at the same time. The one
//! gap is a process dying between a 2xx and recording it: the next try sends the job again with
//! the same key, which the receiver can drop.
//!
//! Callbacks go out from their own loop, at most `CONVEYOR_CALLBACK_CONCURRENCY` at once, each
//! within [`TIMEOUT`]: receivers that never answer slow nothing but other callbacks. Where they
//! may go is [`address`]'s business; redirects are not followed (a 3xx is a failed try).

pub mod address;

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio::{sync::Semaphore, task::JoinSet};
use tokio_util::sync::CancellationToken;

use crate::{
    auth::Sees,
    config::CallbackArgs,
    store::{
        callbacks::{self, Due, Outcome},
        jobs,
    },
};
use address::{Policy, Refused};

/// How long one POST may take, all told; connecting may take at most [`CONNECT_TIMEOUT`].
pub const TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the loop looks for due callbacks when nothing else wakes it.
const POLL: Duration = Duration::from_millis(500);

/// The client callbacks are sent with: only allowed addresses, no redirects, no proxy.
pub fn client(policy: Policy) -> reqwest::Client {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(address::Resolver(Arc::new(policy))))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TIMEOUT)
        .build()
        .expect("a client without special TLS settings always builds")
}

/// Sends due callbacks until `shutdown`, at most `args.concurrency` at once.
pub async fn run(pool: PgPool, args: CallbackArgs, shutdown: CancellationToken) {
    let policy = Policy::new(args.allow.clone());
    let client = client(policy.clone());
    let slots = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let mut sending = JoinSet::new();
    loop {
        let free = slots.available_permits();
        if free > 0 {
            match callbacks::claim_due(&pool, free as i64, 3 * TIMEOUT).await {
                Ok(due) => {
                    for due in due {
                        let permit = Arc::clone(&slots).try_acquire_owned();
                        let (pool, client, policy, horizon) =
                            (pool.clone(), client.clone(), policy.clone(), args.horizon());
                        sending.spawn(async move {
                            let _permit = permit;
                            if let Err(err) = send(&pool, &client, &policy, horizon, &due).await {
                                // The claim runs out and the callback is tried again.
                                tracing::warn!(job_id = %due.job_id, "recording a callback try failed: {err}");
                            }
                        });
                    }
                }
                Err(err) => tracing::warn!("looking for due callbacks failed: {err}"),
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(POLL) => {}
            Some(_) = sending.join_next(), if !sending.is_empty() => {}
        }
    }
    // A try cut short is claimed again once its claim runs out.
    sending.abort_all();
}

/// Sends every due callback once and waits for each (for tests and tools); how many were
/// delivered.
pub async fn deliver_due(
    pool: &PgPool,
    client: &reqwest::Client,
    args: &CallbackArgs,
) -> sqlx::Result<usize> {
    let policy = Policy::new(args.allow.clone());
    let mut delivered = 0;
    for due in callbacks::claim_due(pool, 100, 3 * TIMEOUT).await? {
        delivered += usize::from(send(pool, client, &policy, args.horizon(), &due).await?);
    }
    Ok(delivered)
}

/// One try; whether it was delivered.
async fn send(
    pool: &PgPool,
    client: &reqwest::Client,
    policy: &Policy,
    horizon: Duration,
    due: &Due,
) -> sqlx::Result<bool> {
    let Some(mut job) = jobs::find(pool, due.job_id, Sees::Everything).await? else {
        return Ok(false);
    };
    // The receiver is told whose job it was by id, not by email, and not about this callback.
    job.owner_email = None;
    job.callback = None;
    let checked = reqwest::Url::parse(&due.url)
        .ok()
        .and_then(|url| url.host().map(|host| policy.check_host(host)));
    let sent = match checked {
        Some(Ok(())) => client
            .post(&due.url)
            .header("Idempotency-Key", due.job_id.to_string())
            .json(&job)
            .send()
            .await
            .map_err(|err| why_not_sent(&err)),
        Some(Err(refused)) => Err(refused.to_string()),
        None => Err("the URL has no host".to_owned()),
    };
    let (status, error) = match sent {
        Ok(response) if response.status().is_success() => {
            let status = response.status().as_u16();
            callbacks::record(pool, due, Outcome::Delivered { status }).await?;
            crate::telemetry::callback_sent(true);
            return Ok(true);
        }
        Ok(response) => (
            Some(response.status().as_u16()),
            format!("answered {}", response.status()),
        ),
        Err(why) => (None, why),
    };
    tracing::info!(job_id = %due.job_id, attempt = due.attempt, "callback not delivered: {error}");
    let outcome = Outcome::Failed {
        status,
        error: &error,
        backoff: backoff(due.attempt),
        horizon,
    };
    callbacks::record(pool, due, outcome).await?;
    crate::telemetry::callback_sent(false);
    Ok(false)
}

/// Why a POST got no answer, in words for the job's owner.
fn why_not_sent(err: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return refused.to_string();
        }
        source = cause.source();
    }
    if err.is_timeout() {
        format!("no answer within {} seconds", TIMEOUT.as_secs())
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed before an answer came".to_owned()
    }
}

/// 2 s, 4 s, 8 s, … at most half an hour.
fn backoff(attempt: i32) -> Duration {
    Duration::from_secs(2u64.pow(attempt.clamp(1, 20) as u32).min(1800))
}
