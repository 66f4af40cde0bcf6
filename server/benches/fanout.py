#!/usr/bin/env python3
"""`make bench` (fan-out part; alone: `make bench ONLY=fanout`): many browsers watching one
running import (issue 15).

For each number of watchers (500, 2,000 and 10,000 by default), on a fresh release server
without workers: a 200,000-row import is created (it waits, as nothing runs it yet), the
watchers (`server/examples/watchers.rs`, one process holding every stream) open the job's
`/api/jobs/{id}/events` and get its first state, then a `server worker` process runs the job.
Prints, per run:
  - whether every watcher saw the job end;
  - NOTIFY -> SSE latency, p50 / p99 over every announced change and every watcher: from the
    watchers' own LISTEN hearing a version of the job announced to a stream receiving it, or
    the later version that covers it (changes close together are merged, and a stream that is
    behind gets only the newest state);
  - the server's database reads for live streams while the job ran (`/metrics`,
    `conveyor_progress_reads_total`), per announced change: the shared reader's (`views`) and
    the streams' own (`stream`: resyncs, lags);
  - the server's CPU time while the job ran, in all and per push to one stream;
  - the server's RSS before the watchers came, its peak, and once they have all left and it
    has stopped falling (the seconds that took).
Goals on this machine: p99 < 50 ms at 500 watchers and < 250 ms at 10,000; RSS < 300 MB at
10,000 and back near its start after they leave; reads per change independent of watchers.
"""

import argparse
import http.client
import json
import os
import re
import resource
import subprocess
import sys
import time

from imports import AUTH, SCHEMA, Server, generate, sign_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_mb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def settled_rss(pid, limit=30):
    """RSS once it stops falling (under 1 MB over 3 s; jemalloc hands freed pages back over
    about 10 s), and the seconds that took; or after `limit` seconds."""
    samples = [rss_mb(pid)]
    while len(samples) <= limit:
        time.sleep(1)
        samples.append(rss_mb(pid))
        if len(samples) > 3 and samples[-4] - samples[-1] < 1:
            break
    return samples[-1], len(samples) - 1


def cpu_seconds(pid):
    """The CPU time `pid` has used, user and system."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(port):
    """The server's `/metrics` as {name{labels}: value}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics", headers=AUTH)
    text = conn.getresponse().read().decode()
    values = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


def reads(values, by):
    return values.get(f'conveyor_progress_reads_total{{by="{by}"}}', 0.0)


def one_run(args, csv_path, watchers, run):
    env = {"CONVEYOR_MAX_STREAMS": str(watchers + 100)}
    with Server(args, workers=False, env=env) as server:
        dataset = f"fanout_{run}_{watchers}"
        server.post("/api/datasets", {"name": dataset, "columns": SCHEMA})
        upload_id = server.upload(csv_path)
        job = server.post("/api/jobs", {"jobType": "import", "fileGuid": upload_id,
                                        "dataset": dataset})
        start_rss = rss_mb(server.process.pid)
        watching = subprocess.Popen(
            [args.watchers_bin, "--url", f"http://127.0.0.1:{args.port}",
             "--token", AUTH["authorization"].split(" ", 1)[1], "--job", job["id"],
             "--watchers", str(watchers), "--db-url", args.db_url]
            + (["--timeline"] if args.timeline else []),
            stdout=subprocess.PIPE, text=True)
        worker = None
        try:
            connected = json.loads(watching.stdout.readline() or "{}")
            if connected.get("connected") != watchers:
                sys.exit(f"the watchers did not all connect: {connected}")
            before = metrics(args.port)
            cpu_before = cpu_seconds(server.process.pid)
            worker = subprocess.Popen(
                [args.server, "worker"],
                env=dict(os.environ, DATABASE_URL=args.db_url, RUST_LOG="error"))
            summary = json.loads(watching.stdout.readline() or "{}")
            after = metrics(args.port)
            server_cpu = cpu_seconds(server.process.pid) - cpu_before
            # The process's high-water mark: the upload before is streamed, a few MB.
            peak_rss = rss_mb(server.process.pid, "VmHWM")
            watching.wait(timeout=120)
        finally:
            watching.kill()
            watching.wait()
            if worker:
                worker.terminate()
                worker.wait(timeout=60)
        # Until the server has closed every stream the watchers left.
        for _ in range(600):
            if metrics(args.port).get("conveyor_sse_clients", 0) == 0:
                break
            time.sleep(0.1)
        end_rss, settled_in = settled_rss(server.process.pid)
    if summary.get("sawTheEnd") != watchers:
        sys.exit(f"not every watcher saw the job end: {summary}")
    changes = max(summary["changes"], 1)
    return {
        **summary,
        "viewsReadsPerChange": (reads(after, "views") - reads(before, "views")) / changes,
        "streamReads": reads(after, "stream") - reads(before, "stream"),
        "serverCpu": server_cpu,
        "cpuUsPerPush": server_cpu * 1e6 / max(summary["arrivals"], 1),
        "startRss": start_rss, "peakRss": peak_rss, "endRss": end_rss, "settledIn": settled_in,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--watchers-bin", required=True, help="the release watchers example")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--dir", required=True, help="where to keep the generated file")
    parser.add_argument("--port", type=int, default=3401)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--watchers", default="500,2000,10000")
    parser.add_argument("--timeline", action="store_true",
                        help="print when each version reached the watchers (stderr)")
    args = parser.parse_args()

    # A descriptor per stream, in the server and in the watchers (who inherit this limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    counts = [int(n) for n in args.watchers.split(",")]
    wanted = max(counts) + 1_000
    if hard != resource.RLIM_INFINITY and hard < wanted:
        sys.exit(f"{max(counts):,} watchers need {wanted:,} open files; the hard limit is {hard:,}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    os.makedirs(args.dir, exist_ok=True)
    csv_path = os.path.join(args.dir, f"fanout-{args.rows}.csv")
    generate(csv_path, args.rows)
    sign_in(args, email="fanout-bench@example.com", role="admin")
    print(f"Live fan-out: N watchers of one {args.rows:,}-row import's events")
    for n, watchers in enumerate(counts):
        run = one_run(args, csv_path, watchers, n)
        goal = 50 if watchers <= 500 else 250
        print(f"  {watchers:>6,} watchers: all saw the end; NOTIFY -> SSE p50 {run['p50Ms']:.0f} ms, "
              f"p99 {run['p99Ms']:.0f} ms (max {run['maxMs']:.0f}; {run['changes']} changes, "
              f"{run['deliveries']:,} timed in {run['arrivals']:,} pushes); reads per change "
              f"{run['viewsReadsPerChange']:.2f} shared + {run['streamReads']:.0f} by streams; "
              f"server CPU {run['serverCpu']:.1f} s, {run['cpuUsPerPush']:.1f} us per push; "
              f"RSS {run['startRss']:.0f} MB -> peak {run['peakRss']:.0f} MB -> "
              f"{run['endRss']:.0f} MB {run['settledIn']} s after they left")
        if watchers in (500, 10_000):
            print(f"          goal p99 < {goal} ms: {'met' if run['p99Ms'] < goal else 'NOT met'}"
                  + (f"; RSS < 300 MB: {'met' if run['peakRss'] < 300 else 'NOT met'}"
                     if watchers == 10_000 else ""))


if __name__ == "__main__":
    main()
