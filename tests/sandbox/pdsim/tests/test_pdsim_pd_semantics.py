"""PD semantics of the simulator that mirror sglang 0.5.23 failure modes (issue 19), on loopback.

- a request without bootstrap_room: HTTP 400 with sglang's message on both roles
  (sglang/srt/managers/scheduler.py handle_generate_request);
- n > 1: the warmup and all samples share bootstrap_room[0] (io_struct.py, tokenizer_manager.py
  _handle_batch_request), so the samples never get KV and time out with HTTP 500;
- the prefill waits for its decode to connect for the room (prefill.py pop_bootstrapped) up to
  SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, holding no KV meanwhile;
- a decode that connected and then vanished before the transfer: the room fails and its KV is freed, on mooncake
  (its session is not alive) as on NIXL (the WRITE raises NIXL_ERR_REMOTE_DISCONNECT: nixl/conn.py _post_xfer,
  observed with the real NIXL in tests/fixtures/kv_transport/nixl-peer-death-2026-12-04.md);
- a request whose HTTP client hung up is aborted at the tokenizer's next check (tokenizer_manager.py
  _stream_one_response, every SGLANG_REQUEST_STATE_WAIT_TIMEOUT = 4 s): out of the bootstrap queue, and a SIGTERM
  drain no longer waits for it.
Every wait is bounded (a few seconds each).
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.promtext import parse_exposition

from tests.http_client import http


def gauge(sim, name: str) -> float:
    return sum(v for _s, _labels, v in parse_exposition(sim.metrics_text()).get(name, {}).get("samples", []))


def body_for(prefill, room, **extra) -> dict:
    return {"text": "four little prompt words", "sampling_params": {"max_new_tokens": 3},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap, "bootstrap_room": room,
            **extra}  # fmt: skip


def in_thread(fn, *args, **kwargs) -> dict:
    out: dict = {}

    def run():
        try:
            out["answer"] = fn(*args, **kwargs)
        except OSError as exc:  # a read timeout: no answer
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    out["thread"] = t
    return out


# --- 2. no bootstrap room ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_request_without_room_is_400_with_sglangs_message(sims, role):
    sim = sims.start(role)
    status, body = http("POST", sim.url("/generate"), {"text": "x", "rid": "abc"})
    assert status == 400
    assert body == {"error": {"message": "Invalid request: Disaggregated request received without bootstrap "
                                         "room id. req.rid='abc'"}}  # fmt: skip
    status, body = http("POST", sim.url("/v1/chat/completions"), {"messages": [{"role": "user", "content": "x"}]})
    assert status == 400 and body["object"] == "error" and body["code"] == 400
    assert body["message"].startswith("Invalid request: Disaggregated request received without bootstrap room id.")


def test_null_mode_needs_no_room(sims):
    assert http("POST", sims.start("null").url("/generate"), {"text": "x"})[0] == 200


# --- 3. parallel sampling --------------------------------------------------------------------------------


def test_parallel_sampling_shares_one_room_and_times_out(sims):
    env = {"SGLANG_SIM_HANDOFF_TIMEOUT": "0.5"}
    prefill = sims.start("prefill", env=env)
    decode = sims.start("decode", env=env)
    rooms = [111, 222]  # what sglang-router 0.3.2 sends for n=2: one room per sample, host/port lists
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 3,
            "bootstrap_host": ["127.0.0.1"] * 2, "bootstrap_port": [prefill.bootstrap] * 2,
            "bootstrap_room": rooms}  # fmt: skip
    on_prefill = in_thread(http, "POST", prefill.url("/v1/chat/completions"), body)
    t0 = time.monotonic()
    status, err = http("POST", decode.url("/v1/chat/completions"), body)
    assert status == 500, err
    assert "KVTransferError(bootstrap_room=111)" in err["message"] and "KVPoll.WaitingForInput" in err["message"]
    assert "share bootstrap_room 111" in err["message"]
    assert 0.4 < time.monotonic() - t0 < 5
    on_prefill["thread"].join(10)
    pstatus, perr = on_prefill["answer"]
    assert pstatus == 500 and "KVPoll.Bootstrapping" in perr["message"]
    # only bootstrap_room[0] was ever used: the prefill never saw the second room
    status, kv = http("GET", f"http://127.0.0.1:{prefill.bootstrap}/sim/kv")
    assert [entry["bootstrap_room"] for entry in kv] == [111]
    # the same request with n=1 goes through
    single = {**body, "n": 1, "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap,
              "bootstrap_room": 333}  # fmt: skip
    on_prefill = in_thread(http, "POST", prefill.url("/v1/chat/completions"), single)
    status, out = http("POST", decode.url("/v1/chat/completions"), single)
    assert status == 200 and len(out["choices"]) == 1
    on_prefill["thread"].join(10)
    assert on_prefill["answer"][0] == 200


def test_generate_n2_uses_sampling_params_n(sims):
    env = {"SGLANG_SIM_HANDOFF_TIMEOUT": "0.3"}
    prefill = sims.start("prefill", env=env)
    decode = sims.start("decode", env=env)
    body = body_for(prefill, 5, sampling_params={"max_new_tokens": 2, "n": 2})
    on_prefill = in_thread(http, "POST", prefill.url("/generate"), body)
    status, err = http("POST", decode.url("/generate"), body)
    assert status == 500 and "share bootstrap_room 5" in err["error"]["message"]
    on_prefill["thread"].join(10)


# --- 4. bootstrap wait, dead decode: mooncake frees, NIXL strands ------------------------------------------


def test_prefill_waits_for_decode_connection_then_bootstrap_timeout(sims):
    prefill = sims.start("prefill", "--enable-metrics", env={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "1.5"})
    t0 = time.monotonic()
    waiting = in_thread(http, "POST", prefill.url("/generate"), body_for(prefill, 9))
    time.sleep(0.5)
    # meanwhile it is in the bootstrap queue, which sglang's load snapshot counts (its gauges are not rewritten while no
    # batch runs: test_pdsim_gauges.py)
    assert load(prefill)["disaggregation"]["prefill_bootstrap_queue_reqs"] == 1
    assert gauge(prefill, "sglang:num_bootstrap_failed_reqs_total") == 0.0
    waiting["thread"].join(10)
    status, err = waiting["answer"]
    assert status == 500 and 1.4 < time.monotonic() - t0 < 6
    assert "KVTransferError(bootstrap_room=9)" in err["error"]["message"]
    assert "timed out after" in err["error"]["message"] and "in KVPoll.Bootstrapping" in err["error"]["message"]
    # out of the bootstrap queue, and never prefilled: no KV was allocated (the load snapshot, which the idle
    # scheduler publishes at once; the gauges never counted the request: test_pdsim_gauges.py)
    idle = wait_load(prefill, lambda got: got["disaggregation"]["prefill_bootstrap_queue_reqs"] == 0, 3)
    assert idle["num_used_tokens"] == 0 and idle["token_usage"] == 0.0, idle
    assert gauge(prefill, "sglang:num_bootstrap_failed_reqs_total") == 1.0


def load(sim) -> dict:
    """The published load snapshot (GET /v1/loads), fresher than the gauges (test_pdsim_gauges.py)."""
    status, body = http("GET", sim.url("/v1/loads?include=core,disagg"))
    assert status == 200
    return body["loads"][0]


def wait_load(sim, idle, timeout: float) -> dict:
    """The load snapshot once IDLE(snapshot) holds, within TIMEOUT s: what sglang offers for a freed KV or an idle
    worker. Not live either, but written at once when the scheduler finds itself idle and every 50 ms while work
    waits with no batch (scheduler.py on_idle, publish_load_snapshot), where the gauges wait for the next batch
    report or, at idle, up to 30 s (metrics_reporter.py _maybe_log_idle_metrics)."""
    t0 = time.monotonic()
    while not idle(got := load(sim)):
        assert time.monotonic() - t0 < timeout, f"not at idle after {timeout} s: {got}"
        time.sleep(0.02)
    return got


def kv_freed(got: dict) -> bool:
    """A prefill's load snapshot with no KV held and no room in its in-flight queue."""
    return got["num_used_tokens"] == 0 and got["disaggregation"]["prefill_inflight_queue_reqs"] == 0


def room_entry(prefill, room: int) -> dict:
    """The prefill's record of a room, read from GET /sim/kv (GET /sim/kv/<room> would be a decode's poll)."""
    status, entries = http("GET", f"http://127.0.0.1:{prefill.bootstrap}/sim/kv")
    assert status == 200
    return next((e for e in entries if e["bootstrap_room"] == room), {})


def post_open(sim, body: dict) -> socket.socket:
    """POST /generate on a connection of its own, left open: the caller reads the answer or hangs up."""
    data = json.dumps(body).encode()
    conn = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
    conn.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))  # fmt: skip
    return conn


def connect_then_kill_decode(sims, backend: str, room: int, *, own_connection: bool = False):
    """A prefill whose decode connected for ROOM and died before the transfer; the prefill's client is still
    waiting (its connection open: a client that hung up has its request aborted, as in sglang). Returns the
    prefill and its client: a thread's answer, or with OWN_CONNECTION the open socket (post_open)."""
    env = {"SGLANG_SIM_PREFILL_LATENCY": "3.5", "SGLANG_SIM_HANDOFF_TIMEOUT": "30"}
    prefill = sims.start("prefill", "--enable-metrics", "--disaggregation-transfer-backend", backend, env=env)
    decode = sims.start("decode", "--disaggregation-transfer-backend", backend, env=env)
    body = body_for(prefill, room)
    if own_connection:
        on_prefill = post_open(prefill, body)
    else:
        on_prefill = in_thread(http, "POST", prefill.url("/generate"), body, timeout=60)
    in_thread(http, "POST", decode.url("/generate"), body, timeout=8)
    deadline = time.monotonic() + 3
    while not room_entry(prefill, room).get("connected_at"):
        assert time.monotonic() < deadline, "the decode never connected for the room"
        time.sleep(0.05)
    decode.popen.kill()  # gone after connecting, while the prefill computes: before the transfer starts
    decode.popen.wait(5)
    return prefill, on_prefill


def test_mooncake_frees_kv_of_a_decode_gone_before_transfer(sims):
    prefill, on_prefill = connect_then_kill_decode(sims, "mooncake", 77)
    on_prefill["thread"].join(10)
    status, err = on_prefill["answer"]
    assert status == 500 and "Decode instance could be dead" in err["error"]["message"]
    # freed: the load snapshot says so at once; the gauges at the idle scheduler's next look (they hold the prefill
    # batch's report, running 1, until then: a stale running gauge is rewritten at once)
    assert wait_load(prefill, kv_freed, 3)["token_usage"] == 0.0
    wait_gauge(prefill, "sglang:token_usage", 0.0, 3)
    assert gauge(prefill, "sglang:num_transfer_failed_reqs_total") == 1.0


def test_nixl_fails_and_frees_kv_of_a_decode_gone_before_transfer(sims):
    # the WRITE towards a dead decode raises NIXL_ERR_REMOTE_DISCONNECT (real nixl 1.5.1 / UCX:
    # tests/fixtures/kv_transport/nixl-peer-death-2026-12-04.md), so the room fails as mooncake's does
    prefill, on_prefill = connect_then_kill_decode(sims, "nixl", 78)
    on_prefill["thread"].join(10)
    status, err = on_prefill["answer"]
    assert status == 500, err
    assert err["error"]["message"] == (
        "KVTransferError(bootstrap_room=78): KVSender failed to post transfer: NIXL_ERR_REMOTE_DISCONNECT"
    )
    # freed (the load snapshot: the idle scheduler's next look, not the answer's instant)
    assert wait_load(prefill, kv_freed, 3)["token_usage"] == 0.0
    assert gauge(prefill, "sglang:num_transfer_failed_reqs_total") == 1.0


# --- 5. a client that hung up: its request is aborted at the tokenizer's next check ---------------------------


def wait_bootstrap_queue(sim, value: int, timeout: float) -> float:
    """Seconds until the prefill's published load snapshot counts VALUE requests in its bootstrap queue (sglang
    publishes it every 50 ms while work waits with no batch to run; its gauges not then: test_pdsim_gauges.py)."""
    t0 = time.monotonic()
    while (got := load(sim)["disaggregation"]["prefill_bootstrap_queue_reqs"]) != value:
        assert time.monotonic() - t0 < timeout, f"bootstrap queue still {got} after {timeout} s"
        time.sleep(0.1)
    return time.monotonic() - t0


def wait_gauge(sim, name: str, value: float, timeout: float) -> float:
    """Seconds until the gauge NAME reads VALUE (at most TIMEOUT)."""
    t0 = time.monotonic()
    while gauge(sim, name) != value:
        assert time.monotonic() - t0 < timeout, f"{name} still {gauge(sim, name)} after {timeout} s"
        time.sleep(0.1)
    return time.monotonic() - t0


def test_a_request_whose_client_hung_up_leaves_the_bootstrap_queue_and_the_drain(sims):
    # the default check period (4 s), as sglang; a watchdog period short enough to see the drain end at once
    # (and a scheduler that exits at once after the drain: sglang's up to 15 s is timed in test_pdsim_drain.py)
    prefill = sims.start("prefill", "--enable-metrics", env={"SGLANG_SIM_DRAIN_POLL": "0.2",
                                                             "SGLANG_SIM_SCHEDULER_EXIT": "0"})  # fmt: skip
    t0 = time.monotonic()
    waiting = post_open(prefill, body_for(prefill, 31))  # no decode ever connects for room 31
    wait_bootstrap_queue(prefill, 1, 3)
    kept = post_open(prefill, body_for(prefill, 32))  # its client stays
    wait_bootstrap_queue(prefill, 2, 3)
    waiting.close()
    wait_bootstrap_queue(prefill, 1, 8)
    # not at once: at the tokenizer's first check, SGLANG_REQUEST_STATE_WAIT_TIMEOUT (4 s) after the request began
    assert 3.5 < time.monotonic() - t0 < 8
    assert gauge(prefill, "sglang:num_aborted_requests_total") == 1.0
    assert "Request is disconnected from the client side" in prefill.log()
    kept.close()
    wait_bootstrap_queue(prefill, 0, 6)
    assert gauge(prefill, "sglang:num_aborted_requests_total") == 2.0
    assert gauge(prefill, "sglang:num_bootstrap_failed_reqs_total") == 0.0  # aborted, not timed out
    # nothing left for a SIGTERM to wait for: the watchdog's first look ends the process, with its record
    prefill.popen.send_signal(signal.SIGTERM)
    assert prefill.popen.wait(5) == 0
    exit_line = [ln for ln in prefill.log().splitlines() if "sim_lifecycle=" in ln][-1]
    record = json.loads(exit_line.split("sim_lifecycle=", 1)[1])
    assert record["exit"]["reason"] == "drained" and record["sigterm"]["in_flight"] == 0, record
    assert [(r["completed"], r["end"] is not None) for r in record["requests"]] == [(False, True)] * 2, record


def test_a_nixl_room_whose_decode_died_frees_its_kv_with_its_client_gone(sims):
    prefill, connection = connect_then_kill_decode(sims, "nixl", 79, own_connection=True)
    connection.close()  # the client goes too: its WRITE fails, or the tokenizer's check aborts it, whichever first
    # the room holds KV from its decode's connection on (prefill.py pop_bootstrapped), which connect_then_kill_decode
    # waited for; neither /metrics nor /v1/loads is written while its batch runs (metrics_reporter.py, scheduler.py
    # process_batch_result), so its KV shows in neither before the batch ends, and then only until it is freed
    assert room_entry(prefill, 79).get("connected_at")

    def ended():
        names = ("sglang:num_transfer_failed_reqs_total", "sglang:num_aborted_requests_total")
        return sum(gauge(prefill, name) for name in names)  # counters: counted as it happens

    t0 = time.monotonic()
    while not ended():
        assert time.monotonic() - t0 < 8, "the room neither failed nor was aborted"
        time.sleep(0.05)
    assert wait_load(prefill, kv_freed, 3)["token_usage"] == 0.0
    wait_gauge(prefill, "sglang:num_used_tokens", 0.0, 3)  # a stale running gauge: rewritten at the idle look
    failed = gauge(prefill, "sglang:num_transfer_failed_reqs_total")
    assert failed + gauge(prefill, "sglang:num_aborted_requests_total") == 1.0


# --- load reports (sglang/srt/entrypoints/v1_loads.py; what SMG's load poll reads) --------------------------------


def test_v1_loads_reports_the_running_window_and_a_decodes_requests_waiting_for_kv(sims):
    prefill = sims.start("prefill", env={"SGLANG_SIM_PREFILL_LATENCY": "3"})
    decode = sims.start("decode", "--max-running-requests", "48")
    status, answer = http("GET", decode.url("/v1/loads?include=core,disagg,queues,memory"))
    assert status == 200 and answer["version"] == "0.5.23" and len(answer["loads"]) == 1
    load = answer["loads"][0]
    assert load["max_running_requests"] == 48 and load["disaggregation"]["mode"] == "decode"
    assert {"memory", "queues", "disaggregation"} <= set(load) and load["max_total_num_tokens"] > 0
    core = http("GET", decode.url("/v1/loads?include=core"))[1]["loads"][0]
    assert not {"memory", "queues", "disaggregation"} & set(core) and core["num_running_reqs"] == 0
    bad = http("GET", decode.url("/v1/loads?include=core,gpu"))
    assert bad[0] == 400 and "Invalid include sections" in str(bad[1])
    assert http("GET", decode.url("/get_load"))[0] == 404  # gone in 0.5.23
    # a request whose KV has not come yet waits at the decode (its transfer queue), not runs
    calls = [in_thread(http, "POST", s.url("/generate"), body_for(prefill, 515), timeout=15) for s in (prefill, decode)]
    deadline, seen = time.monotonic() + 2.5, None
    while time.monotonic() < deadline and not seen:
        load = http("GET", decode.url("/v1/loads"))[1]["loads"][0]
        seen = load if load["num_waiting_reqs"] else None
        time.sleep(0.05)
    assert seen and seen["disaggregation"]["decode_transfer_queue_reqs"] == 1 and seen["num_running_reqs"] == 0
    for call in calls:
        call["thread"].join(15)
    assert [c["answer"][0] for c in calls] == [200, 200]
