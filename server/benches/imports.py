#!/usr/bin/env python3
"""`make bench`: how fast Conveyor imports a large CSV, next to PostgreSQL's own COPY.

Prints, for generated files on this machine:
  - rows/s of `psql \\copy` into a typed table with a primary key (the ceiling),
  - rows/s of our whole import through the real server (upload -> job completed, every cell
    validated against a typed schema), and of the job alone (created -> completed), on a
    running server (each measurement starts a fresh server; its first import, also shown,
    pays for opening the database connections),
  - their ratio to COPY, and the server's peak RSS;
  - rows/s of exporting the dataset back to CSV, created -> downloaded, next to `psql \\copy … to`
    of the same rows from a typed table, and of exporting it as XLSX;
  - the same for a smaller XLSX file (made by our own XLSX export) and its export;
  - the time from `kill -9` of a worker mid-chunk to that chunk running again elsewhere;
  - the server's peak RSS importing a 300 MB file that is one quoted field;
  - how long the preview of an upload (`GET /api/uploads/{id}/preview`) takes for a ~1 GB CSV
    and for the XLSX file: it reads only the start of the file, so it should not grow with it.
`--rows 10000000` makes a ~1 GB CSV, to see that memory stays flat.
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

# Requests carry the bench account's API token (a script's way in): set by `sign_in`.
AUTH = {}

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
    done = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"psql failed: {done.stderr.strip()}")
    return done.stdout


def raw_copy(url, path, rows, keep=False):
    psql(url, "-c", "drop table if exists bench_copy; create table bench_copy (id bigint primary key, "
         "name text, email text, amount numeric, born date, active boolean, city text, "
         "country text, score integer, note text)")
    start = time.monotonic()
    psql(url, "-c", f"\\copy bench_copy from '{path}' with (format csv, header true)")
    elapsed = time.monotonic() - start
    if not keep:
        psql(url, "-c", "drop table bench_copy")
    return rows / elapsed, elapsed


def request(host, port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request(method, path, body=body, headers={**AUTH, **(headers or {})})
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
    conn.request("GET", f"/api/jobs/{job_id}/events", headers=AUTH)
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


SCHEMA = [
    {"name": "id", "type": "integer"}, {"name": "name", "type": "text"},
    {"name": "email", "type": "email"}, {"name": "amount", "type": "decimal"},
    {"name": "born", "type": "date"}, {"name": "active", "type": "boolean"},
    {"name": "city", "type": "text"}, {"name": "country", "type": "text"},
    {"name": "score", "type": "integer"}, {"name": "note", "type": "text"},
]


class Server:
    """The release server on its own port, for one measurement (its peak RSS is the run's)."""

    def __init__(self, args, workers=True, env=None):
        self.port = args.port
        env = dict(os.environ, DATABASE_URL=args.db_url, LEPTOS_SITE_ADDR=f"127.0.0.1:{args.port}",
                   CONVEYOR_MAX_UPLOAD_BYTES=str(4 << 30), RUST_LOG="warn", **(env or {}))
        if not workers:
            env["CONVEYOR_NO_WORKERS"] = "1"
        self.process = subprocess.Popen([args.server, "serve"], env=env)
        wait_ready("127.0.0.1", self.port, self.process)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(timeout=60)

    def peak_rss_mb(self):
        return peak_rss_mb(self.process.pid)

    def post(self, path, body):
        status, data = request("127.0.0.1", self.port, "POST", path, json.dumps(body),
                               {"content-type": "application/json"})
        if status not in (201, 202):
            sys.exit(f"POST {path} answered {status}: {data!r}")
        return json.loads(data)

    def upload(self, path):
        out = subprocess.run(
            ["curl", "-sS", "--fail-with-body", *curl_auth(), "-F", f"file=@{path}",
             f"http://127.0.0.1:{self.port}/api/uploads"],
            check=True, capture_output=True, text=True)
        return json.loads(out.stdout)["id"]

    def run_job(self, body, rows):
        """Creates a job and follows it to the end; returns (job, seconds)."""
        start = time.monotonic()
        job = self.post("/api/jobs", body)
        job = follow_until_finished("127.0.0.1", self.port, job["id"])
        elapsed = time.monotonic() - start
        done = job["rowsOk"] if job["jobType"] == "import" else job["itemProgress"]
        if job["status"] != "completed" or done != rows:
            sys.exit(f"the job did not complete cleanly: {job}")
        return job, elapsed

    def download(self, job, path):
        subprocess.run(["curl", "-sS", "--fail-with-body", *curl_auth(), "-o", path,
                        f"http://127.0.0.1:{self.port}{job['resultUrl']}"], check=True)


def curl_auth():
    return [arg for name, value in AUTH.items() for arg in ("-H", f"{name}: {value}")]


def sign_in(args, email="bench@example.com", role="member"):
    """Makes the bench account (`server user add`, as an operator would), signs in and creates
    an API token, which every request then carries."""
    password = "bench password"
    subprocess.run([args.server, "user", "add", "--email", email, "--role", role,
                    "--password-stdin"],
                   input=password + "\n", text=True, check=True, capture_output=True,
                   env=dict(os.environ, DATABASE_URL=args.db_url, RUST_LOG="warn"))
    with Server(args, workers=False):
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
        conn.request("POST", "/api/session", json.dumps({"email": email, "password": password}),
                     {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        cookie = response.getheader("set-cookie", "").split(";")[0]
        if response.status != 200 or not cookie:
            sys.exit(f"signing in answered {response.status}")
        conn.request("POST", "/api/account/tokens", json.dumps({"name": "make bench"}),
                     {"content-type": "application/json", "cookie": cookie})
        response = conn.getresponse()
        token = json.loads(response.read())
        conn.close()
    AUTH["authorization"] = f"Bearer {token['secret']}"


def imported(args, path, rows, dataset):
    """Upload -> completed for one file into a new typed dataset, twice on one fresh server:
    its first import (cold: the process opens its database connections, each of which warms
    its caches) and then the same file again into a second dataset, as a running server does
    it. Returns the second, with the first under "cold"."""
    with Server(args) as server:
        def once(name):
            server.post("/api/datasets", {"name": name, "columns": SCHEMA})
            start = time.monotonic()
            upload_id = server.upload(path)
            uploaded = time.monotonic()
            _, job_s = server.run_job({"jobType": "import", "fileGuid": upload_id, "dataset": name},
                                      rows)
            return {
                "total_rps": rows / (time.monotonic() - start),
                "job_rps": rows / job_s,
                "upload_s": uploaded - start,
                "job_s": job_s,
            }
        cold = once(dataset)
        warm = once(dataset + "_w")
        warm["cold"] = cold
        warm["rss_mb"] = server.peak_rss_mb()
        return warm


def exported(args, dataset, rows, fmt, path):
    """An export on a fresh server (see `export_once`), with the server's peak RSS."""
    with Server(args) as server:
        return {**export_once(server, dataset, rows, fmt, path), "rss_mb": server.peak_rss_mb()}


def export_once(server, dataset, rows, fmt, path):
    """Creates an export and follows it until its file is downloaded to `path`."""
    start = time.monotonic()
    job, _ = server.run_job({"jobType": "export", "dataset": dataset, "format": fmt}, rows)
    server.download(job, path)
    seconds = time.monotonic() - start
    return {"rps": rows / seconds, "s": seconds, "mb": os.path.getsize(path) / 1e6}


def copy_out(url, rows, path):
    """rows/s of `psql \\copy … to` a CSV file from the typed table `raw_copy` kept."""
    start = time.monotonic()
    psql(url, "-c", f"\\copy bench_copy to '{path}' with (format csv, header true)")
    return rows / (time.monotonic() - start)


def worker(args):
    env = dict(os.environ, DATABASE_URL=args.db_url, RUST_LOG="error")
    return subprocess.Popen([args.server, "worker"], env=env)


def kill_and_rerun(args, path, rows):
    """Seconds from `kill -9` of a worker in the middle of a chunk to that chunk running again
    on another worker (default settings: 5 s leases, 1 s heartbeats), and the job's end."""
    def query(sql):
        return psql(args.db_url, "-At", "-c", sql).strip()

    with Server(args, workers=False) as server:
        upload_id = server.upload(path)
        job = server.post("/api/jobs", {"jobType": "import", "fileGuid": upload_id,
                                        "dataset": f"bench_kill_{int(time.time())}"})
        while True:
            first = worker(args)
            chunk = ""
            while not chunk:  # a chunk being worked on: its lease is held
                chunk = query(f"select chunk_no from job_chunks where job_id = '{job['id']}' "
                              "and lease_owner is not null limit 1")
            first.kill()
            killed = time.monotonic()
            first.wait()
            # It may have committed between the query and the kill: then try another chunk.
            if query(f"select state from job_chunks where job_id = '{job['id']}' "
                     f"and chunk_no = {chunk}") == "pending":
                break
        second = worker(args)
        try:
            while query(f"select count(*) from job_chunks where job_id = '{job['id']}' and "
                        f"chunk_no = {chunk} and (state = 'done' or lease_owner is not null "
                        "and attempts > 1)") != "1":
                time.sleep(0.02)  # measuring: the poll's own period bounds the error
            rerun = time.monotonic() - killed
            done = follow_until_finished("127.0.0.1", args.port, job["id"])
        finally:
            second.terminate()
            second.wait()
        if done["status"] != "completed" or done["rowsOk"] != rows:
            sys.exit(f"the job did not complete exactly after the kill: {done}")
        return rerun


def report_import(label, ours, copy_rps):
    print(f"  {label}, upload -> completed {ours['total_rps']:>10,.0f} rows/s  "
          f"(upload {ours['upload_s']:.1f} s + job {ours['job_s']:.1f} s)")
    print(f"  {label}, job alone           {ours['job_rps']:>10,.0f} rows/s")
    print(f"    ratio to COPY: whole import {ours['total_rps'] / copy_rps:.2f}, job alone "
          f"{ours['job_rps'] / copy_rps:.2f}  (goal: >= 0.5); server peak RSS {ours['rss_mb']:,.0f} MB")
    low, high = ours["spread"]
    print(f"    whole import / COPY in each of the runs: {low:.2f} to {high:.2f}")
    cold = ours["cold"]
    print(f"    a fresh server's first import (cold): {cold['total_rps']:,.0f} rows/s, "
          f"{cold['total_rps'] / copy_rps:.2f} of COPY (job {cold['job_s']:.1f} s)")


def median_import(args, path, rows, dataset, copy_rps_of, repeat=None):
    """`--repeat` COPY/import pairs, alternating, as this machine's speed drifts by ±10% from
    run to run: the median COPY, and the median import (a running server's: see `imported`)
    with its spread of ratios to COPY and the median cold first import."""
    copies, imports = [], []
    for i in range(repeat or args.repeat):
        copies.append(copy_rps_of())
        imports.append(imported(args, path, rows, dataset + (f"_{i}" if i else "")))
    copy = sorted(copies)[len(copies) // 2]
    ours = sorted(imports, key=lambda one: one["total_rps"])[len(imports) // 2]
    ratios = [one["total_rps"] / c[0] for one, c in zip(imports, copies)]
    ours["spread"] = (min(ratios), max(ratios))
    ours["cold"] = sorted((one["cold"] for one in imports), key=lambda one: one["total_rps"])[len(imports) // 2]
    return copy, ours


def csv_part(args, run):
    path = os.path.abspath(os.path.join(args.dir, f"bench-{args.rows}.csv"))
    generate(path, args.rows)
    size_mb = os.path.getsize(path) / 1e6
    (copy_rps, copy_s), csv_import = median_import(
        args, path, args.rows, f"bench_{run}", lambda: raw_copy(args.db_url, path, args.rows))
    print(f"CSV: {args.rows:,} rows x {len(COLUMNS)} columns, {size_mb:.0f} MB, {os.cpu_count()} cores; "
          f"imports validate every cell against a typed schema; medians of {args.repeat} runs")
    print(f"  raw COPY (psql \\copy, typed table + primary key)  {copy_rps:>10,.0f} rows/s  ({copy_s:.1f} s)")
    report_import("CSV import", csv_import, copy_rps)


def export_part(args, run):
    """CSV export of the generated rows, created -> downloaded, against `\\copy … to` of the same
    rows from a typed table, alternating (`--repeat` pairs), on one running server that
    imported them; then XLSX export of the same dataset against our CSV export."""
    path = os.path.abspath(os.path.join(args.dir, f"bench-{args.rows}.csv"))
    generate(path, args.rows)
    dataset = f"bench_{run}_e"
    raw_copy(args.db_url, path, args.rows, keep=True)
    copies, exports = [], []
    with Server(args) as server:
        server.post("/api/datasets", {"name": dataset, "columns": SCHEMA})
        upload_id = server.upload(path)
        server.run_job({"jobType": "import", "fileGuid": upload_id, "dataset": dataset}, args.rows)
        for _ in range(args.repeat):
            copies.append(copy_out(args.db_url, args.rows, os.path.join(args.dir, "copy.csv")))
            exports.append(export_once(server, dataset, args.rows, "csv",
                                       os.path.join(args.dir, "export.csv")))
        xlsx = export_once(server, dataset, args.rows, "xlsx", os.path.join(args.dir, "export.xlsx"))
        rss = server.peak_rss_mb()
    psql(args.db_url, "-c", "drop table bench_copy")
    copy = sorted(copies)[len(copies) // 2]
    csv = sorted(exports, key=lambda one: one["rps"])[len(exports) // 2]
    ratios = [one["rps"] / c for one, c in zip(exports, copies)]
    print(f"Export: {args.rows:,} rows x {len(COLUMNS)} columns; medians of {args.repeat} runs")
    print(f"  raw \\copy (typed table) to a CSV file  {copy:>10,.0f} rows/s")
    print(f"  CSV export, created -> downloaded   {csv['rps']:>10,.0f} rows/s  "
          f"({csv['s']:.2f} s, {csv['mb']:.0f} MB; server peak RSS {rss:,.0f} MB, importing too)")
    print(f"    ratio to \\copy: {csv['rps'] / copy:.2f} (goal: >= 0.5); in each run "
          f"{min(ratios):.2f} to {max(ratios):.2f}")
    print(f"  XLSX export, created -> downloaded  {xlsx['rps']:>10,.0f} rows/s  "
          f"({xlsx['s']:.1f} s, {xlsx['mb']:.0f} MB)")
    print(f"    ratio to our CSV export: {xlsx['rps'] / csv['rps']:.2f} (goal: >= 0.5)")


def xlsx_file(args, run):
    """The bench's XLSX file: our own export of a smaller dataset, so no spreadsheet tool is
    needed; made again each time (the export is measured), with the export's figures."""
    small = os.path.abspath(os.path.join(args.dir, f"bench-{args.xlsx_rows}.csv"))
    generate(small, args.xlsx_rows)
    imported(args, small, args.xlsx_rows, f"bench_{run}_x")
    xlsx = os.path.join(args.dir, f"bench-{args.xlsx_rows}.xlsx")
    return small, xlsx, exported(args, f"bench_{run}_x", args.xlsx_rows, "xlsx", xlsx)


def xlsx_part(args, run):
    small, xlsx, xlsx_export = xlsx_file(args, run)
    (copy_rps, _), xlsx_import = median_import(
        args, xlsx, args.xlsx_rows, f"bench_{run}_xi",
        lambda: raw_copy(args.db_url, small, args.xlsx_rows), args.xlsx_repeat)
    print(f"XLSX: {args.xlsx_rows:,} rows x {len(COLUMNS)} columns, {os.path.getsize(xlsx) / 1e6:.0f} MB; "
          f"medians of {args.xlsx_repeat} runs")
    print(f"  raw COPY of the same rows as CSV  {copy_rps:>10,.0f} rows/s")
    report_import("XLSX import", xlsx_import, copy_rps)
    print(f"  XLSX export, created -> file ready {xlsx_export['rps']:>10,.0f} rows/s  "
          f"({xlsx_export['s']:.1f} s, peak RSS {xlsx_export['rss_mb']:,.0f} MB)")


def kill_part(args, run):
    path = os.path.abspath(os.path.join(args.dir, f"bench-{args.rows}.csv"))
    generate(path, args.rows)
    rerun_s = kill_and_rerun(args, path, args.rows)
    print("Crash recovery (default settings: 5 s leases, 1 s heartbeats)")
    print(f"  kill -9 of a worker mid-chunk -> that chunk running again on another worker: "
          f"{rerun_s:.1f} s (goal: < 15 s); the job then completed with exact counts")


def hostile_part(args, run):
    """A 300 MB file whose second row is one quoted field: memory must stay as flat as for any
    other import (the row is refused at 8 MiB while it is read, never held whole)."""
    path = os.path.abspath(os.path.join(args.dir, "bench-one-field.csv"))
    if not os.path.exists(path):
        with open(path, "wb") as out:
            out.write(b'id,note\n1,ok\n2,"')
            block = b"x" * (1 << 20)
            for _ in range(300):
                out.write(block)
            out.write(b'"\n3,ok\n')
    with Server(args) as server:
        start = time.monotonic()
        upload_id = server.upload(path)
        job = server.post("/api/jobs", {"jobType": "import", "fileGuid": upload_id,
                                        "dataset": f"bench_{run}_field"})
        job = follow_until_finished("127.0.0.1", server.port, job["id"])
        seconds = time.monotonic() - start
        if (job["status"], job["rowsOk"], job["rowsFailed"]) != ("completed", 2, 1):
            sys.exit(f"the single-field import did not end as it should: {job}")
        rss = server.peak_rss_mb()
    print(f"Hostile input: a {os.path.getsize(path) / 1e6:.0f} MB CSV whose second row is one quoted field")
    print(f"  upload -> completed (2 rows imported, the huge one refused) in {seconds:.1f} s; "
          f"server peak RSS {rss:,.0f} MB (goal: < 256 MB)")


def preview_part(args, run):
    """The review step's preview of a ~1 GB CSV (10,000,000 rows) and of the XLSX file: the time
    from request to answer, a few times each (goal: a second or two)."""
    big_rows = 10_000_000
    big = os.path.abspath(os.path.join(args.dir, f"bench-{big_rows}.csv"))
    generate(big, big_rows)
    xlsx = os.path.join(args.dir, f"bench-{args.xlsx_rows}.xlsx")
    if not os.path.exists(xlsx):
        xlsx_file(args, run)
    with Server(args, workers=False) as server:
        print("Preview (GET /api/uploads/{id}/preview: sheets, header, 20 rows, mapping)")
        for label, path in [("CSV", big), ("XLSX", xlsx)]:
            upload_id = server.upload(path)
            times = []
            for _ in range(5):
                start = time.monotonic()
                status, body = request("127.0.0.1", server.port, "GET",
                                       f"/api/uploads/{upload_id}/preview?dataset=bench_{run}_p")
                times.append(time.monotonic() - start)
                preview = json.loads(body)
                if status != 200 or len(preview["rows"]) != 20 or preview["problem"]:
                    sys.exit(f"the preview of {path} answered {status}: {body[:300]!r}")
            times.sort()
            print(f"  {label} of {os.path.getsize(path) / 1e6:,.0f} MB: median {times[2] * 1000:,.0f} ms, "
                  f"slowest {times[-1] * 1000:,.0f} ms of 5 (goal: < 2 s); server peak RSS "
                  f"{server.peak_rss_mb():,.0f} MB")


def delete_part(args, run):
    """Deleting a dataset of `--rows` rows: the DELETE's answer (the dataset is gone from then
    on) and the `delete` job that removes its rows, 10,000 per transaction, to its end."""
    path = os.path.abspath(os.path.join(args.dir, f"bench-{args.rows}.csv"))
    generate(path, args.rows)
    dataset = f"bench_{run}_del"
    with Server(args) as server:
        server.post("/api/datasets", {"name": dataset, "columns": SCHEMA})
        upload_id = server.upload(path)
        server.run_job({"jobType": "import", "fileGuid": upload_id, "dataset": dataset}, args.rows)
        start = time.monotonic()
        status, body = request("127.0.0.1", server.port, "DELETE", f"/api/datasets/{dataset}")
        answered = time.monotonic() - start
        if status != 202:
            sys.exit(f"DELETE /api/datasets/{dataset} answered {status}: {body[:300]!r}")
        job = follow_until_finished("127.0.0.1", server.port, json.loads(body)["id"])
        seconds = time.monotonic() - start
        if job["status"] != "completed" or job["itemProgress"] != args.rows:
            sys.exit(f"the deletion did not complete cleanly: {job}")
        left = psql(args.db_url, "-At", "-c",
                    f"select count(*) from dataset_rows r join datasets d on d.id = r.dataset_id "
                    f"where d.name = '{dataset}'").strip()
        if left != "0":
            sys.exit(f"the deletion left {left} rows")
        rss = server.peak_rss_mb()
    print(f"Deleting a dataset of {args.rows:,} rows")
    print(f"  DELETE answered in {answered * 1000:,.0f} ms (the dataset gone, its name free); "
          f"its rows removed in {seconds:.1f} s ({args.rows / seconds:,.0f} rows/s); "
          f"server peak RSS {rss:,.0f} MB")


PARTS = {"csv": csv_part, "export": export_part, "xlsx": xlsx_part, "kill": kill_part, "hostile": hostile_part,
         "preview": preview_part, "delete": delete_part}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--dir", required=True, help="where the generated files are kept")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--xlsx-rows", type=int, default=200_000)
    parser.add_argument("--port", type=int, default=3400)
    parser.add_argument("--repeat", type=int, default=3, help="COPY/import pairs to run (CSV)")
    parser.add_argument("--xlsx-repeat", type=int, default=5,
                        help="COPY/import pairs to run for the (smaller, noisier) XLSX file")
    parser.add_argument("--only", choices=sorted(PARTS), action="append",
                        help="run only this part (repeatable); all by default")
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    sign_in(args)
    run = int(time.time())
    for name, part in PARTS.items():
        if not args.only or name in args.only:
            part(args, run)


if __name__ == "__main__":
    main()
