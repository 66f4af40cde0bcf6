#!/usr/bin/env python3
"""`make bench` (small part; alone: `make bench ONLY=small`): many small imports (issue 15).

On a release server running its workers, `--jobs` (default 10,000) imports of `--rows`
(default 100) rows each, made by 16 clients at once (the clients are
`server/examples/small_imports.rs`), each into a dataset of its own, by one owner. When half
of the run with files are made, another owner makes one import of the same size. The owner has
200,000 older jobs whose items are gone (`HISTORY`), as in a deployment of some age, before the
runs begin. Prints:
  - jobs/s from the first request to the last job completed (goal: >= 1,000 jobs/s), twice:
    each job made with its file in one request (`POST /api/jobs` with a form), and each file
    uploaded first (`POST /api/uploads`, then `POST /api/jobs`), as two runs on one server;
  - what PostgreSQL alone manages when it makes only the writes a small job cannot do without
    (pgbench with `FLOOR_SCRIPT`, the server stopped), and the end-to-end rate's ratio to it;
  - p50 / p99 of `POST /api/jobs` in each run (with its file; its file already uploaded);
  - the other owner's job: created -> completed (one owner's backlog must not starve another);
  - the server's peak RSS;
  - retention keeping up: with the server stopped, everything the runs left (not the floor's)
    is aged past the retention age and
    `server/examples/retention_round.rs --until-done` deletes it (each job's items, file and
    queue message), round after round as the retention duty does: jobs/s, against the rate the
    run with files made them at.
Completion is watched through the job list's exact per-status counts.
"""

import argparse
import datetime
import http.client
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import imports
from imports import AUTH, Server, follow_until_finished, sign_in

GOAL_JOBS_PER_S = 1000
BOUNDARY = "benchboundary"


def multipart(rows):
    """An upload body holding a CSV of `rows` rows."""
    csv = "id,name\n" + "".join(f"{i},row {i}\n" for i in range(rows))
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"small.csv\"\r\nContent-Type: text/csv\r\n\r\n{csv}\r\n"
            f"--{BOUNDARY}--\r\n").encode()


class Client:
    """One keep-alive connection, with the signed-in owner's token."""

    def __init__(self, port, auth):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.auth = dict(auth)

    def call(self, method, path, data, content_type, ok):
        self.conn.request(method, path, data, {**self.auth, "content-type": content_type})
        response = self.conn.getresponse()
        answer = response.read()
        if response.status != ok:
            raise RuntimeError(f"{method} {path} answered {response.status}: {answer[:300]!r}")
        return json.loads(answer)

    def import_file(self, body, dataset):
        """Uploads, then creates the import; its job and the create request's seconds."""
        upload = self.call("POST", "/api/uploads", body,
                           f"multipart/form-data; boundary={BOUNDARY}", 201)
        request = json.dumps({"jobType": "import", "fileGuid": upload["id"], "dataset": dataset})
        start = time.monotonic()
        job = self.call("POST", "/api/jobs", request, "application/json", 202)
        return job, time.monotonic() - start


def create_imports(args, jobs, rows, name, midway=None, parallel=16, with_file=False):
    """`jobs` imports of `rows` rows from `parallel` connections of the Rust client
    (`server/examples/small_imports.rs`, as the signed-in owner), each uploaded then created, or
    `with_file` created with its file in one request; the create latencies. `midway` runs (on
    its own thread) once half are made."""
    client = subprocess.Popen(
        [args.imports_bin, "--base", f"http://127.0.0.1:{args.port}",
         "--token", AUTH["authorization"].split(" ", 1)[1], "--jobs", str(jobs),
         "--rows", str(rows), "--connections", str(parallel), "--prefix", name]
        + (["--with-file"] if with_file else []),
        stdout=subprocess.PIPE, text=True)
    midway_thread = None
    for line in client.stdout:
        if line.strip() == "half":
            if midway:
                midway_thread = threading.Thread(target=midway)
                midway_thread.start()
        else:
            result = json.loads(line)
    if client.wait() != 0:
        sys.exit("creating small jobs failed")
    if midway_thread:
        midway_thread.join()
    return result["createSeconds"]


def import_counts(client):
    """The owner's imports by status (the job list's exact counts)."""
    page = client.call("GET", "/api/jobs?limit=1&type=import", None, "application/json", 200)
    return {count["status"]: count["count"] for count in page["counts"]}


def wait_finished(port, auth, jobs, before=None):
    """Until `jobs` more imports of the owner have completed than the counts `before` the run
    (none, if not given); fails if one did not complete."""
    client = Client(port, auth)
    before = before or {}
    while True:
        counts = import_counts(client)
        ended = lambda status: counts.get(status, 0) - before.get(status, 0)
        if ended("failed") or ended("cancelled"):
            sys.exit(f"small jobs did not complete: {counts}")
        if ended("completed") >= jobs:
            return
        time.sleep(0.05)  # measuring: the poll's own period bounds the error


def small_jobs(args, jobs, rows):
    """Imports created -> all completed, on the running server: jobs/s and create latencies."""
    start = time.monotonic()
    latencies = create_imports(args, jobs, rows, f"small_{int(start)}")
    wait_finished(args.port, AUTH, jobs)
    return jobs / (time.monotonic() - start), latencies


# The writes one small job of the bench cannot do without on our schema (its indexes and
# triggers included), in three transactions: its file stored, its dataset and job made, and its
# rows written with the job and dataset ended. No HTTP, no queue, no leases, no locks, no
# notifications: a floor for this machine, not a design. pgbench runs it with prepared
# statements, as the server's are, as the bench's owner.
FLOOR_SCRIPT = """\
BEGIN;
insert into uploads (id, owner, filename, size, receiving)
    values (gen_random_uuid(), '{owner}', 'small.csv', {size}, false) returning id as upload \\gset
insert into upload_parts (upload_id, part_no, data)
    values (:upload, 0, convert_to(repeat('1,row 1' || chr(10), {rows}), 'UTF8'));
COMMIT;
BEGIN;
insert into datasets (id, owner, name, state)
    values (gen_random_uuid(), '{owner}', gen_random_uuid()::text, 'provisional')
    returning id as dataset \\gset
insert into jobs (id, kind, owner, upload_id, dataset_id, source_filename)
    values (gen_random_uuid(), 'import', '{owner}', :upload, :dataset, 'small.csv')
    returning id as job, seq \\gset
COMMIT;
BEGIN;
insert into dataset_rows (dataset_id, pos, record)
    select :dataset, ((:seq)::bigint << 32) + n, n || chr(9) || 'row ' || n
    from generate_series(1, {rows}) n;
update datasets set state = 'ready', row_count = {rows} where id = :dataset;
update jobs set status = 'completed', started_at = now(), finished_at = now(), sealed = true,
    item_count = {rows}, item_progress = {rows}, rows_ok = {rows}, version = version + 2
    where id = :job;
COMMIT;
"""


def sql_floor(args, rows, seconds=15, clients=4):
    """Small jobs per second that PostgreSQL alone manages with `FLOOR_SCRIPT` (pgbench,
    `clients` connections; run with the server stopped)."""
    owner = imports.psql(args.db_url, "-At", "-c",
                         "select id from users where email = 'small-bench@example.com'").strip()
    script = FLOOR_SCRIPT.format(owner=owner, rows=rows, size=rows * 10)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as file:
        file.write(script)
        file.flush()
        done = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(seconds),
                               "-f", file.name, args.db_url],
                              capture_output=True, text=True)
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or not found:
        sys.exit(f"pgbench failed: {done.stderr.strip()}")
    return float(found.group(1))


# Older jobs whose items retention deleted long ago, as a deployment of some age keeps (their
# summaries stay 90 days): the run works beside them, and a retention round must not read past
# them to find the jobs it is due to take.
HISTORY = 200_000


def seed_history(args):
    """Gives the owner `HISTORY` older jobs whose items are gone, and the planner statistics a
    table of that size has. (In a table growing from empty, as the bench's was, each automatic
    `ANALYZE` made every connection plan its statements on `jobs` again.)"""
    imports.psql(args.db_url, "-c", f"""
        insert into jobs (id, kind, owner, source_filename, status, created_at, started_at,
                          finished_at, items_pruned_at)
        select gen_random_uuid(), 'import',
               (select id from users where email = 'small-bench@example.com'), 'history.csv',
               'completed', at - interval '1 minute', at - interval '1 minute', at,
               now() - interval '20 days'
        from generate_series(1, {HISTORY}) n,
             lateral (select now() - interval '30 days' + n * interval '1 s' as at) t;""",
                 "-c", "vacuum analyze jobs")


def retention_rate(args, before):
    """Ages every finished job, file and queue message the run made (all made `before`, when
    the floor began) past the retention age (8 days against 7) and times the retention rounds
    that delete them: (jobs, seconds)."""
    imports.psql(args.db_url, "-c", f"""
        update jobs set finished_at = now() - interval '8 days'
        where finished_at is not null and items_pruned_at is null and created_at < '{before}';
        update uploads set alive_at = now() - interval '8 days' where created_at < '{before}';
        update apalis.jobs set done_at = now() - interval '8 days' where done_at is not null;""")
    done = subprocess.run([args.retention_bin, "--db-url", args.db_url, "--items-days", "7",
                           "--jobs-days", "400", "--until-done"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"retention failed: {done.stderr.strip()}")
    pruned = json.loads(done.stdout)
    left = imports.psql(args.db_url, "-At", "-c",
                        "select count(*) from jobs "
                        f"where items_pruned_at is null and created_at < '{before}'").strip()
    if left != "0":
        sys.exit(f"retention left the items of {left} jobs: {pruned}")
    return pruned["job_items"], pruned["seconds"]


def p50_p99(values):
    ordered = sorted(values)
    return (statistics.median(ordered) * 1000,
            ordered[max(0, math.ceil(len(ordered) * 0.99) - 1)] * 1000)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--imports-bin", required=True,
                        help="the release small_imports example: the clients")
    parser.add_argument("--retention-bin", required=True,
                        help="the release retention_round example: times retention last")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--port", type=int, default=3402)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=16)
    args = parser.parse_args()

    sign_in(args, email="small-other@example.com")
    other_auth = dict(AUTH)
    sign_in(args, email="small-bench@example.com")
    other = {}

    def other_owner():
        client = Client(args.port, other_auth)
        created = time.monotonic()
        job, _ = client.import_file(multipart(args.rows), "small_other")
        other["job"] = job
        other["created"] = created

    seed_history(args)
    env = {"CONVEYOR_MAX_ACTIVE_JOBS": str(args.jobs * 2),
           "CONVEYOR_MAX_UPLOADS_AT_ONCE": str(args.parallel * 2)}
    with Server(args, env=env) as server:
        runs = {}
        for with_file in (False, True):
            # The two requests a job first (as scripts made them before a file could come
            # with its job), then one; the other owner's job is made during the second.
            before = import_counts(Client(args.port, AUTH))
            start = time.monotonic()
            latencies = create_imports(args, args.jobs, args.rows, f"small{int(with_file)}",
                                       other_owner if with_file else None, args.parallel,
                                       with_file)
            created = time.monotonic()
            wait_finished(args.port, AUTH, args.jobs, before)
            runs[with_file] = (args.jobs / (time.monotonic() - start), created - start,
                               latencies)
        imports.AUTH.clear()
        imports.AUTH.update(other_auth)
        done = follow_until_finished("127.0.0.1", args.port, other["job"]["id"])
        if done["status"] != "completed":
            sys.exit(f"the other owner's job did not complete: {done}")
        stamp = lambda text: datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        other_wait = stamp(done["finishedAt"]) - stamp(done["createdAt"])
        rss = server.peak_rss_mb()
    floor_began = imports.psql(args.db_url, "-At", "-c", "select now()").strip()
    floor = sql_floor(args, args.rows)
    pruned_jobs, pruned_seconds = retention_rate(args, floor_began)
    rate = runs[True][0]
    print(f"Small imports: {args.jobs:,} jobs of {args.rows} rows, {args.parallel} clients, "
          f"each into its own dataset, beside {HISTORY:,} older jobs; twice")
    for with_file, how in ((True, "each made with its file (one POST /api/jobs with a form)"),
                           (False, "each uploaded, then made (POST /api/uploads, POST /api/jobs)")):
        run_rate, made_in, latencies = runs[with_file]
        p50, p99 = p50_p99(latencies)
        print(f"  {how}: first request -> last completed: {run_rate:,.0f} jobs/s "
              f"(goal >= {GOAL_JOBS_PER_S:,}: "
              f"{'met' if run_rate >= GOAL_JOBS_PER_S else 'NOT met'}); all made in "
              f"{made_in:.1f} s; POST /api/jobs p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"  PostgreSQL alone making only a small job's writes (pgbench, 4 clients, no server): "
          f"{floor:,.0f} jobs/s; end to end is {rate / floor:.2f} of that (with its file), "
          f"{runs[False][0] / floor:.2f} (uploaded first)")
    print(f"  another owner's job, made half way: created -> completed in "
          f"{other_wait.total_seconds():.2f} s")
    print(f"  server peak RSS {rss:,.0f} MB")
    print(f"  retention, once all the run left is past its age (the older jobs' items are "
          f"gone): {pruned_jobs:,} jobs' items, files and messages deleted in "
          f"{pruned_seconds:.1f} s ({pruned_jobs / pruned_seconds:,.0f} jobs/s, against "
          f"{rate:,.0f} made a second)")


if __name__ == "__main__":
    main()
