//! Maintenance: the duties that keep the engine whole whatever its processes do, each a module
//! with its own loop and period, in its own task, so a slow one never delays another. Each
//! round is one transaction led by one process at a time (`store::leadership`), so every
//! worker process runs them all and any one of them dying loses nothing.
//!
//! | duty | period | what it does |
//! |---|---|---|
//! | [`lease_rescue`] | heartbeat | frees items whose lease expired; fails those out of attempts |
//! | [`requeue`] | heartbeat | queues a message for every due item without a live one |
//! | [`batches`] | heartbeat | ends sealed batches whose children have all ended |
//! | [`counts`] | heartbeat | folds the job count deltas into the counts the job list shows |
//! | [`retention`] | 10 min, then round after round while a backlog is left | deletes what finished jobs left behind (`store::retention`) |
//! | callbacks ([`super::callbacks`]) | 1 s | delivers completion callbacks; no leader: each delivery claims its job's row |
//!
//! Every statement they run lives in `store/`.

pub mod batches;
pub mod counts;
pub mod lease_rescue;
pub mod requeue;
pub mod retention;

use std::{future::Future, time::Duration};

use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::callbacks;
use crate::{config::WorkerArgs, store::leadership::Duty};

/// Starts every duty in `tasks`; each stops when `shutdown` fires.
pub fn spawn(
    tasks: &mut JoinSet<()>,
    pool: &PgPool,
    args: &WorkerArgs,
    shutdown: &CancellationToken,
) {
    let heartbeat = args.heartbeat();
    let lease = args.lease();
    let (items, jobs) = args.retention();
    let kept = retention::Kept { items, jobs };
    let p = pool.clone();
    tasks.spawn(every(
        Duty::LeaseRescue,
        heartbeat,
        shutdown.clone(),
        move || lease_rescue::round(p.clone()),
    ));
    let p = pool.clone();
    tasks.spawn(every(
        Duty::Requeue,
        heartbeat,
        shutdown.clone(),
        move || requeue::round(p.clone(), lease),
    ));
    let p = pool.clone();
    tasks.spawn(every(
        Duty::BatchSettlement,
        heartbeat,
        shutdown.clone(),
        move || batches::round(p.clone()),
    ));
    let p = pool.clone();
    tasks.spawn(every(
        Duty::CountFolding,
        heartbeat,
        shutdown.clone(),
        move || counts::round(p.clone()),
    ));
    let p = pool.clone();
    let stop = shutdown.clone();
    tasks.spawn(every(
        Duty::Retention,
        retention::EVERY,
        shutdown.clone(),
        move || {
            let (p, stop) = (p.clone(), stop.clone());
            async move { retention::catch_up(&p, kept, &stop).await.map(|_| ()) }
        },
    ));
    tasks.spawn(callbacks::run(
        pool.clone(),
        args.callbacks.clone(),
        shutdown.clone(),
    ));
}

/// Runs `round` at once and then every `period` (a late round delays the next, never doubles
/// it) until `shutdown`; a failed round is logged and the next one tries again.
async fn every<F, Fut, E>(duty: Duty, period: Duration, shutdown: CancellationToken, mut round: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(err) = round().await {
            tracing::warn!(
                ?duty,
                "maintenance round failed (the next one retries): {err}"
            );
        }
    }
}
