"""The simulated engine: a prefill queue, a decode batch, the KV pool, and the latency model (all knobs).

Latency model (every term is a knob; all default to 0 but the KV transfer, so a default worker is instant):
- prefill of one request: SGLANG_SIM_PREFILL_LATENCY + SGLANG_SIM_PREFILL_TOKEN_LATENCY * input tokens.
  Prefills run SGLANG_SIM_PREFILL_SLOTS at a time (default 1: one forward at a time, as SGLang's scheduler
  runs one prefill batch per step), first come first served, so time to first token grows with the input
  length and with the prefill queue in front of the request (sglang:num_queue_reqs).
- time per output token: SGLANG_SIM_TOKEN_LATENCY * (1 + SGLANG_SIM_DECODE_BATCH_FACTOR * (batch - 1)),
  batch = requests decoding at that step, so it grows with the decode batch as a memory-bound decode does.
- KV handoff (prefill role): input tokens * SGLANG_SIM_KV_BYTES_PER_TOKEN bytes moved at
  SGLANG_SIM_KV_TRANSFER_GBPS GB/s (0: instant). Simulated numbers, reported as sglang reports a real
  transfer (sglang:kv_transfer_latency_ms, sglang:kv_transfer_speed_gb_s, sglang:kv_transfer_total_mb).
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time

GEN_WINDOW_S = 10.0


def prefill_seconds(knobs, input_tokens: int) -> float:
    return knobs.prefill_latency + knobs.prefill_token_latency * max(0, input_tokens)


def token_seconds(knobs, batch: int) -> float:
    return knobs.token_latency * (1.0 + knobs.decode_batch_factor * max(0, batch - 1))


def kv_transfer(knobs, input_tokens: int) -> tuple[int, float]:
    """(bytes, seconds) of moving one request's KV from prefill to decode."""
    nbytes = max(0, input_tokens) * knobs.kv_bytes_per_token
    seconds = nbytes / (knobs.kv_transfer_gbps * 1e9) if knobs.kv_transfer_gbps > 0 else 0.0
    return nbytes, seconds


class Engine:
    """Counts what SGLang's scheduler reports (queue, running, KV use) and makes requests wait their turn."""

    def __init__(self, knobs):
        self.knobs = knobs
        self.cond = threading.Condition()
        self.queue: collections.deque = collections.deque()  # tickets waiting for a prefill slot
        self.next_ticket = 0
        self.prefilling = 0
        self.bootstrapping = 0  # prefill: requests waiting for their decode to connect (the bootstrap queue)
        self.transferring = 0  # prefill: KV transfers in flight (the prefill inflight queue)
        self.awaiting_kv = 0  # decode: requests waiting for their KV (the decode transfer queue)
        self.decoding = 0  # decode batch size
        self.kv_used = 0  # tokens held in the KV pool
        self.generated: collections.deque = collections.deque()  # (monotonic time, tokens) for gen_throughput

    # --- prefill -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def prefill(self, input_tokens: int, stop: threading.Event | None = None, check=None):
        """Wait in the prefill queue, then hold a slot for the prefill's duration. Yields the seconds queued.
        CHECK, called while the request waits in the queue, may raise to take it out (an abort)."""
        slots = self.knobs.prefill_slots
        t0 = time.monotonic()
        with self.cond:
            ticket = self.next_ticket
            self.next_ticket += 1
            self.queue.append(ticket)
            try:
                while self.queue[0] != ticket or (slots > 0 and self.prefilling >= slots):
                    if check is not None:
                        check()
                    self.cond.wait(0.5)
            except BaseException:
                self.queue.remove(ticket)
                self.cond.notify_all()
                raise
            self.queue.popleft()
            self.prefilling += 1
            self.kv_used += input_tokens
            self.cond.notify_all()
        queued = time.monotonic() - t0
        try:
            seconds = prefill_seconds(self.knobs, input_tokens)
            if seconds > 0:
                if stop is not None:
                    stop.wait(seconds)
                else:
                    time.sleep(seconds)
            yield queued
        finally:
            with self.cond:
                self.prefilling -= 1
                self.cond.notify_all()

    def release(self, tokens: int) -> None:
        with self.cond:
            self.kv_used = max(0, self.kv_used - tokens)

    @contextlib.contextmanager
    def _counted(self, counter: str):
        """One more in the count COUNTER (an attribute) while the block runs."""
        with self.cond:
            setattr(self, counter, getattr(self, counter) + 1)
        try:
            yield
        finally:
            with self.cond:
                setattr(self, counter, getattr(self, counter) - 1)

    def bootstrap(self):
        """Prefill: one request waiting for its decode to connect while the block runs."""
        return self._counted("bootstrapping")

    def transfer(self):
        """Prefill: one KV transfer in flight while the block runs."""
        return self._counted("transferring")

    def awaiting(self):
        """Decode: one request waiting for its KV while the block runs."""
        return self._counted("awaiting_kv")

    # --- decode --------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def decode(self, held_tokens: int, new_tokens: int):
        """Join the decode batch. held_tokens: KV already counted (null mode's prefill), new_tokens: KV that
        arrives now (a decode's handoff). Every token generated adds one more; all is released at the end."""
        held = {"tokens": held_tokens + new_tokens}
        with self.cond:
            self.decoding += 1
            self.kv_used += new_tokens
        try:
            yield held
        finally:
            with self.cond:
                self.decoding -= 1
                self.kv_used = max(0, self.kv_used - held["tokens"])

    def step(self, held: dict, count: int = 1) -> None:
        """One decode step: sleep the batch's time per output token, then count `count` new tokens."""
        with self.cond:
            batch = self.decoding
        seconds = token_seconds(self.knobs, batch)
        if seconds > 0:
            time.sleep(seconds)
        now = time.monotonic()
        with self.cond:
            held["tokens"] += count
            self.kv_used += count
            self.generated.append((now, count))
            while self.generated and self.generated[0][0] < now - GEN_WINDOW_S:
                self.generated.popleft()

    # --- what the scheduler reports ------------------------------------------------------------------------
    def snapshot(self) -> dict:
        now = time.monotonic()
        with self.cond:
            while self.generated and self.generated[0][0] < now - GEN_WINDOW_S:
                self.generated.popleft()
            recent = sum(n for _when, n in self.generated)
            return {
                "num_queue_reqs": len(self.queue),
                "num_running_reqs": self.prefilling + self.decoding,
                "prefilling": self.prefilling,
                "decoding": self.decoding,
                "bootstrapping": self.bootstrapping,
                "transferring": self.transferring,
                "awaiting_kv": self.awaiting_kv,
                "kv_used_tokens": min(self.kv_used, self.knobs.kv_capacity_tokens),
                "gen_throughput": recent / GEN_WINDOW_S,
            }
