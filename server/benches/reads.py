#!/usr/bin/env python3
"""`make bench` (reads part; alone: `make bench ONLY=reads`): how cheap the job view is to
read (issue 15).

On a release server (no workers) with one finished import, `server/examples/load.rs` asks
`GET /healthz` (no database), then `GET /api/jobs/{id}` (the job view pages and streams
return), from 32 keep-alive connections for 5 s each, as the same signed-in script. Prints
req/s and p50 / p99 of each and their ratio. Goal: the job view at >= 0.3x `/healthz`.
"""

import argparse
import json
import os
import subprocess
import sys

from imports import AUTH, SCHEMA, Server, generate, sign_in

GOAL = 0.3


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the release server binary")
    parser.add_argument("--load-bin", required=True, help="the release load example")
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--dir", required=True, help="where to keep the generated file")
    parser.add_argument("--port", type=int, default=3401)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    csv_path = os.path.join(args.dir, "reads-1000.csv")
    generate(csv_path, 1_000)
    sign_in(args, email="reads-bench@example.com")
    with Server(args, workers=True) as server:
        server.post("/api/datasets", {"name": "reads", "columns": SCHEMA})
        job, _ = server.run_job({"jobType": "import", "fileGuid": server.upload(csv_path),
                                 "dataset": "reads"}, 1_000)
        base = f"http://127.0.0.1:{args.port}"
        out = subprocess.run(
            [args.load_bin, "--token", AUTH["authorization"].split(" ", 1)[1],
             "--connections", str(args.connections), "--seconds", str(args.seconds),
             "--urls", f"{base}/healthz", f"{base}/api/jobs/{job['id']}"],
            check=True, capture_output=True, text=True).stdout
    health, view = (json.loads(line) for line in out.splitlines())
    for run in (health, view):
        if run["notOk"]:
            sys.exit(f"{run['url']} answered other than 200 {run['notOk']} times")
    ratio = view["perSecond"] / health["perSecond"]
    print(f"Reads, {args.connections} keep-alive connections, {args.seconds:g} s each")
    for name, run in (("GET /healthz", health), ("GET /api/jobs/{id}", view)):
        print(f"  {name}: {run['perSecond']:,.0f} req/s, p50 {run['p50Ms']:.2f} ms, "
              f"p99 {run['p99Ms']:.2f} ms")
    print(f"  job view / healthz: {ratio:.2f}x (goal >= {GOAL}: "
          f"{'met' if ratio >= GOAL else 'NOT met'})")


if __name__ == "__main__":
    main()
