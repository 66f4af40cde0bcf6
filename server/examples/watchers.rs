//! The watchers of `make bench ONLY=fanout` (`server/benches/fanout.py` runs it): many
//! browsers following one job's server-sent events, and how late each change reaches them.
//!
//! It opens `--watchers` streams of `/api/jobs/{id}/events` and, once each has the job's first
//! state, prints `{"connected": n}` and waits. From then on it listens to `job_progress` on the
//! database itself, so it knows when each version of the job was announced, and every stream
//! notes when each version reached it: a version's latency is the time between the two, both
//! taken on this process's clock. The server merges changes that come close together, and a
//! stream that is behind sends only the newest state, so a stream may get version 7 after 4
//! without 5 and 6: each announced change is timed to the first arrival that covers it (5, 6
//! and 7 all to 7's), so a merged change counts once per stream like any other. When every stream has
//! seen the job end (or `--timeout` passed) it prints a summary as one JSON line, closes the
//! streams and exits. It fails if a stream cannot connect, rather than wait for it.
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

/// What one stream saw: the version it started from, then each version that arrived after
/// everyone connected, and when.
#[derive(Default)]
struct Seen {
    first: i64,
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
        let (opening, mut connected) = (opening.clone(), Some(connected_tx.clone()));
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
                // Whole lines, read in place (the rest waits for the next chunk).
                let mut start = 0;
                while let Some(length) = pending[start..].iter().position(|&b| b == b'\n') {
                    let line = &pending[start..start + length];
                    start += length + 1;
                    let Some(data) = line.strip_prefix(b"data:") else {
                        continue;
                    };
                    let job: Job = serde_json::from_slice(data.trim_ascii())?;
                    if first {
                        first = false;
                        seen.first = job.version;
                        drop(permit.take());
                        // Dropped once used: should another stream fail, the count stops short
                        // and the wait below ends in an error.
                        if let Some(connected) = connected.take() {
                            let _ = connected.send(()).await;
                        }
                    } else if started.load(Ordering::Acquire) {
                        seen.arrivals.push((job.version, at));
                    }
                    if matches!(job.status.as_str(), "completed" | "failed" | "cancelled") {
                        seen.ended = true;
                        break 'stream;
                    }
                }
                pending.drain(..start);
            }
            anyhow::Ok(seen)
        });
    }
    drop(connected_tx);
    let connecting = async {
        for _ in 0..args.watchers {
            if connected_rx.recv().await.is_none() {
                // Every sender is gone: a stream ended without its first state (the only
                // one finished, so the first joined), and the others never will.
                if let Some(joined) = streams.join_next().await {
                    joined??;
                }
                anyhow::bail!("a stream ended before its first state");
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(args.timeout), connecting)
        .await
        .map_err(|_| anyhow::anyhow!("the streams did not all connect in time"))??;
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
    let (mut unmatched, mut early) = (0usize, 0usize);
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
    let mut arrivals = 0usize;
    for seen in &results {
        ended += usize::from(seen.ended);
        arrivals += seen.arrivals.len();
        let mut last = seen.first;
        for &(version, at) in &seen.arrivals {
            // Every announcement this arrival covers, each timed to it.
            let mut covered = (last + 1..=version)
                .filter_map(|v| announced.get(&v))
                .peekable();
            if covered.peek().is_none() {
                unmatched += 1;
            }
            for told in covered {
                if *told > at {
                    // Our listener heard it after the server sent it: no latency to speak of.
                    early += 1;
                    latencies.push(0.0);
                } else {
                    latencies.push((at - *told).as_secs_f64());
                }
            }
            last = last.max(version);
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
            "arrivals": arrivals,
            "deliveries": latencies.len(),
            "unmatched": unmatched,
            "early": early,
            "p50Ms": quantile(0.5),
            "p99Ms": quantile(0.99),
            "maxMs": quantile(1.0),
        })
    );
    Ok(())
}
