"""A decode's heartbeat to the prefills it takes KV from, as sglang 0.5.23's CommonKVManager does it
(sglang/srt/disaggregation/common/conn.py `_start_heartbeat_checker_thread`, `_handle_node_failure`).

One thread per decode: every SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL seconds (5, at least 2) it sends
GET /health to each prefill bootstrap server it knows (requests timeout (2, 3)); an answer other than 200, or none,
is a miss, a 200 resets the count. After SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE misses in a row (2, at least 1)
the prefill is dropped and every room tied to it that has not succeeded fails ("Lost connection with prefill
instance"). So a decode whose prefill died fails its handoff in about two periods (10 s), not after the waiting
timeout; a prefill that a later request reaches again is watched anew with no misses. A frozen prefill (SIGSTOP)
still takes connections, so each miss waits out the probe's 3 s read timeout: 11-16 s after the freeze.

A room is tied to its prefill when the decode takes the request in (CommonKVReceiver.__init__ adds it to
addr_to_rooms_tracker), not when the prefill first answers for it: a request that reaches a decode after its prefill
froze or died fails with the rooms that were there before. A prefill the decode does not know (never reached, or
dropped) is looked up first (decode.py DecodePreallocQueue._ensure_prefill_info: GET /route, timeout 5 s, at most
one attempt a second per prefill); after 15 failed attempts every request waiting on it is aborted ("Could not fetch
prefill parallel info"). Not mirrored: sglang makes that lookup on its scheduler thread, so a frozen prefill's
lookups stall the whole decode 5 s at a time.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.request

log = logging.getLogger("sglang_pd_sim")
HEALTH_TIMEOUT = 3.0  # requests' timeout=(2, 3): connect, then read
# decode.py DecodePreallocQueue: _max_ensure_retries 15, _ensure_retry_interval 1.0 s; common/conn.py
# try_ensure_parallel_info: requests.get(.../route, timeout=5)
ENSURE_RETRIES = 15
ENSURE_INTERVAL = 1.0
ROUTE_TIMEOUT = 5.0
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
        self.ensure_count: dict[str, int] = {}  # unknown address -> failed lookups in this cycle (_ensure_retry_count)
        self.ensure_last: dict[str, float] = {}  # unknown address -> when the last lookup was counted
        self.ensure_aborts: dict[str, int] = {}  # unknown address -> cycles that ended in an abort
        self.thread: threading.Thread | None = None

    def known_now(self, addr: str) -> bool:
        """Is ADDR in the decode's prefill_info_table (reached before and not dropped since)?"""
        with self.lock:
            return addr in self.known

    def track(self, addr: str) -> int:
        """A room tied to the prefill at ADDR, which is in prefill_info_table from now on (a lookup that succeeded
        ends its retry cycle). Returns the token that failed() compares: the rooms tied to an address fail when it
        is dropped after they began."""
        with self.lock:
            self.known.setdefault(addr, 0)
            self.ensure_count.pop(addr, None)
            self.ensure_last.pop(addr, None)
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

    def ensure_cycle(self, addr: str) -> int:
        """The lookup cycle of an unknown ADDR a waiting room joins: ensure_aborted() compares it."""
        with self.lock:
            return self.ensure_aborts.get(addr, 0)

    def ensure_missed(self, addr: str, now: float) -> None:
        """A lookup of the unknown ADDR failed at NOW (monotonic): counted at most once per ENSURE_INTERVAL, as the
        scheduler tries an address at most once a second; the ENSURE_RETRIES-th ends the cycle in an abort."""
        with self.lock:
            last = self.ensure_last.get(addr)
            if last is not None and now - last < ENSURE_INTERVAL:
                return
            self.ensure_last[addr] = now
            count = self.ensure_count.get(addr, 0) + 1
            if count < ENSURE_RETRIES:
                self.ensure_count[addr] = count
                return
            self.ensure_count.pop(addr, None)
            self.ensure_last.pop(addr, None)
            self.ensure_aborts[addr] = self.ensure_aborts.get(addr, 0) + 1
        log.error("Could not fetch prefill parallel info from %s after %d attempts", addr, count)

    def ensure_aborted(self, addr: str, cycle: int) -> bool:
        with self.lock:
            return self.ensure_aborts.get(addr, 0) != cycle

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
