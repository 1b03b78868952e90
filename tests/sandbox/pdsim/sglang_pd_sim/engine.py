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
import math
import threading
import time

GEN_WINDOW_S = 10.0
# sglang/srt/managers/scheduler_components/metrics_reporter.py `_maybe_log_idle_metrics`: an idle scheduler rewrites
# its gauges when the running gauge is stale, else at most every 30 s
IDLE_METRICS_S = 30.0
# sglang/srt/managers/scheduler.py LOAD_STALL_REFRESH_S: a scheduler with queued work but no batch to run publishes
# its load snapshot this often (on_idle); the simulator's scheduler loop looks that often
LOAD_STALL_REFRESH_S = 0.05
DEFAULT_CHUNKED_PREFILL = 8192
# The longest one wait of a request's thread covers (Engine.step): a non-streamed request's thread sleeps
# through up to this much of its decode steps at once, as sglang's tokenizer hears of them (generation.py
# token_steps), never longer, so a stall or the load snapshot is late by at most this.
MAX_WAIT_S = 0.25


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

    def __init__(self, knobs, decode_log_interval: int = 40, load_publish_interval: int = 15,
                 chunked_prefill_size: int | None = None):  # fmt: skip
        self.knobs = knobs
        # --chunked-prefill-size: a prompt is prefilled in extend batches of at most this many tokens, and the
        # scheduler publishes its load snapshot after each (scheduler.py process_batch_result, forced for an extend
        # batch). Unset, sglang sizes it by GPU memory (sglang/srt/arg_groups/memory_hook.py
        # _handle_gpu_memory_settings: 2048 to 16384); the double takes 8192, an 80 GB GPU's. -1 (or 0): one batch.
        size = DEFAULT_CHUNKED_PREFILL if chunked_prefill_size is None else int(chunked_prefill_size)
        self.chunk_tokens = size if size > 0 else None
        self.cond = threading.Condition()
        # What the scheduler publishes, as sglang 0.5.23 publishes it (not live counts): `gauges` feeds /metrics
        # (metrics_reporter.py -> metrics_collector.log_stats), `loads` feeds /v1/loads (scheduler.py
        # publish_load_snapshot -> load_snapshot.py shared memory). See publish_* and idle_tick.
        self.decode_log_interval = max(1, int(decode_log_interval or 40))  # --decode-log-interval
        self.load_publish_interval = max(1, int(load_publish_interval or 15))  # --load-snapshot-publish-interval
        self.forward_ct_decode = 0.0  # decode forward passes: one step of the whole batch is one
        self.stalled = lambda: False  # lifecycle.py: a hung scheduler publishes nothing
        self.gauges: dict = {}
        self.gauges_at = 0.0
        self.loads: dict = {}
        self.loads_at = 0.0
        self.queue: collections.deque = collections.deque()  # tickets waiting for a prefill slot
        self.next_ticket = 0
        self.prefilling = 0
        self.bootstrapping = 0  # prefill: requests waiting for their decode to connect (the bootstrap queue)
        self.transferring = 0  # prefill: KV transfers in flight (the prefill inflight queue)
        self.awaiting_kv = 0  # decode: requests waiting for their KV (the decode transfer queue)
        self.decoding = 0  # decode batch size
        self.kv_used = 0  # tokens held in the KV pool
        self.generated: collections.deque = collections.deque()  # (monotonic time, tokens) for gen_throughput
        self.publish_gauges()
        self.publish_loads()

    # --- prefill -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def prefill(self, input_tokens: int, stop: threading.Event | None = None, check=None, pd_prefill: bool = False):
        """Wait in the prefill queue, then hold a slot for the prefill's duration. Yields the seconds queued.
        CHECK, called while the request waits in the queue, may raise to take it out (an abort)."""
        slots = self.knobs.prefill_slots
        t0 = time.monotonic()
        with self.cond:
            ticket = self.next_ticket
            self.next_ticket += 1
            self.queue.append(ticket)
            self.ingested()
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
            chunks = max(1, math.ceil(input_tokens / self.chunk_tokens)) if self.chunk_tokens else 1
            for _chunk in range(chunks):
                if seconds > 0:
                    if stop is not None:
                        stop.wait(seconds / chunks)
                    else:
                        time.sleep(seconds / chunks)
                while self.stalled() and not (stop is not None and stop.is_set()):
                    time.sleep(0.1)  # a scheduler that stalls mid-prompt runs no further batch and publishes nothing
                # scheduler.py process_batch_result: the load snapshot is published as each extend batch's result is
                # processed (forced), so after every chunk of a long prompt, and before a PD prefill's requests join
                # the in-flight queue
                self.publish_loads()
            if not pd_prefill:
                # batch_result_processor.py: report_prefill_stats after the batch (a PD prefill reports once its
                # requests are in the in-flight queue: report_prefill below, from generation.py)
                self.publish_gauges()
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
        self.ingested()
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

    def step(self, held: dict, count: int = 1, wanted: int = 1) -> int:
        """Up to WANTED decode steps of one request in one wait: all of them when a step takes no time, else as many
        as fit in MAX_WAIT_S (at least one), so the scheduler's side (the load snapshot, the gauges, a stall) still
        moves at least that often. Sleeps the batch's time per output token for each, counts `count` new tokens per
        step; returns how many steps it took."""
        with self.cond:
            batch = self.decoding
        per_step = token_seconds(self.knobs, batch)
        steps = max(1, wanted if per_step <= 0 else min(wanted, int(MAX_WAIT_S / per_step)))
        if per_step > 0:
            time.sleep(per_step * steps)
        now = time.monotonic()
        with self.cond:
            held["tokens"] += count * steps
            self.kv_used += count * steps
            self.generated.append((now, count * steps))
            while self.generated and self.generated[0][0] < now - GEN_WINDOW_S:
                self.generated.popleft()
            # one request's step is 1/batch of the batch's forward pass
            before = self.forward_ct_decode
            self.forward_ct_decode = after = before + steps / max(1, batch)
        passes = range(math.floor(before) + 1, math.floor(after) + 1)
        # batch_result_processor.py: forward_ct_decode += 1, then report_decode_stats, whose metrics (the gauges)
        # are written only when forward_ct_decode % decode_log_interval == 0 (40); scheduler.py process_batch_result
        # publishes the load snapshot every --load-snapshot-publish-interval (15) decode passes
        if any(n % self.decode_log_interval == 0 for n in passes):
            self.publish_gauges()
        if any(n % self.load_publish_interval == 0 for n in passes):
            self.publish_loads()
        return steps

    # --- what the scheduler publishes ----------------------------------------------------------------------
    def publish_gauges(self, **override) -> None:
        """metrics_reporter.py: the scheduler's stats written to its gauges (metrics_collector.log_stats) from the
        live state, OVERRIDE replacing some (a PD prefill's report counts the batch it just ran as running)."""
        snap = self.snapshot()
        snap.update(override)
        with self.cond:
            self.gauges, self.gauges_at = snap, time.monotonic()

    def publish_loads(self) -> None:
        """scheduler.py publish_load_snapshot: load_inquirer.py get_loads written for /v1/loads."""
        snap = self.snapshot()
        with self.cond:
            self.loads, self.loads_at = snap, time.monotonic()

    def report_prefill(self, batch: int) -> None:
        """A PD prefill's report_prefill_stats (metrics_reporter.py) after its batch: the batch's requests count as
        running ("running_batch is never populated in PD prefill, so count the current forward batch") and are in
        the in-flight queue already (prefill.py process_batch_result_disagg_prefill appends them before the
        report). The gauges then hold these values until the next prefill batch or a fully idle scheduler."""
        snap = self.snapshot()
        self.publish_gauges(num_running_reqs=batch, transferring=snap["transferring"] + batch)

    def ingested(self) -> None:
        """A request reached the scheduler (its waiting, bootstrap or transfer queue): scheduler.py's event loop
        takes it in (`ingest_requests`) and, with no batch to run, goes to on_idle at once, whose first look
        publishes the load snapshot (its 50 ms throttle counts from the last such look, long ago after an idle
        spell). With a batch running nothing is published until that batch's next report."""
        if not self.stalled() and not self.busy()[0]:
            self.publish_loads()

    def busy(self) -> tuple[bool, bool]:
        """(a batch runs, fully idle): scheduler.py's event loop runs a batch, or calls on_idle; is_fully_idle counts
        the waiting queue and the PD queues (bootstrap, in-flight, prealloc, transfer) too."""
        with self.cond:
            batch = self.prefilling > 0 or self.decoding > 0
            idle = not (batch or self.queue or self.bootstrapping or self.transferring or self.awaiting_kv)
        return batch, idle

    def idle_tick(self) -> None:
        """scheduler.py on_idle, reached when no batch runs: with work still queued (a bootstrap, a transfer, KV
        on its way) it publishes the load snapshot (every LOAD_STALL_REFRESH_S) but not the gauges; fully idle it
        publishes the load snapshot and, through metrics_reporter.py `_maybe_log_idle_metrics`, the gauges when the
        running gauge disagrees with the running batch or every IDLE_METRICS_S. A stalled scheduler does neither."""
        if self.stalled():
            return
        batch, idle = self.busy()
        if batch:
            return
        self.publish_loads()
        if idle:
            with self.cond:
                stale = self.gauges.get("num_running_reqs", 0) != 0
                due = time.monotonic() - self.gauges_at > IDLE_METRICS_S
            if stale or due:
                self.publish_gauges()

    def run_idle_loop(self, stop: threading.Event) -> None:
        while not stop.wait(LOAD_STALL_REFRESH_S):
            self.idle_tick()

    # --- what the scheduler holds now (live) -----------------------------------------------------------------
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
