"""State shared by both listeners of one simulated worker: requests seen, the prefill's KV rooms, counters."""

from __future__ import annotations

import collections
import json
import threading
import time

from sglang_pd_sim import SGLANG_VERSION, __version__
from sglang_pd_sim.cli import Knobs
from sglang_pd_sim.collector import SimMetrics
from sglang_pd_sim.engine import Engine
from sglang_pd_sim.heartbeat import PrefillHeartbeat
from sglang_pd_sim.lifecycle import Lifecycle, ServerStatus

MAX_RECORDS = 20000
MAX_ROOMS = 100000


class SimState:
    def __init__(self, args, knobs: Knobs):
        self.args = args
        self.knobs = knobs
        self.role = args.disaggregation_mode if args.disaggregation_mode in ("prefill", "decode") else "null"
        self.started = time.time()
        self.ready = threading.Event()  # weights loaded: the HTTP port listens (warm-up may still run)
        self.stop = threading.Event()
        self.draining = threading.Event()  # SIGTERM: tokenizer_manager.gracefully_exit
        self.lock = threading.Lock()
        self.kv_changed = threading.Condition(self.lock)
        self.records: collections.deque = collections.deque(maxlen=MAX_RECORDS)
        self.kv: collections.OrderedDict = collections.OrderedDict()  # prefill: room -> handoff record
        self.dp_ranks: dict = {}
        self.nixl_rooms: collections.deque = collections.deque(maxlen=1000)  # decode: rooms whose KV came over NIXL
        self.inflight = 0
        self.generations = 0
        arch = knobs.architecture
        self.is_dsv4 = "DeepseekV4" in arch
        # The few resolution hooks that matter to a PD pair (DeepSeek-V4 forces page 256, fp8_e4m3 KV, dsv4).
        self.page_size = args.page_size or (256 if self.is_dsv4 else 1)
        kv = args.kv_cache_dtype
        self.kv_cache_dtype = "fp8_e4m3" if (self.is_dsv4 and kv == "auto") else kv
        self.attention_backend = args.attention_backend or ("dsv4" if self.is_dsv4 else None)
        self.model_name = args.served_model_name or args.model_path
        self.tokenizer_path = args.tokenizer_path or args.model_path
        # the scheduler's report periods, from sglang's own flags (--decode-log-interval 40,
        # --load-snapshot-publish-interval 15): engine.py publishes the gauges and the load snapshot at those
        self.engine = Engine(knobs, args.decode_log_interval, args.load_snapshot_publish_interval,
                             getattr(args, "chunked_prefill_size", None))  # fmt: skip
        self.metrics = SimMetrics(model_name=self.model_name, role=self.role, dp_size=args.dp_size or 1)
        self.life = Lifecycle(knobs)
        self.engine.stalled = self.life.stalled  # a hung scheduler publishes nothing
        # decode: sglang's heartbeat to the prefills it takes KV from (heartbeat.py); its thread starts with the first
        self.heartbeat = PrefillHeartbeat(self.stop)

    def is_ready(self) -> bool:
        """sglang/srt/managers/tokenizer_manager.py is_ready / is_healthy: not paused, not gracefully exiting,
        server status Up."""
        return not self.life.is_pause and not self.draining.is_set() and self.life.status is ServerStatus.Up

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

    def max_running_requests(self) -> int:
        """The scheduler's running window (what /server_info and /v1/loads report): --max-running-requests, or
        the simulator's stand-in for the size sglang derives from the KV pool when it is unset."""
        return args_or(self.args.max_running_requests, 256)

    def server_info(self) -> dict:
        info = dict(vars(self.args))
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
                    "effective_max_running_requests_per_dp": self.max_running_requests(),
                }
            ],
            simulator={"name": "sglang-pd-sim", "version": __version__, "knobs": self.knobs.as_dict()},
        )
        return info


def args_or(value, default):
    return default if value is None else value


def as_room(value):
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        return None


def loads(raw: bytes):
    if not raw:
        return None
    return json.loads(raw)
