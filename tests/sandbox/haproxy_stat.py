"""HAProxy's own counters, read on its runtime socket, standard library only (runs on the guest's python3).

HAProxy fronts the routers on a router host (issue 39; roles/sglang_router/tasks/haproxy.yml) with its runtime socket
at /run/haproxy/admin.sock. Tests copy this file into the guest and run it over ssh:

    python3 haproxy_stat.py show                                  # one snapshot, JSON
    python3 haproxy_stat.py watch --stop-file F --interval 0.2    # every server's state changes until F exists

`show` prints {"at": epoch, "info": {Pid, Uptime_sec, ...}, "stat": [{pxname, svname, status, scur, stot, hrsp_5xx,
eresp, econ, wretr, wredis, cli_abrt, srv_abrt, ...}, ...]}: the answers to `show info` and `show stat` (haproxy 2.6
management.txt, sections 9.1 "CSV format" and 9.3 "show info"), each row keyed by the CSV header's own names.
`watch` prints {"t0": epoch, "changes": [[t, "backend/server", "UP"], ...], "first": snapshot, "last": snapshot}:
every change of each server's status, seconds since t0, sampled every --interval; a socket that does not answer
(HAProxy killed, not back yet) is recorded as the state "socket: <error>" of the pseudo-server "-".

Counters live in the HAProxy process: a reload starts new workers whose counters begin at zero, and so does a restart
(info Pid changes). counter_delta() says which.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

SOCKET = "/run/haproxy/admin.sock"
# The counters that say a request failed or was retried (management.txt 9.1): responses 5xx (the server's or
# HAProxy's own), errors reading a response (eresp: the server closed or reset it), connection errors (econ),
# retries and redispatches (wretr, wredis), transfers aborted by the client or by the server (cli_abrt, srv_abrt).
COUNTERS = ("stot", "hrsp_5xx", "eresp", "econ", "wretr", "wredis", "cli_abrt", "srv_abrt", "ereq", "dreq", "chkdown")


def ask(command: str, path: str = SOCKET, timeout: float = 2.0) -> str:
    """One command on the runtime socket (non-interactive mode: HAProxy answers and closes)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def parse_stat(text: str) -> list[dict]:
    """`show stat` CSV -> one dict per proxy/server row; numbers as int, empty fields as None."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise ValueError(f"not a show stat answer: {text[:200]!r}")
    header = lines[0][2:].split(",")
    rows = []
    for line in lines[1:]:
        fields = line.split(",")
        row = {}
        for name, value in zip(header, fields, strict=False):
            if not name:
                continue
            row[name] = int(value) if value.isdigit() else (value if value != "" else None)
        rows.append(row)
    return rows


def parse_info(text: str) -> dict:
    """`show info` "Name: value" lines -> {Name: value} (numbers as int)."""
    info = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            value = value.strip()
            info[name.strip()] = int(value) if value.isdigit() else value
    return info


def snapshot(path: str = SOCKET) -> dict:
    return {"at": time.time(), "info": parse_info(ask("show info", path)), "stat": parse_stat(ask("show stat", path))}


def row(snap: dict, pxname: str, svname: str) -> dict | None:
    """The row of proxy PXNAME's SVNAME (a server's name, FRONTEND or BACKEND) in SNAP, or None."""
    return next((r for r in snap["stat"] if r.get("pxname") == pxname and r.get("svname") == svname), None)


def counter_delta(before: dict, after: dict, pxname: str, svname: str, counters=COUNTERS) -> dict:
    """{counter: after - before} of one row; when AFTER comes from another HAProxy process than BEFORE (info Pid
    differs: reloaded or restarted) the counters began at zero in between, so AFTER's own values, and
    "process_changed": True."""
    same = before["info"].get("Pid") == after["info"].get("Pid")
    old, new = row(before, pxname, svname) or {}, row(after, pxname, svname) or {}
    found = {c: (new.get(c) or 0) - ((old.get(c) or 0) if same else 0) for c in counters}
    found["process_changed"] = not same
    return found


def states(snap: dict) -> dict:
    """{"backend/server": status} of every server row of SNAP (not the FRONTEND and BACKEND rows)."""
    return {f"{r['pxname']}/{r['svname']}": r.get("status") for r in snap["stat"]
            if r.get("svname") not in ("FRONTEND", "BACKEND")}  # fmt: skip


def watch(args: argparse.Namespace) -> dict:
    if os.path.exists(args.stop_file):
        os.remove(args.stop_file)
    t0 = time.time()
    stop_at = time.monotonic() + args.deadline
    changes, last, first, latest = [], {}, None, None
    while time.monotonic() < stop_at and not os.path.exists(args.stop_file):
        try:
            latest = snapshot(args.socket)
            now = states(latest)
            first = first or latest
        except (OSError, ValueError) as exc:
            now = {"-": f"socket: {type(exc).__name__}"}
        for name in sorted(set(now) | set(last)):
            if now.get(name) != last.get(name) and name in now:
                changes.append([round(time.time() - t0, 3), name, now[name]])
        last = now
        time.sleep(args.interval)
    return {"t0": t0, "changes": changes, "first": first, "last": latest}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--socket", default=SOCKET)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="one snapshot of show info and show stat")
    p_watch = sub.add_parser("watch", help="every server's status changes until the stop file exists")
    p_watch.add_argument("--stop-file", required=True)
    p_watch.add_argument("--interval", type=float, default=0.2)
    p_watch.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args(argv)
    result = snapshot(args.socket) if args.command == "show" else watch(args)
    json.dump(result, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
