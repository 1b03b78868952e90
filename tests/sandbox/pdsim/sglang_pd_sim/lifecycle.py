"""What sglang 0.5.23's TokenizerManager knows about its own life: the server status (Starting, Up, UnHealthy),
when the scheduler last answered (the health check's only evidence), a stalled scheduler (knobs), and, for
tests, each generation request's start/end and what was in flight at SIGTERM (GET /sim/lifecycle, and one
`sim_lifecycle={...}` JSON line on stderr at exit, so a test reads a stopped worker's record from its journal).
"""

from __future__ import annotations

import collections
import enum
import json
import logging
import os
import threading
import time

log = logging.getLogger("sglang_pd_sim")

GENERATION_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")
MAX_REQUESTS = 20000
EXIT_LINE_REQUESTS = 200  # the exit line stays below journald's LineMax (48K)


class ServerStatus(enum.Enum):
    """sglang/srt/managers/tokenizer_manager.py ServerStatus."""

    Up = "Up"
    Starting = "Starting"
    UnHealthy = "UnHealthy"


class Lifecycle:
    def __init__(self, knobs):
        self.knobs = knobs
        self.lock = threading.Lock()
        # tokenizer_manager.py TokenizerManager.__init__: server_status = Starting, last_receive_tstamp = now
        self.status = ServerStatus.Starting
        self.last_receive = time.time()
        self.is_pause = False  # sglang's /pause_generation is not simulated: never paused
        self.started = time.time()
        self.listening_at: float | None = None  # the HTTP port listens (weights loaded)
        self.up_at: float | None = None  # first ServerStatus.Up (warm-up done): the stall clock starts here
        self.sigterm: dict | None = None
        self.shutdown: dict | None = None  # after the drain: ShutdownReq and the wait for the scheduler (app.py)
        self.exit: dict | None = None
        self.requests: collections.deque = collections.deque(maxlen=MAX_REQUESTS)
        self._health_pending = False
        self.runtime_stall: tuple[float, float] | None = None  # POST /sim/stall (stall_now)
        self._seq = 0
        self._at_sigterm: list[dict] = []  # the entries in flight at SIGTERM (their rid is known once parsed)

    # --- server status -------------------------------------------------------------------------------------
    def set_status(self, status: ServerStatus) -> None:
        with self.lock:
            if status != self.status:
                log.info("server_status %s -> %s", self.status.value, status.value)
            self.status = status
            if status is ServerStatus.Up and self.up_at is None:
                self.up_at = time.time()

    # --- the scheduler: stall window (SGLANG_SIM_STALL_AFTER / SGLANG_SIM_STALL_FOR) ---------------------------
    def stall_now(self, seconds: float | None) -> tuple[float, float]:
        """Fault injection for tests (POST /sim/stall, no sglang counterpart): the scheduler stalls from now for
        SECONDS (None: for good), as SGLANG_SIM_STALL_AFTER does at start-up."""
        with self.lock:
            now = time.time()
            self.runtime_stall = (now, now + seconds if seconds is not None else float("inf"))
            how_long = "good" if seconds is None else f"{seconds:g} s"
            log.warning("sim: scheduler stalled by POST /sim/stall for %s", how_long)
            return self.runtime_stall

    def stall_window(self) -> tuple[float, float] | None:
        if self.runtime_stall is not None and time.time() < self.runtime_stall[1]:
            return self.runtime_stall
        after = self.knobs.stall_after
        if after is None or self.up_at is None:
            return None
        start = self.up_at + after
        return start, (start + self.knobs.stall_for) if self.knobs.stall_for is not None else float("inf")

    def stalled(self, now: float | None = None) -> bool:
        window = self.stall_window()
        now = time.time() if now is None else now
        return window is not None and window[0] <= now < window[1]

    def wait_scheduler(self, stop: threading.Event) -> None:
        """Block while the simulated scheduler is stalled (a hung forward: nothing progresses, nothing answers),
        through the process's exit too (a stalled request is cut, never answered)."""
        while True:
            window = self.stall_window()
            now = time.time()
            if window is None or not window[0] <= now < window[1]:
                return
            if stop.is_set():
                time.sleep(min(window[1] - now, 0.25))
            else:
                stop.wait(min(window[1] - now, 0.25))

    def scheduler_output(self) -> None:
        """tokenizer_manager.py handle_loop: any output from the detokenizer sets last_receive_tstamp."""
        with self.lock:
            self.last_receive = time.time()

    # --- http_server.py health_generate ------------------------------------------------------------------
    def health_generate(self, state) -> bool:
        """sglang/srt/entrypoints/http_server.py health_generate, past its 503-at-once checks: submit a 1-token
        request to the scheduler, then sleep(1) and check whether the scheduler answered (anything) since tic,
        up to SGLANG_HEALTH_CHECK_TIMEOUT seconds; Up on success, UnHealthy on timeout."""
        tic = time.time()
        self._submit_health_request(state)
        timeout = self.knobs.health_check_timeout
        while time.time() < tic + timeout:
            if state.stop.wait(1):  # await asyncio.sleep(1)
                return False
            if self.last_receive > tic:
                self.set_status(ServerStatus.Up)
                return True
        log.error(
            "Health check failed. Server couldn't get a response from detokenizer for last %d seconds. "
            "tic start time: %s. last_heartbeat time: %s",
            timeout,
            time.strftime("%H:%M:%S", time.localtime(tic)),
            time.strftime("%H:%M:%S", time.localtime(self.last_receive)),
        )
        self.set_status(ServerStatus.UnHealthy)
        return False

    def _submit_health_request(self, state) -> None:
        """The health request (input_ids=[0], max_new_tokens=1, log_metrics=False) through the simulated
        scheduler: it waits out a stall and its turn in the prefill queue, then the scheduler answers.
        One at a time: a request still pending answers for every check that started before it does."""
        with self.lock:
            if self._health_pending:
                return
            self._health_pending = True
        threading.Thread(target=self._health_request, args=(state,), name="health", daemon=True).start()

    def _health_request(self, state) -> None:
        try:
            self.wait_scheduler(state.stop)
            if state.stop.is_set():
                return
            with state.engine.prefill(1, state.stop):
                pass
            state.engine.release(1)
            self.wait_scheduler(state.stop)
            self.scheduler_output()
        finally:
            with self.lock:
                self._health_pending = False

    # --- request records (tests: "N in flight at SIGTERM, and they completed") ---------------------------
    def begin(self, rid: str | None, path: str) -> dict:
        with self.lock:
            self._seq += 1
            entry = {"seq": self._seq, "rid": rid, "path": path, "start": time.time(), "end": None,
                     "completed": None, "status": None}  # fmt: skip
            self.requests.append(entry)
        return entry

    def end(self, entry: dict, *, rid: str | None, status: int | None, completed: bool) -> None:
        with self.lock:
            entry.update(rid=rid or entry["rid"], end=time.time(), status=status, completed=completed)

    def in_flight(self) -> list[dict]:
        with self.lock:
            return [dict(e) for e in self.requests if e["end"] is None]

    def on_sigterm(self) -> None:
        with self.lock:
            if self.sigterm is None:
                self._at_sigterm = [e for e in self.requests if e["end"] is None]
                self.sigterm = {
                    "time": time.time(),
                    "in_flight": len(self._at_sigterm),
                    "seqs": [e["seq"] for e in self._at_sigterm],
                    "server_status": self.status.value,
                }

    def snapshot(self, state, limit: int | None = None) -> dict:
        with self.lock:
            requests = [dict(e) for e in self.requests]
            body = {
                "pid": os.getpid(),
                "role": state.role,
                "started": self.started,
                "listening_at": self.listening_at,
                "up_at": self.up_at,
                "server_status": self.status.value,
                "gracefully_exit": state.draining.is_set(),
                "stalled": self.stalled(),
                "stall_window": self.stall_window(),
                "last_receive": self.last_receive,
                "sigterm": dict(self.sigterm, rids=[e["rid"] for e in self._at_sigterm]) if self.sigterm else None,
                "shutdown": dict(self.shutdown) if self.shutdown else None,
                "exit": dict(self.exit) if self.exit else None,
            }
        body["requests_total"] = len(requests)
        body["requests_completed"] = sum(1 for e in requests if e["completed"])
        body["requests_open"] = sum(1 for e in requests if e["end"] is None)
        if limit is not None and len(requests) > limit:
            body["requests_left_out"] = len(requests) - limit
            requests = requests[-limit:]
        body["requests"] = requests
        if body["stall_window"] and body["stall_window"][1] == float("inf"):
            body["stall_window"] = [body["stall_window"][0], None]
        return body

    def log_exit(self, state, reason: str) -> None:
        """One JSON line on stderr (the journal) as the process ends: its record outlives the process."""
        with self.lock:
            if self.exit is None:
                self.exit = {"time": time.time(), "reason": reason}
        log.info("sim_lifecycle=%s", json.dumps(self.snapshot(state, EXIT_LINE_REQUESTS), sort_keys=True))
