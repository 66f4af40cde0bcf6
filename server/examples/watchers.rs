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
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::Parser;
use serde::Deserialize;
use sqlx::postgres::PgListener;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::Semaphore,
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;
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
    /// Also print, to stderr, when each version was announced and when it reached the
    /// streams it reached (first, median, last), in ms from the first announcement.
    #[arg(long)]
    timeline: bool,
    /// Seconds to wait for every stream to see the job end.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

#[derive(Deserialize)]
struct Announced {
    id: Uuid,
    version: i64,
}

/// What a stream needs of a job's state.
struct Job {
    version: i64,
    ended: bool,
}

/// One event stream, read straight off its socket: the response's head, then its chunks,
/// then the `data:` lines within them. A browser's parser costs the browser's machine; here
/// it shares the server's two cores, so each event is handled in the task that reads the
/// socket (a `reqwest` body is handed over from a connection task of its own, and each event
/// took two task wake-ups and about 14 µs of CPU).
struct Stream {
    socket: TcpStream,
    /// Bytes read and not yet taken, from `start`.
    read: Vec<u8>,
    start: usize,
    /// Bytes of the current chunk still to come.
    chunk_left: usize,
    /// The body so far, de-chunked, up to a line not yet whole.
    body: Vec<u8>,
    /// When the last read returned.
    read_at: Instant,
    /// The current event's `id:`.
    version: Option<i64>,
    /// The body's last chunk came: what it held before is still read.
    last_chunk: bool,
}

impl Stream {
    async fn open(address: &str, request: &[u8]) -> anyhow::Result<Self> {
        let mut socket = TcpStream::connect(address).await?;
        socket.set_nodelay(true)?;
        socket.write_all(request).await?;
        let mut stream = Self {
            socket,
            read: Vec::with_capacity(4096),
            start: 0,
            chunk_left: 0,
            body: Vec::with_capacity(4096),
            read_at: Instant::now(),
            version: None,
            last_chunk: false,
        };
        loop {
            stream.fill().await?;
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            let httparse::Status::Complete(length) = response.parse(&stream.read)? else {
                continue;
            };
            anyhow::ensure!(response.code == Some(200), "answered {:?}", response.code);
            let chunked = response.headers.iter().any(|header| {
                header.name.eq_ignore_ascii_case("transfer-encoding")
                    && header.value.eq_ignore_ascii_case(b"chunked")
            });
            anyhow::ensure!(chunked, "the event stream is not chunked");
            stream.start = length;
            return Ok(stream);
        }
    }

    /// Reads more from the socket; an error once it has closed.
    async fn fill(&mut self) -> anyhow::Result<()> {
        if self.start > 0 {
            self.read.drain(..self.start);
            self.start = 0;
        }
        self.read.reserve(8192);
        let got = self.socket.read_buf(&mut self.read).await?;
        self.read_at = Instant::now();
        anyhow::ensure!(got > 0, "the server closed the stream");
        Ok(())
    }

    /// The next job state in the stream: its version from the event's `id:` line, and whether
    /// it has ended from the `status` in its `data:` line. The view is not parsed whole (ten
    /// thousand parses of each view took about a fifth of this process's CPU); a JSON string's
    /// quotes are escaped, so `"status":"` can only be the view's own key.
    async fn next_job(&mut self) -> anyhow::Result<Job> {
        loop {
            // Whole lines of the body already here: a state, or lines to skip.
            while let Some(end) = memchr::memchr(b'\n', &self.body) {
                let line = &self.body[..end];
                let job = if let Some(id) = line.strip_prefix(b"id:") {
                    self.version = Some(std::str::from_utf8(id)?.trim().parse()?);
                    None
                } else if let Some(data) = line.strip_prefix(b"data:") {
                    let version = self.version.take().context("an event without an id")?;
                    let at = memchr::memmem::find(data, b"\"status\":\"")
                        .context("a state without a status")?;
                    let status = &data[at + 10..];
                    let ended = [&b"completed\""[..], b"failed\"", b"cancelled\""]
                        .iter()
                        .any(|end| status.starts_with(end));
                    Some(Job { version, ended })
                } else {
                    None
                };
                self.body.drain(..=end);
                if let Some(job) = job {
                    return Ok(job);
                }
            }
            let before = self.body.len();
            self.dechunk()?;
            if self.body.len() == before {
                anyhow::ensure!(!self.last_chunk, "the server ended the stream");
                self.fill().await?;
            }
        }
    }

    /// Moves what has been read of the body into `body`, chunk framing removed.
    fn dechunk(&mut self) -> anyhow::Result<()> {
        while self.start < self.read.len() && !self.last_chunk {
            if self.chunk_left > 0 {
                let take = self.chunk_left.min(self.read.len() - self.start);
                self.body
                    .extend_from_slice(&self.read[self.start..self.start + take]);
                self.start += take;
                self.chunk_left -= take;
                continue;
            }
            // A chunk's size line, after the previous chunk's closing line break.
            let rest = &self.read[self.start..];
            if rest == b"\r" {
                return Ok(());
            }
            let rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
            let skipped = self.read.len() - self.start - rest.len();
            match httparse::parse_chunk_size(rest) {
                Ok(httparse::Status::Complete((length, size))) => {
                    self.last_chunk = size == 0;
                    self.start += skipped + length;
                    self.chunk_left = usize::try_from(size)?;
                }
                Ok(httparse::Status::Partial) => return Ok(()),
                Err(_) => anyhow::bail!("a malformed chunk"),
            }
        }
        Ok(())
    }
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
    let server = args.url.strip_prefix("http://").unwrap_or(&args.url);
    let address: Arc<str> = server.trim_end_matches('/').into();
    let request: Arc<[u8]> = format!(
        "GET /api/jobs/{}/events HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {}\r\n\
         accept: text/event-stream\r\n\r\n",
        args.job, args.token
    )
    .into_bytes()
    .into();
    // Set once every stream has its first state: from then on they note arrival times.
    let started = Arc::new(AtomicBool::new(false));
    let (connected_tx, mut connected_rx) = tokio::sync::mpsc::channel::<()>(args.watchers.max(1));
    // Connections opened a few hundred at a time: a burst of ten thousand overflows the
    // server's accept queue, and the retried SYNs would measure the kernel.
    let opening = Arc::new(Semaphore::new(256));
    // Cancelled once every stream has seen the end (or time is up): streams stay open until
    // then, so that closing ten thousand connections is not timed as the last pushes.
    let all_ended = CancellationToken::new();
    let ended = Arc::new(AtomicUsize::new(0));
    let mut streams = JoinSet::new();
    for _ in 0..args.watchers {
        let (address, request) = (address.clone(), request.clone());
        let (opening, connected) = (opening.clone(), connected_tx.clone());
        let (started, all_ended, ended) = (started.clone(), all_ended.clone(), ended.clone());
        let watchers = args.watchers;
        streams.spawn(async move {
            let permit = opening.acquire_owned().await?;
            let mut stream = Stream::open(&address, &request).await?;
            let mut seen = Seen::default();
            let first = stream.next_job().await?;
            seen.first = first.version;
            drop(permit);
            // Dropped once used: should another stream fail, the count stops short and the
            // wait below ends in an error.
            let _ = connected.send(()).await;
            drop(connected);
            let mut job = first;
            while !job.ended {
                job = stream.next_job().await?;
                if started.load(Ordering::Acquire) {
                    seen.arrivals.push((job.version, stream.read_at));
                }
            }
            seen.ended = true;
            if ended.fetch_add(1, Ordering::AcqRel) + 1 == watchers {
                all_ended.cancel();
            }
            all_ended.cancelled().await;
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
    // Streams that saw the end wait for the others; at the deadline they are let go.
    let _let_go = all_ended.clone().drop_guard();
    let (mut ended, mut failed) = (0usize, 0usize);
    let mut latencies: Vec<f64> = Vec::new();
    let (mut unmatched, mut early) = (0usize, 0usize);
    let mut results = Vec::new();
    loop {
        tokio::select! {
            () = &mut deadline => {
                all_ended.cancel();
                // Those that saw the end come back at once; the others are not waited for.
                while let Ok(Some(next)) =
                    tokio::time::timeout(Duration::from_secs(1), streams.join_next()).await
                {
                    match next {
                        Ok(Ok(seen)) => results.push(seen),
                        _ => failed += 1,
                    }
                }
                break;
            }
            next = streams.join_next() => match next {
                None => break,
                Some(Ok(Ok(seen))) => results.push(seen),
                Some(Ok(Err(err))) => {
                    // The run has failed: the others are let go rather than wait for it.
                    eprintln!("a stream failed: {err:#}");
                    failed += 1;
                    all_ended.cancel();
                }
                Some(Err(err)) => {
                    eprintln!("a stream's task failed: {err}");
                    failed += 1;
                    all_ended.cancel();
                }
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
    if args.timeline {
        timeline(&announced, &results);
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

/// Per version: when it was announced and when it reached the streams it reached.
fn timeline(announced: &HashMap<i64, Instant>, results: &[Seen]) {
    let Some(&start) = announced.values().min() else {
        return;
    };
    let ms = |at: Instant| at.saturating_duration_since(start).as_secs_f64() * 1000.0;
    let mut reached: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    for seen in results {
        for &(version, at) in &seen.arrivals {
            reached.entry(version).or_default().push(ms(at));
        }
    }
    for (version, mut at) in reached {
        at.sort_by(f64::total_cmp);
        let told = announced.get(&version).map_or(f64::NAN, |&told| ms(told));
        eprintln!(
            "version {version}: announced {told:.0} ms, reached {} streams: first {:.0}, median {:.0}, last {:.0} ms",
            at.len(),
            at[0],
            at[at.len() / 2],
            at[at.len() - 1]
        );
    }
}
