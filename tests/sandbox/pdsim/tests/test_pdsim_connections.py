"""Connections and the PD heartbeat of the simulator, as sglang 0.5.23:

- keep-alive: the worker's uvicorn closes a connection idle for SGLANG_TIMEOUT_KEEP_ALIVE (5 s) after its last
  response (sglang/srt/environ.py; http_server.py hands it to uvicorn as timeout_keep_alive);
- heartbeat: a decode whose prefill died fails the room's handoff after SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE
  missed heartbeats every SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL seconds (2 x 5 s; sglang/srt/disaggregation/
  common/conn.py _start_heartbeat_checker_thread), not after its waiting timeout; a room is tied to its prefill when
  the decode takes the request in (CommonKVReceiver.__init__), and a prefill the decode cannot look up fails its rooms
  after 15 lookups a second apart (decode.py _ensure_prefill_info).
Simulators on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_pd_sim.heartbeat import PrefillHeartbeat, heartbeat_settings
from sglang_pd_sim.httpbase import keep_alive_timeout

from tests.http_client import http


def test_keep_alive_and_heartbeat_settings_are_sglangs(monkeypatch):
    monkeypatch.delenv("SGLANG_TIMEOUT_KEEP_ALIVE", raising=False)
    assert keep_alive_timeout() == 5.0  # environ.py SGLANG_TIMEOUT_KEEP_ALIVE = EnvInt(5)
    monkeypatch.setenv("SGLANG_TIMEOUT_KEEP_ALIVE", "2")
    assert keep_alive_timeout() == 2.0
    assert heartbeat_settings({}) == (5.0, 2)  # EnvFloat(5.0), EnvInt(2)
    # floored as CommonKVManager.__init__ floors them: at least 2 s, at least 1 miss
    assert heartbeat_settings({"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "0.5",
                               "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "0"}) == (2.0, 1)  # fmt: skip


def _get(conn: HTTPConnection, path: str) -> int:
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    return resp.status


def test_worker_closes_a_connection_idle_past_the_keep_alive_timeout(sims):
    sim = sims.start("null", env={"SGLANG_TIMEOUT_KEEP_ALIVE": "1"})  # sglang's 5 s, shortened
    conn = HTTPConnection("127.0.0.1", sim.port, timeout=5)
    assert _get(conn, "/v1/models") == 200
    time.sleep(0.4)
    assert _get(conn, "/v1/models") == 200  # idle below the timeout: the same connection serves
    sock = conn.sock
    time.sleep(1.6)
    sock.settimeout(2)
    assert sock.recv(1) == b""  # the server closed it: idle longer than SGLANG_TIMEOUT_KEEP_ALIVE
    conn.close()


def test_a_long_request_is_not_cut_by_the_keep_alive_timeout(sims):
    # the timeout is the wait between requests, not a limit on one: a 2 s generation on a 1 s keep-alive answers
    sim = sims.start("null", env={"SGLANG_TIMEOUT_KEEP_ALIVE": "1", "SGLANG_SIM_TOKEN_LATENCY": "0.1"})
    conn = HTTPConnection("127.0.0.1", sim.port, timeout=10)
    assert _get(conn, "/v1/models") == 200
    body = b'{"text": "slow", "sampling_params": {"max_new_tokens": 20}}'
    conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and b"completion_tokens" in resp.read()
    conn.close()


def test_a_decode_whose_prefill_died_fails_the_handoff_at_the_heartbeat_not_the_waiting_timeout(sims):
    # the prefill computes for 30 s, so its KV never comes; the decode's waiting timeout is 30 s as well
    prefill = sims.start("prefill", env={"SGLANG_SIM_PREFILL_LATENCY": "30"})
    beat = {"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "2", "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "2"}
    decode = sims.start("decode", "--enable-metrics", env={"SGLANG_SIM_HANDOFF_TIMEOUT": "30", **beat})
    body = {"text": "a prompt", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "127.0.0.1",
            "bootstrap_port": prefill.bootstrap, "bootstrap_room": 4242}  # fmt: skip
    threading.Thread(target=lambda: _quiet(http, "POST", prefill.url("/generate"), body, timeout=40),
                     daemon=True).start()  # fmt: skip
    out: dict = {}

    def on_decode():
        out["answer"] = http("POST", decode.url("/generate"), body, timeout=40)
        out["at"] = time.monotonic()

    thread = threading.Thread(target=on_decode, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while "connected_at" not in next(iter(http("GET", f"http://127.0.0.1:{prefill.bootstrap}/sim/kv")[1]), {}):
        assert time.monotonic() < deadline, "the decode never reached the prefill"
        time.sleep(0.05)
    time.sleep(2.5)  # a heartbeat or two answered by the live prefill: no failure meanwhile
    assert thread.is_alive()
    killed = time.monotonic()
    prefill.popen.kill()
    prefill.popen.wait(5)
    thread.join(20)
    status, err = out["answer"]
    took = out["at"] - killed
    # two missed beats 2 s apart (the first within one period of the kill), plus at most one long poll (1 s)
    assert status == 500 and 2.0 <= took < 7.5, (status, took)
    lost = f"Lost connection with prefill instance (bootstrap_addr: 127.0.0.1:{prefill.bootstrap})"
    assert lost in err["error"]["message"]
    assert "Lost connection with prefill instance" in decode.log() and "requests affected" in decode.log()
    # the decode had connected: a failed transfer, as decode.py counts it
    text = decode.metrics_text()
    assert "sglang:num_transfer_failed_reqs_total" in text


def _quiet(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except OSError:
        pass  # the prefill is killed under it


def test_a_request_that_reaches_the_decode_after_its_prefill_froze_fails_at_the_heartbeat(sims):
    # sglang/srt/disaggregation/common/conn.py CommonKVReceiver.__init__: the room joins addr_to_rooms_tracker of a
    # prefill the decode knows when the request arrives, so _handle_node_failure fails it too, though the frozen
    # prefill never answered for it. A frozen prefill takes the probe's connection and never answers: each miss
    # waits out the 3 s read timeout.
    prefill = sims.start("prefill")
    beat = {"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "2", "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "2"}
    decode = sims.start("decode", env={"SGLANG_SIM_HANDOFF_TIMEOUT": "30", **beat})

    def body(room):
        return {"text": "a prompt", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "127.0.0.1",
                "bootstrap_port": prefill.bootstrap, "bootstrap_room": room}  # fmt: skip

    first = threading.Thread(target=lambda: _quiet(http, "POST", prefill.url("/generate"), body(1), timeout=20))
    first.start()
    assert http("POST", decode.url("/generate"), body(1), timeout=20)[0] == 200  # the decode knows its prefill now
    first.join(20)
    prefill.popen.send_signal(signal.SIGSTOP)
    try:
        frozen = time.monotonic()
        status, err = http("POST", decode.url("/generate"), body(2), timeout=40)
        took = time.monotonic() - frozen
    finally:
        prefill.popen.send_signal(signal.SIGCONT)
    # two misses of up to 2 s + 3 s each, then at most one unanswered poll (1.5 s): far below the 30 s waiting timeout
    assert status == 500 and took < 13.0, (status, took, err)
    lost = f"Lost connection with prefill instance (bootstrap_addr: 127.0.0.1:{prefill.bootstrap})"
    assert lost in err["error"]["message"]


def test_a_prefill_the_decode_cannot_look_up_fails_its_rooms_after_15_lookups_a_second_apart():
    # sglang/srt/disaggregation/decode.py DecodePreallocQueue._ensure_prefill_info: one attempt a second per
    # prefill (_ensure_retry_interval 1.0), the 15th failure (_max_ensure_retries) aborts every request waiting on it
    # and starts a new cycle; a lookup that succeeds (track) ends the cycle.
    beat = PrefillHeartbeat(threading.Event())
    addr = "10.0.0.9:8998"
    cycle = beat.ensure_cycle(addr)
    for attempt in range(14):
        beat.ensure_missed(addr, 100.0 + attempt)
        beat.ensure_missed(addr, 100.5 + attempt)  # within the second: the scheduler does not try again
    assert not beat.ensure_aborted(addr, cycle)
    beat.ensure_missed(addr, 114.0)
    assert beat.ensure_aborted(addr, cycle)
    later = beat.ensure_cycle(addr)
    beat.ensure_missed(addr, 115.0)
    beat.track(addr)  # reached: known from now on, the failed lookups forgotten
    assert beat.known_now(addr)
    for attempt in range(14):
        beat.ensure_missed(addr, 116.0 + attempt)
    assert not beat.ensure_aborted(addr, later)
