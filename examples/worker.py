#!/usr/bin/env python3
"""A reference worker for Conveyor's job types (issue 14): copy its shape, replace `handle`.

It claims items of its token's job types (long-polling, so an idle worker costs nothing),
works through them one at a time while a second thread sends heartbeats for every item it
holds, and ends each with a result or a failure. Standard library only.

    python3 examples/worker.py --url http://localhost:3000 --token cvw_... --name render-1

The protocol, in full:
    POST /api/workers/{name}/claims      {"types"?, "max", "waitSeconds"} -> {"assignments": [...]}
    POST /api/assignments/{id}/heartbeat                     -> {"cancelled", "leaseExpiresAt"}
    POST /api/assignments/{id}/result    {"result": ...}     -> {"state": "done", ...}
    POST /api/assignments/{id}/failure   {"message", "retry"} -> {"state": "pending"|"failed"}
    POST /api/assignments/endings        {"results": [{"id", "result"}],
                                          "failures": [{"id", "message", "retry"}]}
                                         -> {"endings": [{"id", "state"} or {"id", "error"}]}
This worker sends its endings together, once per claim (or every `--report-every`).
A 409 means the assignment is no longer this worker's (its lease ran out, or its job was
cancelled): drop the item, nothing was recorded. Each event is printed as a JSON line.

The demonstration `handle` does what a payload asks, so the tests (and you) can drive it:
    {"sleepSeconds": 2}                      works that long (sending heartbeats meanwhile)
    {"fail": "why", "retry": false}          fails, and says whether to try again
    {"failUntilAttempt": 3}                  fails until its third attempt
    {"result": ...}                          answers that result
and otherwise answers {"echo": payload}.
"""

import argparse
import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse


class Refused(Exception):
    """The server said no: `status` and its message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    """One keep-alive connection to the server (one per thread: http.client is not shared)."""

    def __init__(self, url, token):
        self.url = urllib.parse.urlsplit(url)
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        }
        self.conn = None

    def post(self, path, body, timeout=90):
        """The JSON answer; `Refused` for a 4xx or 5xx, `OSError` when the server is away."""
        payload = json.dumps(body).encode()
        for attempt in range(2):
            if self.conn is None:
                make = (http.client.HTTPSConnection if self.url.scheme == "https"
                        else http.client.HTTPConnection)
                self.conn = make(self.url.hostname, self.url.port, timeout=timeout)
            try:
                self.conn.request("POST", path, payload, self.headers)
                response = self.conn.getresponse()
                data = response.read()
            except (http.client.HTTPException, OSError) as err:
                # The server closed a kept-alive connection: once more on a new one.
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise OSError(f"cannot reach the server: {err}") from err
                continue
            try:
                answer = json.loads(data) if data else {}
            except ValueError:
                answer = {}
            if response.status >= 400:
                message = (answer.get("error", {}).get("message")
                           or data.decode(errors="replace")[:200])
                raise Refused(response.status, message)
            return answer


def lost(refused):
    """Whether a refusal means the item is no longer ours (rather than a passing failure)."""
    return refused.status in (401, 403, 404, 409)


NAME = None
MAX_RESULT_BYTES = 1 << 20  # the server's limit on a result
MAX_BATCH_BYTES = 8 << 20  # endings sent together stay well under the server's 16 MiB body
MAX_BATCH_ENDINGS = 1000  # the server's limit on endings per request


def say(event, **fields):
    print(json.dumps({"event": event, "worker": NAME, "at": time.time(), **fields}), flush=True)


class Cancelled(Exception):
    """The item's job was cancelled (a heartbeat said so): stop working on it."""


def handle(job_type, payload, attempt, stop):
    """The work. Replace this with yours: return a JSON-able result, or raise to fail.

    `stop` is set when the item's job is cancelled: check it in long loops."""
    if not isinstance(payload, dict):
        return {"echo": payload}
    deadline = time.monotonic() + float(payload.get("sleepSeconds", 0))
    while time.monotonic() < deadline:
        if stop.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            raise Cancelled()
    if "fail" in payload:
        raise ItemFailed(payload["fail"], payload.get("retry", True))
    if attempt < int(payload.get("failUntilAttempt", 0)):
        raise ItemFailed(f"failing attempt {attempt}", True)
    if "result" in payload:
        return payload["result"]
    return {"echo": payload}


class ItemFailed(Exception):
    def __init__(self, message, retry=True):
        super().__init__(message)
        self.retry = retry


class Held:
    """The items this worker holds, for the heartbeat thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items = {}  # assignment id -> Event set when its job is cancelled

    def add(self, assignment_id):
        with self.lock:
            self.items[assignment_id] = threading.Event()
            return self.items[assignment_id]

    def drop(self, assignment_id):
        with self.lock:
            self.items.pop(assignment_id, None)

    def ids(self):
        with self.lock:
            return list(self.items.items())


def heartbeats(api, held, every, stopping):
    while not stopping.wait(every):
        for assignment_id, cancelled in held.ids():
            try:
                answer = api.post(f"/api/assignments/{assignment_id}/heartbeat", {})
                if answer.get("cancelled"):
                    say("cancelled", assignment=assignment_id)
                    held.drop(assignment_id)
                    cancelled.set()
            except Refused as refused:
                if lost(refused):
                    # The lease is gone: the item may be someone else's now.
                    say("lost", assignment=assignment_id, status=refused.status)
                    held.drop(assignment_id)
                    cancelled.set()
                else:
                    say("heartbeat-error", assignment=assignment_id, status=refused.status)
            except Exception as err:  # the server away for a moment: the next beat tries again
                say("heartbeat-error", assignment=assignment_id, error=str(err))


def run(args):
    global NAME
    NAME = args.name
    api = Api(args.url, args.token)
    held = Held()
    stopping = threading.Event()  # SIGTERM: claim no more, finish what is claimed
    drained = threading.Event()  # then the heartbeats stop too
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    beat = threading.Thread(
        target=heartbeats,
        args=(Api(args.url, args.token), held, args.heartbeat_seconds, drained),
        daemon=True,
    )
    beat.start()
    claim = {"max": args.max, "waitSeconds": args.wait}
    if args.types:
        claim["types"] = args.types.split(",")
    path = f"/api/workers/{urllib.parse.quote(args.name)}/claims"
    say("started", name=args.name)
    idle_claims = 0
    while not stopping.is_set():
        try:
            assignments = api.post(path, claim)["assignments"]
        except Refused as refused:
            say("claim-error", status=refused.status, error=str(refused))
            if refused.status in (401, 403):
                break  # the token was revoked, or is not for these types
            time.sleep(1)
            continue
        except Exception as err:  # the server away for a moment
            say("claim-error", error=str(err))
            time.sleep(1)
            continue
        if not assignments:
            idle_claims += 1
            if args.exit_when_idle and idle_claims >= args.exit_when_idle:
                break
            continue
        idle_claims = 0
        for a in assignments:
            held.add(a["id"])
        endings = Endings(api, held)
        for a in assignments:
            ending = work(held, a)
            if ending:
                endings.add(a, *ending)
                if endings.full(args.report_every):
                    endings.send()
        endings.send()
    drained.set()
    say("stopped", name=args.name)


def work(held, a):
    """Does one claimed item: its ending, ("result", value) or ("failure", message, retry), or
    None when its job was cancelled."""
    assignment_id = a["id"]
    with held.lock:
        cancelled = held.items.get(assignment_id)
    if cancelled is None or cancelled.is_set():
        held.drop(assignment_id)
        return None
    say("claimed", assignment=assignment_id, job=a["jobId"], item=a["itemNo"],
        attempt=a["attempt"], payload=a["payload"])
    try:
        result = handle(a["jobType"], a["payload"], a["attempt"], cancelled)
    except Cancelled:
        held.drop(assignment_id)
        say("dropped", assignment=assignment_id, item=a["itemNo"])
        return None
    except ItemFailed as failed:
        return ("failure", str(failed), failed.retry)
    except Exception as err:  # the work's own bug: report it, and let it be tried again
        return ("failure", f"{type(err).__name__}: {err}", True)
    # A result the server cannot take fails its item for good (trying again would not help).
    try:
        size = len(json.dumps(result, allow_nan=False))
    except (TypeError, ValueError) as err:
        return ("failure", f"The result is not JSON: {err}", False)
    if size > MAX_RESULT_BYTES:
        return ("failure", f"The result is {size} bytes, more than {MAX_RESULT_BYTES}", False)
    return ("result", result)


class Endings:
    """Endings waiting to be sent, together, in one request (`POST /api/assignments/endings`).
    Their items stay held (heartbeats go on) until the server has them."""

    def __init__(self, api, held):
        self.api, self.held, self.items, self.size = api, held, [], 0

    def add(self, a, kind, *what):
        say("finishing", assignment=a["id"], item=a["itemNo"])
        if kind == "failure":
            what = (what[0][:10_000], what[1])
        size = len(json.dumps(what[0]))
        if self.items and self.size + size > MAX_BATCH_BYTES:
            self.send()
        self.items.append((a, kind, what))
        self.size += size

    def full(self, most):
        return len(self.items) >= min(most, MAX_BATCH_ENDINGS) or self.size >= MAX_BATCH_BYTES

    def send(self):
        if not self.items:
            return
        body = {"results": [], "failures": []}
        for a, kind, what in self.items:
            if kind == "result":
                body["results"].append({"id": a["id"], "result": what[0]})
            else:
                body["failures"].append({"id": a["id"], "message": what[0], "retry": what[1]})
        answers = self.post(body)
        by_id = {a["id"]: (a, kind) for a, kind, _ in self.items}
        too_large = []
        for answer in answers:
            a, kind = by_id[answer["id"]]
            if "error" in answer:
                error = answer["error"]
                say("refused", assignment=a["id"], item=a["itemNo"], code=error["code"])
                if error["code"] == "invalid" and kind == "result":
                    too_large.append((a, error["message"]))
            else:
                event = "done" if kind == "result" else "failed"
                say(event, assignment=a["id"], job=a["jobId"], item=a["itemNo"],
                    state=answer["state"])
        # A result the server cannot keep (too large, or for the follow-up type) fails its item.
        if too_large:
            failures = [{"id": a["id"], "message": message, "retry": False}
                        for a, message in too_large]
            for answer in self.post({"results": [], "failures": failures}):
                say("failed", assignment=answer["id"], state=answer.get("state"),
                    error=answer.get("error"))
        for a, _, _ in self.items:
            self.held.drop(a["id"])
        self.items, self.size = [], 0

    def post(self, body):
        # Sent again while the server is away (an ending sent twice is recorded once).
        for wait in (0.2, 0.5, 1, 2, 4, 8, 16, 0):
            try:
                return self.api.post("/api/assignments/endings", body)["endings"]
            except Refused as refused:
                if refused.status in (400, 401, 403, 413, 422):
                    say("finish-error", status=refused.status, error=str(refused))
                    return []
                error = str(refused)
            except Exception as err:
                error = str(err)
            say("finish-error", error=error)
            time.sleep(wait)
        return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the server, e.g. http://localhost:3000")
    parser.add_argument("--token", required=True, help="a worker token (cvw_...)")
    parser.add_argument("--name", required=True, help="this worker's name, recorded on items")
    parser.add_argument("--types", help="comma-separated types (default: the token's)")
    parser.add_argument("--max", type=int, default=10, help="items per claim")
    parser.add_argument("--wait", type=int, default=20, help="seconds a claim may wait")
    parser.add_argument("--heartbeat-seconds", type=float, default=2.0)
    parser.add_argument("--report-every", type=int, default=100,
                        help="send endings once this many are done (and after each claim)")
    parser.add_argument("--exit-when-idle", type=int, default=0,
                        help="stop after this many claims in a row came back empty")
    run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
