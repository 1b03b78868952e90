"""The worker's /metrics: the collectors of collector.py in Prometheus text, only with --enable-metrics."""

from __future__ import annotations

from sglang_pd_sim.httpbase import BaseHandler
from sglang_pd_sim.promtext import CONTENT_TYPE


class MetricsMixin(BaseHandler):
    def metrics(self) -> None:
        st = self.state
        if not st.args.enable_metrics:  # as SGLang: /metrics exists only with --enable-metrics
            self.send_json(404, {"detail": "Not Found"})
            return
        text = st.metrics.render(st.engine.snapshot(), st.knobs.kv_capacity_tokens)
        self.send_text(200, text, CONTENT_TYPE)
