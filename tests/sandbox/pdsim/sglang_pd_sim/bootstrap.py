"""The prefill's bootstrap server on --disaggregation-bootstrap-port (GET /health, GET|PUT /route, dp ranks)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from sglang_pd_sim.httpbase import BaseHandler
from sglang_pd_sim.state import as_room, loads


class BootstrapHandler(BaseHandler):
    def route(self, path: str) -> None:
        if self.sim_routes(path):
            return
        st = self.state
        a = st.args
        if path == "/health" and self.command in ("GET", "HEAD"):
            self.send_text(200, "OK")
        elif path == "/route" and self.command == "GET" and not st.ready.is_set():
            # sglang/srt/disaggregation/common/conn.py CommonKVBootstrapServer._handle_route_get: 503 until every
            # prefill rank registered (PUT /route), which the schedulers do once their weights are loaded; the
            # server itself listens from the start (tokenizer_manager.py init_disaggregation, before
            # entrypoints/engine.py Engine._launch_subprocesses waits for the schedulers)
            self.send_text(503, "Prefill server not fully registered yet (0 workers registered).")
        elif path == "/route" and self.command == "GET":
            qs = parse_qs(urlsplit(self.path).query)
            engine_rank = int((qs.get("engine_rank") or ["-1"])[0])
            if engine_rank == -1:
                self.send_json(
                    200,
                    {
                        "prefill_attn_tp_size": a.tp_size // max(1, a.attn_dp_size or 1),
                        "prefill_dp_size": a.dp_size,
                        "prefill_pp_size": a.pp_size,
                        "prefill_page_size": st.page_size,
                        "prefill_kv_cache_dtype": st.kv_cache_dtype,
                        "transfer_backend": a.disaggregation_transfer_backend,
                    },
                )
            elif 0 <= engine_rank < a.tp_size * a.pp_size:
                self.send_json(
                    200, {"rank_ip": a.host, "rank_port": a.port + 1000 + engine_rank, "engine_rank": engine_rank}
                )
            else:
                self.send_text(404, f"engine_rank {engine_rank} is not registered")
        elif path == "/route" and self.command == "PUT":
            self.read_body()
            self.send_text(200, "OK")
        elif path == "/register_dp_rank" and self.command == "POST":
            body = loads(self.read_body()) or {}
            room = as_room(body.get("bootstrap_room"))
            self._room = room
            with st.lock:
                st.dp_ranks[room] = int(body.get("dp_rank") or 0)
            self.send_json(200, {"status": "ok"})
        elif path == "/query_dp_ranks" and self.command == "POST":
            body = loads(self.read_body()) or {}
            rooms = body.get("bootstrap_rooms") or []
            with st.lock:
                ranks = {str(r): st.dp_ranks.get(as_room(r), 0 if as_room(r) in st.kv else -1) for r in rooms}
            self.send_json(200, {"dp_ranks": ranks})
        else:
            self.send_json(404, {"detail": "Not Found"})
