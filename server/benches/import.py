#!/usr/bin/env python3
"""`make bench`: how fast Conveyor imports a large CSV, next to PostgreSQL's own COPY.

Prints, for one generated file on this machine:
  - rows/s of `psql \\copy` into a typed table with a primary key (the ceiling),
  - rows/s of our whole import through the real server (upload -> job completed),
    and of the job alone (created -> completed),
  - their ratio to COPY, and the server's peak RSS.
Standard library only; the server is the release binary, the database the bench cluster.
"""

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import time
import urllib.parse

COLUMNS = ["id", "name", "email", "amount", "born", "active", "city", "country", "score", "note"]


def generate(path, rows):
    """A deterministic CSV of `rows` rows x 10 columns, ~100 bytes a row; reused when present."""
    stamp = f"{path}.rows"
    if os.path.exists(path) and os.path.exists(stamp) and open(stamp).read() == str(rows):
        return
    rng = random.Random(42)
    cities = ["Lisbon", "Oslo", "Quito", "Osaka", "Lagos", "Perth", "Lyon", "Cork"]
    with open(path, "w", newline="") as out:
        out.write(",".join(COLUMNS) + "\n")
        for i in range(1, rows + 1):
            out.write(
                f"{i},Person {i},person{i}@example.com,{rng.randint(0, 99999)}.{rng.randint(0, 99):02d},"
                f"19{rng.randint(50, 99)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d},"
                f"{'true' if i % 3 else 'false'},{rng.choice(cities)},PT,{rng.randint(0, 1000)},"
                f"\"note {i}, ok\"\n"
            )
    open(stamp, "w").write(str(rows))


def psql(url, *args):
    return subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q", *args], check=True,
                          capture_output=True, text=True).stdout


def raw_copy(url, path, rows):
    psql(url, "-c", "drop table if exists bench_copy; create table bench_copy (id bigint primary key, "
         "name text, email text, amount numeric, born date, active boolean, city text, "
         "country text, score integer, note text)")
    start = time.monotonic()
    psql(url, "-c", f"\\copy bench_copy from '{path}' with (format csv, header true)")
    elapsed = time.monotonic() - start
    psql(url, "-c", "drop table bench_copy")
    return rows / elapsed, elapsed


def request(host, port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def wait_ready(host, port, server):
    for _ in range(600):
        if server.poll() is not None:
            sys.exit("the server exited during start-up")
        try:
            request(host, port, "GET", "/api/jobs?limit=1")
            return
        except OSError:
            time.sleep(0.1)  # start-up only: nothing to subscribe to before the port is open
    sys.exit("the server did not start")


def follow_until_finished(host, port, job_id):
    """Reads the job's SSE stream until it is finished; returns the last state."""
    conn = http.client.HTTPConnection(host, port, timeout=3600)
    conn.request("GET", f"/api/jobs/{job_id}/events")
    response = conn.getresponse()
    data = ""
    while True:
        line = response.readline().decode()
        if not line:
            sys.exit("the event stream ended early")
        if line.startswith("data:"):
            data = line[5:].strip()
        elif line.strip() == "" and data:
            job = json.loads(data)
            data = ""
            if job["status"] in ("completed", "failed", "cancelled"):
                conn.close()
                return job


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def our_import(args, path, rows):
    env = dict(os.environ, DATABASE_URL=args.db_url, LEPTOS_SITE_ADDR=f"127.0.0.1:{args.port}",
               CONVEYOR_MAX_UPLOAD_BYTES=str(4 << 30), RUST_LOG="warn")
    server = subprocess.Popen([args.server, "serve"], env=env)
    try:
        wait_ready("127.0.0.1", args.port, server)
        start = time.monotonic()
        upload = subprocess.run(
            ["curl", "-sS", "--fail-with-body", "-F", f"file=@{path};type=text/csv",
             f"http://127.0.0.1:{args.port}/api/uploads"],
            check=True, capture_output=True, text=True)
        upload_id = json.loads(upload.stdout)["id"]
        uploaded = time.monotonic()
        status, body = request("127.0.0.1", args.port, "POST", "/api/jobs",
                               json.dumps({"jobType": "import", "fileGuid": upload_id,
                                           "dataset": f"bench_{int(start)}"}),
                               {"content-type": "application/json"})
        if status != 202:
            sys.exit(f"creating the job answered {status}: {body!r}")
        job = follow_until_finished("127.0.0.1", args.port, json.loads(body)["id"])
        done = time.monotonic()
        if job["status"] != "completed" or job["rowsOk"] != rows:
            sys.exit(f"the import did not complete cleanly: {job}")
        return {
            "total_rps": rows / (done - start),
            "job_rps": rows / (done - uploaded),
            "upload_s": uploaded - start,
            "job_s": done - uploaded,
            "rss_mb": peak_rss_mb(server.pid),
        }
    finally:
        server.terminate()
        server.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--dir", required=True, help="where the generated file is kept")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--port", type=int, default=3400)
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.abspath(os.path.join(args.dir, f"bench-{args.rows}.csv"))
    generate(path, args.rows)
    size_mb = os.path.getsize(path) / 1e6
    copy_rps, copy_s = raw_copy(args.db_url, path, args.rows)
    ours = our_import(args, path, args.rows)

    print()
    print(f"CSV: {args.rows:,} rows x {len(COLUMNS)} columns, {size_mb:.0f} MB, {os.cpu_count()} cores")
    print(f"  raw COPY (psql \\copy, typed table + primary key) {copy_rps:>10,.0f} rows/s  ({copy_s:.1f} s)")
    print(f"  Conveyor import, upload -> completed            {ours['total_rps']:>10,.0f} rows/s  "
          f"(upload {ours['upload_s']:.1f} s + job {ours['job_s']:.1f} s)")
    print(f"  Conveyor job alone, created -> completed         {ours['job_rps']:>10,.0f} rows/s")
    print(f"  ratio to COPY: whole import {ours['total_rps'] / copy_rps:.2f}, job alone "
          f"{ours['job_rps'] / copy_rps:.2f}  (goal: >= 0.5)")
    print(f"  server peak RSS                                 {ours['rss_mb']:>10,.0f} MB")
    print("XLSX: not benchmarked yet: XLSX import is not implemented (issue 3).")


if __name__ == "__main__":
    main()
