"""The worker's /metrics (only with --enable-metrics, as in SGLang)."""

from __future__ import annotations

from sglang_pd_sim.httpbase import BaseHandler


class MetricsMixin(BaseHandler):
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
