//! Claims that wait (issue 14): an external worker asks for up to N items of its types and,
//! when none can be had, waits up to `waitSeconds` for some instead of asking again and again.
//! The wait holds no database connection: it listens to the hub's `items_ready` notifications
//! (sent in the transaction that makes items claimable: added, freed by a failure or by lease
//! rescue), and wakes by itself when the next item in backoff is due. A job that waits behind
//! another with its serialize key sends nothing when that one ends, so a wait also tries again
//! every [`RECHECK`].

use std::time::Duration;

use sqlx::PgPool;
use tokio::{sync::broadcast::error::RecvError, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    progress::{Hub, ItemsReady},
    store::assignments::{self, Assignment},
};

/// The longest a waiting claim goes without trying again.
pub const RECHECK: Duration = Duration::from_secs(5);

/// A claim: who asks, for what, how many, and how long it may wait.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    pub worker: &'a str,
    pub types: &'a [String],
    pub max: i64,
    pub wait: Duration,
}

/// Claims items as soon as there are some, waiting up to `claim.wait`; nothing when the wait
/// ends empty-handed or the process shuts down.
pub async fn claim(
    pool: &PgPool,
    hub: &Hub,
    claim: &Claim<'_>,
    shutdown: &CancellationToken,
) -> sqlx::Result<Vec<Assignment>> {
    // Listening before the first try: items made ready between a try and the wait are heard.
    let mut ready = hub.items_ready();
    let deadline = Instant::now() + claim.wait;
    loop {
        let claimed = assignments::claim(pool, claim.worker, claim.types, claim.max).await?;
        let now = Instant::now();
        if !claimed.is_empty() || now >= deadline {
            return Ok(claimed);
        }
        let next_due = assignments::next_due(pool, claim.types).await?;
        let until = [
            Some(deadline),
            Some(now + RECHECK),
            next_due.map(|d| now + d),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(deadline);
        let wake = async {
            loop {
                match ready.recv().await {
                    Ok(ItemsReady::Of(job_type))
                        if !claim.types.iter().any(|t| **t == *job_type) => {}
                    Ok(_) | Err(RecvError::Lagged(_)) => return,
                    // The hub stopped (shutting down): only the clock wakes us.
                    Err(RecvError::Closed) => std::future::pending().await,
                }
            }
        };
        tokio::select! {
            () = wake => {}
            () = tokio::time::sleep_until(until) => {}
            () = shutdown.cancelled() => return Ok(Vec::new()),
        }
    }
}
