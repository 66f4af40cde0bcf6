#!/usr/bin/env python3
"""`make bench` (admin part; alone: `make bench ONLY=admin`): the operations console at scale.

Seeds millions of jobs in SQL (10,000,000 by default: 2,000 owners with a skewed spread, 10
datasets each, three kinds, every status, a year of creation times, file names to search, row
errors), then times, on the release server with an admin's API token:
  - `GET /api/jobs` (which carries the counts per status) for the first page, a page deep in
    the list, each filter alone and combined, a file-name search and an id-prefix search;
  - the server-rendered `/jobs` page;
  - the queue health read (`GET /api/queue`) and its server-rendered `/admin` page, over the
    seeded history (each ended job's change of status, a week of completed imports' chunks);
as p50 / p99 over many sequential requests, against the goal p99 < 50 ms. PostgreSQL's
auto_explain logs the plan of every statement slower than 50 ms during the timings; the plans
of the slowest are printed when the goal is missed. The server runs its workers, as in
production (jobs are kept 400 days, so retention leaves the year of seeded jobs alone), and
the timings start once they have folded the seed's count deltas.

Then the live list's cost: an import of 1,000,000 rows runs with one stream open (its
follower), then another with 100 more live job-list streams open, and for each the database
transactions of the whole process during it and the reads made for the streams (from
`/metrics`: the shared reader's, and the streams' own) are printed. The goal: the streams'
reads do not grow with the viewers.

Last, with the server stopped, one retention round over the seeded jobs that deletes 100
files no job uses (`server/examples/retention_round.rs`; `--retention-bin`), timed.

`--seeded` skips the seed and uses the jobs already in the database (a developer re-running
the timings; `make bench` always starts from a fresh database).

The seed drops the job table's secondary indexes, inserts, and builds them again from their own
definitions (`pg_indexes`): building an index once is many times faster than keeping ten of them
up to date row by row. Standard library only.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

from imports import AUTH, SCHEMA, Server, generate, psql, sign_in

GOAL_MS = 50


def seed(url, jobs):
    start = time.monotonic()
    psql(url, "-c", """
        insert into users (id, email, password_hash, role)
        select gen_random_uuid(), 'owner' || i || '@bench.example', 'no password', 'member'
        from generate_series(0, 1999) i;
        create unlogged table bench_owners as
            select (row_number() over (order by id) - 1)::int as oi, id, email from users
            where email like 'owner%@bench.example';
        insert into datasets (id, owner, name)
        select gen_random_uuid(), o.id, 'dataset_' || j from bench_owners o, generate_series(0, 9) j;
        create unlogged table bench_datasets as
            select o.oi, (substr(d.name, 9))::int as j, d.id from datasets d
            join bench_owners o on o.id = d.owner;
        """)
    indexes = psql(url, "-At", "-F", "\t", "-c",
                   "select indexname, indexdef from pg_indexes "
                   "where schemaname = current_schema() and tablename = 'jobs' "
                   "and indexname not in (select conname from pg_constraint "
                   "                      where conrelid = 'jobs'::regclass)").splitlines()
    indexes = [line.split("\t", 1) for line in indexes if line]
    psql(url, "-c", "; ".join(f"drop index {name}" for name, _ in indexes))
    batch = 1_000_000
    for first in range(1, jobs + 1, batch):
        last = min(first + batch - 1, jobs)
        psql(url, "-c", f"""
            insert into jobs (id, kind, owner, status, dataset_id, source_filename, format,
                              created_at, started_at, finished_at, item_count, item_progress,
                              rows_ok, rows_failed)
            select gen_random_uuid(), r.kind, o.id, r.status,
                   case when r.kind <> 'batch' then d.id end,
                   case when r.kind = 'import' then
                       (array['customers','orders','invoices','leads','payroll','inventory'])[1 + floor(r.f * 6)::int]
                       || '-' || (array['lisbon','oslo','quito','osaka','lagos','perth','lyon','cork'])[1 + floor(r.g * 8)::int]
                       || '-' || (r.i % 997) || '.' || (array['csv','xlsx','ods'])[1 + floor(r.h * 3)::int] end,
                   case when r.kind = 'export' then 'csv'::export_format end,
                   r.created, r.created + interval '1 second',
                   case when r.status in ('completed', 'failed', 'cancelled')
                        then r.created + interval '30 seconds' end,
                   1000, 1000, 1000 - r.errors, r.errors
            from (select i,
                         -- The newest 300 are live: open batches, which give the bench's
                         -- workers nothing to do (an import would need its file).
                         case when i > {jobs} - 300 then 'batch'::job_kind
                              when k < 0.75 then 'import'::job_kind
                              when k < 0.99 then 'export' else 'batch' end as kind,
                         case when i > {jobs} - 300 then
                                  case when s < 0.5 then 'waiting'::job_status else 'running' end
                              when s < 0.05 then 'failed' when s < 0.067 then 'cancelled'
                              else 'completed' end as status,
                         f, g, h, floor(2000 * ow ^ 3)::int as oi, dj,
                         case when e < 0.03 then 10 else 0 end as errors,
                         now() - interval '365 days' + (i::float8 / {jobs}) * interval '365 days'
                             as created
                  from (select i, random() k, random() s, random() f, random() g, random() h,
                               random() e, random() ow, floor(random() * 10)::int dj
                        from generate_series({first}, {last}) i) raw) r
            join bench_owners o on o.oi = r.oi
            join bench_datasets d on d.oi = r.oi and d.j = r.dj
            """)
        print(f"  seeded {last:,} jobs ({time.monotonic() - start:.0f} s)", flush=True)
    for name, definition in indexes:
        psql(url, "-c", definition)
    # The history the queue health page reads by time: each ended job's last change of status
    # (a year of them, as the jobs), and a chunk for each import completed in the last week
    # (retention deletes older jobs' chunks).
    psql(url, "-c", """
        insert into job_transitions (job_id, at, from_status, to_status)
        select id, finished_at, 'running', status from jobs where finished_at is not null;
        insert into job_chunks (job_id, chunk_no, first_row, row_count, byte_start, byte_end,
                                state, done_at)
        select id, 0, 1, 1000, 0, 0, 'done', finished_at from jobs
        where kind = 'import' and status = 'completed'
          and finished_at > now() - interval '7 days';""")
    print(f"  seeded their transitions and chunks ({time.monotonic() - start:.0f} s)", flush=True)
    psql(url, "-c", "vacuum analyze jobs, job_transitions, job_chunks")
    return time.monotonic() - start


def one_value(url, sql):
    return psql(url, "-At", "-c", sql).strip()


def timed(conn, path, n):
    """p50 and p99 in ms of `n` sequential GETs (after a few to warm up)."""
    def get():
        conn.request("GET", path, headers=AUTH)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            sys.exit(f"GET {path} answered {response.status}")
    for _ in range(3):
        get()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        get()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    # Nearest rank.
    return statistics.median(times), times[max(0, -(-len(times) * 99 // 100) - 1)]


def folded(url):
    """Waits until the workers have folded every count delta; how many there were, and the
    seconds it took."""
    pending = int(one_value(url, "select count(*) from job_count_deltas"))
    start = time.monotonic()
    while one_value(url, "select count(*) from job_count_deltas") != "0":
        if time.monotonic() - start > 600:
            sys.exit("the count deltas were not folded within 10 minutes")
        time.sleep(0.5)
    return pending, time.monotonic() - start


def scrape(port):
    """`/metrics` as {series: value}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics", headers=AUTH)
    response = conn.getresponse()
    text = response.read().decode()
    if response.status != 200:
        sys.exit(f"GET /metrics answered {response.status}")
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            values[series] = float(value)
    return values


class ListStreams:
    """`n` live job-list streams (`GET /api/jobs/events`), each read on its own thread, open
    until closed; started once every one has had its first event."""

    def __init__(self, port, n):
        self.conns = []
        ready = threading.Barrier(n + 1)
        for _ in range(n):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
            conn.request("GET", "/api/jobs/events", headers=AUTH)
            response = conn.getresponse()
            if response.status != 200:
                sys.exit(f"a list stream answered {response.status}")
            self.conns.append(conn)
            threading.Thread(target=self.read, args=(response, ready), daemon=True).start()
        try:
            ready.wait(timeout=120)
        except threading.BrokenBarrierError:
            sys.exit("the list streams did not all get their first event within 2 minutes")

    @staticmethod
    def read(response, ready):
        first = True
        try:
            while line := response.readline():
                if first and line.startswith(b"data:"):
                    first = False
                    ready.wait(timeout=120)
        except Exception:  # noqa: BLE001 - closed under it at the end, however http.client minds
            pass

    def close(self):
        for conn in self.conns:
            try:
                if conn.sock:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


# PostgreSQL 15 reports an idle backend's transactions within 10 s (PGSTAT_IDLE_INTERVAL).
STATS_SETTLE_S = 11


def stream_cost(args, server, path, rows, streams):
    """Runs an import of `path` with `streams` list streams open; the database transactions
    from just before it to when their statistics have all arrived (the same window for every
    run), and the reads made for streams during it."""
    opened = ListStreams(server.port, streams) if streams else None
    name = f"bench_streams_{streams}_{int(time.time())}"
    server.post("/api/datasets", {"name": name, "columns": SCHEMA})
    upload_id = server.upload(path)
    xacts = "select xact_commit + xact_rollback from pg_stat_database where datname = current_database()"
    time.sleep(STATS_SETTLE_S)  # what came before has been counted
    before, xact_before, start = scrape(server.port), int(one_value(args.db_url, xacts)), time.monotonic()
    server.run_job({"jobType": "import", "fileGuid": upload_id, "dataset": name}, rows)
    seconds = time.monotonic() - start
    after = scrape(server.port)
    time.sleep(STATS_SETTLE_S)
    xact_after = int(one_value(args.db_url, xacts))
    if opened:
        opened.close()
    reads = {by: after.get(f'conveyor_progress_reads_total{{by="{by}"}}', 0)
                 - before.get(f'conveyor_progress_reads_total{{by="{by}"}}', 0)
             for by in ("views", "stream")}
    return {"s": seconds, "xacts": xact_after - xact_before,
            "views_per_s": reads["views"] / seconds, "stream_reads": reads["stream"]}


RETENTION_FILES = 100


def retention(args):
    """One retention round over the seeded jobs, with `RETENTION_FILES` files no job uses old
    enough to go (a round's batch of them), timed by `examples/retention_round.rs` with the
    server stopped. Jobs and their items are kept 400 days, so only the files go."""
    psql(args.db_url, "-c", f"""
        insert into uploads (id, owner, filename, size, receiving, alive_at)
        select gen_random_uuid(), (select id from bench_owners where oi = 0), 'old.csv', 1,
               false, now() - interval '500 days'
        from generate_series(1, {RETENTION_FILES});""")
    done = subprocess.run([args.retention_bin, "--db-url", args.db_url, "--items-days", "400",
                           "--jobs-days", "400"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the retention round failed: {done.stderr.strip()}")
    round_ = json.loads(done.stdout)
    if round_["uploads"] != RETENTION_FILES:
        sys.exit(f"the retention round deleted {round_['uploads']} files, not {RETENTION_FILES}")
    print(f"  a retention round over {args.jobs:,} jobs, deleting {RETENTION_FILES} files no job "
          f"uses: {round_['seconds'] * 1000:.0f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--pg-log", required=True, help="the bench cluster's log file")
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--requests", type=int, default=200, help="requests per measurement")
    parser.add_argument("--port", type=int, default=3400)
    parser.add_argument("--dir", default="target/bench", help="where the import file goes")
    parser.add_argument("--stream-rows", type=int, default=1_000_000)
    parser.add_argument("--seeded", action="store_true", help="use the jobs already seeded")
    parser.add_argument("--retention-bin",
                        help="the release retention_round example: times a retention round last")
    args = parser.parse_args()

    # Signing in starts a server first, which migrates the database.
    sign_in(args, email="admin@bench.example", role="admin")
    if args.seeded:
        args.jobs = int(one_value(args.db_url, "select count(*) from jobs"))
        print(f"Operations console: {args.jobs:,} jobs (seeded before)")
    else:
        print(f"Operations console: {args.jobs:,} jobs")
        seconds = seed(args.db_url, args.jobs)
        print(f"  seeded in {seconds:.0f} s (insert, then the indexes built, then vacuum analyze)")

    # The skew gives owner 0 the most jobs (about 8%).
    heavy = one_value(args.db_url, "select email from bench_owners where oi = 0")
    if not heavy:
        sys.exit("no bench owner found")
    deep = one_value(args.db_url, f"""
        select (extract(epoch from created_at) * 1000000)::bigint || '_' || replace(id::text, '-', '')
        from jobs order by created_at desc, id desc offset {args.jobs // 2} limit 1""")
    some_id = one_value(args.db_url, "select replace(id::text, '-', '') from jobs limit 1")
    month = one_value(args.db_url, "select to_char(now() - interval '200 days', 'YYYY-MM-DD')")
    month_end = one_value(args.db_url, "select to_char(now() - interval '193 days', 'YYYY-MM-DD')")
    queries = [
        ("first page", "/api/jobs"),
        ("a page half way down", f"/api/jobs?before={deep}"),
        ("status=failed", "/api/jobs?status=failed"),
        ("status=running", "/api/jobs?status=running"),
        ("type=batch", "/api/jobs?type=batch"),
        ("owner (the busiest)", f"/api/jobs?owner={heavy}"),
        ("dataset", "/api/jobs?dataset=dataset_3"),
        ("created in one week", f"/api/jobs?from={month}&to={month_end}"),
        ("with row errors", "/api/jobs?errors=1"),
        ("failed imports of one owner", f"/api/jobs?status=failed&type=import&owner={heavy}"),
        ("dataset + completed + from", f"/api/jobs?dataset=dataset_7&status=completed&from={month}"),
        ("file name search", "/api/jobs?q=payroll-osaka-42."),
        ("id prefix search", f"/api/jobs?q={some_id[:12]}"),
        ("/jobs page (SSR)", "/jobs"),
        ("/jobs?status=failed page (SSR)", "/jobs?status=failed"),
        ("queue health", "/api/queue"),
        ("/admin queue health page (SSR)", "/admin"),
    ]
    # Plans of every statement slower than the goal, into the cluster's log, from here on.
    database = one_value(args.db_url, "select current_database()")
    psql(args.db_url, "-c", f"""
        alter database {database} set session_preload_libraries = 'auto_explain';
        alter database {database} set auto_explain.log_min_duration = '{GOAL_MS}ms';
        alter database {database} set auto_explain.log_level = 'log';
        alter database {database} set log_min_messages = 'log';""")
    log_from = os.path.getsize(args.pg_log) if os.path.exists(args.pg_log) else 0
    missed = []
    with Server(args, env={"CONVEYOR_RETAIN_JOBS_DAYS": "400", "CONVEYOR_MAX_STREAMS": "200"}) as server:
        deltas, seconds = folded(args.db_url)
        print(f"  the workers folded the seed's {deltas:,} count deltas in {seconds:.1f} s")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        print(f"  p50 / p99 over {args.requests} sequential requests each (goal: p99 < {GOAL_MS} ms)")
        for label, path in queries:
            p50, p99 = timed(conn, path, args.requests)
            mark = "" if p99 < GOAL_MS else "  <- missed"
            if p99 >= GOAL_MS:
                missed.append(label)
            print(f"    {label:<34} {p50:7.1f} ms {p99:7.1f} ms{mark}", flush=True)
        conn.close()

        path = os.path.join(args.dir, f"streams-{args.stream_rows}.csv")
        os.makedirs(args.dir, exist_ok=True)
        generate(path, args.stream_rows)
        print(f"  an import of {args.stream_rows:,} rows with live job-list streams open:")
        costs = {}
        for streams in (0, 100):
            cost = costs[streams] = stream_cost(args, server, path, args.stream_rows, streams)
            print(f"    {streams + 1:>3} streams: {cost['s']:5.1f} s, "
                  f"{cost['xacts']:6d} database transactions (with the {STATS_SETTLE_S} s after), "
                  f"{cost['views_per_s']:5.2f} shared reads/s for the streams, "
                  f"{cost['stream_reads']:.0f} by streams for themselves", flush=True)
        grew = costs[100]["views_per_s"] / max(costs[0]["views_per_s"], 0.01)
        print(f"    shared reads per second with 101 streams / with 1: {grew:.2f} (goal: about 1)")
    if args.retention_bin:
        retention(args)
    if missed:
        with open(args.pg_log, errors="replace") as log:
            log.seek(log_from)
            plans = [chunk for chunk in log.read().split("LOG:  duration:") if "Query Text" in chunk]
        plans.sort(key=lambda plan: -float(plan.split(" ms", 1)[0].strip() or 0))
        print(f"  missed: {', '.join(missed)}; the slowest plans PostgreSQL logged:")
        for plan in plans[:3]:
            print("    duration:" + plan.rstrip().replace("\n", "\n    "))


if __name__ == "__main__":
    main()
