//! Conveyor's server: HTTP, pages, live progress and the job engine, in one binary.
//!
//! Layout:
//! - [`config`]: command line and environment.
//! - [`auth`]: accounts, sessions, API tokens, and whose things a request sees.
//! - [`db`]: the pool and migrations.
//! - [`store`]: all SQL, one module per concern.
//! - [`spreadsheet`]: reading files (no database in sight).
//! - [`jobs`]: the job engine: creating jobs, the plan and chunk tasks, the workers.
//! - [`progress`]: the process's one LISTEN connection and the per-client live feeds.
//! - [`http`]: the API, SSE and the Leptos pages.
//! - [`incident`]: failures logged under a reference, which is all people see of them.
//! - [`telemetry`]: the metrics the processes keep, for `/metrics`.
//!
//! `serve` and `work` are what `main` runs; integration tests call them too.

pub mod auth;
pub mod config;
pub mod db;
pub mod http;
pub mod incident;
pub mod jobs;
pub mod logs;
pub mod progress;
pub mod spreadsheet;
pub mod store;
pub mod telemetry;

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    config::{ServeArgs, WorkerArgs},
    http::AppState,
    jobs::Engine,
    progress::{Hub, Views},
};

/// How long connections get to close once shutdown begins.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves HTTP on `listener` (and runs workers unless `no_workers`) until `shutdown` fires.
pub async fn serve(
    pool: PgPool,
    args: ServeArgs,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let leptos_options = http::leptos_options()?;
    telemetry::watch("http", pool.clone(), shutdown.clone());
    if let Some(addr) = args.metrics.metrics_addr {
        serve_metrics(addr, pool.clone(), shutdown.clone()).await?;
    }
    let hub = Hub::start(pool.clone(), shutdown.clone());
    // The workers' name and run slots, and the lane by which creates hand them small imports.
    let process = jobs::worker::process_name();
    let slots = jobs::worker::slots(&args.worker);
    let (lane, handed) = jobs::lane::new(&process, args.worker.lease(), args.worker.concurrency);
    let state = AppState {
        views: Views::start(pool.clone(), &hub, shutdown.clone()),
        recent: progress::recent::RecentViews::start(&hub, shutdown.clone()),
        identities: auth::identities::Identities::start(&hub, shutdown.clone()),
        hub,
        pool: pool.clone(),
        leptos_options,
        max_upload_bytes: args.max_upload_bytes,
        auth: std::sync::Arc::new(args.auth.clone()),
        limits: std::sync::Arc::new(args.limits.clone()),
        streams: Default::default(),
        probed: Default::default(),
        callbacks: std::sync::Arc::new(jobs::callbacks::address::Policy::new(
            args.worker.callbacks.allow.clone(),
        )),
        metrics: std::sync::Arc::new(args.metrics.clone()),
        converter: std::sync::Arc::new(
            args.worker
                .converter_path()
                .context("finding this program, to read workbooks")?,
        ),
        shutdown: shutdown.clone(),
        groups: jobs::group::Groups::new((!args.no_workers).then_some(lane)),
    };
    let workers = if args.no_workers {
        None
    } else {
        // The workers' own connections: HTTP traffic never starves their heartbeats.
        let worker_pool = db::connect_like(&pool, args.worker_db_pool).await?;
        enough_connections(&worker_pool, &args.worker)?;
        Some(tokio::spawn(run_workers(
            worker_pool,
            args.worker.clone(),
            process,
            (slots, Some(handed)),
            shutdown.clone(),
        )))
    };
    tracing::info!("listening on http://{}", listener.local_addr()?);
    let header_timeout = args.limits.header_timeout();
    let served = http::connections::serve(
        listener,
        http::router(state),
        header_timeout,
        shutdown.clone(),
    );
    // Open event streams end with the shutdown; a connection that still has not closed this
    // long after it (a client that never finishes its request) does not hold the process.
    let stuck = async {
        shutdown.cancelled().await;
        tokio::time::sleep(CLOSE_GRACE).await;
    };
    tokio::select! {
        () = served => {}
        () = stuck => tracing::warn!("connections still open {CLOSE_GRACE:?} after shutdown: dropped"),
    }
    if let Some(workers) = workers {
        workers.await??;
    }
    Ok(())
}

/// Runs workers until `shutdown` fires.
pub async fn work(
    pool: PgPool,
    args: WorkerArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let process = jobs::worker::process_name();
    let slots = jobs::worker::slots(&args);
    run_workers(pool, args, process, (slots, None), shutdown).await
}

/// Runs the workers of `process` in its run slots (with the other end of its creates' lane,
/// in `serve`) until `shutdown` fires.
async fn run_workers(
    pool: PgPool,
    args: WorkerArgs,
    process: String,
    (slots, lane): (jobs::lane::Slots, Option<jobs::lane::Receiver>),
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    enough_connections(&pool, &args)?;
    telemetry::watch("workers", pool.clone(), shutdown.clone());
    let engine = Engine::new(pool, &args).context("finding this program, to convert workbooks")?;
    jobs::worker::run(engine, &args, process, slots, lane, shutdown).await;
    Ok(())
}

/// Each of the workers keeps one connection listening for queued tasks (apalis), and a task
/// holds two at most (an export chunk reads its rows on one while its transaction writes on
/// the other): with a connection more for each task, and one over, some task can always take
/// its second and finish, and one is left for a heartbeat.
fn enough_connections(pool: &PgPool, args: &WorkerArgs) -> anyhow::Result<()> {
    let connections = pool.options().get_max_connections() as usize;
    let needed = 2 * args.concurrency + 2;
    anyhow::ensure!(
        connections >= needed,
        "{} tasks at once need at least {needed} database connections; the pool has \
         {connections} (raise CONVEYOR_WORKER_DB_POOL, or CONVEYOR_DB_POOL for `server worker`, \
         or lower CONVEYOR_WORKER_CONCURRENCY)",
        args.concurrency
    );
    Ok(())
}

/// Serves `GET /metrics` alone on `addr` (`CONVEYOR_METRICS_ADDR`) until `shutdown` fires.
pub async fn serve_metrics(
    addr: std::net::SocketAddr,
    pool: PgPool,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    tracing::info!("metrics on http://{addr}{}", http::scrape::PATH);
    tokio::spawn(async move {
        // A scraper's requests: the default head deadline.
        let header_timeout = config::LimitArgs::default().header_timeout();
        http::connections::serve(
            listener,
            http::scrape::alone(pool),
            header_timeout,
            shutdown,
        )
        .await;
    });
    Ok(())
}
