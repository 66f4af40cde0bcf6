//! The HTTP load of `make bench ONLY=reads` (`server/benches/reads.py` runs it): each of
//! `--urls` in turn, from `--connections` keep-alive connections asking one after the other
//! for `--seconds`, as fast as the server answers. Prints one JSON line per URL: requests per
//! second, p50 / p99 latency, and how many answers were not 200.
//!
//! A Rust program rather than the benches' usual Python, which cannot ask fast enough to find
//! the server's limit.

use std::time::{Duration, Instant};

use clap::Parser;
use tokio::task::JoinSet;

#[derive(Parser)]
struct Args {
    /// The URLs to load, one after the other.
    #[arg(long, num_args = 1.., required = true)]
    urls: Vec<String>,
    /// Sent as `Authorization: Bearer …`.
    #[arg(long)]
    token: String,
    #[arg(long, default_value_t = 32)]
    connections: usize,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    for url in &args.urls {
        let until = Instant::now() + Duration::from_secs_f64(args.seconds);
        let mut loaders = JoinSet::new();
        for _ in 0..args.connections {
            // One client each: one keep-alive connection each.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()?;
            let (url, token) = (url.clone(), args.token.clone());
            loaders.spawn(async move {
                let (mut times, mut not_ok) = (Vec::new(), 0usize);
                while Instant::now() < until {
                    let asked = Instant::now();
                    let response = client.get(&url).bearer_auth(&token).send().await?;
                    let ok = response.status() == reqwest::StatusCode::OK;
                    response.bytes().await?;
                    times.push(asked.elapsed().as_secs_f64());
                    not_ok += usize::from(!ok);
                }
                anyhow::Ok((times, not_ok))
            });
        }
        let started = Instant::now();
        let (mut times, mut not_ok) = (Vec::new(), 0usize);
        while let Some(done) = loaders.join_next().await {
            let (some, bad) = done??;
            times.extend(some);
            not_ok += bad;
        }
        let elapsed = started.elapsed().as_secs_f64();
        times.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len().max(1)) - 1;
            times.get(i).copied().unwrap_or(f64::NAN) * 1000.0
        };
        println!(
            "{}",
            serde_json::json!({
                "url": url,
                "requests": times.len(),
                "perSecond": times.len() as f64 / elapsed,
                "p50Ms": at(0.5),
                "p99Ms": at(0.99),
                "notOk": not_ok,
            })
        );
    }
    Ok(())
}
