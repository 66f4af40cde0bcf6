//! Running workers: apalis fetches task messages from PostgreSQL and hands them to
//! [`handle`]; [`Runner`] runs each under a lease; [`super::maintenance`] replaces what is lost;
//! [`super::callbacks`] sends completion callbacks from a loop of its own. In `serve`, creates
//! also hand small imports on directly, leased by their insert ([`super::lane`],
//! [`take_handed`]). Every run holds one of the process's run slots (as many as its
//! concurrency), whichever way it came.
//!
//! A message only says "this item may be due". The run takes the item's lease (counting an
//! attempt; nothing to do if the item is leased, done or not yet due), renews it every
//! heartbeat while it works, and stops at once if the lease is lost or the job is no longer
//! live (cancelled). A failure that is worth retrying frees the item after an exponential
//! backoff with jitter, until the job's attempts per item run out; the handler always reports
//! success to apalis, so apalis's own retries never add runs.
//!
//! Guards against apalis-postgres 1.0's known defects (see `docs/architecture.md`):
//! - names are unique per process start, so a restarted process never shadows its dead self;
//! - a batch size of 1, so a fetched task never waits behind a busy slot without a heartbeat
//!   (it waits for one of the shared run slots only while all are taken);
//! - pub/sub *and* a 1 s poll, because re-queued tasks send no NOTIFY;
//! - every run is its own tokio task, so a panic fails that attempt instead of silently
//!   stopping the worker;
//! - none of this decides correctness: leases, attempts and the chunk done-gate do.
//!
//! On shutdown the workers stop fetching, running items get `shutdown_grace` to finish, and
//! the rest are stopped and their leases given back, so another process picks them up at once.

use std::time::Duration;

use apalis::prelude::{BackendExt, BoxDynError, Data, Strategy, WorkerBuilder, WorkerBuilderExt};
use apalis_postgres::{Config, PostgresStorage, Pubsub};
use app::history::RunOutcome;
use tokio::task::JoinSet;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;
use uuid::Uuid;

use super::{
    Done, Engine, Run, TaskError, batch, chunk, deletion, export,
    lane::{self, Handed, Slots},
    maintenance, plan,
};
use crate::{
    config::WorkerArgs,
    incident,
    store::{
        history,
        leases::{self, AfterFailure, Item, Lease},
        notify, processes,
        queue::{QUEUE, TaskMsg},
        states,
    },
    telemetry,
};

/// The run slots of workers running `args`: as many as their concurrency.
pub fn slots(args: &WorkerArgs) -> Slots {
    std::sync::Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)))
}

/// This process's name among workers, unique per start: the prefix of its lease owners.
pub fn process_name() -> String {
    format!(
        "{}-{}-{}",
        host_name(),
        std::process::id(),
        &Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Runs workers and the maintenance duties until `shutdown` fires, then drains (see the module
/// docs). `process` is [`process_name`]; the runs take `slots` ([`slots`] of `args`); `lane`
/// brings the jobs this process's creates hand on ([`super::lane`]), if it makes any.
pub async fn run(
    engine: Engine,
    args: &WorkerArgs,
    process: String,
    slots: Slots,
    lane: Option<lane::Receiver>,
    shutdown: CancellationToken,
) {
    let host = host_name();
    let me = processes::Beat {
        process: process.clone(),
        host,
        pid: std::process::id(),
        slots: args.concurrency.max(1),
        every: args.heartbeat(),
    };
    if let Err(err) = processes::beat(&engine.pool, &me).await {
        tracing::warn!("cannot register this worker process (its next heartbeat retries): {err}");
    }
    let runner = Runner {
        engine: engine.clone(),
        process: process.clone(),
        lease: args.lease(),
        heartbeat: args.heartbeat(),
        stop_all: CancellationToken::new(),
        runs: TaskTracker::new(),
        slots,
    };
    let mut workers = JoinSet::new();
    for slot in 0..args.concurrency.max(1) {
        workers.spawn(fetch(
            runner.clone(),
            format!("conveyor-{process}-{slot}"),
            args.lease(),
            shutdown.clone(),
        ));
    }
    if let Some(lane) = lane {
        workers.spawn(take_handed(runner.clone(), lane, shutdown.clone()));
    }
    maintenance::spawn(&mut workers, &engine.pool, args, &shutdown);
    // Not one of `workers`, nor stopped by `shutdown`: it beats while anything runs, through
    // the drain, and stops once all has.
    let stop_beating = CancellationToken::new();
    let beating = tokio::spawn(beat(engine.pool.clone(), me, stop_beating.clone()));
    tracing::info!(workers = args.concurrency, %process, "workers running");
    tokio::select! {
        // Biased: the workers end with the shutdown too, and when both are ready by the time
        // this is polled, only a stop without one is an error.
        biased;
        () = shutdown.cancelled() => {}
        () = join_all(&mut workers) => tracing::error!("every worker stopped"),
    }

    // Stopping: apalis stops fetching; what runs gets the grace, counted from now.
    let drained = async {
        join_all(&mut workers).await;
        runner.runs.close();
        runner.runs.wait().await;
    };
    let grace = args.shutdown_grace();
    if tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!(
            running = runner.runs.len(),
            "stopping the chunks still running after {grace:?}; other workers will run them"
        );
        runner.stop_all.cancel();
        join_all(&mut workers).await;
        runner.runs.close();
        runner.runs.wait().await;
    }
    stop_beating.cancel();
    let _ = beating.await;
    if let Err(err) = processes::stopped(&engine.pool, &process).await {
        tracing::warn!("cannot record that this worker process stopped: {err}");
    }
    tracing::info!("workers stopped");
}

/// Says every heartbeat that this process is alive (`store::processes`), until `stop`.
async fn beat(pool: sqlx::PgPool, me: processes::Beat, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(me.every) => {}
            () = stop.cancelled() => return,
        }
        if let Err(err) = processes::beat(&pool, &me).await {
            tracing::warn!("worker process heartbeat failed (the next one retries): {err}");
        }
    }
}

async fn join_all(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

/// One apalis worker, taking one message at a time until shutdown. apalis ends a worker
/// whose database went away (a restart, a failover); this starts a new one, under a new name,
/// with backoff, until the database answers again.
async fn fetch(runner: Runner, name: String, lease: Duration, shutdown: CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    for start in 0.. {
        let name = format!("{name}-{start}");
        // No lock step: the fetch marks a message `Queued` under this worker with its time
        // (`lock_at`), which is all that `store::queue::message_is_live` and apalis's own
        // re-enqueueing of a dead worker's messages read; marking it `Running` as well cost a
        // transaction per task.
        let config = Config::default()
            .queue(QUEUE)
            .lock_tasks(false)
            .batch_size(1)
            .heartbeat_interval(lease)
            .missed_heartbeats(3);
        let pool = &runner.engine.pool;
        let strategy = Strategy::new()
            .stream(Pubsub::new(pool.clone(), QUEUE.to_owned()))
            .interval(Duration::from_secs(1));
        let backend = PostgresStorage::<TaskMsg>::new(pool)
            .with_config(config)
            .poll_with_strategy(strategy);
        // One task at a time: without the limit an apalis worker keeps fetching and runs every
        // message it fetched at once.
        let worker = WorkerBuilder::new(name.clone())
            .backend(backend)
            .concurrency(1)
            .data(runner.clone())
            .build(handle);
        let stop = shutdown.clone();
        let stopped = async move {
            stop.cancelled().await;
            Ok::<_, std::io::Error>(())
        };
        match worker.run_until(stopped).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(worker = %name, "worker stopped, restarting in {backoff:?}: {err}")
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Runs the jobs this process's creates hand on ([`super::lane`]) until `shutdown`; then gives
/// back the leases of those not begun, so that other workers run them at once. The first job
/// waiting takes a run slot, and those handed on meanwhile join it, in one batch
/// ([`Runner::run_batch`]). A first job that finds no slot within a heartbeat of its lease
/// (every slot busy with longer tasks) is given back too, long before its lease could run out:
/// requeueing then queues it with its owner's turn (one that joins a batch late renews its
/// lease, or is given back: [`Runner::renewed`]).
async fn take_handed(runner: Runner, mut lane: lane::Receiver, shutdown: CancellationToken) {
    loop {
        let handed = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            handed = lane.recv() => handed,
        };
        let Some(handed) = handed else { break };
        let too_late = tokio::time::Instant::from_std(handed.leased_at + runner.heartbeat);
        let slot = tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                lane::give_back(&runner.engine.pool, &handed.lease).await;
                break;
            }
            slot = runner.slots.clone().acquire_owned() => slot.expect("never closed"),
            () = tokio::time::sleep_until(too_late) => {
                lane::give_back(&runner.engine.pool, &handed.lease).await;
                continue;
            }
        };
        // Those handed on meanwhile run with it, in one batch ([`batch`]).
        let mut handed = vec![handed];
        while handed.len() < batch::MOST {
            match lane.try_recv() {
                Ok(next) => handed.push(next),
                Err(_) => break,
            }
        }
        let span = match &handed[..] {
            [one] => task_span(&one.task()),
            more => tracing::error_span!("batch", jobs = more.len()),
        };
        let runner_ = runner.clone();
        runner.runs.spawn(
            async move {
                runner_.run_batch(handed).await;
                drop(slot);
            }
            .instrument(span),
        );
    }
    lane.close();
    while let Some(handed) = lane.recv().await {
        lane::give_back(&runner.engine.pool, &handed.lease).await;
    }
}

/// Runs one message's item (see the module docs). Always `Ok`: our tables keep attempts.
async fn handle(task: TaskMsg, runner: Data<Runner>) -> Result<(), BoxDynError> {
    let runner = (*runner).clone();
    let span = task_span(&task);
    // The slots are shared with the runs creates hand on, first come first served: a run
    // waits here only while every slot is taken.
    let slot = runner.slots.clone().acquire_owned().await?;
    // Tracked outside apalis, so shutdown waits for the run even if apalis lets go of it.
    let run = runner.runs.spawn({
        let runner = runner.clone();
        async move {
            runner.run(task).await;
            drop(slot);
        }
        .instrument(span)
    });
    if let Err(err) = run.await {
        tracing::error!("a run crashed outside its item: {err}");
    }
    Ok(())
}

/// The span a run is logged in: which task, of which job (and chunk). At level `error`, so that
/// whatever `RUST_LOG` lets through still carries its fields.
fn task_span(task: &TaskMsg) -> tracing::Span {
    let item = Item::of(task);
    let span = tracing::error_span!(
        "task",
        task = task.kind(),
        job_id = %item.job_id(),
        chunk_no = tracing::field::Empty,
    );
    if let Item::Chunk { chunk_no, .. } = item {
        span.record("chunk_no", chunk_no);
    }
    span
}

/// What every run of this process shares.
#[derive(Clone)]
struct Runner {
    engine: Engine,
    /// This process's start, the prefix of its lease owners.
    process: String,
    lease: Duration,
    heartbeat: Duration,
    /// Stops every run: the shutdown grace is over.
    stop_all: CancellationToken,
    runs: TaskTracker,
    /// A run holds one of these from before it begins to its end ([`lane::Slots`]).
    slots: Slots,
}

impl Runner {
    async fn run(&self, task: TaskMsg) {
        let pool = &self.engine.pool;
        let item = Item::of(&task);
        let owner = format!("{}/{}", self.process, Uuid::new_v4().simple());
        let lease = match leases::acquire(pool, item, &owner, self.lease).await {
            Ok(Some(lease)) => lease,
            // Leased by another worker, done, not due, or its job has ended.
            Ok(None) => return,
            Err(err) => {
                // The message is spent; `maintenance::requeue` queues the item again.
                tracing::warn!(?task, "could not take the lease: {err}");
                return;
            }
        };
        self.run_leased(task, lease).await;
    }

    /// Runs the jobs creates handed on together: those that a batch can import take one
    /// transaction ([`batch`]); the others, and all of them if the batch fails, run one by one.
    async fn run_batch(&self, mut handed: Vec<Handed>) {
        if handed.len() == 1 {
            return self.run_handed(handed.pop().expect("one")).await;
        }
        let pool = &self.engine.pool;
        let mut ready = Vec::with_capacity(handed.len());
        for one in handed {
            if self.renewed(&one).await {
                ready.push(one);
            }
        }
        let stop = self.stop_all.child_token();
        let heartbeats: Vec<_> = ready
            .iter()
            .map(|one| {
                let lease = one.lease.clone();
                let beat = keep_alive(
                    pool.clone(),
                    lease,
                    self.lease,
                    self.heartbeat,
                    stop.clone(),
                );
                tokio::spawn(beat.in_current_span())
            })
            .collect();
        let started = std::time::Instant::now();
        let leases = ready.iter().map(|one| one.lease.clone()).collect();
        let imported =
            tokio::spawn(batch::import(self.engine.clone(), leases, stop).in_current_span());
        let imported = imported
            .await
            .map_err(TaskError::from)
            .and_then(|done| done);
        let took = started.elapsed();
        let imported = imported.unwrap_or_else(|err| {
            tracing::warn!("a batch of small imports failed, each runs alone: {err}");
            vec![false; ready.len()]
        });
        // The imported give their places back at once; the others run one by one in this
        // slot, their leases kept alive until each begins.
        let mut others = Vec::new();
        for ((one, beat), imported) in ready.into_iter().zip(heartbeats).zip(imported) {
            if imported {
                beat.abort();
                telemetry::task_ran(one.task().kind(), RunOutcome::Ok, took);
            } else {
                others.push((one, beat));
            }
        }
        for (one, beat) in others {
            beat.abort();
            if self.stop_all.is_cancelled() {
                lane::give_back(pool, &one.lease).await;
            } else {
                self.run_handed(one).await;
            }
        }
    }

    /// Runs a job its create handed on, once [`Self::renewed`].
    async fn run_handed(&self, handed: Handed) {
        if !self.renewed(&handed).await {
            return;
        }
        let task = handed.task();
        self.run_leased(task, handed.lease).await;
        // Held to the run's end: places bound the handed jobs waiting and running.
        drop(handed.place);
    }

    /// Whether a handed job may run under its lease. One that waited for a slot for a
    /// heartbeat or more renews it first (a run's own first renewal comes a heartbeat after it
    /// begins), and is given back if that fails: a lease lost meanwhile was rescued, and the
    /// job runs elsewhere.
    async fn renewed(&self, handed: &Handed) -> bool {
        if handed.leased_at.elapsed() < self.heartbeat {
            return true;
        }
        let lease = &handed.lease;
        let renewed = leases::renew(&self.engine.pool, lease, self.lease).await;
        if matches!(renewed, Ok(true)) {
            return true;
        }
        // Lost (rescued meanwhile), or the job ended (a cancel): nothing to run.
        tracing::info!(item = ?lease.item, "a handed job's lease was not renewed: {renewed:?}");
        lane::give_back(&self.engine.pool, lease).await;
        false
    }

    /// Runs `task` under `lease`, taken for it, renewing the lease while it runs, and records
    /// how the run ended.
    async fn run_leased(&self, task: TaskMsg, lease: Lease) {
        let stop = self.stop_all.child_token();
        let started = std::time::Instant::now();
        let heartbeat = tokio::spawn(
            keep_alive(
                self.engine.pool.clone(),
                lease.clone(),
                self.lease,
                self.heartbeat,
                stop.clone(),
            )
            .in_current_span(),
        );
        // The work stops itself at its next safe point once `stop` fires (never dropped in
        // the middle of a statement, which would leave its connection unusable).
        let work = tokio::spawn(
            execute(self.engine.clone(), task, lease.clone(), stop.clone()).in_current_span(),
        );
        let ended = work
            .await
            .map_err(TaskError::from)
            .and_then(|result| result);
        heartbeat.abort();
        let took = started.elapsed();
        let (outcome, recorded) = match ended {
            // Its work's transaction gave the lease back and ended the run.
            Ok(Done::RunEnded) => (RunOutcome::Ok, Ok(())),
            ended => self.end(&lease, &task, ended, &stop).await,
        };
        telemetry::task_ran(task.kind(), outcome, took);
        if let Err(err) = recorded {
            // The lease runs out and `maintenance::lease_rescue` frees the item.
            tracing::warn!(?task, "could not record the end of a run: {err}");
        }
    }

    /// Gives the lease back, or records the failed attempt, and ends the run with how it went.
    async fn end(
        &self,
        lease: &Lease,
        task: &TaskMsg,
        ended: Result<Done, TaskError>,
        stop: &CancellationToken,
    ) -> (RunOutcome, sqlx::Result<()>) {
        let pool = &self.engine.pool;
        let released = || leases::release(pool, lease);
        let (outcome, recorded, error) = match ended {
            Ok(_) => (RunOutcome::Ok, released().await, None),
            Err(TaskError::Stopped) => (RunOutcome::Stopped, released().await, None),
            // Whatever a run told to stop says, it was the stop: the attempt does not count.
            Err(_) if stop.is_cancelled() => (RunOutcome::Stopped, released().await, None),
            Err(TaskError::Refused(refusal)) => {
                match super::fail(pool, lease.item.job_id(), &refusal).await {
                    Ok(()) => (RunOutcome::Refused, released().await, Some(refusal.reason)),
                    // Not recorded: an attempt like any other failure, so the refusal comes
                    // again after the backoff.
                    Err(err) => {
                        let (recorded, error) = self.record_failure(lease, task, &err.into()).await;
                        (RunOutcome::Retry, recorded, error)
                    }
                }
            }
            Err(err @ TaskError::Retry(_)) => {
                let (recorded, error) = self.record_failure(lease, task, &err).await;
                (RunOutcome::Retry, recorded, error)
            }
        };
        let history = history::end_run(pool, &lease.owner, outcome, error.as_deref());
        (outcome, recorded.and(history.await))
    }

    /// Frees the item after a backoff, or, out of attempts, fails the chunk (or the job, for
    /// its plan or finish); with what people are told of the failure.
    async fn record_failure(
        &self,
        lease: &Lease,
        task: &TaskMsg,
        err: &TaskError,
    ) -> (sqlx::Result<()>, Option<String>) {
        // People see the reference; the log has the cause.
        let reference = incident::warning(
            &format!("run of {task:?} failed (attempt {})", lease.attempt),
            err,
        );
        let error = reference.sentence();
        let recorded = self.record_attempt(lease, task, &error).await;
        (recorded, Some(error))
    }

    async fn record_attempt(&self, lease: &Lease, task: &TaskMsg, error: &str) -> sqlx::Result<()> {
        let mut tx = self.engine.pool.begin().await?;
        let after = leases::record_failure(&mut tx, lease, error, backoff(lease.attempt)).await?;
        if after == AfterFailure::OutOfAttempts {
            let job_id = lease.item.job_id();
            let version = match lease.item {
                Item::Chunk { .. } => states::job::add_failed_chunk(&mut tx, job_id).await?,
                Item::Step(_) => {
                    let what = match task {
                        TaskMsg::ExportFinish { .. } => "The job could not be finished",
                        TaskMsg::DeleteRows { .. } => "The dataset's rows could not be deleted",
                        _ => "The job could not be planned",
                    };
                    let reason = format!("{what} after {} attempts. {error}", lease.attempt);
                    states::job::fail(&mut tx, job_id, &reason, None).await?
                }
            };
            if let Some(version) = version {
                notify::job_changed(&mut tx, job_id, version).await?;
            }
        }
        tx.commit().await
    }
}

async fn execute(
    engine: Engine,
    task: TaskMsg,
    lease: Lease,
    stop: CancellationToken,
) -> Result<Done, TaskError> {
    let run = Run {
        lease: &lease,
        stop: &stop,
    };
    let held = match task {
        TaskMsg::Plan { job_id } => return plan::run(&engine, job_id, run).await,
        TaskMsg::Chunk { job_id, chunk_no } => chunk::run(&engine, job_id, chunk_no, run).await,
        TaskMsg::ExportPlan { job_id } => export::plan(&engine, job_id).await,
        TaskMsg::ExportChunk { job_id, chunk_no } => {
            export::chunk(&engine, job_id, chunk_no, run).await
        }
        TaskMsg::ExportFinish { job_id } => export::finish(&engine, job_id).await,
        TaskMsg::DeleteRows { job_id } => deletion::run(&engine, job_id, &stop).await,
    };
    held.map(|()| Done::LeaseHeld)
}

/// Renews the lease every heartbeat; cancels `stop` when it is lost or the job is no longer
/// live, or when renewals have failed (the database unreachable) for as long as a lease lasts.
async fn keep_alive(
    pool: sqlx::PgPool,
    lease: Lease,
    ttl: Duration,
    every: Duration,
    stop: CancellationToken,
) {
    let mut last_renewed = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        match leases::renew(&pool, &lease, ttl).await {
            Ok(true) => last_renewed = tokio::time::Instant::now(),
            Ok(false) => break,
            Err(err) if last_renewed.elapsed() >= ttl => {
                tracing::warn!(item = ?lease.item, "lease lost, cannot renew it: {err}");
                break;
            }
            Err(_) => {}
        }
    }
    stop.cancel();
}

/// Exponential backoff with jitter after attempt `attempt` failed: about 1 s, 2 s, 4 s, …, at
/// most 5 minutes, each cut by a random part of up to half (so a burst of failures spreads).
fn backoff(attempt: i32) -> Duration {
    let base = 2f64.powi(attempt.clamp(1, 20) - 1).min(300.0);
    let jitter = (Uuid::new_v4().as_u128() % 1000) as f64 / 2000.0;
    Duration::from_secs_f64(base * (1.0 - jitter))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::backoff;

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        for attempt in 1..=12 {
            let full = 2f64.powi(attempt - 1).min(300.0);
            let secs = backoff(attempt).as_secs_f64();
            assert!(secs <= full && secs >= full / 2.0, "{attempt}: {secs}");
        }
        assert!(backoff(50).as_secs_f64() <= 300.0);
    }
}
