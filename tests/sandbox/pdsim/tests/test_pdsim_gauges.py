"""The simulator's load gauges and load snapshot are published as sglang 0.5.23 publishes them, not live counts
(sglang/srt/managers/scheduler_components/metrics_reporter.py report_prefill_stats, report_decode_stats,
_maybe_log_idle_metrics; sglang/srt/managers/scheduler.py publish_load_snapshot, on_idle), and the collection's
measured drain (plugins/module_utils/units/drain.py) is not fooled by a gauge that is stale at 0, nor
held by one that a request's end left non-zero. The simulator's default is published (cli.py Knobs.gauges).

Engine tests run in process with a fake clock-free scheduler; worker tests run simulators on 127.0.0.1.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring import prom_text
from ansible_collections.disagg.sglang.plugins.module_utils.units import drain, service_health

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim import engine as engine_mod
from sglang_pd_sim.cli import load_knobs
from sglang_pd_sim.engine import Engine
from sglang_pd_sim.promtext import parse_exposition

from tests.http_client import http

# /metrics as sglang publishes its gauges: the simulator's default (cli.py Knobs.gauges), said where a test relies on it
PUBLISHED = {"SGLANG_SIM_GAUGES": "published"}


def gauge(sim, name: str) -> float:
    return sum(v for _s, _labels, v in parse_exposition(sim.metrics_text()).get(name, {}).get("samples", []))


def load(sim) -> dict:
    status, body = http("GET", sim.url("/v1/loads?include=core,disagg"))
    assert status == 200
    return body["loads"][0]


def in_thread(fn, *args, **kwargs) -> dict:
    out: dict = {}

    def run():
        out["answer"] = fn(*args, **kwargs)
        out["at"] = time.monotonic()

    out["thread"] = threading.Thread(target=run, daemon=True)
    out["thread"].start()
    return out


def pd_request(sims, room, tokens, latency, *, timeout, env=None):
    """A prefill and a decode with --enable-metrics (LATENCY s a token, ENV beside), and one PD request of TOKENS
    tokens sent to both in threads: (decode, [the prefill's call, the decode's call])."""
    prefill = sims.start("prefill")
    decode = sims.start("decode", "--enable-metrics", env={"SGLANG_SIM_TOKEN_LATENCY": latency, **(env or {})})
    body = {"text": "a prompt", "sampling_params": {"max_new_tokens": tokens}, "bootstrap_host": "127.0.0.1",
            "bootstrap_port": prefill.bootstrap, "bootstrap_room": room}  # fmt: skip
    calls = [in_thread(http, "POST", sim.url("/generate"), body, timeout=timeout) for sim in (prefill, decode)]
    return decode, calls


# --- the engine: when the scheduler publishes ----------------------------------------------------------------


def test_decode_gauges_are_written_every_decode_log_interval_passes_not_at_each_step():
    eng = Engine(load_knobs({}), decode_log_interval=40, load_publish_interval=15)
    with eng.decode(0, 10) as held:
        for _step in range(14):
            eng.step(held)
        assert eng.gauges["num_running_reqs"] == 0 and eng.loads["num_running_reqs"] == 0  # both stale at 0
        eng.step(held)  # the 15th pass: the load snapshot
        assert eng.loads["num_running_reqs"] == 1 and eng.gauges["num_running_reqs"] == 0
        for _step in range(25):
            eng.step(held)  # the 40th pass: the gauges (metrics_reporter.py report_decode_stats)
        assert eng.gauges["num_running_reqs"] == 1 and eng.gauges["kv_used_tokens"] == 50


def test_a_pass_is_one_step_of_the_whole_batch():
    eng = Engine(load_knobs({}), decode_log_interval=4, load_publish_interval=100)
    with eng.decode(0, 1) as first, eng.decode(0, 1) as second:
        for _pass in range(3):
            eng.step(first)
            eng.step(second)
        assert eng.gauges["num_running_reqs"] == 0  # 3 passes of a batch of 2: no report yet
        eng.step(first)
        eng.step(second)
        assert eng.gauges["num_running_reqs"] == 2  # the 4th pass


def test_idle_scheduler_rewrites_a_stale_running_gauge_at_once_else_every_30_s(monkeypatch):
    eng = Engine(load_knobs({}), decode_log_interval=1)
    with eng.decode(0, 5) as held:
        eng.step(held)
        eng.idle_tick()  # a batch runs: on_idle is not reached, nothing is published from there
        assert eng.gauges["num_running_reqs"] == 1
    assert eng.gauges["num_running_reqs"] == 1  # the last report, until the scheduler finds itself idle
    eng.idle_tick()
    assert eng.gauges["num_running_reqs"] == 0 and eng.gauges["kv_used_tokens"] == 0  # stale running: at once
    # not stale: rewritten only when 30 s passed since the last write
    eng.kv_used = 7  # something the running gauge does not show
    eng.idle_tick()
    assert eng.gauges["kv_used_tokens"] == 0
    monkeypatch.setattr(eng, "gauges_at", time.monotonic() - engine_mod.IDLE_METRICS_S - 1)
    eng.idle_tick()
    assert eng.gauges["kv_used_tokens"] == 7


def test_work_waiting_without_a_batch_publishes_the_load_snapshot_not_the_gauges():
    eng = Engine(load_knobs({}))
    with eng.bootstrap():  # a prefill's request waits for its decode: no batch, not idle
        eng.idle_tick()
        assert eng.loads["bootstrapping"] == 1 and eng.gauges["bootstrapping"] == 0
    with eng.awaiting():  # a decode's request waits for its KV
        eng.idle_tick()
        assert eng.loads["awaiting_kv"] == 1 and eng.gauges["awaiting_kv"] == 0


def test_a_stalled_scheduler_publishes_nothing():
    eng = Engine(load_knobs({}))
    eng.stalled = lambda: True
    with eng.bootstrap():
        eng.idle_tick()
        assert eng.loads["bootstrapping"] == 0


def test_a_pd_prefill_report_counts_its_batch_as_running_and_in_flight():
    eng = Engine(load_knobs({}))
    with eng.prefill(100, pd_prefill=True):
        assert eng.gauges["num_running_reqs"] == 0  # a PD prefill reports after its requests left for the KV send
    eng.report_prefill(1)
    assert (eng.gauges["num_running_reqs"], eng.gauges["transferring"]) == (1, 1)


# --- a worker: /metrics and /v1/loads --------------------------------------------------------------------------


def test_gauges_knob_is_published_by_default_or_live():
    assert load_knobs({}).gauges == "published"
    assert load_knobs({"SGLANG_SIM_GAUGES": "live"}).gauges == "live"
    odd = load_knobs({"SGLANG_SIM_GAUGES": "stale"})
    assert odd.gauges == "published" and odd.problems


def test_a_default_worker_s_gauges_are_not_live_they_refresh_every_decode_log_interval_passes(sims):
    # no SGLANG_SIM_GAUGES: the default. A decode of 60 tokens at 50 ms each: its gauges stay at the idle report's 0
    # until the 40th decode pass (metrics_reporter.py report_decode_stats, --decode-log-interval 40), while its load
    # snapshot counts the request from its arrival (scheduler.py on_idle, every 15 passes after)
    started = time.monotonic()
    decode, calls = pd_request(sims, 909, 60, "0.05", timeout=20)
    stale, fresh = [], []
    while calls[1]["thread"].is_alive() and time.monotonic() - started < 15:
        running = gauge(decode, "sglang:num_running_reqs")
        snapshot = load(decode)
        (fresh if running else stale).append((time.monotonic() - started, snapshot["num_running_reqs"]
                                              + snapshot["num_waiting_reqs"]))  # fmt: skip
        time.sleep(0.05)
    for call in calls:
        call["thread"].join(15)
    assert [c["answer"][0] for c in calls] == [200, 200]
    # not live: for the first 39 passes (about 2 s) the gauge said 0 while the load snapshot counted the request
    assert any(held == 1 for _t, held in stale), stale
    # (judged on the samples' own times: on a loaded machine the first sample may come a second after the start)
    assert stale and max(t for t, _h in stale) > 1.5, stale
    # refreshed at the 40th pass (about 2 s in), and held from then until the answer (no report in passes 41-60)
    assert fresh and 1.7 < fresh[0][0] < 4.0, (fresh[:3], stale[-3:])
    assert fresh[0][0] - stale[0][0] > 0.5, (stale[:3], fresh[:3])  # seen stale a while before the refresh
    assert all(t < fresh[0][0] for t, _h in stale), "the gauge went back to 0 while the request decoded"
    # idle again: the running gauge is stale (1, none running), so the idle scheduler rewrites it at once
    deadline = time.monotonic() + 1
    while gauge(decode, "sglang:num_running_reqs"):
        assert time.monotonic() < deadline, "the idle scheduler did not rewrite its stale running gauge"
        time.sleep(0.05)


def test_decode_gauges_read_zero_while_a_short_request_decodes_and_v1_loads_counts_it(sims):
    # 30 tokens, fewer than sglang's 40 decode passes between two reports: the gauges never see the request
    decode, calls = pd_request(sims, 808, 30, "0.06", timeout=15, env=PUBLISHED)
    time.sleep(0.6)  # decoding (about 1.8 s in all)
    assert calls[1]["thread"].is_alive()
    assert prom_text.in_flight(decode.metrics_text()) == 0  # the gauges: stale at 0
    snapshot = load(decode)
    assert snapshot["num_running_reqs"] + snapshot["num_waiting_reqs"] == 1  # the load snapshot counts it
    for call in calls:
        call["thread"].join(15)
    assert [c["answer"][0] for c in calls] == [200, 200]
    time.sleep(0.2)
    assert prom_text.in_flight(decode.metrics_text()) == 0 and load(decode)["num_running_reqs"] == 0


def test_prefill_gauges_miss_a_request_in_the_bootstrap_queue_and_v1_loads_counts_it(sims):
    env = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "2", **PUBLISHED}
    prefill = sims.start("prefill", "--enable-metrics", env=env)
    waiting = in_thread(http, "POST", prefill.url("/generate"), {
        "text": "x", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "127.0.0.1",
        "bootstrap_port": prefill.bootstrap, "bootstrap_room": 9})  # fmt: skip
    time.sleep(0.5)  # no decode connects: the request waits in the bootstrap queue, no batch runs
    assert gauge(prefill, "sglang:num_prefill_bootstrap_queue_reqs") == 0.0  # the last report was an idle one
    snapshot = load(prefill)
    assert snapshot["num_waiting_reqs"] == 1 and snapshot["disaggregation"]["prefill_bootstrap_queue_reqs"] == 1
    assert snapshot["num_running_reqs"] == 0  # a PD prefill never fills its running batch
    waiting["thread"].join(10)
    assert waiting["answer"][0] == 500  # the bootstrap timeout


def test_the_collections_drain_waits_for_a_request_the_gauges_miss(sims):
    # drain.drain, as the rolling batch runs it against a decode out of the router: the gauges say 0 from
    # the start, the drain must still wait until the request is answered
    decode, calls = pd_request(sims, 4711, 30, "0.05", timeout=15, env=PUBLISHED)
    deadline = time.monotonic() + 5
    while load(decode)["num_running_reqs"] + load(decode)["num_waiting_reqs"] == 0:
        assert time.monotonic() < deadline, "the request never reached the decode"
        time.sleep(0.02)
    assert prom_text.in_flight(decode.metrics_text()) == 0  # what the drain read alone before: "drained"
    health = decode.url("/health")
    drained = drain.drain(service_health.metrics_url(health), 10, fetch=service_health.fetch,
                          sleep=time.sleep, clock=time.monotonic, poll=0.05,
                          loads=drain.loads_url(health))  # fmt: skip
    ended = time.monotonic()
    calls[1]["thread"].join(10)
    assert drained["left"] == 0 and drained["seconds"] > 0.5
    assert ended >= calls[1]["at"]  # not before the decode answered (drain.QUIET after its last count)


def drain_of(sim, timeout: float) -> dict:
    """drain.drain as the rolling batch and the retirement run it against an instance out of the router."""
    health = sim.url("/health")
    return drain.drain(service_health.metrics_url(health), timeout, fetch=service_health.fetch,
                       sleep=time.sleep, clock=time.monotonic, poll=0.05,
                       loads=drain.loads_url(health))  # fmt: skip


def test_the_drain_waits_out_a_prefill_request_its_gauges_never_counted_and_ends_when_it_ends(sims):
    # a default (published) prefill: a request in its bootstrap queue is in no gauge (no batch ran: stale at 0) but in
    # its load snapshot (on_idle, every 50 ms while work waits); the drain neither ends on the stale 0 nor waits on
    # after the request's bootstrap timeout
    prefill = sims.start("prefill", "--enable-metrics", env={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "2"})
    waiting = in_thread(http, "POST", prefill.url("/generate"), {
        "text": "x", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "127.0.0.1",
        "bootstrap_port": prefill.bootstrap, "bootstrap_room": 31})  # fmt: skip
    deadline = time.monotonic() + 3
    while load(prefill)["num_waiting_reqs"] == 0:
        assert time.monotonic() < deadline, "the request never reached the bootstrap queue"
        time.sleep(0.02)
    assert prom_text.in_flight(prefill.metrics_text()) == 0  # stale: what a gauges-only drain would believe
    drained = drain_of(prefill, 10)
    ended = time.monotonic()
    waiting["thread"].join(5)
    assert waiting["answer"][0] == 500  # the bootstrap timeout
    assert drained["left"] == 0 and drained["seconds"] > 1.0, drained
    assert waiting["at"] <= ended < waiting["at"] + 3.0, (ended - waiting["at"], drained)


def test_the_drain_ends_on_a_decode_s_refreshed_gauges_at_once_not_after_the_idle_rewrite_period(sims):
    # 60 tokens: the gauges are refreshed at the 40th decode pass (running 1) and hold it until the idle scheduler
    # rewrites its stale running gauge, at once (metrics_reporter.py _maybe_log_idle_metrics), not after 30 s; the
    # drain, which takes the larger of the gauges and the load snapshot, ends seconds after the answer (not 30)
    decode, calls = pd_request(sims, 4712, 60, "0.05", timeout=20)
    deadline = time.monotonic() + 6
    while prom_text.in_flight(decode.metrics_text()) == 0:  # the 40th pass: the gauges count the request
        assert time.monotonic() < deadline and calls[1]["thread"].is_alive(), "the gauges never counted the request"
        time.sleep(0.02)
    drained = drain_of(decode, 20)
    ended = time.monotonic()
    calls[1]["thread"].join(10)
    assert calls[1]["answer"][0] == 200
    assert drained["left"] == 0 and drained["seconds"] > 0.5, drained
    assert calls[1]["at"] - 0.1 <= ended < calls[1]["at"] + 3.0, (ended - calls[1]["at"], drained)


def test_the_drain_catches_a_request_that_arrives_after_its_first_0_and_ends_with_none_in_flight(sims):
    # the router chose this worker just before it left the router's listing: the drain's first readings say 0 (the
    # prefill is idle), then the request arrives. The drain ends only after its readings said 0 for QUIET seconds,
    # so after the prefill answered, and the prefill's own record holds no request in flight at the drain's end (what
    # SIGTERM would have found: tests/integration/faults.py drain_problems).
    prefill = sims.start("prefill", "--enable-metrics")
    decode = sims.start("decode", env={"SGLANG_SIM_TOKEN_LATENCY": "0.05"})
    drain = in_thread(drain_of, prefill, 10)
    time.sleep(0.4)  # its first readings say 0 before anything arrives
    assert drain["thread"].is_alive(), "the drain ended on its first 0"
    body = {"text": "late", "sampling_params": {"max_new_tokens": 8}, "bootstrap_host": "127.0.0.1",
            "bootstrap_port": prefill.bootstrap, "bootstrap_room": 4713}  # fmt: skip
    calls = [in_thread(http, "POST", sim.url("/generate"), body, timeout=15) for sim in (prefill, decode)]
    drain["thread"].join(10)
    status, record = http("GET", prefill.url("/sim/lifecycle"))
    for call in calls:
        call["thread"].join(10)
    assert [c["answer"][0] for c in calls] == [200, 200]
    assert drain["answer"]["left"] == 0 and drain["at"] >= calls[0]["at"], (drain, calls[0]["at"])
    assert status == 200 and record["requests_total"] == 1, record
    assert [r for r in record["requests"] if r["end"] is None] == [], record["requests"]
