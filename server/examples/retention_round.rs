//! One retention round (`jobs::maintenance::retention::round`) against `--db-url`, timed: the
//! retention figure of `make bench ONLY=admin` (`server/benches/console.py` runs it once the
//! console's timings are done, over the jobs it seeded). Prints one JSON line: the seconds the
//! round took and what it deleted.

use std::time::{Duration, Instant};

use clap::Parser;
use server::jobs::maintenance::retention::{self, Kept};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    db_url: String,
    /// How long finished jobs' items, and files no job uses, are kept.
    #[arg(long)]
    items_days: u64,
    /// How long finished jobs' summaries are kept.
    #[arg(long)]
    jobs_days: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pool = sqlx::PgPool::connect(&args.db_url).await?;
    let day = Duration::from_secs(86_400);
    let kept = Kept {
        items: day * args.items_days as u32,
        jobs: day * args.jobs_days as u32,
    };
    let started = Instant::now();
    let pruned = retention::round(&pool, kept).await?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{{\"seconds\": {seconds:.4}, \"uploads\": {}, \"jobs\": {}, \"job_items\": {}}}",
        pruned.uploads, pruned.jobs, pruned.job_items
    );
    Ok(())
}
