# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""sglang-guard: turns a worker of this host that is alive but silent into a crash that systemd restarts.

Every `interval` seconds, for each worker unit of its configuration (JSON, --config), in a thread of its own: read the
unit's ActiveState and MainPID (systemctl show), GET /health on the worker's main port with `probe_timeout` and,
when that goes unanswered, GET /v1/loads?include=core the same way; verdict.py (shipped beside this file, from the
collection's plugins/module_utils/guard) decides. A kill is `systemctl kill --signal=SIGKILL --kill-whom=all UNIT`:
every process of the unit's cgroup, as sglang's own kill_process_tree does (sglang/srt/utils/common.py), so the
unit ends on a signal and Restart=on-failure brings it back. Each kill and each budget hold is one journal line
(stdout, this unit's SyslogIdentifier) with its reason; GET /metrics on `metrics_host`:`metrics_port` exports
the kills and the budget state (verdict.metrics_text). The worker's API key, where the workers have one, comes from
the environment (SGLANG_WORKER_API_KEY, the guard's own environment file): /v1/loads needs it, /health does not.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verdict

SYSTEMCTL = "/usr/bin/systemctl"


def say(line):
    print(line, flush=True)


def probe(host, port, path, timeout, api_key=""):
    """(outcome, body): outcome is the HTTP status, "refused" (nothing listens), "timeout" (no answer within
    TIMEOUT, the connection taken or not) or "error" (another transport error, e.g. a reset)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        conn.request("GET", path, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read(200000)
    except ConnectionRefusedError:
        return "refused", b""
    except TimeoutError:
        return "timeout", b""
    except OSError:
        return "error", b""
    except http.client.HTTPException:
        return "error", b""
    finally:
        conn.close()


def snapshot_stamps(body):
    """The load snapshot timestamps of a /v1/loads answer (one per DP rank); [] when it holds none."""
    try:
        loads = json.loads(body).get("loads")
    except (ValueError, AttributeError):
        return []
    return [x["timestamp"] for x in loads or [] if isinstance(x, dict) and isinstance(x.get("timestamp"), (int, float))]


def unit_show(unit):
    """(ActiveState, MainPID) of UNIT; ("unknown", None) when systemctl does not answer."""
    try:
        out = subprocess.run([SYSTEMCTL, "show", "-p", "ActiveState", "-p", "MainPID", f"{unit}.service"],
                             capture_output=True, text=True, timeout=10, check=False).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", None
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return props.get("ActiveState", "unknown"), props.get("MainPID")


def unit_kill(unit):
    """SIGKILL to every process of UNIT's cgroup; returns systemctl's exit status."""
    cmd = [SYSTEMCTL, "kill", "--signal=SIGKILL", "--kill-whom=all", f"{unit}.service"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).returncode


def read(worker, timeout, api_key, show=unit_show):
    """One reading of WORKER ({unit, host, port}) for verdict.look."""
    at = time.time()
    active, pid = show(worker["unit"])
    health, _body = probe(worker["host"], worker["port"], "/health", timeout)
    loads = None
    if active == "active" and health == "timeout":
        status, body = probe(worker["host"], worker["port"], "/v1/loads?include=core", timeout, api_key)
        # any HTTP answer is the tokenizer's: the process lives; only a 200 shows the scheduler's snapshots
        loads = None if isinstance(status, str) else snapshot_stamps(body) if status == 200 else []
    return {"at": at, "active": active, "pid": pid, "health": health, "loads": loads}


class Guard:
    """The guard's loop over its workers; SHOW, KILL and CLOCK are injectable for the tests."""

    def __init__(self, config, api_key="", show=unit_show, kill=unit_kill, clock=time.time):
        self.config = config
        self.verdict_config = {"bound": float(config["bound"]), "budget": int(config["kill_budget"]),
                               "window": float(config["kill_window"])}  # fmt: skip
        self.api_key = api_key
        self.show, self.kill, self.clock = show, kill, clock
        self.lock = threading.Lock()
        now = clock()
        self.workers = {w["unit"]: {"state": verdict.new_state(now), "silent_s": 0.0, "kills_total": 0}
                        for w in config["workers"]}  # fmt: skip
        self.stop = threading.Event()

    def look(self, worker):
        """One look at WORKER: read it, judge, act. Returns the event."""
        reading = read(worker, float(self.config["probe_timeout"]), self.api_key, self.show)
        now = self.clock()
        unit = worker["unit"]
        with self.lock:
            entry = self.workers[unit]
            state, event = verdict.look(entry["state"], reading, now, self.verdict_config)
            entry.update(state=state, silent_s=event["silent_s"])
        if event["action"] == verdict.KILL:
            rc = self.kill(unit)
            with self.lock:
                entry["kills_total"] += 1
            say(f"killing {unit}.service (pid {reading['pid']}, {event['phase']}): {event['reason']}; systemd restarts "
                f"it (systemctl kill --signal=SIGKILL --kill-whom=all: rc {rc})")  # fmt: skip
        elif event["action"] == verdict.HOLD:
            say(f"not killing {unit}.service (pid {reading['pid']}, {event['phase']}): {event['reason']}; the guard "
                "holds off until a kill leaves the window (metric sglang_guard_budget_spent)")  # fmt: skip
        return event

    def run_worker(self, worker):
        interval = float(self.config["interval"])
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.look(worker)
            except Exception as exc:
                say(f"look at {worker['unit']}.service failed: {exc!r}")
            self.stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def metrics(self):
        with self.lock:
            return verdict.metrics_text(self.workers, self.clock(), self.verdict_config)

    def start(self):
        threads = [threading.Thread(target=self.run_worker, args=(w,), name=w["unit"], daemon=True)
                   for w in self.config["workers"]]  # fmt: skip
        for t in threads:
            t.start()
        return threads


def serve_metrics(guard, host, port):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = guard.metrics().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the guard's JSON configuration")
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text())
    guard = Guard(config, api_key=os.environ.get("SGLANG_WORKER_API_KEY", ""))
    if config.get("metrics_port"):
        serve_metrics(guard, config.get("metrics_host") or "127.0.0.1", int(config["metrics_port"]))
    units = ", ".join(f"{w['unit']} ({w['host']}:{w['port']})" for w in config["workers"])
    say(f"guarding {units}: a worker silent for {config['bound']} s is killed, at most {config['kill_budget']} "
        f"kills in {config['kill_window']} s each; a look every {config['interval']} s, probes time out after "
        f"{config['probe_timeout']} s")  # fmt: skip
    guard.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        guard.stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
