//! Running workers: apalis fetches task messages from PostgreSQL and hands them to
//! [`handle`]. Each process runs `concurrency` apalis workers of one task at a time.
//!
//! Guards against apalis-postgres 1.0's known defects (see `docs/architecture.md`):
//! - names are unique per process start, so a restarted process never shadows its dead self
//!   and the dead one's tasks are re-queued after `3 × heartbeat`;
//! - a batch size of 1, so a fetched task never waits behind a busy slot without a heartbeat;
//! - pub/sub *and* a 1 s poll, because re-queued tasks send no NOTIFY;
//! - every task runs in its own tokio task, so a panic fails that task instead of silently
//!   stopping the worker;
//! - none of this decides correctness: the chunk done-gate does.

use std::time::Duration;

use apalis::prelude::{BackendExt, BoxDynError, Data, Strategy, WorkerBuilder};
use apalis_postgres::{Config, PostgresStorage, Pubsub};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    Engine, chunk, export, plan,
    queue::{QUEUE, TaskMsg},
};
use crate::config::WorkerArgs;

/// Runs workers until `shutdown` fires, then lets in-flight tasks finish.
pub async fn run(engine: Engine, args: &WorkerArgs, shutdown: CancellationToken) {
    let mut workers = JoinSet::new();
    let process = format!(
        "{}-{}-{}",
        host_name(),
        std::process::id(),
        &Uuid::new_v4().simple().to_string()[..8]
    );
    for n in 0..args.concurrency.max(1) {
        let name = format!("conveyor-{process}-{n}");
        let config = Config::default()
            .queue(QUEUE)
            .batch_size(1)
            .heartbeat_interval(args.heartbeat())
            .missed_heartbeats(3);
        let strategy = Strategy::new()
            .stream(Pubsub::new(engine.pool.clone(), QUEUE.to_owned()))
            .interval(Duration::from_secs(1));
        let backend = PostgresStorage::<TaskMsg>::new(&engine.pool)
            .with_config(config)
            .poll_with_strategy(strategy);
        let worker = WorkerBuilder::new(name.clone())
            .backend(backend)
            .data(engine.clone())
            .build(handle);
        let stop = shutdown.clone();
        workers.spawn(async move {
            let stopped = async move {
                stop.cancelled().await;
                Ok::<_, std::io::Error>(())
            };
            if let Err(err) = worker.run_until(stopped).await {
                tracing::error!(worker = %name, "worker stopped: {err}");
            }
        });
    }
    tracing::info!(workers = args.concurrency, %process, "workers running");
    while workers.join_next().await.is_some() {}
}

/// Runs one task message.
async fn handle(task: TaskMsg, engine: Data<Engine>) -> Result<(), BoxDynError> {
    let engine = (*engine).clone();
    let label = format!("{task:?}");
    let result = tokio::spawn(async move {
        match task {
            TaskMsg::Plan { job_id } => plan::run(&engine, job_id).await,
            TaskMsg::Chunk { job_id, chunk_no } => chunk::run(&engine, job_id, chunk_no).await,
            TaskMsg::ExportPlan { job_id } => export::plan(&engine, job_id).await,
            TaskMsg::ExportChunk { job_id, chunk_no } => {
                export::chunk(&engine, job_id, chunk_no).await
            }
            TaskMsg::ExportFinish { job_id } => export::finish(&engine, job_id).await,
        }
    })
    .await
    .map_err(super::TaskError::from)
    .and_then(|result| result);
    if let Err(err) = &result {
        tracing::warn!(task = %label, "task failed, will be retried: {err}");
    }
    result.map_err(Into::into)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".to_owned())
}
