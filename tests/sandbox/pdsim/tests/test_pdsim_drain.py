"""SIGTERM drains as sglang 0.5.23 does (tokenizer_manager.py sigterm_watchdog, http_server.py health_generate):
/health and /ready answer 503 at once, in-flight requests finish, then the process exits 0.

Simulator subprocesses on 127.0.0.1; every wait is bounded (each test takes about a second).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.cli import load_knobs

from tests.http_client import http

# the SIGTERM watchdog period (sglang: 5 s), and a scheduler that exits at once after the drain's ShutdownReq (default
# 15 s, sglang's bound): these tests time the drain; the shutdown after it has tests of its own below
POLL = {"SGLANG_SIM_DRAIN_POLL": "0.05", "SGLANG_SIM_SCHEDULER_EXIT": "0"}
SLOW = {"SGLANG_SIM_TOKEN_LATENCY": "0.05", **POLL}  # 20 tokens: about 1 s in flight


def start_request(sim, tokens: int = 20) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        t0 = time.monotonic()
        body = {"text": "drain me", "sampling_params": {"max_new_tokens": tokens}}
        try:
            out["answer"] = http("POST", sim.url("/generate"), body, timeout=15)
        except OSError as exc:  # the connection dropped: no answer
            out["answer"] = (None, repr(exc))
        out["done_at"] = time.monotonic()
        out["took"] = out["done_at"] - t0

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def wait_in_flight(sim, n: int = 1, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        load = http("GET", sim.url("/v1/loads"))[1]["loads"][0]
        if load["num_running_reqs"] + load["num_waiting_reqs"] >= n:
            return
        time.sleep(0.02)
    raise AssertionError("request never got in flight")


def test_sigterm_finishes_in_flight_request_then_exits_0(sims):
    sim = sims.start("null", env=SLOW)
    assert http("GET", sim.url("/ready"))[0] == 200
    thread, out = start_request(sim)
    wait_in_flight(sim)
    sim.popen.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    # draining: health and readiness fail at once, so a router stops sending; the rest is served
    assert http("GET", sim.url("/health"))[0] == 503
    assert http("GET", sim.url("/health_generate"))[0] == 503
    assert http("GET", sim.url("/ready"))[0] == 503
    assert http("GET", sim.url("/v1/loads"))[0] == 200 and sim.popen.poll() is None
    # a request that still arrives is served too (sglang 0.5.23 does not refuse it)
    late = http("POST", sim.url("/generate"), {"text": "late", "sampling_params": {"max_new_tokens": 2}})
    assert late[0] == 200
    thread.join(10)
    status, body = out["answer"]
    assert status == 200 and body["meta_info"]["completion_tokens"] == 20, out
    rc = sim.popen.wait(5)
    exited_at = time.monotonic()
    assert rc == 0
    assert exited_at >= out["done_at"]  # not before the in-flight request was answered
    log = sim.log()
    assert "Received SIGTERM" in log and "Remaining number of requests 1" in log and "Shutdown complete" in log


def test_sigterm_when_idle_exits_at_once(sims):
    sim = sims.start("decode", env=POLL)
    t0 = time.monotonic()
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(5) == 0
    assert time.monotonic() - t0 < 1.0


def test_force_shutdown_does_not_wait(sims):
    sim = sims.start("null", env={**SLOW, "SGL_FORCE_SHUTDOWN": "1"})
    thread, out = start_request(sim, tokens=40)  # about 2 s
    wait_in_flight(sim)
    t0 = time.monotonic()
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(5) == 0
    assert time.monotonic() - t0 < 1.2  # the request had about two seconds left
    thread.join(10)
    assert out["answer"][0] is None, out  # cut off: no answer, which is what forcing means
    assert "force shutdown flag set" in sim.log()


# --- after the drain: ShutdownReq, and up to 15 s for the schedulers (tokenizer_manager.py sigterm_watchdog) ----------


def test_shutdown_knobs_default_to_sglangs_15_s_grace():
    default = load_knobs({})
    assert (default.scheduler_exit, default.shutdown_grace) == (15.0, 15.0)  # _SCHEDULER_EXIT_TIMEOUT_SECS
    knobs = load_knobs({"SGLANG_SIM_SCHEDULER_EXIT": "2.5", "SGLANG_SIM_SHUTDOWN_GRACE": "4"})
    assert (knobs.scheduler_exit, knobs.shutdown_grace) == (2.5, 4.0)


def test_after_the_drain_the_worker_spends_the_schedulers_exit_time_before_it_exits(sims):
    sim = sims.start("null", env={**SLOW, "SGLANG_SIM_SCHEDULER_EXIT": "1.5"})
    thread, out = start_request(sim)  # about 1 s
    wait_in_flight(sim)
    sim.popen.send_signal(signal.SIGTERM)
    thread.join(10)
    assert out["answer"][0] == 200
    drained_at = out["done_at"]
    time.sleep(0.5)
    # shutting down: still listening, health 503, not yet exited
    assert sim.popen.poll() is None and http("GET", sim.url("/health"))[0] == 503
    assert sim.popen.wait(5) == 0
    assert time.monotonic() - drained_at >= 1.4  # the scheduler's 1.5 s after the drain, not an exit at once
    log = sim.log()
    assert "Sent ShutdownReq to the scheduler; waiting up to 15s" in log and "Schedulers still alive" not in log
    [line] = [ln for ln in log.splitlines() if "sim_lifecycle=" in ln]
    record = json.loads(line.split("sim_lifecycle=", 1)[1])
    assert record["exit"]["reason"] == "drained" and record["shutdown"]["seconds"] == 1.5
    assert record["exit"]["time"] - record["shutdown"]["time"] >= 1.4


def test_a_scheduler_slower_than_the_grace_is_killed_at_the_grace(sims):
    sim = sims.start("null", env={**POLL, "SGLANG_SIM_SCHEDULER_EXIT": "30", "SGLANG_SIM_SHUTDOWN_GRACE": "1"})
    t0 = time.monotonic()
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(5) == 0
    assert 0.95 <= time.monotonic() - t0 < 2.5
    assert "Schedulers still alive 1s after ShutdownReq, killing them" in sim.log()
