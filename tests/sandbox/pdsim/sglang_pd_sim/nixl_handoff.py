"""Optional: each room's KV goes from the prefill into the decode through the installed NIXL/UCX (DRAM).

The simulator's handoff is HTTP (handoff.py: the decode long-polls the prefill's GET /sim/kv/<room>) and the
transfer itself is simulated time (engine.kv_transfer). Where the worker runs with
`--disaggregation-transfer-backend nixl` and `nixl._api` imports (the sandbox installs nixl 1.5.1 and
nixl-cu13 1.5.1 into the workers' venv), this module makes the bytes real, as sglang's NIXL backend moves
them, but in host memory (no GPU): the decode registers a buffer for the room and hands its NIXL agent
metadata and descriptor to the prefill (an "offer"), the prefill WRITEs the room's KV bytes into it with a
notification `sim-kv:<room>`, and the decode, once the room is transferred, waits for that notification and
checks every byte (a pattern that depends on the room, so a write into the wrong room is caught).
It is off unless SGLANG_SIM_KV_NIXL=1: on 2-core test machines a NIXL agent per worker changes the timing the
latency model sets, so only the tests that prove the bytes turn it on.

Pure standard library until used: nixl is imported lazily, and `available()` says why it cannot be used.

The glue (what the simulator's handoff calls; each a no-op answering None where NIXL is off):
  decode:  offer = decode_offer(backend, room, input_tokens, per_token); send_offer(opener, netloc, room, offer)
           ... the prefill says "transferred" ... decode_verify(backend, room) (release(backend, room) on failure)
  prefill: the POST /sim/kv/<room>/nixl route calls accept_offer(room, body);
           hand_off calls prefill_write(backend, rooms) -> {bytes, seconds, rooms} or None; a WRITE towards
           a decode that died raises NixlHandoffError (NIXL_ERR_REMOTE_DISCONNECT), and the room fails

  available(backend, env)      (bool, why): nixl backend asked, not turned off, nixl._api imports
  kv_nbytes(tokens, per_token, cap)   bytes written for a room (SGLANG_SIM_KV_NIXL_MAX_MIB caps it, 64)
  pattern(room, nbytes)        the bytes the prefill writes for a room
  DecodeKV(name)               decode: one registered pool of slots; offer(room, nbytes) -> dict (JSON-safe)
                               or None (no free slot), wait(room, timeout) -> dict, release(room)
  PrefillKV(name)              prefill: write(room, offer) -> {bytes, seconds, gbps}
  prepare(backend, role)       at load time: the side's agent and buffer (as sglang makes them before it serves)
One agent per process (UCX backend); calls into it are serialized by a lock, as the simulator serves requests
from threads.

`python -m sglang_pd_sim.nixl_handoff --selftest [--mib N]` runs a decode and a prefill in two processes on
this host and prints one line `NIXL_HANDOFF_SELFTEST {json}`; `--role decode|prefill --dir DIR` runs one side
(two units, as the workers run; the offers go through DIR/offers.json).
"""

from __future__ import annotations

import base64
import os
import threading
import time

SWITCH = "SGLANG_SIM_KV_NIXL"
MAX_MIB = "SGLANG_SIM_KV_NIXL_MAX_MIB"
DEFAULT_MAX_MIB = 64
NOTIF_PREFIX = b"sim-kv:"
_PERIOD = 251


class NixlHandoffError(Exception):
    """The NIXL write of a room failed, or its bytes did not arrive as written."""


def available(backend, env=None):
    """(True, "") when the room's KV should go through NIXL; else (False, why)."""
    env = os.environ if env is None else env
    if backend != "nixl":
        return False, f"transfer backend is {backend!r}, not nixl"
    if str(env.get(SWITCH, "0")).strip().lower() not in ("1", "true", "yes", "on"):
        return False, f"{SWITCH}={env.get(SWITCH, '0')} (set it to 1 to move each room's KV through NIXL)"
    try:
        import nixl._api  # noqa: F401, PLC0415
    except Exception as exc:  # ImportError, or the wheel's own load errors (bundled UCX)
        return False, f"nixl does not import: {type(exc).__name__}: {exc}"
    return True, ""


def max_bytes(env=None):
    env = os.environ if env is None else env
    try:
        mib = float(env.get(MAX_MIB, DEFAULT_MAX_MIB))
    except ValueError:
        mib = DEFAULT_MAX_MIB
    return max(1, int(mib * 2**20))


def kv_nbytes(input_tokens, per_token, cap):
    """Bytes written for one room: its simulated KV size, at least one byte, at most cap."""
    return max(1, min(int(cap), max(0, int(input_tokens)) * max(0, int(per_token))))


def pattern(room, nbytes):
    """The room's bytes: byte i is (i + room) % 251 + 1 (never 0, so a zeroed buffer never passes)."""
    shift = int(room) % _PERIOD
    period = bytes((k + shift) % _PERIOD + 1 for k in range(_PERIOD))
    return (period * (nbytes // _PERIOD + 1))[:nbytes]


def notif(room):
    return NOTIF_PREFIX + str(int(room)).encode()


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def _unb64(text):
    return base64.b64decode(text.encode("ascii"))


class _Agent:
    """One NIXL agent of this process (UCX backend), created at first use; calls serialized."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.RLock()
        self._agent = None

    def get(self):
        with self.lock:
            if self._agent is None:
                from nixl._api import nixl_agent, nixl_agent_config  # noqa: PLC0415

                agent = nixl_agent(self.name, nixl_agent_config(backends=["UCX"]))
                if "UCX" not in agent.backends:
                    raise NixlHandoffError(f"NIXL has no UCX backend (plugins: {agent.get_plugin_list()})")
                self._agent = agent
            return self._agent


class _Buffer:
    """Host memory (anonymous mmap) registered with NIXL as DRAM, handed out in fixed slots."""

    def __init__(self, agent, nbytes, slot_bytes=None):
        import ctypes  # noqa: PLC0415
        import mmap  # noqa: PLC0415

        self.nbytes = nbytes
        self.slot_bytes = slot_bytes or nbytes
        self.mem = mmap.mmap(-1, nbytes)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self.reg = agent.register_memory([(self.addr, nbytes, 0, "")], "DRAM")
        self.free_slots = list(range(nbytes // self.slot_bytes))

    def descs(self, agent, slot, nbytes):
        return agent.get_xfer_descs([(self.addr + slot * self.slot_bytes, nbytes, 0)], "DRAM")

    def view(self, slot, nbytes):
        off = slot * self.slot_bytes
        return self.mem[off : off + nbytes]

    def write(self, slot, data):
        off = slot * self.slot_bytes
        self.mem[off : off + len(data)] = data


class DecodeKV:
    """The decode side: one registered pool (as sglang registers its KV pool once), a slot per room.

    The pool's metadata goes to the prefill with every offer; NIXL knows the pool from the first one.
    """

    def __init__(self, name, slot_bytes=None, slots=8):
        self.agent = _Agent(name)
        self.slot_bytes = slot_bytes or max_bytes()
        self.slots = slots
        self.pool = None
        self.rooms = {}
        self.notifs = {}

    def offer(self, room, nbytes):
        """A slot of the pool for the room: the JSON-safe dict the prefill needs to write into it, or None
        when every slot is taken (the caller then keeps the HTTP handoff alone for that room)."""
        nbytes = min(int(nbytes), self.slot_bytes)
        with self.agent.lock:
            agent = self.agent.get()
            self.prepare()
            self.release(room)
            if not self.pool.free_slots:
                return None
            slot = self.pool.free_slots.pop(0)
            self.pool.write(slot, bytes(nbytes))  # zeroed: a missing write shows
            self.rooms[room] = (slot, nbytes)
            return {
                "room": int(room),
                "agent": self.agent.name,
                "nbytes": nbytes,
                "meta": _b64(agent.get_agent_metadata()),
                "descs": _b64(agent.get_serialized_descs(self.pool.descs(agent, slot, nbytes))),
            }

    def prepare(self):
        """The agent and the registered pool, made once (at load time: prepare() below)."""
        with self.agent.lock:
            agent = self.agent.get()
            if self.pool is None:
                self.pool = _Buffer(agent, self.slot_bytes * self.slots, self.slot_bytes)

    def _notified(self, room):
        want = notif(room)
        with self.agent.lock:
            for peer, msgs in self.agent.get().get_new_notifs().items():
                self.notifs.setdefault(peer, []).extend(msgs)
            for peer, msgs in self.notifs.items():
                if want in msgs:
                    msgs.remove(want)
                    return peer
        return None

    def wait(self, room, timeout):
        """Wait for the room's notification, check the bytes, free the slot: {bytes, bytes_verified, peer}."""
        if room not in self.rooms:
            raise NixlHandoffError(f"no NIXL buffer offered for bootstrap_room={room}")
        slot, nbytes = self.rooms[room]
        deadline = time.monotonic() + timeout
        peer = None
        try:
            while peer is None:
                peer = self._notified(room)
                if peer is None:
                    if time.monotonic() > deadline:
                        raise NixlHandoffError(
                            f"bootstrap_room={room}: no NIXL notification {notif(room)!r} within {timeout:.1f} s"
                        )
                    time.sleep(0.001)
            with self.agent.lock:
                got = self.pool.view(slot, nbytes)
            want = pattern(room, nbytes)
            good = nbytes if got == want else sum(a == b for a, b in zip(got, want, strict=True))
            if good != nbytes:
                raise NixlHandoffError(
                    f"bootstrap_room={room}: only {good} of {nbytes} bytes arrived as written (NIXL from {peer})"
                )
            return {"bytes": nbytes, "bytes_verified": good, "peer": peer}
        finally:
            self.release(room)

    def release(self, room):
        with self.agent.lock:
            taken = self.rooms.pop(room, None)
            if taken is not None:
                self.pool.free_slots.append(taken[0])


class PrefillKV:
    """The prefill side: WRITE a room's bytes into the slot a decode offered (one registered source buffer)."""

    def __init__(self, name, slot_bytes=None):
        self.agent = _Agent(name)
        self.slot_bytes = slot_bytes or max_bytes()
        self.src = None
        self.peers = {}

    def prepare(self):
        """The agent and the registered source buffer, made once (at load time: prepare() below)."""
        with self.agent.lock:
            agent = self.agent.get()
            if self.src is None:
                self.src = _Buffer(agent, self.slot_bytes)

    def _remote(self, agent, offer):
        """The decode's agent: loaded once, and again when it comes back with new metadata (a restart)."""
        name, meta = offer["agent"], offer["meta"]
        known = self.peers.get(name)
        if known is None or known[1] != meta:
            if known is not None:
                agent.remove_remote_agent(known[0])
            remote = agent.add_remote_agent(_unb64(meta))
            self.peers[name] = (remote.decode() if isinstance(remote, bytes) else remote, meta)
        return self.peers[name][0]

    def write(self, room, offer, timeout=30.0):
        """{bytes, seconds, gbps} of one NIXL WRITE of the room's pattern into the offer, with its notification.

        A decode that died fails the write, it never hangs: NIXL raises nixlRemoteDisconnectError
        (NIXL_ERR_REMOTE_DISCONNECT) from transfer() when the WRITE is posted after the death, from
        check_xfer_state() within about 0.1 s for a WRITE in flight at the kill, and nixlBackendError
        (NIXL_ERR_BACKEND) from add_remote_agent when the prefill first meets the dead decode's agent
        (nixl 1.5.1, UCX error mode `peer`
        as sglang keeps it; UCX over TCP and shared memory: tests/hardware/nixl_peer_death.py,
        tests/fixtures/kv_transport/nixl-peer-death-2026-12-04.md). sglang/srt/disaggregation/nixl/conn.py
        _post_xfer / _await_handles turn that into a Failed room (transfer_worker), and reload the peer's
        metadata afterwards (_reload_invalidated_peers): here the peer is forgotten, so its next offer loads it.
        """
        nbytes = int(offer["nbytes"])
        if nbytes > self.slot_bytes:
            raise NixlHandoffError(f"bootstrap_room={room}: offer of {nbytes} bytes > {self.slot_bytes} ({MAX_MIB})")
        with self.agent.lock:
            self.prepare()
            agent = self.agent.get()
            step, handle, remote = "add_remote_agent", None, offer["agent"]
            t0 = time.perf_counter()
            try:
                remote = self._remote(agent, offer)
                step = "initialize_xfer"
                remote_descs = agent.deserialize_descs(_unb64(offer["descs"]))
                self.src.write(0, pattern(room, nbytes))
                src = self.src.descs(agent, 0, nbytes)
                handle = agent.initialize_xfer("WRITE", src, remote_descs, remote, notif(room))
                step = "transfer"
                t0 = time.perf_counter()
                state = agent.transfer(handle, notif(room))
                step = "check_xfer_state"
                deadline = time.monotonic() + timeout
                while state == "PROC":
                    if time.monotonic() > deadline:
                        raise NixlHandoffError(f"bootstrap_room={room}: NIXL WRITE still running after {timeout} s")
                    state = agent.check_xfer_state(handle)
                seconds = time.perf_counter() - t0
            except NixlHandoffError:
                raise
            except Exception as exc:  # nixlRemoteDisconnectError, nixlBackendError: the binding raises them
                self.peers.pop(offer["agent"], None)
                why = f"bootstrap_room={room}: NIXL WRITE to {remote} failed in {step}: {exc}"
                raise NixlHandoffError(why) from exc
            finally:
                if handle is not None:
                    try:
                        agent.release_xfer_handle(handle)
                    except Exception:  # a handle NIXL cannot cancel: its write already failed or ended
                        pass
        if state != "DONE":
            self.peers.pop(offer["agent"], None)
            raise NixlHandoffError(f"bootstrap_room={room}: NIXL WRITE to {remote} ended in state {state}")
        return {"bytes": nbytes, "seconds": seconds, "gbps": nbytes / seconds / 1e9 if seconds > 0 else None}


# ------------------------------------------------------------------------------------------------
# The glue the simulator's handoff calls (one DecodeKV or PrefillKV per process, made by
# prepare() at load time, or at first use).
# Every function is a no-op answering None where available() says no, so call sites need no other check.

_GLUE_LOCK = threading.Lock()
_SIDES = {}
_OFFERS = {}  # prefill: room -> the offer its decode POSTed (kept until the room is written or dropped)
_STATUS = {}


def enabled(backend):
    """available(backend), decided once per process (and logged by the caller via status())."""
    with _GLUE_LOCK:
        if backend not in _STATUS:
            _STATUS[backend] = available(backend)
        return _STATUS[backend][0]


def status(backend):
    """(on, why) as enabled() decided it."""
    enabled(backend)
    return _STATUS[backend]


def _side(kind):
    with _GLUE_LOCK:
        if kind not in _SIDES:
            name = f"sim-{kind}-{os.getpid()}"
            _SIDES[kind] = DecodeKV(name) if kind == "decode" else PrefillKV(name)
        return _SIDES[kind]


def prepare(backend, role):
    """At load time, as sglang makes its NIXL agent and registers the KV pool in the scheduler's init
    (sglang/srt/disaggregation/nixl/conn.py NixlKVManager.__init__ and register_buffer_to_engine), before the
    server answers: the side's agent and buffer, so the first request does not pay for them (about 1 s a side
    on a busy 2-core machine, more than a short handoff timeout). True when NIXL is on; raises when the agent
    or the buffer cannot be made (sglang does not start then)."""
    if not enabled(backend) or role not in ("prefill", "decode"):
        return False
    try:
        _side(role).prepare()
    except NixlHandoffError:
        raise
    except Exception as exc:
        raise NixlHandoffError(f"NIXL agent for the {role}: {type(exc).__name__}: {exc}") from exc
    return True


def decode_offer(backend, room, input_tokens, per_token):
    """Decode: a slot for the room's KV and the offer to POST to the prefill; None when off or no slot free."""
    if not enabled(backend):
        return None
    dec = _side("decode")
    return dec.offer(room, kv_nbytes(input_tokens, per_token, dec.slot_bytes))


def send_offer(opener, netloc, room, offer, timeout=5.0):
    """Decode: POST the offer to the prefill's bootstrap server (POST /sim/kv/<room>/nixl)."""
    import json  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    req = urllib.request.Request(
        f"http://{netloc}/sim/kv/{int(room)}/nixl",
        data=json.dumps(offer).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with opener.open(req, timeout=timeout) as resp:
        resp.read()


def accept_offer(room, offer):
    """Prefill (the POST /sim/kv/<room>/nixl route): keep the decode's offer for the room's write."""
    if not isinstance(offer, dict) or not {"agent", "meta", "descs", "nbytes"} <= offer.keys():
        raise ValueError("a NIXL offer needs agent, meta, descs and nbytes")
    with _GLUE_LOCK:
        _OFFERS[int(room)] = offer


def offered(rooms):
    """Prefill: has a decode offered a NIXL slot for every one of the rooms (its WRITE then tells whether the
    decode is still there)?"""
    with _GLUE_LOCK:
        return bool(rooms) and all(int(r) in _OFFERS for r in rooms)


def offered_rooms():
    """Prefill: the rooms whose decode offered a slot that is not written yet (GET /sim/nixl shows them)."""
    with _GLUE_LOCK:
        return sorted(_OFFERS)


def prefill_write(backend, rooms, timeout=30.0):
    """Prefill: WRITE every room that has an offer; {bytes, seconds, rooms} in all, or None when nothing
    went through NIXL (off, or no decode offered). Raises NixlHandoffError when a write fails."""
    if not enabled(backend):
        return None
    with _GLUE_LOCK:
        offers = [(r, _OFFERS.pop(int(r), None)) for r in rooms]
    offers = [(r, o) for r, o in offers if o is not None]
    if not offers:
        return None
    pre = _side("prefill")
    done = [pre.write(r, o, timeout) for r, o in offers]
    return {"bytes": sum(d["bytes"] for d in done), "seconds": sum(d["seconds"] for d in done), "rooms": len(done)}


def decode_verify(backend, room, timeout=5.0):
    """Decode, once the prefill says the room is transferred: wait for the notification and check every
    byte; the result dict, or None when the room went without NIXL. Raises NixlHandoffError."""
    if not enabled(backend):
        return None
    dec = _side("decode")
    if room not in dec.rooms:
        return None
    return dec.wait(room, timeout)


def release(backend, room):
    """Decode: give the room's slot back (its handoff failed or was abandoned)."""
    if enabled(backend):
        _side("decode").release(room)


def drop_offer(room):
    """Prefill: forget a room's offer (the request failed before the write)."""
    with _GLUE_LOCK:
        _OFFERS.pop(int(room), None)


def selftest(mib=8.0, rooms=(7, 8, 9), timeout=60.0):
    """A decode and a prefill in two processes write `rooms` through NIXL; the decode's verdicts."""
    import multiprocessing  # noqa: PLC0415

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    nbytes = int(mib * 2**20)

    def decode_side(conn):
        try:
            dec = DecodeKV("sim-decode", slot_bytes=nbytes, slots=len(rooms))
            offers = [dec.offer(r, nbytes) for r in rooms]
            conn.send(offers)
            conn.send([dec.wait(r, timeout) for r in rooms])
        except Exception as exc:
            conn.send({"error": f"{type(exc).__name__}: {exc}"})
        conn.recv()  # stay until the prefill is done with the agent

    proc = ctx.Process(target=decode_side, args=(child,), daemon=True)
    proc.start()
    result = {"mib": mib, "rooms": list(rooms)}
    try:
        offers = parent.recv()
        if isinstance(offers, dict):
            raise NixlHandoffError(offers["error"])
        pre = PrefillKV("sim-prefill", slot_bytes=nbytes)
        result["writes"] = [pre.write(o["room"], o, timeout) for o in offers]
        got = parent.recv()
        if isinstance(got, dict):
            raise NixlHandoffError(got["error"])
        result["decode"] = got
        result["ok"] = all(g["bytes_verified"] == nbytes for g in got)
    except Exception as exc:
        result["ok"], result["error"] = False, f"{type(exc).__name__}: {exc}"
    parent.send("done")
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    return result


def selftest_units(role, directory, mib=8.0, rooms=(7, 8, 9), timeout=60.0):
    """One side of the self-test as its own process (two systemd units, as the workers run): the decode
    writes its offers to DIRECTORY/offers.json and waits; the prefill reads them and writes the rooms."""
    import json  # noqa: PLC0415

    nbytes = int(mib * 2**20)
    offers_path = os.path.join(directory, "offers.json")
    result = {"role": role, "mib": mib, "rooms": list(rooms), "pid": os.getpid()}
    try:
        if role == "decode":
            dec = DecodeKV("sim-decode", slot_bytes=nbytes, slots=len(rooms))
            offers = [dec.offer(r, nbytes) for r in rooms]
            with open(offers_path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(offers, f)
            os.replace(offers_path + ".tmp", offers_path)
            result["decode"] = [dec.wait(r, timeout) for r in rooms]
            result["ok"] = all(g["bytes_verified"] == nbytes for g in result["decode"])
        else:
            deadline = time.monotonic() + timeout
            while not os.path.exists(offers_path):
                if time.monotonic() > deadline:
                    raise NixlHandoffError(f"no {offers_path} within {timeout} s")
                time.sleep(0.05)
            with open(offers_path, encoding="utf-8") as f:
                offers = json.load(f)
            pre = PrefillKV("sim-prefill", slot_bytes=nbytes)
            result["writes"] = [pre.write(o["room"], o, timeout) for o in offers]
            time.sleep(1)  # let the notifications leave before the agent goes
            result["ok"] = True
    except Exception as exc:
        result["ok"], result["error"] = False, f"{type(exc).__name__}: {exc}"
    return result


def main(argv=None):
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415
    import sys  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m sglang_pd_sim.nixl_handoff")
    parser.add_argument("--selftest", action="store_true", required=True)
    parser.add_argument("--mib", type=float, default=8.0)
    parser.add_argument("--role", choices=("decode", "prefill"), help="one side only, offers through --dir")
    parser.add_argument("--dir", help="a folder both sides can read and write (with --role)")
    args = parser.parse_args(argv)
    ok, why = available("nixl")
    if not ok:
        result = {"ok": False, "error": why}
    elif args.role:
        result = selftest_units(args.role, args.dir, args.mib)
    else:
        result = selftest(args.mib)
    print("NIXL_HANDOFF_SELFTEST " + json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0 if result["ok"] else 1)  # NIXL's progress threads: exit without waiting for them


if __name__ == "__main__":
    main()
