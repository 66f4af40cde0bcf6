//! `/admin`, for admins and viewers: the queue's health. Worker processes, the backlog, the
//! job waiting longest, and throughput over the last hour and day as bar charts drawn on the
//! server (SVG, no script needed to read them). In the browser the page reads it again every
//! few seconds: one cheap read per open page (`store::queue_health`), not per job change.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

use crate::{
    data::get_queue_health,
    model::{duration, thousands},
    queue_health::{Bucket, ProcessState, QueueHealth, Throughput, WorkerProcess},
    zone::{LocalTime, use_zone},
};

/// How often an open page reads the figures again.
const REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

#[component]
pub fn QueuePage() -> impl IntoView {
    let first = Resource::new(|| (), |_| get_queue_health());
    view! {
        <section class="card">
            <h1>"Queue health"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading the queue..."</p> }>
                {move || Suspend::new(async move {
                    match first.await {
                        Ok(health) => view! { <Health first=health /> }.into_any(),
                        Err(err) => view! { <p class="error">{err.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

/// The figures, read again every [`REFRESH`] once the page is live.
#[component]
fn Health(first: QueueHealth) -> impl IntoView {
    let health = RwSignal::new(first);
    // Effects run only in the browser. A read still under way skips a tick, so slow answers
    // neither pile up nor overwrite a newer one.
    Effect::new(move |_| {
        let reading = StoredValue::new(false);
        let reread = move || {
            if reading.get_value() {
                return;
            }
            reading.set_value(true);
            leptos::task::spawn_local(async move {
                if let Ok(now) = get_queue_health().await {
                    health.set(now);
                }
                reading.set_value(false);
            });
        };
        if let Ok(handle) = set_interval_with_handle(reread, REFRESH) {
            on_cleanup(move || handle.clear());
        }
    });
    view! {
        <p class="muted" data-testid="queue-read-at">
            "As of " {move || view! { <LocalTime at=health.with(|h| h.at) /> }}
            ", read again every " {REFRESH.as_secs()} " s."
        </p>
        {move || view! { <Summary health=health.get() /> }}
        <h2>"Last hour"</h2>
        {move || view! { <Charts window=health.with(|h| h.hour.clone()) span="hour" /> }}
        <h2>"Last day"</h2>
        {move || view! { <Charts window=health.with(|h| h.day.clone()) span="day" /> }}
        <h2>"Worker processes"</h2>
        {move || view! { <Processes processes=health.with(|h| h.processes.clone()) /> }}
    }
    .into_any()
}

/// The figures at a glance: workers, backlog, the oldest waiting job, and the hour's rates.
#[component]
fn Summary(health: QueueHealth) -> impl IntoView {
    let alive: Vec<&WorkerProcess> = health
        .processes
        .iter()
        .filter(|p| p.state == ProcessState::Alive)
        .collect();
    let slots: i64 = alive.iter().map(|p| i64::from(p.slots)).sum();
    let running: i64 = alive.iter().map(|p| p.running).sum();
    let gone = health
        .processes
        .iter()
        .filter(|p| p.state == ProcessState::Gone)
        .count();
    let due: i64 = health.backlog.iter().map(|b| b.due).sum();
    let oldest_due = health
        .backlog
        .iter()
        .map(|b| b.oldest_secs)
        .fold(None, |max: Option<f64>, s| {
            Some(max.map_or(s, |m| m.max(s)))
        });
    let hour = health.hour.total();
    let failure = hour
        .failure_rate()
        .map_or_else(|| "none ended".to_owned(), |r| format!("{:.1}%", r * 100.0));
    view! {
        <dl class="tiles" data-testid="queue-summary">
            <div data-testid="tile-workers">
                <dt>"Workers alive"</dt>
                <dd>{alive.len()} " processes"</dd>
                <dd class="muted">
                    {format!("{running} of {slots} slots busy")}
                    {(gone > 0).then(|| view! { <span class="error">{format!(", {gone} gone")}</span> })}
                </dd>
            </div>
            <div data-testid="tile-backlog">
                <dt>"Backlog"</dt>
                <dd>{thousands(due)} " tasks due"</dd>
                <dd class="muted">
                    {oldest_due.map_or_else(
                        || "nothing waiting".to_owned(),
                        |s| format!("oldest due {}", duration(s)),
                    )}
                </dd>
            </div>
            <div data-testid="tile-oldest">
                <dt>"Oldest waiting job"</dt>
                {match health.oldest_waiting {
                    Some(job) => view! {
                        <dd>
                            <a href=format!("/jobs/{}", job.id)>"waiting " {duration(job.waited_secs)}</a>
                        </dd>
                        <dd class="muted">"since " <LocalTime at=job.created_at /></dd>
                    }
                        .into_any(),
                    None => view! { <dd>"none"</dd> }.into_any(),
                }}
            </div>
            <div data-testid="tile-hour">
                <dt>"Last hour"</dt>
                <dd>{thousands(hour.completed + hour.failed + hour.cancelled)} " jobs ended"</dd>
                <dd class="muted">
                    {format!("failure rate {failure}, {} rescued", thousands(hour.rescued))}
                </dd>
            </div>
        </dl>
        <table class="jobs" data-testid="backlog">
            <thead>
                <tr><th>"Task"</th><th>"Due"</th><th>"Oldest due"</th></tr>
            </thead>
            <tbody>
                {health
                    .backlog
                    .into_iter()
                    .map(|b| view! {
                        <tr>
                            <td>{b.task}</td>
                            <td>{thousands(b.due)}</td>
                            <td>{duration(b.oldest_secs)}</td>
                        </tr>
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// Rows per second and jobs ended per minute over one window, with its totals.
#[component]
fn Charts(window: Throughput, span: &'static str) -> impl IntoView {
    let total = window.total();
    let secs = window.bucket_secs.max(1) as f64;
    let per_minute = 60.0 / secs;
    let rows: Vec<f64> = window
        .buckets
        .iter()
        .map(|b| b.rows as f64 / secs)
        .collect();
    let ended = |pick: fn(&Bucket) -> i64| -> Vec<f64> {
        window
            .buckets
            .iter()
            .map(|b| pick(b) as f64 * per_minute)
            .collect()
    };
    let failure = total
        .failure_rate()
        .map_or_else(|| "none ended".to_owned(), |r| format!("{:.1}%", r * 100.0));
    let window_secs = secs * window.buckets.len() as f64;
    view! {
        <div class="charts" data-testid=format!("charts-{span}")>
            <figure>
                <figcaption>
                    "Rows per second: "
                    <span data-testid="rows-total">{thousands(total.rows)}</span>
                    " rows, "
                    {format!("{:.0}", total.rows as f64 / window_secs)}
                    "/s on average"
                </figcaption>
                <Bars
                    label=format!("Rows per second over the last {span}")
                    from=window.from
                    bucket_secs=window.bucket_secs
                    series=vec![("rows", "rows/s", rows)]
                />
            </figure>
            <figure>
                <figcaption>
                    "Jobs ended per minute: "
                    <span data-testid="jobs-completed">{thousands(total.completed)}</span>
                    " completed, "
                    <span data-testid="jobs-failed">{thousands(total.failed)}</span>
                    " failed, "
                    {thousands(total.cancelled)}
                    " cancelled; failure rate "
                    {failure}
                    "; "
                    <span data-testid="rescued">{thousands(total.rescued)}</span>
                    " runs rescued from lost workers"
                </figcaption>
                <Bars
                    label=format!("Jobs ended per minute over the last {span}")
                    from=window.from
                    bucket_secs=window.bucket_secs
                    series=vec![
                        ("completed", "completed/min", ended(|b| b.completed)),
                        ("failed", "failed/min", ended(|b| b.failed)),
                        ("cancelled", "cancelled/min", ended(|b| b.cancelled)),
                    ]
                />
            </figure>
        </div>
    }
    .into_any()
}

/// Chart size in SVG units (it scales to the page's width).
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 120.0;

/// Stacked bars, one per bucket, each series a class (its colour, in the stylesheet); each bar
/// names its time and values on hover.
#[component]
fn Bars(
    label: String,
    from: DateTime<Utc>,
    bucket_secs: i64,
    series: Vec<(&'static str, &'static str, Vec<f64>)>,
) -> impl IntoView {
    let zone = use_zone();
    let n = series.first().map_or(0, |(_, _, values)| values.len());
    let stacked = |i: usize| series.iter().map(|(_, _, v)| v[i]).sum::<f64>();
    let peak = (0..n).map(stacked).fold(0.0_f64, f64::max);
    let scale = if peak > 0.0 { HEIGHT / peak } else { 0.0 };
    let width = WIDTH / n.max(1) as f64;
    let clock = move |i: usize| {
        let at = from + chrono::Duration::seconds(bucket_secs * i as i64);
        at.with_timezone(&zone.offset()).format("%H:%M").to_string()
    };
    let bars = (0..n)
        .map(|i| {
            let mut top = HEIGHT;
            let values = series
                .iter()
                .map(|(_, unit, v)| format!(", {} {unit}", rate(v[i])))
                .collect::<String>();
            let tip = move || format!("{}{values}", clock(i));
            let parts = series
                .iter()
                .filter(|(_, _, v)| v[i] > 0.0)
                .map(|(class, _, v)| {
                    let h = v[i] * scale;
                    top -= h;
                    view! {
                        <rect
                            class=*class
                            x=format!("{:.2}", i as f64 * width)
                            y=format!("{top:.2}")
                            width=format!("{:.2}", (width - 1.0).max(0.5))
                            height=format!("{h:.2}")
                        />
                    }
                })
                .collect_view();
            view! { <g><title>{tip}</title>{parts}</g> }
        })
        .collect_view();
    view! {
        <div class="chart">
            <svg
                viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                preserveAspectRatio="none"
                role="img"
                aria-label=format!("{label}; peak {}", rate(peak))
            >
                <line class="axis" x1="0" y1=HEIGHT.to_string() x2=WIDTH.to_string() y2=HEIGHT.to_string() />
                {bars}
            </svg>
            <div class="chart-scale muted">
                <span>{move || clock(0)}</span>
                <span>"peak " {rate(peak)}</span>
                <span>{move || format!("now ({})", zone.label())}</span>
            </div>
        </div>
    }
    .into_any()
}

/// "0", "0.25", "12", "1,204".
fn rate(value: f64) -> String {
    if value <= 0.0 {
        "0".to_owned()
    } else if value < 10.0 {
        format!("{value:.2}")
    } else {
        thousands(value.round() as i64)
    }
}

#[component]
fn Processes(processes: Vec<WorkerProcess>) -> impl IntoView {
    if processes.is_empty() {
        return view! {
            <p class="muted">
                "No worker process has run in the last hour: start one with "
                <code>"server worker"</code>"."
            </p>
        }
        .into_any();
    }
    view! {
        <table class="jobs" data-testid="processes">
            <thead>
                <tr>
                    <th>"Process"</th>
                    <th>"Host"</th>
                    <th>"Started"</th>
                    <th>"Last heartbeat"</th>
                    <th>"State"</th>
                    <th>"Tasks now"</th>
                </tr>
            </thead>
            <tbody>
                {processes
                    .into_iter()
                    .map(|p| view! {
                        <tr data-testid="process" data-state=p.state.as_str()>
                            <td><code>{p.process}</code></td>
                            <td>{p.host} " (pid " {p.pid} ")"</td>
                            <td class="nowrap"><LocalTime at=p.started_at /></td>
                            <td class="nowrap"><LocalTime at=p.seen_at /></td>
                            <td class=format!("process-{}", p.state.as_str())>{p.state.as_str()}</td>
                            <td>{format!("{} of {}", p.running, p.slots)}</td>
                        </tr>
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
