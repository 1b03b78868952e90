"""The sglang:* series of SGLang 0.5.23 that dashboards and alerts use, fed by the simulated requests.

Names, types, HELP texts, label names and histogram buckets are those of
sglang/srt/observability/metrics_collector.py in the sglang 0.5.23 wheel:
- TokenizerMetricsCollector (labels from `tokenizer_metric_labels`: model_name, engine_type; several add
  is_streaming): per request, observed when it finishes as `TokenizerManager.collect_metrics`
  (sglang/srt/managers/tokenizer_manager.py) does. A PD prefill never observes time to first token, inter
  token latency or time per output token there; nor does this simulator.
- SchedulerMetricsCollector (labels from `SchedulerMetricsCollector.init_new`: model_name, engine_type,
  tp_rank, pp_rank, moe_ep_rank, and dp_rank where the worker runs data parallel): gauges of the queue,
  the running batch and the KV pool, as the simulated scheduler last published them (engine.py publish_gauges:
  per prefill batch, every --decode-log-interval decode passes, when idle), not live counts; the PD series (KV transfer
  histograms on the prefill as sglang/srt/disaggregation/prefill.py observes them after each transfer,
  bootstrap / transfer failure counters on both roles as prefill.py and decode.py count them).
engine_type is DisaggregationMode.to_engine_type (sglang/srt/disaggregation/utils.py): prefill, decode,
unified. Only the stats-logging rank (attn tp rank 0) exports, so tp_rank is "0".
/metrics (metrics.py) exists only with --enable-metrics. The list of what is exported:
tests/fixtures/metrics/sglang-0.5.23-metrics.txt (kept in sync by tests/sandbox/pdsim/tests/test_pdsim_metrics.py).
"""

from __future__ import annotations

from importlib import resources

from sglang_pd_sim.promtext import Registry

# Buckets, from metrics_collector.py (TokenizerMetricsCollector defaults and the PD histograms).
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]  # fmt: skip
TOKENS_BUCKETS = [100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500,
                  15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000,
                  300000, 400000, 600000, 800000, 1000000, 1100000]  # fmt: skip
QUEUE_BUCKETS = [0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60,
                 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000,
                 2500, 3000]  # fmt: skip
KV_SPEED_BUCKETS = [0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400]
KV_LATENCY_MS_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]
KV_TOTAL_MB_BUCKETS = [1, 5, 10, 50, 100, 500, 1000, 5000, 10000]


BUCKETS = {
    "TTFT": TTFT_BUCKETS,
    "E2E": E2E_BUCKETS,
    "ITL": ITL_BUCKETS,
    "TOKENS": TOKENS_BUCKETS,
    "QUEUE": QUEUE_BUCKETS,
    "KV_SPEED": KV_SPEED_BUCKETS,
    "KV_LATENCY_MS": KV_LATENCY_MS_BUCKETS,
    "KV_TOTAL_MB": KV_TOTAL_MB_BUCKETS,
}
ALL_ROLES = ("prefill", "decode", "unified")
SERIES_TSV = "sglang_0_5_23_series.tsv"


def _series() -> tuple[list[tuple], dict[str, tuple]]:
    """SERIES: (attribute, type, name, label set, buckets, HELP) in metrics_collector.py's order; ROLES: where each
    series shows up, from sglang_0_5_23_series.tsv (its header says what each column holds)."""
    text = resources.files("sglang_pd_sim").joinpath(SERIES_TSV).read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    header, rows = rows[0], [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert header == ["attr", "type", "name", "labels", "buckets", "roles", "help"], header
    series = [(r["attr"], r["type"], r["name"], r["labels"], BUCKETS.get(r["buckets"]), r["help"]) for r in rows]
    return series, {r["name"]: tuple(r["roles"].split(",")) for r in rows}


SERIES, ROLES = _series()


def label_names(label_set: str, dp_size: int = 1) -> list[str]:
    tok = ["model_name", "engine_type"]
    sched = [*tok, "tp_rank", "pp_rank", "moe_ep_rank"] + (["dp_rank"] if dp_size > 1 else [])
    return {"tok": tok, "tok+stream": [*tok, "is_streaming"], "sched": sched}[label_set]


def series_table() -> list[dict]:
    """One row per exported series: name, type, labels, roles, help (what the fixture file lists)."""
    return [
        {
            "name": name,
            "type": kind,
            "labels": label_names(labels),
            "roles": list(ROLES[name]),
            "help": doc,
        }
        for _attr, kind, name, labels, _buckets, doc in SERIES
    ]


class SimMetrics:
    """The collectors of one worker, with SGLang's names; values come from the simulated requests."""

    def __init__(self, *, model_name: str, role: str, dp_size: int = 1):
        engine_type = {"prefill": "prefill", "decode": "decode"}.get(role, "unified")
        self.role = role
        self.tok_labels = {"model_name": model_name, "engine_type": engine_type}
        self.sched_labels = {**self.tok_labels, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        if dp_size > 1:
            self.sched_labels["dp_rank"] = "0"
        self.registry = Registry()
        for attr, kind, name, labels, buckets, doc in SERIES:
            names = label_names(labels, dp_size)
            if kind == "histogram":
                metric = self.registry.histogram(name, doc, names, buckets)
            else:
                metric = getattr(self.registry, kind)(name, doc, names)
            setattr(self, attr, metric)

    # --- TokenizerManager.collect_metrics -----------------------------------------------------------------
    def _stream(self, stream: bool) -> dict:
        return {**self.tok_labels, "is_streaming": "true" if stream else "false"}

    def first_token(self, seconds: float, stream: bool) -> None:
        if self.role != "prefill":
            self.ttft.observe(self._stream(stream), seconds)

    def inter_token(self, interval: float, new_tokens: int) -> None:
        if self.role != "prefill" and new_tokens > 0:
            self.itl.observe(self.tok_labels, interval / new_tokens, new_tokens)

    def finished(self, *, prompt_tokens: int, completion_tokens: int, e2e: float, stream: bool, decode_s=None):
        """observe_one_finished_request. decode_s: first token to finish (None for aborts and on a prefill)."""
        labels = self._stream(stream)
        self.prompt_tokens.inc(labels, prompt_tokens)
        self.generation_tokens.inc(labels, completion_tokens)
        self.num_requests.inc(labels)
        self.e2e.observe(labels, e2e)
        if self.role != "prefill" and decode_s is not None and decode_s > 0 and completion_tokens > 1:
            self.tpot.observe(labels, decode_s / (completion_tokens - 1))
        self.prompt_tokens_hist.observe(self.tok_labels, prompt_tokens)
        self.uncached_prompt_tokens_hist.observe(self.tok_labels, prompt_tokens)  # no prefix cache here
        self.generation_tokens_hist.observe(self.tok_labels, completion_tokens)

    def aborted(self) -> None:
        self.num_aborted.inc(self.tok_labels)

    # --- scheduler ----------------------------------------------------------------------------------------
    def queued(self, seconds: float) -> None:
        self.queue_time.observe(self.sched_labels, seconds)

    def kv_transfer(self, nbytes: int, seconds: float) -> None:
        """RequestTimeStats.compute_and_observe_kv_transfer_metrics: MB = bytes / 2**20, GB/s = MB/1024/s."""
        total_mb = nbytes / (1024 * 1024)
        speed = (total_mb / 1024) / seconds if seconds > 0 else 0.0
        self.kv_transfer_latency.observe(self.sched_labels, seconds * 1000)
        self.kv_transfer_total_mb.observe(self.sched_labels, total_mb)
        self.kv_transfer_speed.observe(self.sched_labels, speed)

    def handoff_failed(self, phase: str) -> None:
        (self.bootstrap_failed if phase == "bootstrap" else self.transfer_failed).inc(self.sched_labels)

    def render(self, snap: dict, capacity: int) -> str:
        """Set the scheduler gauges from the engine's published snapshot (Engine.gauges), then the exposition text."""
        s = self.sched_labels
        used = snap["kv_used_tokens"]
        self.num_running_reqs.set(s, snap["num_running_reqs"])
        self.num_queue_reqs.set(s, snap["num_queue_reqs"])
        self.gen_throughput.set(s, round(snap["gen_throughput"], 3))
        self.cache_hit_rate.set(s, 0.0)
        self.token_usage.set(s, round(used / capacity, 6) if capacity else 0.0)
        self.num_used_tokens.set(s, used)
        self.kv_used_tokens.set(s, used)
        self.kv_available_tokens.set(s, max(0, capacity - used))
        self.max_total_num_tokens.set(s, capacity)
        if self.role == "prefill":
            # sglang/srt/managers/scheduler_components/metrics_reporter.py: len(disagg_prefill_bootstrap_queue.queue)
            self.prefill_bootstrap_queue.set(s, snap["bootstrapping"])
            self.prefill_inflight_queue.set(s, snap["transferring"])
        elif self.role == "decode":
            self.decode_prealloc_queue.set(s, 0)
            self.decode_transfer_queue.set(s, snap["awaiting_kv"])
        return self.registry.exposition()
