#!/usr/bin/env python
"""What the real NIXL (UCX backend, host memory) reports to a prefill whose decode is killed (kill -9).

Evidence for issue 37 item 4 (tests/fixtures/kv_transport/nixl-peer-death-2026-12-04.md holds a run).
Both agents are made as sglang 0.5.23 makes them (sglang/srt/disaggregation/nixl/conn.py
NixlKVManager.__init__): `nixl_agent_config(backends=[], num_threads=8 on the prefill / 0 on the decode,
sync_mode=NIXL_THREAD_SYNC_STRICT)`, then `create_backend("UCX", {"num_threads": "8"})` on the prefill and
`create_backend("UCX", {})` on the decode; sglang passes no `ucx_error_handling_mode`, so NIXL's default applies
(`peer`; the run prints the plugin's defaults). The decode registers one DRAM pool (sglang's register_kv_args);
the prefill adds it as a remote agent.

Cases (one run each; needs Python with nixl 1.5.1, e.g. .cache/nixl-venv/bin/python):
  inflight   the prefill keeps --rooms WRITEs of --mib MiB each in flight into the decode's pool, re-posting each
             one that ends DONE (a new room); once WRITEs have completed and others are in flight, the decode is
             killed; every handle's states after the kill are recorded until all settle or --watch s pass.
  noindices  the decode registers its pool (the prefill holds its metadata) but never hands over the indices of
             a room, so no WRITE is posted; the decode is killed and the prefill watches what NIXL says for
             --watch s (notifications, check_remote_metadata); then it posts one WRITE to the dead decode.
Then, in both: one more WRITE posted to the dead decode, check_remote_metadata, and release of every handle.

    python tests/hardware/nixl_peer_death.py run --case inflight [--tls tcp] [--ucx-error-mode M]
        [--mib 64] [--rooms 4] [--watch 60]
prints one JSON line per event of the prefill (t: seconds after the kill) and a last line NIXL_PEER_DEATH {json}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _agent(role):
    """A NIXL agent with sglang 0.5.23's settings for the role (conn.py NixlKVManager.__init__)."""
    from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t  # noqa: PLC0415

    num_threads = 8 if role == "prefill" else 0
    agent = nixl_agent(
        f"peer-death-{role}-{os.getpid()}",
        nixl_agent_config(backends=[], num_threads=num_threads, sync_mode=nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT),
    )
    params = {"num_threads": str(num_threads)} if num_threads > 0 else {}
    if os.environ.get("PEER_DEATH_UCX_ERROR_MODE"):  # not sglang's setting: only to compare (ai-dynamo/nixl#2039)
        params["ucx_error_handling_mode"] = os.environ["PEER_DEATH_UCX_ERROR_MODE"]
    agent.create_backend("UCX", params)
    return agent, params


def _buffer(agent, nbytes):
    import ctypes  # noqa: PLC0415
    import mmap  # noqa: PLC0415

    mem = mmap.mmap(-1, nbytes)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    reg = agent.register_memory([(addr, nbytes, 0, "")], "DRAM")
    return mem, addr, reg


def decode(args):
    agent, params = _agent("decode")
    slot = int(args.mib * 2**20)
    _mem, addr, _reg = _buffer(agent, slot * args.rooms)
    offer = {
        "pid": os.getpid(),
        "agent": agent.name,
        "meta": agent.get_agent_metadata().hex(),
        "params": params,
        "plugin_defaults": agent.get_plugin_params("UCX"),
        "slot_bytes": slot,
        "slots": [
            agent.get_serialized_descs(agent.get_xfer_descs([(addr + i * slot, slot, 0)], "DRAM")).hex()
            for i in range(args.rooms)
        ],
    }
    path = Path(args.dir) / "decode.json"
    _publish(path, json.dumps(offer))
    while True:  # as sglang's decode listener: take notifications until killed
        agent.get_new_notifs()
        time.sleep(0.01)


def _publish(path, text):
    """Write a marker the other process polls for: whole or not at all (a rename), never an empty file read."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class _Log:
    def __init__(self, kill_file):
        self.kill_file = kill_file
        self.killed_at = None
        self.events = []

    def killed(self):
        if self.killed_at is None and self.kill_file.exists():
            self.killed_at = float(self.kill_file.read_text())
        return self.killed_at

    def __call__(self, **event):
        now = time.monotonic()
        k = self.killed()
        event["t"] = None if k is None else round(now - k, 4)
        self.events.append(event)
        print(json.dumps(event), flush=True)


def _state(agent, handle):
    """check_xfer_state, or the exception the binding raised instead (its type and text)."""
    try:
        return agent.check_xfer_state(handle), None
    except Exception as exc:
        return "RAISED", f"{type(exc).__name__}: {exc}"


def _post(agent, handle, room):
    try:
        return agent.transfer(handle, f"room:{room}".encode()), None
    except Exception as exc:
        return "RAISED", f"{type(exc).__name__}: {exc}"


def prefill(args):
    d = Path(args.dir)
    log = _Log(d / "killed")
    agent, params = _agent("prefill")
    while not (d / "decode.json").exists():
        time.sleep(0.01)
    offer = json.loads((d / "decode.json").read_text())
    remote = agent.add_remote_agent(bytes.fromhex(offer["meta"]))
    remote = remote.decode() if isinstance(remote, bytes) else remote
    slot = offer["slot_bytes"]
    _mem, addr, _reg = _buffer(agent, slot)
    src = agent.get_xfer_descs([(addr, slot, 0)], "DRAM")
    dst = [agent.deserialize_descs(bytes.fromhex(s)) for s in offer["slots"]]
    log(event="ready", remote=remote, params=params, plugin_defaults=offer["plugin_defaults"],
        ucx_tls=os.environ.get("UCX_TLS", "(unset)"))  # fmt: skip
    summary = {"case": args.case, "decode_pid": offer["pid"], "mib": args.mib, "rooms": args.rooms}

    def new_xfer(i, room):
        posted = time.monotonic()
        handle = agent.initialize_xfer("WRITE", src, dst[i], remote, f"room:{room}".encode())
        state, err = _post(agent, handle, room)
        settled = None if state == "PROC" else time.monotonic()
        return {"room": room, "slot": i, "handle": handle, "state": state, "err": err, "posted": posted,
                "settled_at": settled}  # fmt: skip

    live, posted_all, done, next_room = [], [], 0, 0
    if args.case == "inflight":
        for i in range(args.rooms):
            live.append(new_xfer(i, next_room))
            next_room += 1
        posted_all.extend(live)
        signalled = False
        # Until the prefill sees the kill (the runner writes its time just before SIGKILL, on the shared monotonic
        # clock), each handle's settle time is kept: a WRITE that ends with an error between the kill and the moment
        # this loop sees it was in flight at the kill, however late a loaded machine lets this process look.
        while log.killed() is None:
            for n, x in enumerate(live):
                if x["state"] == "PROC":
                    x["state"], x["err"] = _state(agent, x["handle"])
                    if x["state"] != "PROC":
                        x["settled_at"] = time.monotonic()
                if x["state"] == "DONE":
                    agent.release_xfer_handle(x["handle"])
                    done += 1
                    live[n] = new_xfer(x["slot"], next_room)
                    posted_all.append(live[n])
                    next_room += 1
            in_flight = sum(x["state"] == "PROC" for x in live)
            if not signalled and done >= 2 * args.rooms and in_flight:
                _publish(d / "inflight", str(in_flight))
                signalled = True
        kill_seen = time.monotonic()
        for x in live:
            log(event="at_kill", room=x["room"], state=x["state"], err=x["err"],
                age_s=round(log.killed_at - x["posted"], 4))  # fmt: skip
            if x["settled_at"] is not None and x["settled_at"] >= log.killed_at:
                x["settled_t"] = round(x["settled_at"] - log.killed_at, 4)
        summary["writes_done_before_kill"] = sum(
            1 for x in posted_all if x["state"] == "DONE" and x["settled_at"] < log.killed_at
        )
        summary["in_flight_at_kill"] = sum(
            1 for x in posted_all
            if x["posted"] < log.killed_at and (x["settled_at"] is None or x["settled_at"] >= log.killed_at)
        )  # fmt: skip
        summary["seen_kill_s_after"] = round(kill_seen - log.killed_at, 4)
        deadline = kill_seen + args.watch
        while time.monotonic() < deadline and any(x["state"] == "PROC" for x in live):
            for x in live:
                if x["state"] == "PROC":
                    state, err = _state(agent, x["handle"])
                    if state != "PROC":
                        x["state"], x["err"] = state, err
                        x["settled_t"] = round(time.monotonic() - log.killed_at, 4)
                        log(event="settled", room=x["room"], state=state, err=err)
            time.sleep(0.001)
        summary["handles_after_kill"] = [
            {"room": x["room"], "state": x["state"], "err": x["err"], "settled_s_after_kill": x.get("settled_t")}
            for x in live
        ]
    else:
        _publish(d / "inflight", "0")  # registered, no indices: nothing to write
        while log.killed() is None:
            time.sleep(0.01)
        deadline = time.monotonic() + args.watch
        notifs, meta_lost = {}, None
        while time.monotonic() < deadline:
            for peer, msgs in agent.get_new_notifs().items():
                notifs.setdefault(peer, []).extend(m.decode(errors="replace") for m in msgs)
            if meta_lost is None and not agent.check_remote_metadata(remote):
                meta_lost = round(time.monotonic() - log.killed_at, 4)
                log(event="remote_metadata_gone", remote=remote)
            time.sleep(0.05)
        summary["watched_s"] = args.watch
        summary["notifications_after_kill"] = notifs
        summary["remote_metadata_lost_s_after_kill"] = meta_lost
        log(event="watch_over", notifications=notifs, remote_metadata=agent.check_remote_metadata(remote))

    # One more WRITE to the dead decode (a later room to the same peer), followed to its end.
    t0 = time.monotonic()
    try:
        late = new_xfer(0, next_room)
    except Exception as exc:
        late = {"state": "RAISED", "err": f"initialize_xfer {type(exc).__name__}: {exc}", "handle": None}
    log(event="late_post", state=late["state"], err=late["err"])
    while late["state"] == "PROC" and time.monotonic() - t0 < args.watch:
        late["state"], late["err"] = _state(agent, late["handle"])
        time.sleep(0.001)
    summary["late_write"] = {"state": late["state"], "err": late["err"], "seconds": round(time.monotonic() - t0, 4)}
    log(event="late_settled", state=late["state"], err=late["err"])
    try:
        summary["remote_metadata_at_end"] = agent.check_remote_metadata(remote)
    except Exception as exc:
        summary["remote_metadata_at_end"] = f"{type(exc).__name__}: {exc}"
    released = []
    for x in [*live, late]:
        if x.get("handle") is None:
            continue
        try:
            agent.release_xfer_handle(x["handle"])
            released.append({"room": x.get("room"), "released": True})
        except Exception as exc:
            released.append({"room": x.get("room"), "released": False, "err": f"{type(exc).__name__}: {exc}"})
    summary["release"] = released
    print("NIXL_PEER_DEATH " + json.dumps(summary), flush=True)
    os._exit(0)


def run(args):
    env = dict(os.environ)
    if args.tls:
        env["UCX_TLS"] = args.tls
    if args.ucx_error_mode:
        env["PEER_DEATH_UCX_ERROR_MODE"] = args.ucx_error_mode
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--mib", str(args.mib), "--rooms", str(args.rooms), "--watch", str(args.watch), "--case", args.case]
    with tempfile.TemporaryDirectory(prefix="nixl-peer-death-") as d:
        dec = subprocess.Popen([*me, "decode", "--dir", d, *common], env=env, stdout=subprocess.DEVNULL)
        pre = subprocess.Popen([*me, "prefill", "--dir", d, *common], env=env)
        marker = Path(d) / "inflight"
        deadline = time.monotonic() + 120
        while not marker.exists():
            if time.monotonic() > deadline or pre.poll() is not None:
                dec.kill()
                pre.kill()
                sys.exit("the prefill did not get WRITEs going within 120 s")
            time.sleep(0.001)
        if args.case == "noindices":
            time.sleep(1.0)
        killed_at = time.monotonic()  # before the signal: a WRITE the kill ends settles after it
        os.kill(dec.pid, signal.SIGKILL)
        _publish(Path(d) / "killed", repr(killed_at))
        dec.wait()
        print(json.dumps({"event": "decode_killed", "signal": "SIGKILL", "pid": dec.pid}), flush=True)
        try:
            pre.wait(timeout=3 * args.watch + 60)
        except subprocess.TimeoutExpired:
            pre.kill()
            sys.exit("the prefill did not finish")
        return pre.returncode


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("run", "decode", "prefill"))
    p.add_argument("--case", choices=("inflight", "noindices"), default="inflight")
    p.add_argument("--dir")
    p.add_argument("--tls", help="UCX_TLS for both sides (tcp: the lane between two hosts)")
    p.add_argument("--ucx-error-mode", help="pass ucx_error_handling_mode (sglang passes none: NIXL's default)")
    p.add_argument("--mib", type=float, default=64.0)
    p.add_argument("--rooms", type=int, default=4)
    p.add_argument("--watch", type=float, default=60.0)
    args = p.parse_args(argv)
    if args.what == "run":
        sys.exit(run(args))
    (decode if args.what == "decode" else prefill)(args)


if __name__ == "__main__":
    main()
