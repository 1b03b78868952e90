"""HTTP plumbing common to both listeners: the threaded server, request bookkeeping, the /sim/* debug routes."""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from sglang_pd_sim import __version__, nixl_handoff
from sglang_pd_sim.lifecycle import GENERATION_ROUTES
from sglang_pd_sim.state import SimState, as_room, loads

log = logging.getLogger("sglang_pd_sim")


def request_state_wait_timeout() -> float:
    """sglang's SGLANG_REQUEST_STATE_WAIT_TIMEOUT (sglang/srt/environ.py, EnvInt(4)): how often the tokenizer
    manager, waiting for a request's next output, asks whether its HTTP client is still there."""
    try:
        return max(0.1, float(os.environ.get("SGLANG_REQUEST_STATE_WAIT_TIMEOUT") or 4))
    except ValueError:
        return 4.0


def keep_alive_timeout() -> float:
    """sglang's SGLANG_TIMEOUT_KEEP_ALIVE (sglang/srt/environ.py, EnvInt(5)), which http_server.py `launch_server`
    hands to uvicorn as `timeout_keep_alive`: a connection idle that long after its last response is closed."""
    try:
        value = float(os.environ.get("SGLANG_TIMEOUT_KEEP_ALIVE") or 5)
    except ValueError:
        return 5.0
    return value if value > 0 else 5.0


# The prefill's bootstrap server is aiohttp's (sglang/srt/disaggregation/common/conn.py: web.AppRunner with aiohttp's
# default keepalive_timeout of 75 s).
BOOTSTRAP_KEEP_ALIVE = 75.0
# A request that has begun (its line read): reads and writes of its socket time out only after this long.
REQUEST_IO_TIMEOUT = 120.0


class ClientGone(Exception):
    """The client closed the connection: mid-stream, or while its request waited (abort_if_client_gone)."""


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, state: SimState, listener: str):
        self.state = state
        self.listener = listener
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("connection from %s ended: %r", client_address, exc)
        else:
            log.exception("unhandled error serving %s", client_address)


class BaseHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglang-pd-sim/" + __version__
    sys_version = ""
    timeout = None  # set per phase: keep-alive between requests, REQUEST_IO_TIMEOUT within one (handle_one_request)

    server: SimHTTPServer

    # --- plumbing ---
    @property
    def state(self) -> SimState:
        return self.server.state

    def handle_one_request(self):
        """The wait for a request line is the keep-alive wait: on the worker port sglang's uvicorn closes a connection
        idle for SGLANG_TIMEOUT_KEEP_ALIVE (5 s) after its last response (uvicorn starts `timeout_keep_alive` when a
        response completes), so a client's pooled connection older than that is gone. The first request of a
        connection, and a request once its line arrived, get REQUEST_IO_TIMEOUT."""
        served = getattr(self, "_served", 0)
        if served:
            idle = keep_alive_timeout() if self.server.listener == "http" else BOOTSTRAP_KEEP_ALIVE
        else:
            idle = REQUEST_IO_TIMEOUT
        self.connection.settimeout(idle)
        self._served = served + 1
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.connection.settimeout(REQUEST_IO_TIMEOUT)  # the request line arrived: no longer idle
        return super().parse_request()

    def reset_request_state(self) -> None:
        # one handler object serves every request of a keep-alive connection
        self._status = None
        self._room = None
        self._rid = None
        self._note = ""
        self._first_token_at = None  # generation: when the first token was produced
        self._finished = False  # generation: the request ran to its end (a later disconnect is no abort)
        self._settled = False  # its record and lifecycle entry are written (settle)

    def client_gone(self) -> bool:
        """Has the client closed its connection (end of stream or reset), asked without reading from it? What
        starlette's `Request.is_disconnected()` tells sglang's tokenizer manager."""
        try:
            readable, _unused, _unused = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def start_client_checks(self) -> None:
        """A generation begins: its first client check is one SGLANG_REQUEST_STATE_WAIT_TIMEOUT from now."""
        self._client_check_at = time.monotonic() + request_state_wait_timeout()

    def abort_if_client_gone(self) -> None:
        """sglang/srt/managers/tokenizer_manager.py `_stream_one_response` (0.5.23): while a request waits for its
        next output, every SGLANG_REQUEST_STATE_WAIT_TIMEOUT seconds the tokenizer asks whether the HTTP client
        disconnected; if so it aborts the request (`abort_request` -> the scheduler's `abort_request` takes it out
        of its waiting queue, or aborts a prefill's KV sender in the bootstrap or in-flight queue: the room fails
        and its KV is freed) and ends the call ("Request is disconnected from the client side"). The request then
        leaves rid_to_state, so a SIGTERM drain no longer waits for it. Raises ClientGone (counted as aborted,
        generation()). Called from the waits of a generation; a stalled scheduler (lifecycle.py) never gets the
        abort, so the waits on a stall do not call it."""
        now = time.monotonic()
        if now < self._client_check_at:
            return
        self._client_check_at = now + request_state_wait_timeout()
        if self.client_gone():
            log.info("Request is disconnected from the client side. Abort request rid=%r", self._rid)
            self._note = "client-disconnected"
            raise ClientGone(self._rid)

    def send_response(self, code, message=None):
        self._status = code
        super().send_response(code, message)

    def log_message(self, format, *args):
        log.debug("%s %s", self.address_string(), format % args)

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_bytes(self, status: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        # a whole answer is on the books before its last byte leaves: a client that reads it and then asks
        # /sim/requests or /sim/lifecycle finds it there (sglang counts a request before its response is sent)
        self.settle()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, obj, extra: dict | None = None) -> None:
        self.send_bytes(status, json.dumps(obj).encode(), "application/json", extra)

    def send_text(self, status: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_bytes(status, text.encode(), ctype)

    def dispatch(self) -> None:
        self._t0 = time.time()
        self.reset_request_state()
        self._path = path = urlsplit(self.path).path
        # a generation request that reached the service, for GET /sim/lifecycle (start, end, completed)
        self._entry = None
        if self.server.listener == "http" and self.command == "POST" and path in GENERATION_ROUTES:
            self._entry = self.state.life.begin(None, path)
        try:
            self.route(path)
        except (BrokenPipeError, ConnectionResetError, ClientGone):
            self.close_connection = True
            self._note = (self._note + " client-gone").strip()
        except Exception as exc:  # a bug in the simulator must not look like a hung worker
            log.exception("internal error on %s %s", self.command, path)
            if self._status is None:
                self.send_json(500, {"error": {"message": f"simulator error: {exc!r}"}})
        finally:
            self.settle()  # a streamed answer (or none): once it has ended

    def settle(self) -> None:
        """The request's end, once: its lifecycle entry closed and its record written."""
        if self._settled:
            return
        self._settled = True
        if self._entry is not None:
            completed = self._finished and self._status == 200 and "client-gone" not in self._note
            self.state.life.end(self._entry, rid=self._rid, status=self._status, completed=completed)
        if not self._path.startswith("/sim/"):
            self.finish_request(self._path, self._t0)

    def finish_request(self, path: str, t0: float) -> None:
        dt = time.time() - t0
        status = self._status if self._status is not None else 0
        self.state.record(
            {
                "time": t0,
                "method": self.command,
                "path": path,
                "status": status,
                "bootstrap_room": self._room,
                "rid": self._rid,
                "role": self.state.role,
                "listener": self.server.listener,
                "duration_s": round(dt, 6),
            }
        )
        extra = f" room={self._room}" if self._room is not None else ""
        extra += f" rid={self._rid}" if self._rid else ""
        extra += f" {self._note}" if self._note else ""
        log.info(
            "%s %s %s %s %d %.1fms%s",
            self.server.listener,
            self.client_address[0],
            self.command,
            path,
            status,
            dt * 1000,
            extra,
        )

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def do_HEAD(self):
        self.dispatch()

    def route(self, path: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def sim_routes(self, path: str) -> bool:
        """Debug endpoints on every listener."""
        if path == "/sim/requests" and self.command == "GET":
            qs = parse_qs(urlsplit(self.path).query)
            with self.state.lock:
                records = list(self.state.records)
            if "path" in qs:
                records = [r for r in records if r["path"] in qs["path"]]
            if "listener" in qs:
                records = [r for r in records if r["listener"] in qs["listener"]]
            self.send_json(200, records)
            return True
        if path == "/sim/config" and self.command == "GET":
            self.send_json(
                200,
                {
                    "role": self.state.role,
                    "ready": self.state.ready.is_set(),
                    "server_status": self.state.life.status.value,
                    "knobs": self.state.knobs.as_dict(),
                    "handoff": self.state.handoff_info(),
                    "pid": os.getpid(),
                },
            )
            return True
        if path == "/sim/stall" and self.command == "POST":
            # fault injection for tests: the scheduler stalls now (?for=S seconds, default for good)
            raw = (parse_qs(urlsplit(self.path).query).get("for") or [""])[0]
            try:
                seconds = float(raw) if raw not in ("", "inf") else None
            except ValueError:
                self.send_json(400, {"error": f"for={raw!r} is not a number of seconds"})
                return True
            start, end = self.state.life.stall_now(seconds)
            self.send_json(200, {"stalled_from": start, "until": None if end == float("inf") else end})
            return True
        if path == "/sim/lifecycle" and self.command == "GET":
            self.send_json(200, self.state.life.snapshot(self.state))
            return True
        if path.startswith("/sim/kv/") and path.endswith("/nixl") and self.command == "POST":
            # the decode's NIXL offer for a room (nixl_handoff.py): where the prefill writes the room's KV
            try:
                nixl_handoff.accept_offer(int(path.split("/")[3]), loads(self.read_body()))
            except ValueError as exc:
                self.send_json(400, {"error": str(exc)})
            else:
                with self.state.lock:  # the room is connected now (generation.py wait_bootstrapped)
                    self.state.kv_changed.notify_all()
                self.send_json(200, {"accepted": True})
            return True
        if path == "/sim/nixl" and self.command == "GET":
            on, why = nixl_handoff.status(self.state.args.disaggregation_transfer_backend)
            with self.state.lock:
                rooms = list(self.state.nixl_rooms)
            self.send_json(200, {"on": on, "why": why, "rooms": rooms, "offered": nixl_handoff.offered_rooms()})
            return True
        if path == "/sim/kv" and self.command == "GET":
            with self.state.lock:
                self.send_json(200, list(self.state.kv.values()))
            return True
        if path.startswith("/sim/kv/") and self.command == "GET":
            room = as_room(path.rsplit("/", 1)[1])
            try:
                wait = float((parse_qs(urlsplit(self.path).query).get("wait") or ["0"])[0])
            except ValueError:
                wait = 0.0
            entry = kv_poll(self.state, room, wait) if room is not None else None
            body = {"handoff": self.state.handoff_info()}
            if entry is None:
                body.update(bootstrap_room=room, state="unknown")
                self.send_json(404, body)
            else:
                body.update(entry)
                self.send_json(200, body)
            return True
        return False


def kv_poll(state: SimState, room: int, wait: float) -> dict | None:
    """The decode's long-poll for a room; it connects for the room as soon as the prefill has seen it."""
    deadline = time.monotonic() + min(max(wait, 0.0), 10.0)
    connected = False
    while True:
        # once per poll: polled_at is when this decode last asked (a vanished decode asks no more)
        connected = connected or kv_connect(state, room)
        remaining = deadline - time.monotonic()
        entry = state.kv_get(room, min(remaining, 0.05))
        if (entry and entry["state"] == "transferred") or remaining <= 0 or state.stop.is_set():
            return entry


def kv_connect(state: SimState, room: int) -> bool:
    """A decode polled GET /sim/kv/<room>: it has connected for the room and is alive now.

    Mirrors the decode's KVReceiver sending its KV indices to the prefill's bootstrap thread
    (sglang/srt/disaggregation/common/conn.py CommonKVReceiver.init, nixl/conn.py `_start_bootstrap_thread`),
    which moves the prefill's room from KVPoll.Bootstrapping to KVPoll.WaitingForInput. The prefill waits
    for this before it computes and sends the room's KV (generation.py).
    """
    now = time.time()
    with state.lock:
        entry = state.kv.get(room)
        if entry is None:
            return False
        entry.setdefault("connected_at", now)
        entry["polled_at"] = now
        state.kv_changed.notify_all()
        return True
