"""Bounded load against the router of a sandbox host, standard library only (runs on the guest's python3).

The router listens on the guest's loopback, so tests copy this file into the guest and run it over ssh:

    python3 load.py run --requests 300 --concurrency 16 --rate 40 --deadline 60 --readiness
    python3 load.py wait-ready --timeout 120 --probes 3

`run` sends at most N POST /generate requests, C at a time (optionally at most R starts per second), each
with its own timeout, and stops starting new ones after the deadline (or, with --stop-file, once that file
exists: a test ends the load when its change is over, whatever that took). It prints one JSON object:

    {"t0": epoch, "elapsed": s, "total": n, "ok": n, "errors": {"502": n, "ConnectionRefusedError": n},
     "timeline": [[start, end, "200"], ...],          # seconds since t0, one entry per request sent
     "readiness": [[t, "200 2/2"], [t, "503"], ...],  # with --readiness: every change of /readiness
     "workers": [[t, "http://a:30001,http://b:30000"], ...]}  # with --workers: every change of the healthy workers

`wait-ready` waits until /readiness answers 200 with every worker healthy and then K probe requests in a
row succeed; it prints {"ready": bool, "waited": s, "polls": n, "probe_failures": {...}, "last": ...}
and exits 0 when ready, 1 when the timeout passed first.

Only loopback (or the URL given) is contacted, never through a proxy; every loop is bounded.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

# This file is copied alone onto the guest and run by its python3: it keeps its own few lines of urllib instead of
# the controller's tests/http_client.py.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROMPT = "The capital of France is"


def outcome(exc: BaseException) -> str:
    """A short name of why a request did not get a response: the exception class, or the socket error under it."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    if isinstance(exc, socket.timeout | TimeoutError):
        return "TimeoutError"
    return type(exc).__name__


def request(method: str, url: str, body: dict | None, timeout: float) -> tuple[str, object]:
    """(status text, parsed body or None): "200", "503", or the exception name; never raises."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with DIRECT.open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        try:
            raw = exc.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        status = exc.code
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return outcome(exc), None
    try:
        return str(status), json.loads(raw) if raw else None
    except ValueError:
        return str(status), raw.decode(errors="replace")


def generate(base: str, timeout: float, max_new_tokens: int, seq: int) -> str:
    """One /generate through the router; "200" only when the answer carries text."""
    body = {"text": f"{PROMPT} {seq}", "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
    status, answer = request("POST", f"{base}/generate", body, timeout)
    if status == "200" and not (isinstance(answer, dict) and isinstance(answer.get("text"), str)):
        return "200-without-text"
    return status


def readiness(base: str, timeout: float) -> tuple[str, bool]:
    """("200 2/2" | "503" | exception name, every worker healthy)."""
    status, answer = request("GET", f"{base}/readiness", None, timeout)
    if status != "200" or not isinstance(answer, dict):
        return status, False
    healthy, total = answer.get("healthy_workers"), answer.get("total_workers")
    return f"200 {healthy}/{total}", bool(total) and healthy == total


def routed(base: str, timeout: float) -> str:
    """The workers the router routes to now, from its GET /workers: "url,url,..." of the healthy ones (sorted), or
    the status / exception name when it did not answer."""
    status, answer = request("GET", f"{base}/workers", None, timeout)
    if status != "200" or not isinstance(answer, dict):
        return status
    # SMG lists a worker it no longer routes to as draining (status) for its settle time: only ready ones route
    return ",".join(
        sorted(
            w.get("url", "")
            for w in answer.get("workers") or []
            if w.get("is_healthy") and w.get("status", "ready") == "ready"
        )
    )


def run(args: argparse.Namespace) -> dict:
    if args.stop_file and os.path.exists(args.stop_file):
        os.remove(args.stop_file)
    t0 = time.time()
    stop_at = time.monotonic() + args.deadline
    lock = threading.Lock()
    next_seq = [0]
    next_start = [time.monotonic()]  # the earliest moment the next request may start (with --rate)
    timeline: list[list] = []
    changes: list[list] = []
    done = threading.Event()
    # why the load ended: "stop-file" (the test's change is over), "count" (--requests ran out) or "deadline"
    stopped_by: list[str] = []

    def take() -> int | None:
        with lock:
            seq = next_seq[0]
            if seq >= args.requests:
                stopped_by.append("count")
                return None
            next_seq[0] += 1
            # --rate spaces starts at least 1/R apart, counted from the last start (not from t0): a load that ran
            # below its rate (slow answers) saves up no starts to spend at once when requests begin to fail fast
            # (a refused connection), so a restart costs seconds of requests at most R per second.
            when = max(time.monotonic(), next_start[0])
            if args.rate:
                next_start[0] = when + 1 / args.rate
        delay = when - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if args.stop_file and os.path.exists(args.stop_file):
            stopped_by.append("stop-file")
            return None
        if time.monotonic() >= stop_at:
            stopped_by.append("deadline")
            return None
        return seq

    def worker() -> None:
        while (seq := take()) is not None:
            started = time.time()
            status = generate(args.url, args.timeout, args.max_new_tokens, seq)
            with lock:
                timeline.append([round(started - t0, 4), round(time.time() - t0, 4), status])

    def poll_readiness() -> None:
        last = None
        while not done.is_set() and time.monotonic() < stop_at + args.timeout:
            state, _body = readiness(args.url, min(args.timeout, 2.0))
            if state != last:
                changes.append([round(time.time() - t0, 4), state])
                last = state
            done.wait(args.readiness_interval)

    routing: list[list] = []

    def poll_workers() -> None:
        last = None
        while not done.is_set() and time.monotonic() < stop_at + args.timeout:
            state = routed(args.url, min(args.timeout, 2.0))
            if state != last:
                routing.append([round(time.time() - t0, 4), state])
                last = state
            done.wait(args.workers_interval)

    poller = threading.Thread(target=poll_readiness, daemon=True) if args.readiness else None
    if poller:
        poller.start()
    watcher = threading.Thread(target=poll_workers, daemon=True) if args.workers else None
    if watcher:
        watcher.start()
    threads = [threading.Thread(target=worker, daemon=True) for _worker in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        # every request ends within its timeout; a thread still alive after that is abandoned, not waited for
        thread.join(max(0.0, stop_at - time.monotonic()) + args.timeout + 5)
    done.set()
    if poller:
        poller.join(5)
    if watcher:
        watcher.join(5)
    with lock:
        timeline.sort()
        errors: dict[str, int] = {}
        for _start, _end, status in timeline:
            if status != "200":
                errors[status] = errors.get(status, 0) + 1
        return {
            "t0": t0,
            "elapsed": round(time.time() - t0, 3),
            "requested": args.requests,
            "total": len(timeline),
            "ok": len(timeline) - sum(errors.values()),
            "errors": errors,
            "timeline": timeline,
            "readiness": changes,
            "workers": routing,
            "stopped_by": stopped_by[0] if stopped_by else None,
        }


def wait_ready(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    deadline = started + args.timeout
    polls, streak, failures, last = 0, 0, {}, None
    while time.monotonic() < deadline:
        polls += 1
        last, ready = readiness(args.url, 2.0)
        if ready:
            status = generate(args.url, args.request_timeout, args.max_new_tokens, polls)
            if status == "200":
                streak += 1
                if streak >= args.probes:
                    return {"ready": True, "waited": round(time.monotonic() - started, 3), "polls": polls,
                            "probe_failures": failures, "last": last, "at": time.time()}  # fmt: skip
                continue
            failures[status] = failures.get(status, 0) + 1
            last = f"{last}, probe {status}"
        streak = 0
        time.sleep(args.interval)
    return {"ready": False, "waited": round(time.monotonic() - started, 3), "polls": polls,
            "probe_failures": failures, "last": last, "at": time.time()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the router (default %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="a bounded load; prints counts and a per-request timeline")
    p_run.add_argument("--requests", type=int, default=300)
    p_run.add_argument("--concurrency", type=int, default=16)
    p_run.add_argument("--rate", type=float, default=0.0, help="at most this many starts per second (0: no limit)")
    p_run.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    p_run.add_argument("--deadline", type=float, default=60.0, help="no request starts after this many seconds")
    p_run.add_argument("--stop-file", default="", help="no request starts once this file exists (removed at start)")
    p_run.add_argument("--readiness", action="store_true", help="poll /readiness meanwhile and record its changes")
    p_run.add_argument("--readiness-interval", type=float, default=0.1)
    p_run.add_argument("--workers", action="store_true", help="poll GET /workers meanwhile and record its changes")
    p_run.add_argument("--workers-interval", type=float, default=0.1)
    p_wait = sub.add_parser("wait-ready", help="wait for /readiness with every worker healthy and K good probes")
    p_wait.add_argument("--timeout", type=float, default=120.0)
    p_wait.add_argument("--interval", type=float, default=0.2)
    p_wait.add_argument("--probes", type=int, default=1, help="successful /generate in a row that must follow")
    p_wait.add_argument("--request-timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.requests < 0 or args.concurrency < 1 or args.deadline <= 0 or args.timeout <= 0:
            parser.error("--requests >= 0, --concurrency >= 1, --deadline > 0 and --timeout > 0")
        result = run(args)
    else:
        result = wait_ready(args)
    json.dump(result, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0 if args.command == "run" or result["ready"] else 1


if __name__ == "__main__":
    sys.exit(main())
