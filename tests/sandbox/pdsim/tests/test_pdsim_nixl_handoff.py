"""The simulator's optional NIXL handoff (tests/sandbox/pdsim/sglang_pd_sim/nixl_handoff.py).

The pure parts run everywhere. The real two-process write needs a Python 3.11 with nixl 1.5.1 (+ nixl-cu13):
SGLANG_SIM_NIXL_PYTHON, or .cache/nixl-venv, which the test builds once (the project venv has no NIXL).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PDSIM = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PDSIM))

from sglang_pd_sim import nixl_handoff as nh  # noqa: E402

from tests.http_client import DIRECT, http  # noqa: E402


def test_available_only_for_nixl_and_only_when_switched_on():
    on = {"SGLANG_SIM_KV_NIXL": "1"}
    assert nh.available("mooncake", on) == (False, "transfer backend is 'mooncake', not nixl")
    off = "(set it to 1 to move each room's KV through NIXL)"
    assert nh.available("nixl", {}) == (False, f"SGLANG_SIM_KV_NIXL=0 {off}")
    assert nh.available("nixl", {"SGLANG_SIM_KV_NIXL": "no"}) == (False, f"SGLANG_SIM_KV_NIXL=no {off}")
    ok, why = nh.available("nixl", on)
    try:
        import nixl._api  # noqa: F401, PLC0415
    except Exception:
        assert not ok and why.startswith("nixl does not import: ")
    else:
        assert ok and why == ""


def test_sizes_and_pattern():
    assert nh.max_bytes({}) == 64 * 2**20 and nh.max_bytes({"SGLANG_SIM_KV_NIXL_MAX_MIB": "0.5"}) == 2**19
    assert nh.max_bytes({"SGLANG_SIM_KV_NIXL_MAX_MIB": "x"}) == 64 * 2**20
    assert nh.kv_nbytes(100, 35136, 2**30) == 3513600
    assert nh.kv_nbytes(10**6, 35136, 2**20) == 2**20 and nh.kv_nbytes(0, 35136, 2**20) == 1
    p7, p8 = nh.pattern(7, 1000), nh.pattern(8, 1000)
    assert len(p7) == 1000 and 0 not in p7 and p7 != p8 and p7[0] == 8 and p7[1:] == p8[:-1]
    assert nh.pattern(7, 600) == nh.pattern(7 + 251, 600)
    assert nh.notif(12) == b"sim-kv:12"


NIXL_VENV = Path(__file__).resolve().parents[4] / ".cache" / "nixl-venv"
NIXL_PINS = ["nixl==1.5.1", "nixl-cu13==1.5.1", "numpy"]  # the sandbox's pins (tests/sandbox/wheelhouse.py)


def _nixl_python():
    """A Python 3.11 with nixl 1.5.1 (+ nixl-cu13): SGLANG_SIM_NIXL_PYTHON, or .cache/nixl-venv built once from the
    real parser venv's interpreter (3.11, the wheels' ABI) with the machine's own pip configuration. Never skipped:
    when it cannot be had, the test fails and says why."""
    python = os.environ.get("SGLANG_SIM_NIXL_PYTHON")
    if python:
        return python
    venv_python = NIXL_VENV / "bin" / "python"
    stamp = NIXL_VENV / ".stamp"
    if not (venv_python.is_file() and stamp.is_file() and stamp.read_text() == " ".join(NIXL_PINS)):
        import real_parser_client as rpc  # noqa: PLC0415 (tests/sglang_parser, on sys.path by conftest)

        try:
            base, _seconds = rpc.ensure_venv()
        except rpc.ParserUnavailable as exc:
            pytest.fail(f"no Python 3.11 for the NIXL venv: {exc}", pytrace=False)
        steps = [[str(base), "-m", "venv", "--clear", str(NIXL_VENV)],
                 [str(venv_python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                  *NIXL_PINS]]  # fmt: skip
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode:
                pytest.fail(f"building {NIXL_VENV} failed: {' '.join(step)}\n{proc.stderr[-2000:]}", pytrace=False)
        stamp.write_text(" ".join(NIXL_PINS))
    return str(venv_python)


def run_with_nixl(args, marker):
    """(the JSON after MARKER on its output, the process) of the NIXL Python run with ARGS in the simulator's folder,
    SGLANG_SIM_KV_NIXL=1."""
    proc = subprocess.run(
        [_nixl_python(), *args],
        cwd=PDSIM,
        env={**os.environ, "PYTHONPATH": str(PDSIM), "SGLANG_SIM_KV_NIXL": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith(f"{marker} ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(line.split(" ", 1)[1]), proc


def test_rooms_go_through_real_nixl_between_two_processes():
    selftest = ["-m", "sglang_pd_sim.nixl_handoff", "--selftest", "--mib", "4"]
    result, proc = run_with_nixl(selftest, "NIXL_HANDOFF_SELFTEST")
    assert result["ok"] is True and proc.returncode == 0, result
    assert [d["bytes_verified"] for d in result["decode"]] == [4 * 2**20] * 3
    assert {d["peer"] for d in result["decode"]} == {"sim-prefill"}


def test_prepare_makes_the_agent_and_buffer_of_each_side_before_any_request():
    """What the simulator does while it loads (app.py _load_weights), as sglang's NixlKVManager makes its agent and
    registers the KV pool in the scheduler's init: the first request then pays for neither."""
    script = (
        "import json, os\n"
        "from sglang_pd_sim import nixl_handoff as nh\n"
        "got = {'decode': nh.prepare('nixl', 'decode'), 'prefill': nh.prepare('nixl', 'prefill'),"
        " 'null': nh.prepare('nixl', 'null')}\n"
        "dec, pre = nh._side('decode'), nh._side('prefill')\n"
        "got.update(decode_agent=dec.agent._agent is not None, pool=dec.pool is not None,"
        " prefill_agent=pre.agent._agent is not None, src=pre.src is not None, rooms=dec.rooms)\n"
        "print('PREPARED ' + json.dumps(got), flush=True)\n"
        "os._exit(0)\n"
    )
    got, _proc = run_with_nixl(["-c", script], "PREPARED")
    assert got == {"decode": True, "prefill": True, "null": False, "decode_agent": True, "pool": True,
                   "prefill_agent": True, "src": True, "rooms": {}}  # fmt: skip


def test_glue_is_a_no_op_when_off():
    assert nh.decode_offer("mooncake", 1, 100, 35136) is None
    assert nh.prefill_write("mooncake", [1]) is None
    assert nh.decode_verify("mooncake", 1) is None
    assert nh.prepare("mooncake", "decode") is False
    nh.release("mooncake", 1)
    assert nh.status("mooncake") == (False, "transfer backend is 'mooncake', not nixl")


def test_send_offer_reaches_accept_offer_over_http():
    import http.server  # noqa: PLC0415

    class Bootstrap(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # what the bootstrap server's POST /sim/kv/<room>/nixl route does
            room = int(self.path.split("/")[3])
            nh.accept_offer(room, json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Bootstrap)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        offer = {"room": 42, "agent": "sim-decode-1", "nbytes": 10, "meta": "bWV0YQ==", "descs": "ZA=="}
        nh.send_offer(DIRECT, f"127.0.0.1:{server.server_address[1]}", 42, offer)
        assert nh._OFFERS.pop(42) == offer
    finally:
        server.shutdown()
    with pytest.raises(ValueError, match="needs agent, meta, descs and nbytes"):
        nh.accept_offer(1, {"agent": "x"})


GLUE = """
import json, multiprocessing, os, sys
from sglang_pd_sim import nixl_handoff as nh
ctx = multiprocessing.get_context("fork")
a, b = ctx.Pipe()
def decode(conn):
    offers = [nh.decode_offer("nixl", r, 1000, 1000) for r in (5, 6)]
    conn.send(offers)
    conn.recv()  # the prefill says: transferred
    conn.send([nh.decode_verify("nixl", r, 10) for r in (5, 6)])
    conn.recv()
p = ctx.Process(target=decode, args=(b,), daemon=True)
p.start()
for o in a.recv():
    nh.accept_offer(o["room"], o)
w = nh.prefill_write("nixl", [5, 6, 7])  # 7: no offer, not written
a.send("transferred")
v = a.recv()
a.send("done")
p.join(10)
print("GLUE " + json.dumps({"write": w, "verify": v}), flush=True)
os._exit(0)
"""


def test_glue_moves_rooms_through_real_nixl():
    got, _proc = run_with_nixl(["-c", GLUE], "GLUE")
    assert got["write"]["rooms"] == 2 and got["write"]["bytes"] == 2 * 10**6
    assert [v["bytes_verified"] for v in got["verify"]] == [10**6, 10**6]


def test_the_simulators_handoff_moves_each_rooms_kv_through_real_nixl(sims):
    """A prefill and a decode simulator (Python with nixl, SGLANG_SIM_KV_NIXL=1) hand rooms over: the decode
    offers a slot, the prefill WRITEs the room's bytes into it over UCX, the decode checks every byte before it
    generates; a simulator without the switch hands over by HTTP only."""
    python = _nixl_python()
    env = {"SGLANG_SIM_KV_NIXL": "1", "SGLANG_SIM_KV_NIXL_MAX_MIB": "1"}
    args = ("--disaggregation-transfer-backend", "nixl", "--enable-metrics")
    prefill = sims.start("prefill", *args, env=env, python=python)
    decode = sims.start("decode", *args, env=env, python=python)
    for room in (501, 502, 503):
        body = {"text": "a prompt of a few words " * 20, "sampling_params": {"max_new_tokens": 2},
                "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap, "bootstrap_room": room}  # fmt: skip
        done = {}
        thread = threading.Thread(target=lambda b=body, d=done: d.update(p=http("POST", prefill.url("/generate"), b)))
        thread.start()
        status, _answer = http("POST", decode.url("/generate"), body)
        thread.join(30)
        assert status == 200 and done["p"][0] == 200, (status, done)
    status, seen = http("GET", decode.url("/sim/nixl"))
    assert status == 200 and seen["on"] is True, seen
    assert [r["bootstrap_room"] for r in seen["rooms"]] == [501, 502, 503]
    assert all(r["bytes_verified"] == r["bytes"] > 0 and r["peer"] for r in seen["rooms"]), seen["rooms"]
    plain = sims.start("decode", "--disaggregation-transfer-backend", "nixl", python=python)
    status, seen = http("GET", plain.url("/sim/nixl"))
    assert seen["on"] is False and "SGLANG_SIM_KV_NIXL=0" in seen["why"] and seen["rooms"] == []


# --- a decode that dies: what the real NIXL reports, and the double doing the same -------------------------------


class _DeadPeerAgent:
    """A NIXL agent whose peer died: transfer() or check_xfer_state() raises as nixl 1.5.1's binding does
    (nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT; tests/fixtures/kv_transport/nixl-peer-death-2026-12-04.md).
    """

    class nixlRemoteDisconnectError(Exception):  # the binding's name
        pass

    def __init__(self, fail_at):
        self.fail_at, self.released, self.removed = fail_at, [], []

    def add_remote_agent(self, meta):
        return b"sim-decode-9"

    def remove_remote_agent(self, name):
        self.removed.append(name)

    def deserialize_descs(self, data):
        return "remote-descs"

    def initialize_xfer(self, op, src, dst, remote, notif):
        return "handle"

    def transfer(self, handle, notif):
        if self.fail_at == "post":
            raise self.nixlRemoteDisconnectError("NIXL_ERR_REMOTE_DISCONNECT")
        return "PROC"

    def check_xfer_state(self, handle):
        raise self.nixlRemoteDisconnectError("NIXL_ERR_REMOTE_DISCONNECT")

    def release_xfer_handle(self, handle):
        self.released.append(handle)


class _Src:
    def write(self, slot, data):
        pass

    def descs(self, agent, slot, nbytes):
        return "src-descs"


@pytest.mark.parametrize("fail_at", ["post", "in_flight"])
def test_a_write_to_a_dead_decode_fails_with_nixls_error_and_the_peer_is_loaded_again_next_time(fail_at):
    pre = nh.PrefillKV("sim-prefill", slot_bytes=1024)
    fake = _DeadPeerAgent(fail_at)
    pre.agent._agent, pre.src = fake, _Src()
    offer = {"agent": "sim-decode-9", "meta": "bWV0YQ==", "descs": "ZA==", "nbytes": 100}
    with pytest.raises(nh.NixlHandoffError) as failed:
        pre.write(12, offer, timeout=5)
    step = "transfer" if fail_at == "post" else "check_xfer_state"
    want = f"bootstrap_room=12: NIXL WRITE to sim-decode-9 failed in {step}: NIXL_ERR_REMOTE_DISCONNECT"
    assert str(failed.value) == want
    assert fake.released == ["handle"]  # the handle is given back
    assert "sim-decode-9" not in pre.peers  # forgotten: a restarted decode's offer loads its metadata again


def test_offered_says_whether_every_room_has_a_nixl_slot():
    nh.accept_offer(61, {"agent": "a", "meta": "m", "descs": "d", "nbytes": 1})
    try:
        assert nh.offered([61]) is True
        assert nh.offered([61, 62]) is False and nh.offered([]) is False
    finally:
        nh.drop_offer(61)
    assert nh.offered([61]) is False


PEER_DEATH = Path(__file__).resolve().parents[3] / "hardware" / "nixl_peer_death.py"


def run_peer_death(*args):
    """The summary line of tests/hardware/nixl_peer_death.py run with ARGS (real NIXL, sglang's agent settings)."""
    proc = subprocess.run([_nixl_python(), str(PEER_DEATH), "run", *args], capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith("NIXL_PEER_DEATH ")), None)
    assert line and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return json.loads(line.split(" ", 1)[1]), events


def test_real_nixl_ends_every_write_in_flight_to_a_killed_decode_within_a_second():
    """kill -9 of the decode with WRITEs in flight, UCX over TCP (the lane between two hosts): NIXL's default UCX
    error mode, which sglang keeps, is `peer`, and every handle ends (DONE, or NIXL_ERR_REMOTE_DISCONNECT) at once;
    a later WRITE to the dead decode raises when posted. Nothing is left running for a room to wait on."""
    got, events = run_peer_death("--case", "inflight", "--tls", "tcp", "--mib", "32", "--rooms", "4", "--watch", "20")
    ready = events[0]
    assert ready["plugin_defaults"]["ucx_error_handling_mode"] == "peer" and ready["params"] == {"num_threads": "8"}
    assert got["in_flight_at_kill"] >= 1 and got["writes_done_before_kill"] >= 8
    disconnect = "nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT"
    after = got["handles_after_kill"]
    assert all(h["state"] == "DONE" or (h["state"] == "RAISED" and h["err"] == disconnect) for h in after), after
    assert any(h["err"] == disconnect for h in after), after
    assert max(h["settled_s_after_kill"] or 0 for h in after) < 1.0, after
    assert got["late_write"]["state"] == "RAISED" and got["late_write"]["err"] == disconnect
    assert all(r["released"] for r in got["release"]), got["release"]


def test_real_nixl_says_nothing_of_a_decode_killed_before_it_sent_the_rooms_indices():
    """No WRITE is posted for a room without its indices, so NIXL has nothing to fail: no notification, the
    peer's metadata kept; only the next WRITE to that decode raises (sglang's room then waits in
    KVPoll.Bootstrapping, holding no KV, until SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT or its client's abort)."""
    got, _events = run_peer_death("--case", "noindices", "--tls", "tcp", "--mib", "4", "--rooms", "1", "--watch", "3")
    assert got["notifications_after_kill"] == {} and got["remote_metadata_lost_s_after_kill"] is None
    assert got["remote_metadata_at_end"] is True
    assert got["late_write"] == {"state": "RAISED", "err": "nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT",
                                 "seconds": got["late_write"]["seconds"]}  # fmt: skip
    assert got["late_write"]["seconds"] < 1.0


def test_the_simulators_prefill_fails_a_room_whose_decode_died_after_its_nixl_offer(sims):
    """Both simulators on real NIXL: the decode offers its slot, is killed -9 while the prefill computes; the
    prefill's WRITE raises NIXL_ERR_REMOTE_DISCONNECT, the room fails with HTTP 500 and its KV is freed."""
    python = _nixl_python()
    env = {"SGLANG_SIM_KV_NIXL": "1", "SGLANG_SIM_KV_NIXL_MAX_MIB": "1", "SGLANG_SIM_PREFILL_LATENCY": "3",
           "SGLANG_SIM_HANDOFF_TIMEOUT": "30", "UCX_TLS": "tcp"}  # fmt: skip
    args = ("--disaggregation-transfer-backend", "nixl", "--enable-metrics")
    prefill = sims.start("prefill", *args, env=env, python=python)
    decode = sims.start("decode", *args, env=env, python=python)
    body = {"text": "a prompt of a few words " * 20, "sampling_params": {"max_new_tokens": 2},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap, "bootstrap_room": 601}  # fmt: skip
    done = {}
    thread = threading.Thread(target=lambda: done.update(p=http("POST", prefill.url("/generate"), body, timeout=60)))
    thread.start()

    def on_decode():
        try:
            http("POST", decode.url("/generate"), body, timeout=10)
        except OSError:  # killed below: no answer
            pass

    threading.Thread(target=on_decode, daemon=True).start()
    deadline = time.monotonic() + 5
    while 601 not in http("GET", prefill.url("/sim/nixl"))[1].get("offered", []):  # the decode's offer is in
        assert time.monotonic() < deadline, http("GET", prefill.url("/sim/nixl"))
        time.sleep(0.05)
    t_kill = time.monotonic()
    decode.popen.kill()
    decode.popen.wait(5)
    thread.join(30)
    status, err = done["p"]
    # the prefill meets the decode's agent at its first WRITE (sglang loads it at the decode's registration):
    # add_remote_agent of a dead agent raises NIXL_ERR_BACKEND; a known one fails the WRITE (the fixture)
    assert status == 500 and re.fullmatch(
        r"KVTransferError\(bootstrap_room=601\): bootstrap_room=601: NIXL WRITE to sim-decode-\d+ failed in "
        r"(add_remote_agent: NIXL_ERR_BACKEND|(transfer|check_xfer_state): NIXL_ERR_REMOTE_DISCONNECT)",
        err["error"]["message"],
    ), err
    assert time.monotonic() - t_kill < 6  # the prefill's latency (3 s) and the write's error, no wait
    # the room's KV freed: the load snapshot, which the idle scheduler publishes at its next look (scheduler.py
    # on_idle), not at the answer; the gauges are published (metrics_reporter.py), read from /v1/loads instead
    deadline = time.monotonic() + 3
    while True:
        got = http("GET", prefill.url("/v1/loads?include=core,disagg"))[1]["loads"][0]
        if got["num_used_tokens"] == 0 and got["disaggregation"]["prefill_inflight_queue_reqs"] == 0:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.02)
    assert http("GET", prefill.url("/sim/nixl"))[1]["offered"] == []
