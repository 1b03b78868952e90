"""Health, stall, drain and start-up of the simulator, as sglang 0.5.23 (http_server.py health_generate, ready,
_wait_and_warmup; tokenizer_manager.py sigterm_watchdog; engine.py Engine._launch_subprocesses).

Simulator subprocesses on 127.0.0.1 with small knob values (SGLANG_HEALTH_CHECK_TIMEOUT=1..2, watchdog period
0.1..1 s); every wait is bounded.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.cli import load_knobs

from tests.http_client import http

# the watchdog's period, and a scheduler that exits at once after ShutdownReq (sglang: up to 15 s; timed in
# test_pdsim_drain.py): these tests are about what the drain does, not how long the shutdown after it takes
FAST_DRAIN = {"SGLANG_SIM_DRAIN_POLL": "0.1", "SGLANG_SIM_SCHEDULER_EXIT": "0"}


def timed(method: str, url: str, body=None, timeout: float = 10.0):
    t0 = time.monotonic()
    answer = http(method, url, body, timeout=timeout)
    return answer[0], time.monotonic() - t0


def generate(sim, tokens: int = 2, timeout: float = 10.0):
    return http("POST", sim.url("/generate"), {"text": "hi", "sampling_params": {"max_new_tokens": tokens}},
                timeout=timeout)  # fmt: skip


def in_background(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["answer"] = fn()
        except OSError as exc:  # timed out or cut off: no answer
            out["answer"] = (None, repr(exc))
        out["done_at"] = time.time()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def wait_for(probe, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def lifecycle(sim) -> dict:
    status, body = http("GET", sim.url("/sim/lifecycle"))
    assert status == 200
    return body


def exit_record(sim) -> dict:
    [line] = [ln for ln in sim.log().splitlines() if "sim_lifecycle=" in ln]
    return json.loads(line.split("sim_lifecycle=", 1)[1])


# --- knobs ------------------------------------------------------------------------------------------------


def test_knobs_defaults_as_sglang_and_parsing():
    default = load_knobs({})
    assert default.drain_poll == 5.0 and default.warmup_delay == 0.0
    assert default.health_check_timeout == 20 and default.health_endpoint_generation is True
    assert default.stall_after is None and default.stall_for is None
    env = {"SGLANG_SIM_STALL_AFTER": "3", "SGLANG_SIM_STALL_FOR": "inf", "SGLANG_HEALTH_CHECK_TIMEOUT": "2",
           "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "no", "SGLANG_SIM_WARMUP_DELAY": "1.5"}  # fmt: skip
    knobs = load_knobs(env)
    assert (knobs.stall_after, knobs.stall_for, knobs.health_check_timeout) == (3.0, None, 2)
    assert knobs.health_endpoint_generation is False and knobs.warmup_delay == 1.5 and not knobs.problems
    assert load_knobs({"SGLANG_SIM_STALL_FOR": "1.5"}).stall_for == 1.5
    bad = load_knobs({"SGLANG_HEALTH_CHECK_TIMEOUT": "1.5", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "maybe"})
    assert bad.health_check_timeout == 20 and bad.health_endpoint_generation is True and len(bad.problems) == 2


# --- /health is a generation -------------------------------------------------------------------------------


def test_health_is_a_generation_that_takes_about_a_second_ready_answers_at_once(sims):
    sim = sims.start("null")
    for path in ("/health", "/health_generate"):
        status, took = timed("GET", sim.url(path))
        assert status == 200 and 0.9 <= took < 3, (path, took)  # sleep(1), then the scheduler had answered
    status, took = timed("GET", sim.url("/ready"))
    assert status == 200 and took < 0.5
    # the health request is the scheduler's, not a /generate the service records
    assert http("GET", sim.url("/sim/requests?path=/generate"))[1] == []


def test_health_endpoint_generation_off_answers_health_at_once_but_not_health_generate(sims):
    sim = sims.start("null", env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"})
    status, took = timed("GET", sim.url("/health"))
    assert status == 200 and took < 0.5
    status, took = timed("GET", sim.url("/health_generate"))
    assert status == 200 and took >= 0.9


# --- a stalled scheduler -------------------------------------------------------------------------------------


def test_stalled_scheduler_lives_answers_info_hangs_generation_and_fails_health(sims):
    env = {"SGLANG_SIM_STALL_AFTER": "0.3", "SGLANG_SIM_STALL_FOR": "", "SGLANG_HEALTH_CHECK_TIMEOUT": "2"}
    sim = sims.start("null", "--enable-metrics", env=env)
    wait_for(lambda: lifecycle(sim)["stalled"], what="the stall")
    with pytest.raises(TimeoutError):
        generate(sim, timeout=1.0)  # does not progress: the client times out
    for path in ("/v1/models", "/model_info", "/v1/loads", "/metrics"):  # the tokenizer's own: they answer
        assert http("GET", sim.url(path))[0] == 200, path
    for path in ("/server_info", "/get_server_info"):  # get_internal_state asks the scheduler: hangs
        with pytest.raises(TimeoutError):
            http("GET", sim.url(path), timeout=1.0)
    assert http("GET", sim.url("/ready"))[0] == 200  # no health check failed yet: still Up
    status, took = timed("GET", sim.url("/health"))
    assert status == 503 and 1.9 <= took < 4, took  # after SGLANG_HEALTH_CHECK_TIMEOUT
    assert http("GET", sim.url("/ready"))[0] == 503  # UnHealthy
    assert lifecycle(sim)["server_status"] == "UnHealthy" and sim.popen.poll() is None
    assert "Health check failed" in sim.log()


def test_stall_ends_requests_resume_and_health_recovers_up(sims):
    env = {"SGLANG_SIM_STALL_AFTER": "0.2", "SGLANG_SIM_STALL_FOR": "1.6", "SGLANG_HEALTH_CHECK_TIMEOUT": "1"}
    sim = sims.start("null", env=env)
    window = wait_for(lambda: lifecycle(sim)["stall_window"], what="the stall window")
    wait_for(lambda: lifecycle(sim)["stalled"], what="the stall")
    thread, out = in_background(lambda: generate(sim))
    info_thread, info = in_background(lambda: http("GET", sim.url("/server_info"), timeout=10))
    assert timed("GET", sim.url("/health"))[0] == 503  # 1 s without an answer
    assert http("GET", sim.url("/ready"))[0] == 503
    thread.join(10)
    info_thread.join(10)
    assert out["answer"][0] == 200 and out["done_at"] >= window[1] - 0.05  # answered once the stall ended
    assert info["answer"][0] == 200 and info["done_at"] >= window[1] - 0.05  # so did /server_info
    assert http("GET", sim.url("/health"))[0] == 200  # a later successful check sets Up again
    assert http("GET", sim.url("/ready"))[0] == 200 and lifecycle(sim)["server_status"] == "Up"


# --- SIGTERM: the watchdog ------------------------------------------------------------------------------------


def test_sigterm_while_unhealthy_skips_the_drain_and_waits_out_the_stalled_schedulers_exit(sims):
    # the stalled scheduler never reads the ShutdownReq: sglang waits its whole grace (15 s; 1 s here), then kills it
    env = {"SGLANG_SIM_STALL_AFTER": "0.2", "SGLANG_HEALTH_CHECK_TIMEOUT": "1", "SGLANG_SIM_SHUTDOWN_GRACE": "1",
           **FAST_DRAIN}  # fmt: skip
    sim = sims.start("null", env=env)
    wait_for(lambda: lifecycle(sim)["stalled"], what="the stall")
    thread, out = in_background(lambda: generate(sim, timeout=10))
    wait_for(lambda: lifecycle(sim)["requests_open"] == 1, what="a request in flight")
    assert http("GET", sim.url("/health"))[0] == 503
    t0 = time.monotonic()
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(5) == 0
    # no drain (the stalled request would never finish), then the full grace although SCHEDULER_EXIT is 0
    assert 0.95 <= time.monotonic() - t0 < 2.5
    thread.join(5)
    assert out["answer"][0] is None, out  # cut off
    assert "Signal SIGTERM received while health check failed. Force exiting." in sim.log()
    assert "Schedulers still alive 1s after ShutdownReq, killing them" in sim.log()
    assert exit_record(sim)["shutdown"]["scheduler_stalled"] is True
    record = exit_record(sim)
    assert record["exit"]["reason"] == "unhealthy" and record["sigterm"]["in_flight"] == 1
    assert record["sigterm"]["server_status"] == "UnHealthy"
    [request] = record["requests"]
    assert request["end"] is None and request["completed"] is None  # never ended


def test_watchdog_checks_every_period(sims):
    env = {"SGLANG_SIM_TOKEN_LATENCY": "0.05", "SGLANG_SIM_DRAIN_POLL": "0.5", "SGLANG_SIM_SCHEDULER_EXIT": "0"}
    sim = sims.start("null", env=env)
    thread, out = in_background(lambda: generate(sim, tokens=40))  # about 2 s
    wait_for(lambda: lifecycle(sim)["requests_open"] == 1, what="a request in flight")
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(10) == 0
    thread.join(5)
    assert out["answer"][0] == 200
    checks = sim.log().count("Gracefully exiting... Remaining number of requests 1.")
    assert 2 <= checks <= 5, checks  # every 0.5 s over about 2 s (a 0.05 s period would log about 40)
    assert exit_record(sim)["exit"]["time"] >= out["done_at"]


def test_fail_health_is_a_static_override_that_makes_sigterm_skip_the_drain(sims):
    env = {"SGLANG_SIM_FAIL": "health:503", "SGLANG_SIM_TOKEN_LATENCY": "0.05", **FAST_DRAIN}
    sim = sims.start("null", env=env)  # /ready is 200 until a health check fails
    status, took = timed("GET", sim.url("/health"))
    assert status == 503 and took < 0.5  # at once: no generation
    assert http("GET", sim.url("/ready"))[0] == 503
    thread, out = in_background(lambda: generate(sim, tokens=40))
    wait_for(lambda: lifecycle(sim)["requests_open"] == 1, what="a request in flight")
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(5) == 0
    thread.join(5)
    assert out["answer"][0] is None and exit_record(sim)["exit"]["reason"] == "unhealthy"


# --- what the service saw (GET /sim/lifecycle, the exit line) ---------------------------------------------


def test_lifecycle_records_in_flight_at_sigterm_completed_and_quiet_windows(sims):
    sim = sims.start("null", env={"SGLANG_SIM_TOKEN_LATENCY": "0.05", **FAST_DRAIN})
    assert generate(sim)[0] == 200
    quiet_from = time.time()
    time.sleep(0.3)
    quiet_to = time.time()
    threads = [in_background(lambda: generate(sim, tokens=20)) for _thread in range(2)]  # about 1 s each
    wait_for(lambda: lifecycle(sim)["requests_open"] == 2, what="two requests in flight")
    live = lifecycle(sim)
    assert live["server_status"] == "Up" and live["requests_total"] == 3 and live["requests_completed"] == 1
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(10) == 0
    for thread, out in threads:
        thread.join(5)
        assert out["answer"][0] == 200
    record = exit_record(sim)
    assert record["sigterm"]["in_flight"] == 2 and record["exit"]["reason"] == "drained"
    at_sigterm = [r for r in record["requests"] if r["seq"] in record["sigterm"]["seqs"]]
    assert len(at_sigterm) == 2 and all(r["completed"] and r["end"] <= record["exit"]["time"] for r in at_sigterm)
    assert not [r for r in record["requests"] if quiet_from <= r["start"] <= quiet_to]  # none reached it then
    assert record["requests_total"] == 3 and record["requests_completed"] == 3


# --- start-up: loading, then warm-up ----------------------------------------------------------------------


def test_startup_port_closed_while_loading_then_starting_during_warmup_then_up(sims):
    env = {"SGLANG_SIM_STARTUP_DELAY": "1.0", "SGLANG_SIM_WARMUP_DELAY": "1.0"}
    sim = sims.start("prefill", env=env, healthy=False)
    boot = f"http://127.0.0.1:{sim.bootstrap}"
    wait_for(lambda: _answers(boot + "/health") == 200, what="the bootstrap server")  # listens at once
    assert _answers(sim.url("/health")) is None  # the HTTP port is not listening while loading
    assert http("GET", boot + "/route?engine_rank=-1")[0] == 503  # no prefill rank registered yet
    wait_for(lambda: _answers(sim.url("/health")) is not None, what="the HTTP port")
    # warm-up: ServerStatus.Starting
    assert http("GET", sim.url("/health"))[0] == 503 and http("GET", sim.url("/ready"))[0] == 503
    assert http("GET", sim.url("/model_info"))[0] == 200  # what sglang's warm-up waits for
    assert http("GET", boot + "/route?engine_rank=-1")[0] == 200
    assert lifecycle(sim)["server_status"] == "Starting"
    sim.wait_healthy(5)
    assert http("GET", sim.url("/health"))[0] == 200
    record = lifecycle(sim)
    assert record["up_at"] - record["listening_at"] >= 0.9 and record["listening_at"] - record["started"] >= 0.9


def test_sigterm_while_loading_ends_the_process_at_once(sims):
    sim = sims.start("null", env={"SGLANG_SIM_STARTUP_DELAY": "30"}, healthy=False)
    wait_for(lambda: "Loading weights" in sim.log(), what="the load to start")
    sim.popen.send_signal(signal.SIGTERM)
    assert sim.popen.wait(5) == -signal.SIGTERM  # the default action: sglang's handler comes after the load
    assert exit_record(sim)["exit"]["reason"] == "sigterm-while-loading"


def _answers(url: str) -> int | None:
    try:
        return http("GET", url, timeout=3)[0]
    except OSError:
        return None
