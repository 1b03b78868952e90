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
        # SGLANG_SIM_GAUGES=published (the default): the scheduler gauges as the scheduler last published them
        # (engine.py publish_gauges), as sglang's /metrics reads what metrics_collector.log_stats last wrote; live:
        # the counts at the scrape (cli.py Knobs.gauges)
        snap = st.engine.gauges if st.knobs.gauges == "published" else st.engine.snapshot()
        text = st.metrics.render(snap, st.knobs.kv_capacity_tokens)
        self.send_text(200, text, CONTENT_TYPE)
