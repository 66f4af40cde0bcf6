//! The watchers of `make bench ONLY=fanout` (`server/benches/fanout.py` runs it): many
//! browsers following one job's server-sent events, and how late each change reaches them.
//!
//! It opens `--watchers` streams of `/api/jobs/{id}/events` and, once each has the job's first
//! state, prints `{"connected": n}` and waits. From then on it listens to `job_progress` on the
//! database itself, so it knows when each version of the job was announced, and every stream
//! notes when each version reached it: a version's latency is the time between the two, both
//! taken on this process's clock. When every stream has seen the job end (or `--timeout`
//! passed) it prints a summary as one JSON line, closes the streams and exits.
//!
//! A Rust program rather than the benches' usual Python: ten thousand streams parsed by one
//! Python event loop would make the client, not the server, the slowest part of the figure.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use futures::StreamExt;
use serde::Deserialize;
use sqlx::postgres::PgListener;
use tokio::{sync::Semaphore, task::JoinSet};
use uuid::Uuid;

#[derive(Parser)]
struct Args {
    /// The server, e.g. http://127.0.0.1:3401.
    #[arg(long)]
    url: String,
    /// An API token of someone who may see the job.
    #[arg(long)]
    token: String,
    #[arg(long)]
    job: Uuid,
    #[arg(long)]
    watchers: usize,
    /// The database, to hear `job_progress` as the server does.
    #[arg(long)]
    db_url: String,
    /// Seconds to wait for every stream to see the job end.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

#[derive(Deserialize)]
struct Announced {
    id: Uuid,
    version: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Job {
    version: i64,
    status: String,
}

/// What one stream saw after everyone connected: each version and when it arrived.
#[derive(Default)]
struct Seen {
    arrivals: Vec<(i64, Instant)>,
    ended: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let url = format!("{}/api/jobs/{}/events", args.url, args.job);
    // Set once every stream has its first state: from then on they note arrival times.
    let started = Arc::new(AtomicBool::new(false));
    let (connected_tx, mut connected_rx) = tokio::sync::mpsc::channel::<()>(args.watchers.max(1));
    // Connections opened a few hundred at a time: a burst of ten thousand overflows the
    // server's accept queue, and the retried SYNs would measure the kernel.
    let opening = Arc::new(Semaphore::new(256));
    let mut streams = JoinSet::new();
    for _ in 0..args.watchers {
        let (client, url, token) = (client.clone(), url.clone(), args.token.clone());
        let (opening, connected) = (opening.clone(), connected_tx.clone());
        let started = started.clone();
        streams.spawn(async move {
            let mut permit = Some(opening.acquire_owned().await?);
            let response = client.get(&url).bearer_auth(&token).send().await?;
            anyhow::ensure!(response.status().is_success(), "{}", response.status());
            let mut body = response.bytes_stream();
            let (mut pending, mut seen, mut first) = (Vec::new(), Seen::default(), true);
            'stream: while let Some(chunk) = body.next().await {
                let at = Instant::now();
                pending.extend_from_slice(&chunk?);
                while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let Some(data) = line.strip_prefix(b"data:") else {
                        continue;
                    };
                    let job: Job = serde_json::from_slice(data.trim_ascii())?;
                    if first {
                        first = false;
                        drop(permit.take());
                        let _ = connected.send(()).await;
                    } else if started.load(Ordering::Acquire) {
                        seen.arrivals.push((job.version, at));
                    }
                    if matches!(job.status.as_str(), "completed" | "failed" | "cancelled") {
                        seen.ended = true;
                        break 'stream;
                    }
                }
            }
            anyhow::Ok(seen)
        });
    }
    drop(connected_tx);
    for _ in 0..args.watchers {
        connected_rx
            .recv()
            .await
            .ok_or_else(|| anyhow::anyhow!("a stream failed before its first state"))?;
    }
    // Announcements heard from here on, by version.
    let announced: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let mut listener = PgListener::connect(&args.db_url).await?;
    listener.listen("job_progress").await?;
    started.store(true, Ordering::Release);
    println!("{}", serde_json::json!({ "connected": args.watchers }));
    let heard = announced.clone();
    let job_id = args.job;
    let listening = tokio::spawn(async move {
        while let Ok(notification) = listener.recv().await {
            let at = Instant::now();
            if let Ok(change) = serde_json::from_str::<Announced>(notification.payload())
                && change.id == job_id
            {
                heard.lock().unwrap().entry(change.version).or_insert(at);
            }
        }
    });

    let deadline = tokio::time::sleep(Duration::from_secs(args.timeout));
    tokio::pin!(deadline);
    let (mut ended, mut failed) = (0usize, 0usize);
    let mut latencies: Vec<f64> = Vec::new();
    let mut unmatched = 0usize;
    let mut results = Vec::new();
    loop {
        tokio::select! {
            () = &mut deadline => break,
            next = streams.join_next() => match next {
                None => break,
                Some(Ok(Ok(seen))) => results.push(seen),
                Some(_) => failed += 1,
            },
        }
    }
    listening.abort();
    let announced = announced.lock().unwrap();
    for seen in &results {
        ended += usize::from(seen.ended);
        for (version, at) in &seen.arrivals {
            match announced.get(version) {
                Some(told) => latencies.push(at.saturating_duration_since(*told).as_secs_f64()),
                None => unmatched += 1,
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    let quantile = |q: f64| -> f64 {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let at = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[at] * 1000.0
    };
    println!(
        "{}",
        serde_json::json!({
            "watchers": args.watchers,
            "sawTheEnd": ended,
            "failed": failed,
            "unfinished": args.watchers - results.len() - failed,
            "changes": announced.len(),
            "deliveries": latencies.len(),
            "unmatched": unmatched,
            "p50Ms": quantile(0.5),
            "p99Ms": quantile(0.99),
            "maxMs": quantile(1.0),
        })
    );
    Ok(())
}
