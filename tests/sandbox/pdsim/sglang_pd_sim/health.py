"""/health, /health_generate and /ready as sglang 0.5.23 answers them (sglang/srt/entrypoints/http_server.py)."""

from __future__ import annotations

from sglang_pd_sim.httpbase import BaseHandler
from sglang_pd_sim.lifecycle import ServerStatus

HEALTH_PATHS = ("/health", "/health_generate", "/ready")
EMPTY = (b"", "text/plain; charset=utf-8")  # sglang answers Response(status_code=...): no body


class HealthMixin(BaseHandler):
    def health_route(self, path: str) -> None:
        st = self.state
        if self.command not in ("GET", "HEAD"):
            self.send_json(405, {"detail": "Method Not Allowed"})
            return
        if path == "/ready":
            # http_server.py ready: 200 if tokenizer_manager.is_ready() else 503
            self.send_bytes(200 if st.is_ready() else 503, *EMPTY)
            return
        if st.knobs.fail_health is not None:
            # SGLANG_SIM_FAIL=health:CODE, a static override (sglang has none): CODE at once; a failing CODE
            # sets UnHealthy, as http_server.py health_generate does when its check times out.
            if st.knobs.fail_health != 200:
                st.life.set_status(ServerStatus.UnHealthy)
            self._note = "simulated-failure"
            self.send_text(st.knobs.fail_health, "simulated health failure")
            return
        # http_server.py health_generate: 503 at once while gracefully exiting (SIGTERM) or Starting
        if st.draining.is_set():
            self._note = "draining"
            self.send_bytes(503, *EMPTY)
            return
        if st.life.status is ServerStatus.Starting:
            self._note = "starting"
            self.send_bytes(503, *EMPTY)
            return
        # http_server.py health_generate: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false answers /health (only)
        # with 200 without a generation
        if not st.knobs.health_endpoint_generation and path == "/health":
            self.send_bytes(200, *EMPTY)
            return
        ok = st.life.health_generate(st)
        if not ok:
            self._note = "health-check-timeout"
        self.send_bytes(200 if ok else 503, *EMPTY)
