"""A decode's heartbeat to the prefills it takes KV from, as sglang 0.5.23's CommonKVManager does it
(sglang/srt/disaggregation/common/conn.py `_start_heartbeat_checker_thread`, `_handle_node_failure`).

One thread per decode: every SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL seconds (5, at least 2) it sends
GET /health to each prefill bootstrap server it knows (requests timeout (2, 3)); an answer other than 200, or none,
is a miss, a 200 resets the count. After SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE misses in a row (2, at least 1)
the prefill is dropped and every room tied to it that has not succeeded fails ("Lost connection with prefill
instance"). So a decode whose prefill died fails its handoff in about two periods (10 s), not after the waiting
timeout; a prefill that a later request reaches again is watched anew with no misses.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.request

log = logging.getLogger("sglang_pd_sim")
HEALTH_TIMEOUT = 3.0  # requests' timeout=(2, 3): connect, then read
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy from the environment


def heartbeat_settings(env=None) -> tuple[float, int]:
    """(interval, max_failures) from sglang's own variables (sglang/srt/environ.py: EnvFloat(5.0), EnvInt(2)),
    floored as CommonKVManager.__init__ floors them (2 s, 1 miss)."""
    env = os.environ if env is None else env
    try:
        interval = float(env.get("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL") or 5.0)
    except ValueError:
        interval = 5.0
    try:
        failures = int(env.get("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE") or 2)
    except ValueError:
        failures = 2
    return max(interval, 2.0), max(failures, 1)


class PrefillHeartbeat:
    def __init__(self, stop: threading.Event, opener: urllib.request.OpenerDirector = DIRECT):
        self.stop = stop
        self.opener = opener
        self.interval, self.max_failures = heartbeat_settings()
        self.lock = threading.Lock()
        self.known: dict[str, int] = {}  # bootstrap address -> misses in a row (prefill_info_table, heartbeat_failures)
        self.generation: dict[str, int] = {}  # bootstrap address -> times it was dropped
        self.rooms: dict[str, int] = {}  # bootstrap address -> rooms waiting on it now (for the log line)
        self.thread: threading.Thread | None = None

    def track(self, addr: str) -> int:
        """A room's receiver reached the prefill at ADDR (it is in prefill_info_table from now on). Returns the token
        that failed() compares: the rooms tied to an address fail when it is dropped after they began."""
        with self.lock:
            self.known.setdefault(addr, 0)
            self.rooms[addr] = self.rooms.get(addr, 0) + 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="HeartbeatChecker", daemon=True)
                self.thread.start()
            return self.generation.get(addr, 0)

    def untrack(self, addr: str) -> None:
        with self.lock:
            self.rooms[addr] = max(0, self.rooms.get(addr, 0) - 1)

    def failed(self, addr: str, token: int) -> bool:
        with self.lock:
            return self.generation.get(addr, 0) != token

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                addresses = list(self.known)
            for addr in addresses:
                ok = self._probe(addr)
                with self.lock:
                    if ok:
                        self.known[addr] = 0
                        continue
                    log.info("Attempting to reconnect to %s...", addr)
                    self.known[addr] = self.known.get(addr, 0) + 1
                    if self.known[addr] < self.max_failures:
                        continue
                    # _handle_node_failure: out of prefill_info_table, its miss count forgotten, its rooms failed
                    del self.known[addr]
                    self.generation[addr] = self.generation.get(addr, 0) + 1
                    affected = self.rooms.get(addr, 0)
                log.error("Lost connection with prefill instance (bootstrap_addr: %s), %d requests affected", addr,
                          affected)  # fmt: skip

    def _probe(self, addr: str) -> bool:
        try:
            with self.opener.open(f"http://{addr}/health", timeout=HEALTH_TIMEOUT) as resp:
                return resp.status == 200
        except (OSError, ValueError):
            return False
