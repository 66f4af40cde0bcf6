//! What the processes measure, for `GET /metrics` (Prometheus's text format).
//!
//! Every metric's name, labels and help text are here, and nowhere else: the code that sees an
//! event calls one function of this module. Events are counted by the process that sees them
//! (a scraper sums the processes); the state of the database (jobs per status, the queue's
//! backlog and lag) is read when scraped ([`render`]), so any one process answers for the whole
//! deployment (aggregate those with `max`, not `sum`). The recorder is the `metrics` crate's, rendered by
//! `metrics-exporter-prometheus`; it is installed once per process, on first use.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `conveyor_jobs` | gauge | `kind`, `status` |
//! | `conveyor_queue_backlog` | gauge: task messages due and not taken | `task` |
//! | `conveyor_queue_lag_seconds` | gauge: how long the oldest of them has been due | `task` |
//! | `conveyor_rows_imported_total`, `conveyor_rows_failed_total` | counter | |
//! | `conveyor_task_runs_total` | counter | `task`, `outcome` |
//! | `conveyor_task_duration_seconds` | histogram (a `chunk` task is one chunk) | `task` |
//! | `conveyor_leases_rescued_total` | counter | |
//! | `conveyor_callbacks_total` | counter | `outcome` (`delivered`, `failed`) |
//! | `conveyor_sse_clients` | gauge: live event streams open | |
//! | `conveyor_progress_reads_total` | counter: reads of jobs for live streams | `by` (`views`: the process's one reader, per change burst; `stream`: a stream's own first read or resync) |
//! | `conveyor_http_requests_total` | counter | `method`, `route`, `status` |
//! | `conveyor_http_request_duration_seconds` | histogram (to the response's head) | `method`, `route` |
//! | `conveyor_db_connections` | gauge | `pool` (`http`, `workers`), `state` (`in_use`, `idle`) |
//! | `conveyor_scrape_errors_total` | counter: scrapes whose database reads failed | |

use std::{sync::OnceLock, time::Duration};

use app::history::RunOutcome;
use axum::http::Method;
use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::store::{job_counts, queue};

/// Histogram buckets for every `…_seconds` metric: 1 ms to 10 minutes.
const SECONDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
    600.0,
];

/// How often [`watch`] refreshes a pool's gauges and drains the histograms' samples.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (once; later calls only return it). Counted events before
/// the first call are lost, so `serve` and `work` call it first.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder was installed first: /metrics stays empty");
        }
        describe();
        handle
    })
}

fn describe() {
    describe_gauge!("conveyor_jobs", "Jobs, by kind and status.");
    describe_gauge!(
        "conveyor_queue_backlog",
        "Task messages due and not yet taken by a worker, by task."
    );
    describe_gauge!(
        "conveyor_queue_lag_seconds",
        Unit::Seconds,
        "How long the oldest due task message has waited, by task."
    );
    describe_counter!("conveyor_rows_imported_total", "Rows written to datasets.");
    describe_counter!(
        "conveyor_rows_failed_total",
        "Rows refused by imports (row errors)."
    );
    describe_counter!(
        "conveyor_task_runs_total",
        "Task runs by task and outcome (ok, retry, refused, stopped)."
    );
    describe_histogram!(
        "conveyor_task_duration_seconds",
        Unit::Seconds,
        "How long task runs took, by task (a chunk task imports or exports one chunk)."
    );
    describe_counter!(
        "conveyor_leases_rescued_total",
        "Work items freed because their worker stopped renewing the lease."
    );
    describe_counter!(
        "conveyor_callbacks_total",
        "Completion callback attempts, by outcome (delivered, failed)."
    );
    describe_gauge!(
        "conveyor_sse_clients",
        "Live event streams open in this process."
    );
    describe_counter!(
        "conveyor_progress_reads_total",
        "Reads of jobs for live streams: by the shared reader (one per change burst) or by a \
         stream for itself (its first read, a resync)."
    );
    describe_counter!(
        "conveyor_http_requests_total",
        "HTTP responses, by method, route and status."
    );
    describe_histogram!(
        "conveyor_http_request_duration_seconds",
        Unit::Seconds,
        "Time to each response's head, by method and route."
    );
    describe_gauge!(
        "conveyor_db_connections",
        "Database connections of this process, by pool and state."
    );
    describe_counter!(
        "conveyor_scrape_errors_total",
        "Scrapes of /metrics whose database reads failed (their gauges are then stale)."
    );
}

/// The metrics as Prometheus text, with the database's gauges read now.
pub async fn render(pool: &PgPool) -> String {
    if let Err(err) = read_database(pool).await {
        tracing::warn!("/metrics could not read the database: {err}");
        counter!("conveyor_scrape_errors_total").increment(1);
    }
    install().render()
}

async fn read_database(pool: &PgPool) -> sqlx::Result<()> {
    let mut conn = pool.acquire().await?;
    for (kind, status, n) in job_counts::by_kind_and_status(&mut conn).await? {
        gauge!("conveyor_jobs", "kind" => kind.as_str(), "status" => status.as_str()).set(n as f64);
    }
    let backlog = queue::backlog(&mut conn).await?;
    for task in queue::TaskMsg::KINDS {
        let (waiting, lag) = backlog
            .iter()
            .find(|due| due.task == task)
            .map_or((0, 0.0), |due| (due.count, due.oldest_secs));
        gauge!("conveyor_queue_backlog", "task" => task).set(waiting as f64);
        gauge!("conveyor_queue_lag_seconds", "task" => task).set(lag);
    }
    Ok(())
}

/// Keeps `pool`'s gauges (under `label`) current and drains the histograms' samples, until
/// `shutdown` fires.
pub fn watch(label: &'static str, pool: PgPool, shutdown: CancellationToken) {
    let handle = install();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let idle = pool.num_idle();
            let in_use = (pool.size() as usize).saturating_sub(idle);
            gauge!("conveyor_db_connections", "pool" => label, "state" => "in_use")
                .set(in_use as f64);
            gauge!("conveyor_db_connections", "pool" => label, "state" => "idle").set(idle as f64);
            handle.run_upkeep();
        }
    });
}

/// One HTTP response: `route` is the route's pattern (`/api/jobs/{id}`), never the path, and
/// `method` one of the standard ones or `other`, so the series stay few.
pub fn http_response(method: &Method, route: &str, status: u16, took: Duration) {
    // Any other method a client makes up counts as one, so it adds no series.
    let method = match *method {
        Method::GET
        | Method::HEAD
        | Method::POST
        | Method::PUT
        | Method::PATCH
        | Method::DELETE
        | Method::OPTIONS => method.as_str(),
        _ => "other",
    };
    let (method, route) = (method.to_owned(), route.to_owned());
    counter!("conveyor_http_requests_total", "method" => method.clone(), "route" => route.clone(),
             "status" => status.to_string())
    .increment(1);
    histogram!("conveyor_http_request_duration_seconds", "method" => method, "route" => route)
        .record(took.as_secs_f64());
}

/// One task run that held its item's lease.
pub fn task_ran(task: &'static str, outcome: RunOutcome, took: Duration) {
    counter!("conveyor_task_runs_total", "task" => task, "outcome" => outcome.as_str())
        .increment(1);
    histogram!("conveyor_task_duration_seconds", "task" => task).record(took.as_secs_f64());
}

/// A chunk's rows, committed.
pub fn rows_imported(ok: i64, failed: i64) {
    counter!("conveyor_rows_imported_total").increment(ok.max(0) as u64);
    counter!("conveyor_rows_failed_total").increment(failed.max(0) as u64);
}

/// Items freed by lease rescue.
pub fn leases_rescued(n: usize) {
    counter!("conveyor_leases_rescued_total").increment(n as u64);
}

/// One callback attempt.
pub fn callback_sent(delivered: bool) {
    let outcome = if delivered { "delivered" } else { "failed" };
    counter!("conveyor_callbacks_total", "outcome" => outcome).increment(1);
}

/// One open live event stream, counted in `conveyor_sse_clients` until dropped.
pub struct SseClient(());

impl SseClient {
    pub fn open() -> Self {
        gauge!("conveyor_sse_clients").increment(1.0);
        Self(())
    }
}

impl Drop for SseClient {
    fn drop(&mut self) {
        gauge!("conveyor_sse_clients").decrement(1.0);
    }
}

/// Who read jobs for live streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBy {
    /// The process's one reader of changed jobs (`progress::views`).
    Views,
    /// One stream, for itself (`progress::feed`).
    Stream,
}

/// One read of jobs for live streams.
pub fn progress_read(by: ReadBy) {
    let by = match by {
        ReadBy::Views => "views",
        ReadBy::Stream => "stream",
    };
    counter!("conveyor_progress_reads_total", "by" => by).increment(1);
}
