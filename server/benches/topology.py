#!/usr/bin/env python3
"""`make bench` (topology part; alone: `make bench ONLY=topology`): the multi-process shape of
issue 15 on one database, with 1 and then 3 `server worker` processes.

Two release servers without workers share the bench database. `--jobs` imports of `--rows`
rows each (each into its own dataset) are created through the two servers in turn while no
worker runs; then the worker processes start, and each job is followed through the server it
was not created through until it ends. Prints rows/s and jobs/s from the workers' start to the
last job's end, for each number of workers, and their ratio. On 2 cores the workers share
the machine with PostgreSQL: the figure says what more processes buy here, not what they buy
on more machines.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

from imports import SCHEMA, Server, follow_until_finished, generate, sign_in


def one_run(args, csv_path, workers, run):
    """Seconds from the workers' start to every job's end."""
    servers = []
    try:
        for offset in (0, 1):
            port_args = argparse.Namespace(**{**vars(args), "port": args.port + offset})
            servers.append(Server(port_args, workers=False))
        jobs = []
        for n in range(args.jobs):
            via = servers[n % 2]
            dataset = f"topology_{run}_{n}"
            via.post("/api/datasets", {"name": dataset, "columns": SCHEMA})
            upload_id = via.upload(csv_path)
            job = via.post("/api/jobs", {"jobType": "import", "fileGuid": upload_id,
                                         "dataset": dataset})
            jobs.append((job["id"], servers[(n + 1) % 2].port))
        finished = {}

        def follow(job_id, port):
            finished[job_id] = follow_until_finished("127.0.0.1", port, job_id)

        env = dict(os.environ, DATABASE_URL=args.db_url, RUST_LOG="error")
        start = time.monotonic()
        procs = [subprocess.Popen([args.server, "worker"], env=env) for _ in range(workers)]
        try:
            threads = [threading.Thread(target=follow, args=job) for job in jobs]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - start
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=60)
        for job_id, _ in jobs:
            job = finished.get(job_id)
            if not job or job["status"] != "completed" or job["rowsOk"] != args.rows:
                sys.exit(f"a job did not complete cleanly: {job}")
        return elapsed
    finally:
        for server in servers:
            server.__exit__(None, None, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--dir", required=True, help="where to keep the generated file")
    parser.add_argument("--port", type=int, default=3401, help="and the next one")
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    csv_path = os.path.join(args.dir, f"topology-{args.rows}.csv")
    generate(csv_path, args.rows)
    sign_in(args, email="topology-bench@example.com")
    print(f"Two servers without workers, {args.jobs} imports of {args.rows:,} rows made through "
          f"both and followed through the other")
    rates = {}
    for run, workers in enumerate((1, 3)):
        elapsed = one_run(args, csv_path, workers, run)
        rates[workers] = args.jobs * args.rows / elapsed
        print(f"  {workers} worker process{'es' if workers > 1 else ''}: {elapsed:.1f} s, "
              f"{rates[workers]:,.0f} rows/s, {args.jobs / elapsed:.1f} jobs/s")
    print(f"  3 workers / 1 worker: {rates[3] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
