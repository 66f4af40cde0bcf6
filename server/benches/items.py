#!/usr/bin/env python3
"""`make bench` (items part; alone: `make bench ONLY=items`): jobs of a registered type run by
external workers (issue 14), next to our own in-process small jobs, on the release server.

Prints, in one run:
  - items/s of filling a job: 100,000 items of a no-op type in batches of 10,000
    (`POST /api/jobs` with the first batch, then `POST /api/jobs/{id}/items`);
  - items/s end to end: from the job sealed (every item added) to the job completed, its
    items claimed in batches of 100 and ended in batches (one request of endings per claim) by
    4 reference workers (`examples/worker.py`, real processes over HTTP);
  - the claims' long-poll latency: a worker waits in a claim, an item is added, and the time
    from the add request's answer (the item committed, NOTIFY sent) to the claim's answer, as
    p50 / p99 over many tries, on the idle server and again right after the 100,000 items;
  - our own in-process figure for small jobs: imports of 10 rows each (16 at a time, each
    into its own dataset), created -> all completed, in jobs/s.
The goal: >= 5,000 items/s end to end on this machine. Standard library only.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time

import small
from imports import AUTH, Server, follow_until_finished, sign_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "examples", "worker.py")
GOAL_ITEMS_PER_S = 5_000


class Client:
    """One keep-alive connection, as `AUTH` (or the given token)."""

    def __init__(self, port, token=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"content-type": "application/json"}
        self.headers.update({"authorization": f"Bearer {token}"} if token else AUTH)

    def call(self, method, path, body=None, ok=(200, 201, 202, 204)):
        self.conn.request(method, path, json.dumps(body) if body is not None else None,
                          self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status not in ok:
            sys.exit(f"{method} {path} answered {response.status}: {data[:300]!r}")
        return json.loads(data) if data else None


def setup(port):
    """A no-op type and a worker token for it; the token's secret."""
    admin = Client(port)
    admin.call("POST", "/api/job-types", {"name": "bench.noop", "leaseSeconds": 60})
    token = admin.call("POST", "/api/worker-tokens", {"name": "bench", "types": ["bench.noop"]})
    return token["secret"]


def filled(port, items, batch=10_000):
    """A new job of 100,000 items (unsealed); its id and the items/s of adding them."""
    client = Client(port)
    payloads = [{"payload": {"n": n}} for n in range(items)]
    start = time.monotonic()
    job = client.call("POST", "/api/jobs", {"jobType": "bench.noop", "items": payloads[:batch]})
    for first in range(batch, items, batch):
        client.call("POST", f"/api/jobs/{job['id']}/items", {"items": payloads[first:first + batch]})
    return job["id"], items / (time.monotonic() - start)


def run_workers(args, token, workers):
    """Starts the reference workers; they stop once a claim has come back empty."""
    return [subprocess.Popen(
        [sys.executable, WORKER, "--url", f"http://127.0.0.1:{args.port}", "--token", token,
         "--name", f"bench-{n}", "--max", "100", "--wait", "1", "--exit-when-idle", "1"],
        stdout=subprocess.DEVNULL) for n in range(workers)]


def end_to_end(args, token, items, workers):
    job_id, fill_rate = filled(args.port, items)
    procs = run_workers(args, token, workers)
    start = time.monotonic()
    Client(args.port).call("POST", f"/api/jobs/{job_id}/seal", {})
    job = follow_until_finished("127.0.0.1", args.port, job_id)
    elapsed = time.monotonic() - start
    for proc in procs:
        proc.wait(timeout=120)
    if job["status"] != "completed" or job["rowsOk"] != items:
        sys.exit(f"the job did not complete cleanly: {job}")
    return fill_rate, items / elapsed, elapsed


def long_poll_latency(args, token, tries):
    """Seconds from an item's add answered to the waiting claim's answer, per try."""
    owner = Client(args.port)
    job = owner.call("POST", "/api/jobs", {"jobType": "bench.noop"})
    latencies = []
    for _ in range(tries):
        answered = {}
        worker = Client(args.port, token)

        def claim():
            got = worker.call("POST", "/api/workers/latency/claims", {"waitSeconds": 30})
            answered["at"] = time.monotonic()
            answered["n"] = len(got["assignments"])
            for a in got["assignments"]:
                worker.call("POST", f"/api/assignments/{a['id']}/result", {"result": None})

        waiter = threading.Thread(target=claim)
        waiter.start()
        time.sleep(0.2)  # the claim finds nothing and waits
        owner.call("POST", f"/api/jobs/{job['id']}/items", {"items": [{"payload": 1}]})
        added = time.monotonic()
        waiter.join()
        if answered.get("n") != 1:
            sys.exit(f"a waiting claim did not get the new item: {answered}")
        latencies.append(max(0.0, answered["at"] - added))
    owner.call("POST", f"/api/jobs/{job['id']}/cancel", {})
    return latencies


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--imports-bin", required=True,
                        help="the release small_imports example: the small jobs' clients")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--port", type=int, default=3401)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--latency-tries", type=int, default=50)
    parser.add_argument("--small-jobs", type=int, default=500)
    args = parser.parse_args()

    sign_in(args, email="items-bench@example.com", role="admin")
    # The small jobs' 16 clients upload at once.
    env = {"CONVEYOR_MAX_ACTIVE_JOBS": "100000", "CONVEYOR_MAX_UPLOADS_AT_ONCE": "32"}
    with Server(args, env=env) as server:
        token = setup(args.port)
        latencies = long_poll_latency(args, token, args.latency_tries)
        fill_rate, rate, elapsed = end_to_end(args, token, args.items, args.workers)
        # Right after the run, before autovacuum has cleared what its updates left behind.
        latencies_after = long_poll_latency(args, token, args.latency_tries)
        small_rate, _ = small.small_jobs(args, args.small_jobs, rows=10)
        rss = server.peak_rss_mb()
    p50, p99 = small.p50_p99(latencies)
    after50, after99 = small.p50_p99(latencies_after)
    print(f"Jobs of a registered type, {args.items:,} no-op items, {args.workers} external workers")
    print(f"  filling the job: {fill_rate:,.0f} items/s (batches of 10,000)")
    print(f"  sealed -> completed: {elapsed:.1f} s, {rate:,.0f} items/s "
          f"(goal >= {GOAL_ITEMS_PER_S:,}: {'met' if rate >= GOAL_ITEMS_PER_S else 'NOT met'})")
    print(f"  long-poll latency, item added -> waiting claim answered: "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(latencies)} tries); right after the "
          f"{args.items:,}-item run (before autovacuum): p50 {after50:.1f} ms, p99 {after99:.1f} ms")
    print(f"  our in-process small jobs (10-row imports, 16 clients, created -> completed): "
          f"{small_rate:,.0f} jobs/s; external items end to end are {rate / small_rate:,.1f}x that")
    print(f"  server peak RSS {rss:,.0f} MB")


if __name__ == "__main__":
    main()
