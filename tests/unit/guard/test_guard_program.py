"""The worker guard's program (roles/sglang_worker/files/sglang_guard.py) against the engine double on loopback:
what it reads from a worker that serves, loads, warms up, is busy on a long prompt, stalls or is frozen, and what it
does about it. systemd is replaced by a fake (the unit's state, and a kill that records itself); the worker is the
double, which mirrors what sglang 0.5.23 publishes (tests/sandbox/pdsim/README.md: /health, /v1/loads per chunk).

Small numbers: the bound 3 s, a look every 0.25 s, probes of 1.5 s. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "plugins" / "module_utils" / "guard"))
sys.path.insert(0, str(REPO / "roles" / "sglang_worker" / "files"))
import sglang_guard  # noqa: E402

from tests.http_client import http  # noqa: E402

BOUND, INTERVAL, PROBE = 3.0, 0.25, 1.5  # a healthy /health takes about 1 s (sleep(1) first)
# A long prompt: 600 words (the double counts a word a token), 0.01 s each: 6 s of prefill (twice the bound), in
# chunks of 64 tokens (10 extend batches of about 0.6 s, each followed by a load snapshot).
LONG_PROMPT = " ".join(["word"] * 600)
LONG_ENV = {"SGLANG_SIM_PREFILL_TOKEN_LATENCY": "0.01"}


class FakeSystemd:
    """The unit's state as systemctl show gives it, and the kills the guard asked for."""

    def __init__(self, sim):
        self.sim = sim
        self.kills: list[float] = []

    def show(self, _unit):
        return "active", str(self.sim.popen.pid)

    def kill(self, _unit):
        self.kills.append(time.monotonic())
        return 0


def guard_for(sim, bound=BOUND):
    fake = FakeSystemd(sim)
    config = {"bound": bound, "interval": INTERVAL, "probe_timeout": PROBE, "kill_budget": 1, "kill_window": 600,
              "workers": [{"unit": "sglang-prefill0", "host": "127.0.0.1", "port": sim.port}]}  # fmt: skip
    return sglang_guard.Guard(config, show=fake.show, kill=fake.kill), fake


def watch(guard, seconds):
    """Looks for SECONDS, as the guard's loop does; returns the events."""
    worker = guard.config["workers"][0]
    events, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        events.append(guard.look(worker))
        time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))
    return events


def long_generation(sim):
    out = {}

    def run():
        body = {"text": LONG_PROMPT, "sampling_params": {"max_new_tokens": 1}}
        out["answer"] = http("POST", sim.url("/generate"), body, timeout=30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_serving_worker_is_never_killed(sims):
    sim = sims.start("null")
    guard, fake = guard_for(sim)
    events = watch(guard, 4.0)
    assert {e["phase"] for e in events} == {"serving"} and fake.kills == []


def test_a_worker_busy_on_a_long_prompt_is_busy_not_silent(sims):
    sim = sims.start("null", "--chunked-prefill-size", "64", env=LONG_ENV)
    guard, fake = guard_for(sim)
    thread, out = long_generation(sim)
    events = watch(guard, 6.0)
    thread.join(30)
    assert out["answer"][0] == 200
    phases = [e["phase"] for e in events]
    assert "busy" in phases, phases  # /health waited behind the prompt and the snapshot moved on
    assert fake.kills == [], events
    assert max(e["silent_s"] for e in events) < BOUND, events


def test_a_prompt_in_one_batch_longer_than_the_bound_is_silence_as_in_sglang(sims):
    """Without chunked prefill sglang publishes nothing until the one batch ends: the double is not kinder."""
    sim = sims.start("null", "--chunked-prefill-size", "-1", env=LONG_ENV)
    guard, fake = guard_for(sim)
    thread, _out = long_generation(sim)
    events = watch(guard, 5.0)
    thread.join(30)
    assert len(fake.kills) == 1, events
    assert next(e for e in events if e["action"] == "kill")["phase"] == "stalled"


def test_a_stalled_scheduler_is_killed_within_the_bound_and_one_look(sims):
    sim = sims.start("null")
    guard, fake = guard_for(sim)
    watch(guard, 1.5)
    assert http("POST", sim.url("/sim/stall"))[0] == 200
    stalled_at = time.monotonic()
    events = watch(guard, BOUND + 4.0)
    assert len(fake.kills) == 1, events
    took = fake.kills[0] - stalled_at
    # the last sign of life is the snapshot published just before the stall; a look every INTERVAL, each at most two
    # probes long
    assert BOUND - 0.1 <= took <= BOUND + INTERVAL + 2 * PROBE + 0.3, took
    kill = next(e for e in events if e["action"] == "kill")
    assert kill["phase"] == "stalled" and "published no load snapshot" in kill["reason"]
    after = [e["action"] for e in events[events.index(kill) + 1 :]]
    assert set(after) <= {"none", "hold"} and after.count("hold") <= 1, after  # budget 1: held off, said once


def test_a_frozen_process_is_killed_within_the_bound_and_one_look(sims):
    sim = sims.start("null")
    guard, fake = guard_for(sim)
    watch(guard, 1.5)
    os.kill(sim.popen.pid, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        events = watch(guard, BOUND + 4.0)
    finally:
        os.kill(sim.popen.pid, signal.SIGCONT)
    assert len(fake.kills) == 1, events
    took = fake.kills[0] - frozen_at
    assert BOUND - INTERVAL - 0.1 <= took <= BOUND + INTERVAL + 2 * PROBE + 0.3, took
    assert next(e for e in events if e["action"] == "kill")["phase"] == "frozen"


@pytest.mark.parametrize(("what", "env"), [("loading (port closed)", {"SGLANG_SIM_STARTUP_DELAY": "6"}),
                                           ("warming up (503 at once)", {"SGLANG_SIM_WARMUP_DELAY": "6"})])  # fmt: skip
def test_a_loading_or_warming_worker_is_never_killed(sims, what, env):
    sim = sims.start("null", env=env, healthy=False)
    guard, fake = guard_for(sim)
    events = watch(guard, 5.0)
    want = "closed" if "STARTUP" in next(iter(env)) else "answering"
    assert want in {e["phase"] for e in events}, (what, events)
    assert fake.kills == [], (what, events)


def test_a_draining_worker_is_never_killed(sims):
    sim = sims.start("null", env={"SGLANG_SIM_TOKEN_LATENCY": "0.05", "SGLANG_SIM_DRAIN_POLL": "0.2"})
    guard, fake = guard_for(sim)
    thread = threading.Thread(target=lambda: http("POST", sim.url("/generate"), {"text": "hi", "sampling_params": {
        "max_new_tokens": 120}}, timeout=30), daemon=True)  # fmt: skip
    thread.start()
    time.sleep(0.3)
    sim.popen.send_signal(signal.SIGTERM)
    events = watch(guard, 5.0)
    thread.join(30)
    assert "answering" in {e["phase"] for e in events}, events
    assert fake.kills == [], events


def test_the_metrics_say_the_kill_and_the_spent_budget(sims):
    sim = sims.start("null")
    guard, _fake = guard_for(sim)
    http("POST", sim.url("/sim/stall"))
    watch(guard, BOUND + 3.0)
    text = guard.metrics()
    assert 'sglang_guard_kills_total{unit="sglang-prefill0"} 1' in text
    assert 'sglang_guard_budget_spent{unit="sglang-prefill0"} 1' in text


def test_the_double_waits_for_kv_as_long_as_sglangs_waiting_timeout_says():
    """sglang/srt/environ.py SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300); the double's old test knob
    SGLANG_SIM_HANDOFF_TIMEOUT still overrides it."""
    sys.path.insert(0, str(REPO / "tests" / "sandbox" / "pdsim"))
    from sglang_pd_sim.cli import load_knobs  # noqa: PLC0415

    assert load_knobs({}).handoff_timeout == 300.0
    assert load_knobs({"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "12"}).handoff_timeout == 12.0
    bad = load_knobs({"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "1.5"})
    assert bad.handoff_timeout == 300.0 and any("WAITING_TIMEOUT" in p for p in bad.problems)
    both = {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "12", "SGLANG_SIM_HANDOFF_TIMEOUT": "0.5"}
    assert load_knobs(both).handoff_timeout == 0.5
