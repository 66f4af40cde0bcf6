//! One retention round (`jobs::maintenance::retention::round`) against `--db-url`, timed: the
//! retention figure of `make bench ONLY=admin` (`server/benches/console.py` runs it once the
//! console's timings are done, over the jobs it seeded). With `--until-done`, rounds one after
//! the other until none is left (`retention::catch_up`, as the retention duty works off a
//! backlog). Prints one JSON line: the seconds it took and what it deleted.

use std::time::{Duration, Instant};

use clap::Parser;
use server::jobs::maintenance::retention::{self, Kept};
use tokio_util::sync::CancellationToken;

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
    /// Round after round while more is left, not just one.
    #[arg(long)]
    until_done: bool,
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
    let pruned = if args.until_done {
        retention::catch_up(&pool, kept, &CancellationToken::new()).await?
    } else {
        retention::round(&pool, kept).await?
    };
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{{\"seconds\": {seconds:.4}, \"uploads\": {}, \"jobs\": {}, \"job_items\": {}, \"messages\": {}}}",
        pruned.uploads, pruned.jobs, pruned.job_items, pruned.messages
    );
    Ok(())
}
