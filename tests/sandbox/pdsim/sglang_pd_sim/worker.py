"""The worker's HTTP API on --port: routing and auth; the routes themselves live in the mixins."""

from __future__ import annotations

from sglang_pd_sim.generation import GenerationMixin
from sglang_pd_sim.health import HEALTH_PATHS, HealthMixin
from sglang_pd_sim.info import InfoMixin
from sglang_pd_sim.metrics import MetricsMixin

OPEN_PATHS = ("/health", "/health_generate", "/ready", "/metrics")  # stay open with --api-key, as in SGLang
GENERATION_PATHS = {"/generate": "generate", "/v1/completions": "completion", "/v1/chat/completions": "chat"}


class WorkerHandler(GenerationMixin, HealthMixin, InfoMixin, MetricsMixin):
    def route(self, path: str) -> None:
        st = self.state
        if self.sim_routes(path):
            return
        if not path.startswith(OPEN_PATHS) and not self.authorized():
            self.send_json(401, {"error": "Unauthorized"})
            return
        if path in HEALTH_PATHS:
            # health.py: sglang/srt/entrypoints/http_server.py health_generate and ready. While draining every
            # other route keeps being served (new generation requests too: sglang does not refuse them).
            self.health_route(path)
            return
        if not st.ready.is_set():
            self.send_json(503, {"error": {"message": "The server is not ready yet (loading weights)."}})
            return
        get_routes = {
            "/server_info": self.server_info,
            "/get_server_info": self.server_info,
            "/model_info": lambda: self.send_json(200, self.model_info()),
            "/get_model_info": lambda: self.send_json(200, self.model_info()),
            "/v1/models": lambda: self.send_json(200, self.models()),
            "/v1/loads": self.loads,
            "/metrics": self.metrics,
        }
        if path in get_routes:
            if self.command not in ("GET", "HEAD"):
                self.send_json(405, {"detail": "Method Not Allowed"})
            else:
                get_routes[path]()
            return
        if path in GENERATION_PATHS:
            if self.command != "POST":
                self.send_json(405, {"detail": "Method Not Allowed"})
            else:
                self.generation(GENERATION_PATHS[path])
            return
        if path == "/flush_cache" and self.command in ("GET", "POST"):
            self.read_body()
            self.send_text(200, "Cache flushed.\n")
            return
        self.send_json(404, {"detail": "Not Found"})

    def server_info(self) -> None:
        """sglang/srt/entrypoints/http_server.py `server_info` (and the deprecated `get_server_info`, which awaits it):
        `await tokenizer_manager.get_internal_state()` asks every scheduler over ZMQ (tokenizer_control_mixin.py, a
        FanOutCommunicator with no timeout, sglang/srt/managers/communicator.py), so on a stalled scheduler the call
        hangs until the stall ends or the client gives up. The other information routes (/model_info, /v1/models,
        /v1/loads from the published load snapshot, /metrics) are the tokenizer's own and answer."""
        st = self.state
        if st.life.stalled():
            self._note = "scheduler-stalled"
        st.life.wait_scheduler(st.stop)
        self.send_json(200, st.server_info())

    def authorized(self) -> bool:
        key = self.state.args.api_key
        if not key:
            return True
        return self.headers.get("Authorization", "") == f"Bearer {key}"
