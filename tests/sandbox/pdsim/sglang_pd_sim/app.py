"""The worker: SGLang's HTTP API on --port, and on a prefill the bootstrap server on --disaggregation-bootstrap-port.

PD handoff, as simulated here: the router sends the same body, carrying bootstrap_host/bootstrap_port/
bootstrap_room, to a prefill and a decode at once. The prefill records the room and, after
SGLANG_SIM_PREFILL_LATENCY, marks its KV "transferred". The decode polls the prefill's bootstrap server
(GET /sim/kv/<room> at bootstrap_host:bootstrap_port) until that room is transferred, checks that both
sides agree on page size, KV dtype and transfer backend, then generates. If the room does not show up
within SGLANG_SIM_HANDOFF_TIMEOUT, decode fails the request with HTTP 500, as SGLang aborts a request
whose KV transfer failed.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from sglang_pd_sim import SGLANG_VERSION, __version__
from sglang_pd_sim.cli import Knobs, load_knobs, parse_args
from sglang_pd_sim.textgen import count_prompt_tokens, fake_tokens, prompt_key

log = logging.getLogger("sglang_pd_sim")

OPEN_PATHS = ("/health", "/health_generate", "/metrics")  # stay open with --api-key, as in SGLang
GENERATION_PATHS = {"/generate": "generate", "/v1/completions": "completion", "/v1/chat/completions": "chat"}
MAX_RECORDS = 20000
MAX_ROOMS = 100000
MAX_TOKENS_CAP = 65536
POLL_INTERVAL = 0.02
# decode talks to a prefill directly, never through an HTTP proxy from the environment
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HandoffError(Exception):
    """The KV of a bootstrap_room never arrived (or arrived incompatible)."""


class ClientGone(Exception):
    """The client closed the connection mid-stream."""


# --------------------------------------------------------------------------------------------------
# State shared by both listeners
# --------------------------------------------------------------------------------------------------


class SimState:
    def __init__(self, args, knobs: Knobs):
        self.args = args
        self.knobs = knobs
        self.role = args.disaggregation_mode if args.disaggregation_mode in ("prefill", "decode") else "null"
        self.started = time.time()
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.kv_changed = threading.Condition(self.lock)
        self.records: collections.deque = collections.deque(maxlen=MAX_RECORDS)
        self.kv: collections.OrderedDict = collections.OrderedDict()  # prefill: room -> handoff record
        self.dp_ranks: dict = {}
        self.inflight = 0
        self.generations = 0
        self.counters = collections.Counter()
        self.latency_sum = 0.0
        arch = knobs.architecture
        self.is_dsv4 = "DeepseekV4" in arch
        # The few resolution hooks that matter to a PD pair (DeepSeek-V4 forces page 256, fp8_e4m3 KV, dsv4).
        self.page_size = args.page_size or (256 if self.is_dsv4 else 1)
        kv = args.kv_cache_dtype
        self.kv_cache_dtype = "fp8_e4m3" if (self.is_dsv4 and kv == "auto") else kv
        self.attention_backend = args.attention_backend or ("dsv4" if self.is_dsv4 else None)
        self.model_name = args.served_model_name or args.model_path
        self.tokenizer_path = args.tokenizer_path or args.model_path

    # records ---------------------------------------------------------------------------------------
    def record(self, entry: dict) -> None:
        with self.lock:
            self.records.append(entry)

    # prefill KV bookkeeping -------------------------------------------------------------------------
    def kv_seen(self, room: int, rid: str) -> None:
        with self.lock:
            self.kv[room] = {"bootstrap_room": room, "rid": rid, "state": "waiting", "seen_at": time.time()}
            while len(self.kv) > MAX_ROOMS:
                self.kv.popitem(last=False)
            self.kv_changed.notify_all()

    def kv_done(self, room: int) -> None:
        with self.lock:
            if room in self.kv:
                self.kv[room]["state"] = "transferred"
                self.kv[room]["done_at"] = time.time()
            self.kv_changed.notify_all()

    def kv_get(self, room: int, wait: float = 0.0) -> dict | None:
        """The handoff record of a room; with wait > 0, long-poll until it is transferred (or wait ends)."""
        deadline = time.monotonic() + min(max(wait, 0.0), 10.0)
        with self.lock:
            while True:
                entry = self.kv.get(room)
                remaining = deadline - time.monotonic()
                if (entry and entry["state"] == "transferred") or remaining <= 0 or self.stop.is_set():
                    return dict(entry) if entry else None
                self.kv_changed.wait(min(remaining, 0.5))

    def handoff_info(self) -> dict:
        a = self.args
        return {
            "disaggregation_mode": self.role,
            "page_size": self.page_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "transfer_backend": a.disaggregation_transfer_backend,
            "tp_size": a.tp_size,
            "dp_size": a.dp_size,
            "pp_size": a.pp_size,
            "model_path": a.model_path,
        }

    def server_info(self) -> dict:
        info = {k: v for k, v in vars(self.args).items()}
        info.update(
            tokenizer_path=self.tokenizer_path,
            served_model_name=self.model_name,
            page_size=self.page_size,
            kv_cache_dtype=self.kv_cache_dtype,
            attention_backend=self.attention_backend,
        )
        with self.lock:
            load = self.inflight
        info.update(
            version=SGLANG_VERSION,
            status="ready" if self.ready.is_set() else "starting",
            internal_states=[
                {
                    "last_gen_throughput": 0.0,
                    "load": load,
                    "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 0, "graph": 0.0},
                    "avg_spec_accept_length": None,
                    "effective_max_running_requests_per_dp": args_or(self.args.max_running_requests, 256),
                }
            ],
            simulator={"name": "sglang-pd-sim", "version": __version__, "knobs": self.knobs.as_dict()},
        )
        return info


def args_or(value, default):
    return default if value is None else value


# --------------------------------------------------------------------------------------------------
# HTTP plumbing common to both listeners
# --------------------------------------------------------------------------------------------------


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
    timeout = 120  # idle keep-alive connections go away eventually

    server: SimHTTPServer

    # --- plumbing ---
    @property
    def state(self) -> SimState:
        return self.server.state

    def reset_request_state(self) -> None:
        # one handler object serves every request of a keep-alive connection
        self._status = None
        self._room = None
        self._rid = None
        self._note = ""

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
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, obj, extra: dict | None = None) -> None:
        self.send_bytes(status, json.dumps(obj).encode(), "application/json", extra)

    def send_text(self, status: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_bytes(status, text.encode(), ctype)

    def dispatch(self) -> None:
        t0 = time.time()
        self.reset_request_state()
        path = urlsplit(self.path).path
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
            if not path.startswith("/sim/"):
                self.finish_request(path, t0)

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
                    "knobs": self.state.knobs.as_dict(),
                    "handoff": self.state.handoff_info(),
                    "pid": os.getpid(),
                },
            )
            return True
        if path == "/sim/kv" and self.command == "GET":
            with self.state.lock:
                self.send_json(200, list(self.state.kv.values()))
            return True
        if path.startswith("/sim/kv/") and self.command == "GET":
            room = _as_room(path.rsplit("/", 1)[1])
            try:
                wait = float((parse_qs(urlsplit(self.path).query).get("wait") or ["0"])[0])
            except ValueError:
                wait = 0.0
            entry = self.state.kv_get(room, wait) if room is not None else None
            body = {"handoff": self.state.handoff_info()}
            if entry is None:
                body.update(bootstrap_room=room, state="unknown")
                self.send_json(404, body)
            else:
                body.update(entry)
                self.send_json(200, body)
            return True
        return False


def _as_room(value):
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------
# The prefill's bootstrap server
# --------------------------------------------------------------------------------------------------


class BootstrapHandler(BaseHandler):
    def route(self, path: str) -> None:
        if self.sim_routes(path):
            return
        st = self.state
        a = st.args
        if path == "/health" and self.command in ("GET", "HEAD"):
            self.send_text(200, "OK")
        elif path == "/route" and self.command == "GET":
            qs = parse_qs(urlsplit(self.path).query)
            engine_rank = int((qs.get("engine_rank") or ["-1"])[0])
            if engine_rank == -1:
                self.send_json(
                    200,
                    {
                        "prefill_attn_tp_size": a.tp_size // max(1, a.attn_dp_size or 1),
                        "prefill_dp_size": a.dp_size,
                        "prefill_pp_size": a.pp_size,
                        "prefill_page_size": st.page_size,
                        "prefill_kv_cache_dtype": st.kv_cache_dtype,
                        "transfer_backend": a.disaggregation_transfer_backend,
                    },
                )
            elif 0 <= engine_rank < a.tp_size * a.pp_size:
                self.send_json(
                    200, {"rank_ip": a.host, "rank_port": a.port + 1000 + engine_rank, "engine_rank": engine_rank}
                )
            else:
                self.send_text(404, f"engine_rank {engine_rank} is not registered")
        elif path == "/route" and self.command == "PUT":
            self.read_body()
            self.send_text(200, "OK")
        elif path == "/register_dp_rank" and self.command == "POST":
            body = _loads(self.read_body()) or {}
            room = _as_room(body.get("bootstrap_room"))
            self._room = room
            with st.lock:
                st.dp_ranks[room] = int(body.get("dp_rank") or 0)
            self.send_json(200, {"status": "ok"})
        elif path == "/query_dp_ranks" and self.command == "POST":
            body = _loads(self.read_body()) or {}
            rooms = body.get("bootstrap_rooms") or []
            with st.lock:
                ranks = {str(r): st.dp_ranks.get(_as_room(r), 0 if _as_room(r) in st.kv else -1) for r in rooms}
            self.send_json(200, {"dp_ranks": ranks})
        else:
            self.send_json(404, {"detail": "Not Found"})


def _loads(raw: bytes):
    if not raw:
        return None
    return json.loads(raw)


# --------------------------------------------------------------------------------------------------
# The worker's HTTP API
# --------------------------------------------------------------------------------------------------


class WorkerHandler(BaseHandler):
    def route(self, path: str) -> None:
        st = self.state
        if self.sim_routes(path):
            return
        if not path.startswith(OPEN_PATHS) and not self.authorized():
            self.send_json(401, {"error": "Unauthorized"})
            return
        if path in ("/health", "/health_generate"):
            if self.command not in ("GET", "HEAD"):
                self.send_json(405, {"detail": "Method Not Allowed"})
            elif st.knobs.fail_health is not None:
                self.send_text(st.knobs.fail_health, "simulated health failure")
            elif not st.ready.is_set():
                self.send_text(503, "Server is loading the model weights")
            else:
                self.send_bytes(200, b"", "text/plain; charset=utf-8")
            return
        if not st.ready.is_set():
            self.send_json(503, {"error": {"message": "The server is not ready yet (loading weights)."}})
            return
        get_routes = {
            "/server_info": lambda: self.send_json(200, st.server_info()),
            "/get_server_info": lambda: self.send_json(200, st.server_info()),
            "/model_info": lambda: self.send_json(200, self.model_info()),
            "/get_model_info": lambda: self.send_json(200, self.model_info()),
            "/v1/models": lambda: self.send_json(200, self.models()),
            "/get_load": lambda: self.send_json(200, self.load()),
            "/metrics": self.metrics,
        }
        if path in get_routes:
            if self.command not in ("GET", "HEAD"):
                self.send_json(405, {"detail": "Method Not Allowed"})
            else:
                get_routes[path]()
            return
        if path in GENERATION_PATHS:
            if self.command != "POST":
                self.send_json(405, {"detail": "Method Not Allowed"})
            else:
                self.generation(GENERATION_PATHS[path])
            return
        if path == "/flush_cache" and self.command in ("GET", "POST"):
            self.read_body()
            self.send_text(200, "Cache flushed.\n")
            return
        self.send_json(404, {"detail": "Not Found"})

    def authorized(self) -> bool:
        key = self.state.args.api_key
        if not key:
            return True
        return self.headers.get("Authorization", "") == f"Bearer {key}"

    # --- info routes ---
    def model_info(self) -> dict:
        st = self.state
        arch = st.knobs.architecture
        model_type = "deepseek_v4" if st.is_dsv4 else arch.replace("ForCausalLM", "").lower()
        return {
            "model_path": st.args.model_path,
            "tokenizer_path": st.tokenizer_path,
            "is_generation": not st.args.is_embedding,
            "preferred_sampling_params": st.args.preferred_sampling_params,
            "weight_version": st.args.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model_type,
            "architectures": [arch],
        }

    def models(self) -> dict:
        st = self.state
        return {
            "object": "list",
            "data": [
                {
                    "id": st.model_name,
                    "object": "model",
                    "created": int(st.started),
                    "owned_by": "sglang",
                    "root": st.args.model_path,
                    "parent": None,
                    "max_model_len": st.args.context_length or 163840,
                }
            ],
        }

    def load(self) -> list:
        with self.state.lock:
            n = self.state.inflight
        return [{"dp_rank": 0, "num_reqs": n, "num_waiting_reqs": 0, "num_tokens": 0}]

    def metrics(self) -> None:
        st = self.state
        if not st.args.enable_metrics:  # as SGLang: /metrics exists only with --enable-metrics
            self.send_json(404, {"detail": "Not Found"})
            return
        engine = {"prefill": "prefill", "decode": "decode"}.get(st.role, "unified")
        labels = f'model_name="{st.model_name}",engine_type="{engine}",tp_rank="0",pp_rank="0"'
        with st.lock:
            c = dict(st.counters)
            inflight = st.inflight
            lat_sum = st.latency_sum
        lines = []

        def metric(name, kind, help_text, value):
            lines.extend(
                [
                    f"# HELP sglang:{name} {help_text}",
                    f"# TYPE sglang:{name} {kind}",
                    f"sglang:{name}{{{labels}}} {float(value)}",
                ]
            )

        metric("num_running_reqs", "gauge", "The number of running requests.", inflight)
        metric("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", 0)
        metric("num_used_tokens", "gauge", "The number of used tokens.", 0)
        metric("token_usage", "gauge", "The token usage.", 0)
        metric("gen_throughput", "gauge", "The generation throughput (token/s).", 0)
        metric("cache_hit_rate", "gauge", "The prefix cache hit rate.", 0)
        metric("is_ready", "gauge", "Whether the server is ready.", 1)
        metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.", c.get("prompt_tokens", 0))
        metric(
            "generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            c.get("generation_tokens", 0),
        )
        metric("num_requests_total", "counter", "Number of requests processed.", c.get("requests", 0))
        metric("num_aborted_requests_total", "counter", "Number of requests aborted.", c.get("aborted", 0))
        if st.role == "decode":
            metric(
                "kv_transfer_failures_total",
                "counter",
                "KV handoffs that failed (simulated).",
                c.get("handoff_failures", 0),
            )
        n = c.get("requests", 0)
        lines += [
            "# HELP sglang:e2e_request_latency_seconds Histogram of end-to-end request latency in seconds",
            "# TYPE sglang:e2e_request_latency_seconds histogram",
            f'sglang:e2e_request_latency_seconds_bucket{{{labels},le="+Inf"}} {float(n)}',
            f"sglang:e2e_request_latency_seconds_sum{{{labels}}} {lat_sum}",
            f"sglang:e2e_request_latency_seconds_count{{{labels}}} {float(n)}",
        ]
        self.send_text(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4; charset=utf-8")

    # --- generation ---
    def error(self, kind: str, status: int, message: str) -> None:
        if kind == "generate":
            body = {"error": {"message": message}}
        else:
            etype = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
                status, "InternalServerError"
            )
            body = {"object": "error", "message": message, "type": etype, "param": None, "code": status}
        self.send_json(status, body)

    def generation(self, kind: str) -> None:
        st = self.state
        raw = self.read_body()
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            self.error(kind, 400, f"Invalid request body: {exc}")
            return
        rid = req.get("rid")
        self._rid = rid if isinstance(rid, str) else uuid.uuid4().hex
        room = req.get("bootstrap_room")
        self._room = room
        if st.knobs.fail_generate is not None:
            self._note = "simulated-failure"
            self.error(kind, st.knobs.fail_generate, "Simulated failure (SGLANG_SIM_FAIL)")
            self.after_generation()
            return

        prompt, max_tokens, stream = self.gen_params(kind, req)
        if max_tokens is None:
            max_tokens = st.knobs.default_max_tokens
        try:
            max_tokens = max(0, min(int(max_tokens), MAX_TOKENS_CAP))
        except (TypeError, ValueError):
            self.error(kind, 400, f"max tokens must be an integer, got {max_tokens!r}")
            return
        rooms = room if isinstance(room, list) else [room]
        if st.role in ("prefill", "decode") and any(_as_room(r) is None for r in rooms):
            self.error(kind, 400, f"Disaggregated request received without bootstrap room id. rid={self._rid}")
            return

        with st.lock:
            st.inflight += 1
        t0 = time.time()
        try:
            if st.role == "prefill":
                for r in rooms:
                    st.kv_seen(_as_room(r), self._rid)
                if st.knobs.prefill_latency:
                    time.sleep(st.knobs.prefill_latency)
                if not st.knobs.handoff_drop:
                    for r in rooms:
                        st.kv_done(_as_room(r))
                max_tokens = min(max_tokens, 1)  # a prefill worker answers after its first token
            elif st.role == "decode":
                try:
                    for r in rooms:
                        self.wait_for_kv(req.get("bootstrap_host"), req.get("bootstrap_port"), _as_room(r))
                except HandoffError as exc:
                    with st.lock:
                        st.counters["handoff_failures"] += 1
                        st.counters["aborted"] += 1
                    self._note = "handoff-failed"
                    log.warning("%s", exc)
                    self.error(kind, 500, str(exc))
                    return
            self.respond(kind, req, prompt, max_tokens=max_tokens, stream=stream, t0=t0)
        finally:
            with st.lock:
                st.inflight -= 1
            self.after_generation()

    def after_generation(self) -> None:
        st = self.state
        with st.lock:
            st.generations += 1
            count = st.generations
        if st.knobs.crash_after is not None and count >= st.knobs.crash_after:
            log.error("SGLANG_SIM_FAIL crash-after:%d reached: simulated crash (exit 1)", st.knobs.crash_after)
            logging.shutdown()
            os._exit(1)

    @staticmethod
    def gen_params(kind: str, req: dict):
        if kind == "generate":
            prompt = req.get("text")
            if prompt is None:
                prompt = req.get("input_ids")
            sp = req.get("sampling_params") or {}
            max_tokens = sp.get("max_new_tokens") if isinstance(sp, dict) else None
        elif kind == "completion":
            prompt = req.get("prompt")
            max_tokens = req.get("max_tokens")
        else:
            prompt = [
                {"role": m.get("role"), "content": m.get("content")}
                for m in (req.get("messages") or [])
                if isinstance(m, dict)
            ]
            max_tokens = req.get("max_completion_tokens")
            if max_tokens is None:
                max_tokens = req.get("max_tokens")
        return prompt, max_tokens, bool(req.get("stream"))

    def wait_for_kv(self, host, port, room: int) -> None:
        st = self.state
        timeout = st.knobs.handoff_timeout
        if not host:
            raise HandoffError(f"KVTransferError(bootstrap_room={room}): request {self._rid} has no bootstrap_host")
        port = port if port not in (None, "") else 8998  # a null bootstrap_port: SGLang's default
        netloc = f"[{host}]:{port}" if ":" in str(host) and not str(host).startswith("[") else f"{host}:{port}"
        deadline = time.monotonic() + timeout
        phase, why = "Bootstrapping", "no answer from the prefill bootstrap server"
        while True:
            wait = max(0.0, min(1.0, deadline - time.monotonic()))  # long-poll: answered as soon as KV lands
            url = f"http://{netloc}/sim/kv/{room}?wait={wait:.3f}"
            try:
                with DIRECT.open(url, timeout=wait + 2.0) as resp:
                    data = json.loads(resp.read() or b"{}")
                if data.get("state") == "transferred":
                    self.check_compat(data.get("handoff") or {}, room, netloc)
                    self._note = f"handoff={1000 * (time.monotonic() - deadline + timeout):.0f}ms"
                    return
                phase, why = "WaitingForInput", "prefill has the room but its KV transfer has not completed"
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    try:
                        self.check_compat((json.loads(exc.read() or b"{}")).get("handoff") or {}, room, netloc)
                    except ValueError:
                        pass
                    phase, why = "Bootstrapping", "prefill has not seen this bootstrap_room"
                else:
                    why = f"bootstrap server answered HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                phase, why = "Bootstrapping", f"cannot reach prefill bootstrap server: {exc}"
            if time.monotonic() >= deadline:
                raise HandoffError(
                    f"KVTransferError(bootstrap_room={room}): Request {self._rid} timed out after {timeout:.1f}s "
                    f"in KVPoll.{phase} (bootstrap server {netloc}: {why})"
                )
            if st.stop.is_set():
                raise HandoffError(f"KVTransferError(bootstrap_room={room}): server is shutting down")
            time.sleep(POLL_INTERVAL)

    def check_compat(self, prefill: dict, room: int, netloc: str) -> None:
        st = self.state
        ours = st.handoff_info()
        if prefill.get("disaggregation_mode") not in (None, "prefill"):
            raise HandoffError(
                f"KVTransferError(bootstrap_room={room}): {netloc} is a {prefill.get('disaggregation_mode')} "
                "worker, not a prefill bootstrap server"
            )
        for key in ("page_size", "kv_cache_dtype", "transfer_backend"):
            if key in prefill and prefill[key] != ours[key]:
                raise HandoffError(
                    f"KVTransferError(bootstrap_room={room}): {key} mismatch between prefill ({prefill[key]}) "
                    f"and decode ({ours[key]}); set the same value on both roles"
                )

    def respond(self, kind: str, req: dict, prompt, *, max_tokens: int, stream: bool, t0: float) -> None:
        st = self.state
        batch = (
            kind == "generate" and isinstance(prompt, list) and prompt and not all(isinstance(x, int) for x in prompt)
        )
        prompts = prompt if batch else [prompt]
        per_token = st.knobs.token_latency if st.role != "prefill" else 0.0
        outputs = []
        for p in prompts:
            toks = fake_tokens(prompt_key(p), max_tokens)
            outputs.append((p, toks, count_prompt_tokens(p)))
        with st.lock:
            st.counters["requests"] += len(outputs)
            st.counters["prompt_tokens"] += sum(o[2] for o in outputs)
            st.counters["generation_tokens"] += sum(len(o[1]) for o in outputs)
        prompt_tokens = outputs[0][2]
        toks = outputs[0][1]
        self._note = (self._note + f" prompt_tokens={prompt_tokens} completion_tokens={len(toks)}").strip()
        model = req.get("model") or st.model_name
        created = int(time.time())
        finish = "length"

        if not stream:
            if per_token:
                time.sleep(per_token * max_tokens)
            e2e = time.time() - t0
            with st.lock:
                st.latency_sum += e2e
            if kind == "generate":
                items = [self.generate_item(toks_, pt, e2e, done=True) for (_, toks_, pt) in outputs]
                self.send_json(200, items if batch else items[0])
            elif kind == "completion":
                text = "".join(p for _, p in toks)
                self.send_json(
                    200,
                    {
                        "id": self._rid,
                        "object": "text_completion",
                        "created": created,
                        "model": model,
                        "choices": [
                            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}
                        ],
                        "usage": self.usage(prompt_tokens, len(toks)),
                    },
                )
            else:
                text = "".join(p for _, p in toks)
                self.send_json(
                    200,
                    {
                        "id": self._rid,
                        "object": "chat.completion",
                        "created": created,
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": text,
                                    "reasoning_content": None,
                                    "tool_calls": None,
                                },
                                "logprobs": None,
                                "finish_reason": finish,
                                "matched_stop": None,
                            }
                        ],
                        "usage": self.usage(prompt_tokens, len(toks)),
                    },
                )
            return

        # streaming (SSE over chunked transfer encoding)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        include_usage = (
            bool((req.get("stream_options") or {}).get("include_usage"))
            if isinstance(req.get("stream_options"), dict)
            else False
        )
        if kind == "chat":
            self.sse(self.chat_chunk(model, created, {"role": "assistant", "content": ""}, None))
        for i in range(len(toks)):
            if per_token:
                time.sleep(per_token)
            last = i == len(toks) - 1
            if kind == "generate":
                self.sse(self.generate_item(toks[: i + 1], prompt_tokens, time.time() - t0, done=last))
            elif kind == "completion":
                self.sse(
                    {
                        "id": self._rid,
                        "object": "text_completion",
                        "created": created,
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "text": toks[i][1],
                                "logprobs": None,
                                "finish_reason": finish if last else None,
                                "matched_stop": None,
                            }
                        ],
                        "usage": None,
                    }
                )
            else:
                self.sse(self.chat_chunk(model, created, {"role": None, "content": toks[i][1]}, None))
        if kind == "generate" and not toks:
            self.sse(self.generate_item([], prompt_tokens, time.time() - t0, done=True))
        if kind == "chat":
            self.sse(self.chat_chunk(model, created, {"role": None, "content": None}, finish))
        if kind != "generate" and include_usage:
            obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
            self.sse(
                {
                    "id": self._rid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": self.usage(prompt_tokens, len(toks)),
                }
            )
        e2e = time.time() - t0
        with st.lock:
            st.latency_sum += e2e
        self.write_chunk(b"data: [DONE]\n\n")
        self.write_chunk(b"")

    def generate_item(self, toks, prompt_tokens: int, e2e: float, done: bool) -> dict:
        n = len(toks)
        return {
            "text": "".join(p for _, p in toks),
            "output_ids": [t for t, _ in toks],
            "meta_info": {
                "id": self._rid,
                "finish_reason": {"type": "length", "length": n} if done else None,
                "prompt_tokens": prompt_tokens,
                "weight_version": self.state.args.weight_version,
                "total_retractions": 0,
                "completion_tokens": n,
                "cached_tokens": 0,
                "e2e_latency": round(e2e, 6),
            },
        }

    def chat_chunk(self, model, created, delta, finish) -> dict:
        return {
            "id": self._rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {**delta, "reasoning_content": None, "tool_calls": None},
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": None,
                }
            ],
            "usage": None,
        }

    @staticmethod
    def usage(prompt_tokens: int, completion_tokens: int) -> dict:
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }

    def sse(self, obj) -> None:
        self.write_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError as exc:
            raise ClientGone() from exc


# --------------------------------------------------------------------------------------------------
# Process
# --------------------------------------------------------------------------------------------------


def _configure_logging(level_name: str) -> None:
    level = getattr(logging, str(level_name).upper(), logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _loader(state: SimState) -> None:
    delay = state.knobs.startup_delay
    if delay:
        log.info("Loading weights (simulated, %.1fs) ...", delay)
        if state.stop.wait(delay):
            return
    if state.knobs.startup_exit:
        log.error("SGLANG_SIM_FAIL startup:exit: simulated failure while loading weights (exit 1)")
        logging.shutdown()
        os._exit(1)
    state.ready.set()
    log.info("The server is fired up and ready to roll! (%.2fs after start)", time.time() - state.started)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    knobs = load_knobs()
    _configure_logging(args.log_level)
    state = SimState(args, knobs)
    for problem in knobs.problems:
        log.warning("%s", problem)
    log.info("sglang-pd-sim %s (stand-in for sglang %s), pid %d", __version__, SGLANG_VERSION, os.getpid())
    log.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in sorted(vars(args).items())))
    log.info("sim_knobs=%s", json.dumps(knobs.as_dict(), sort_keys=True))

    servers: list[SimHTTPServer] = []
    try:
        servers.append(SimHTTPServer((args.host, args.port), WorkerHandler, state, "http"))
        if state.role == "prefill":
            servers.append(
                SimHTTPServer((args.host, args.disaggregation_bootstrap_port), BootstrapHandler, state, "bootstrap")
            )
    except OSError as exc:
        log.error("cannot bind: %s", exc)
        for srv in servers:
            srv.server_close()
        return 1

    def on_signal(signum, _frame):
        log.info("Received %s, shutting down", signal.Signals(signum).name)
        state.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    for srv in servers:
        threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.2}, name=srv.listener, daemon=True
        ).start()
    log.info(
        "role=%s listening on http://%s:%d%s",
        state.role,
        args.host,
        args.port,
        f", bootstrap server on {args.host}:{args.disaggregation_bootstrap_port}" if state.role == "prefill" else "",
    )
    threading.Thread(target=_loader, args=(state,), name="loader", daemon=True).start()

    while not state.stop.wait(0.5):
        pass
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    log.info("Shutdown complete")
    logging.shutdown()
    return 0
