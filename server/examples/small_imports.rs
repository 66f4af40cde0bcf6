//! The clients of `make bench ONLY=small` (`server/benches/small.py` runs it): `--jobs` imports
//! of a CSV file of `--rows` rows, each uploaded then created (`POST /api/uploads`, then
//! `POST /api/jobs`), or with `--with-file` created with its file in one request (`POST
//! /api/jobs` with a form), into a dataset of its own, from `--connections` keep-alive
//! connections at once. Prints the line `half` once half the jobs are made (the bench then
//! starts another owner's job), then one JSON line: the seconds it took and every create's
//! latency.
//!
//! A Rust program rather than the benches' usual Python: 16 Python threads making these
//! requests took about a quarter of this 2-core machine's CPU (6 ms per job), which the server
//! and PostgreSQL then lacked.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use anyhow::{Context, bail};
use clap::Parser;
use tokio::task::JoinSet;

#[derive(Parser)]
struct Args {
    /// The server's base URL, such as `http://127.0.0.1:3402`.
    #[arg(long)]
    base: String,
    /// Sent as `Authorization: Bearer …`.
    #[arg(long)]
    token: String,
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    #[arg(long, default_value_t = 100)]
    rows: usize,
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Each job's dataset is this, then `_` and the job's number.
    #[arg(long, default_value = "small")]
    prefix: String,
    /// Each job in one request, its file with it.
    #[arg(long)]
    with_file: bool,
}

const BOUNDARY: &str = "benchboundary";

/// A form's field holding a CSV file of `rows` rows.
fn file_field(rows: usize) -> String {
    let mut csv = String::from("id,name\n");
    for i in 0..rows {
        csv.push_str(&format!("{i},row {i}\n"));
    }
    format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; \
         filename=\"small.csv\"\r\nContent-Type: text/csv\r\n\r\n{csv}\r\n"
    )
}

/// A form of `file` (a [`file_field`]), after a `job` field holding `job` if given.
fn form(job: Option<&serde_json::Value>, file: &str) -> Vec<u8> {
    let job = job.map_or(String::new(), |job| {
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"job\"\r\n\
             Content-Type: application/json\r\n\r\n{job}\r\n"
        )
    });
    format!("{job}{file}--{BOUNDARY}--\r\n").into_bytes()
}

/// A job of the bench: into `dataset`, of `upload` if it was uploaded first.
fn job(dataset: String, upload: Option<&serde_json::Value>) -> serde_json::Value {
    let mut job = serde_json::json!({"jobType": "import", "dataset": dataset});
    if let Some(upload) = upload {
        job["fileGuid"] = upload["id"].clone();
    }
    job
}

/// Sends one request; its JSON answer, which must come with `ok`.
async fn call(
    request: reqwest::RequestBuilder,
    ok: reqwest::StatusCode,
) -> anyhow::Result<serde_json::Value> {
    let response = request.send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    if status != ok {
        bail!("answered {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(serde_json::from_slice(&body)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let file = Arc::new(file_field(args.rows));
    let body = bytes::Bytes::from(form(None, &file));
    let made = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = JoinSet::new();
    for first in 0..args.connections {
        // One client each: one keep-alive connection each.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()?;
        let (args, file, body, made) = (args.clone(), file.clone(), body.clone(), made.clone());
        clients.spawn(async move {
            let mut latencies = Vec::new();
            let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
            for n in (first..args.jobs).step_by(args.connections) {
                let dataset = format!("{}_{n}", args.prefix);
                let create = client
                    .post(format!("{}/api/jobs", args.base))
                    .bearer_auth(&args.token);
                let create = if args.with_file {
                    let body = form(Some(&job(dataset, None)), &file);
                    create.header("content-type", &content_type).body(body)
                } else {
                    let upload = client
                        .post(format!("{}/api/uploads", args.base))
                        .bearer_auth(&args.token)
                        .header("content-type", &content_type)
                        .body(body.clone());
                    let upload = call(upload, reqwest::StatusCode::CREATED)
                        .await
                        .context("uploading")?;
                    create.json(&job(dataset, Some(&upload)))
                };
                let asked = Instant::now();
                call(create, reqwest::StatusCode::ACCEPTED)
                    .await
                    .context("creating the job")?;
                latencies.push(asked.elapsed().as_secs_f64());
                if made.fetch_add(1, Ordering::Relaxed) + 1 == args.jobs / 2 {
                    println!("half");
                }
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = clients.join_next().await {
        latencies.extend(done??);
    }
    println!(
        "{}",
        serde_json::json!({
            "seconds": started.elapsed().as_secs_f64(),
            "createSeconds": latencies,
        })
    );
    Ok(())
}
