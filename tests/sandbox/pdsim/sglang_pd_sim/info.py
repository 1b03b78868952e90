"""Information routes of the worker: /model_info, /v1/models, /v1/loads."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from sglang_pd_sim import SGLANG_VERSION
from sglang_pd_sim.httpbase import BaseHandler

# sglang/srt/managers/load_snapshot.py LoadSnapshot.VALID_SECTIONS and the section fields of to_dict()
LOAD_SECTIONS = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}


class InfoMixin(BaseHandler):
    # --- info routes ---
    def model_info(self) -> dict:
        st = self.state
        arch = st.knobs.architecture
        model_type = "deepseek_v4" if st.is_dsv4 else arch.replace("ForCausalLM", "").lower()
        return {
            "model_path": st.args.model_path,
            "tokenizer_path": st.tokenizer_path,
            "is_generation": not st.args.is_embedding,
            "preferred_sampling_params": st.args.preferred_sampling_params,
            "weight_version": st.args.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model_type,
            "architectures": [arch],
        }

    def models(self) -> dict:
        st = self.state
        return {
            "object": "list",
            "data": [
                {
                    "id": st.model_name,
                    "object": "model",
                    # sglang/srt/entrypoints/http_server.py available_models: ModelCard(id=root=served_model_name,
                    # max_model_len=context_len); protocol.py ModelCard: created at the answer, owned_by "sglang"
                    "created": int(time.time()),
                    "owned_by": "sglang",
                    "root": st.model_name,
                    "parent": None,
                    "max_model_len": st.args.context_length or 163840,
                }
            ],
        }

    def loads(self) -> None:
        """GET /v1/loads, as sglang 0.5.23's entrypoints/v1_loads.py answers it from the scheduler's
        LoadSnapshot (managers/scheduler_components/load_inquirer.py get_loads, load_snapshot.py to_dict): the core
        fields always, the sections that `include` names (default all), 400 for an unknown section. A decode's
        requests waiting for their KV count as waiting (its transfer queue), as in load_inquirer. Routers read it
        (SMG's load poll: `?include=core,disagg,queues,memory`); the older /get_load is gone in 0.5.23."""
        st = self.state
        query = parse_qs(urlsplit(self.path).query)
        include = [s.strip() for s in (query.get("include") or [""])[0].split(",")] if query.get("include") else None
        wanted = set(include) if include else None
        if wanted is not None and not wanted <= LOAD_SECTIONS:
            bad = wanted - LOAD_SECTIONS
            self.send_json(400, {"detail": f"Invalid include sections: {bad}. Valid options: {sorted(LOAD_SECTIONS)}"})
            return
        # the snapshot the scheduler last published (engine.py publish_loads; sglang: publish_load_snapshot into
        # shared memory, read by the tokenizer), not live counts
        snap, published = st.engine.loads, st.engine.loads_at
        capacity = st.knobs.kv_capacity_tokens
        used = snap["kv_used_tokens"]
        # load_inquirer.py: waiting = the waiting queue + a prefill's bootstrap queue, or a decode's prealloc and
        # transfer queues; running = the running batch, which a PD prefill never fills (its forward batch and its
        # in-flight transfers are not in it)
        waiting = snap["num_queue_reqs"] + {"decode": snap["awaiting_kv"], "prefill": snap["bootstrapping"]}.get(
            st.role, 0
        )
        running = 0 if st.role == "prefill" else snap["num_running_reqs"]
        load = {
            "timestamp": time.time() - (time.monotonic() - published), "dp_rank": 0, "num_running_reqs": running,
            "num_waiting_reqs": waiting, "num_waiting_uncached_tokens": 0, "num_used_tokens": used,
            "num_total_tokens": used, "num_active_tokens": used, "num_prealloc_ready_tokens": 0,
            "max_total_num_tokens": capacity, "max_running_requests": st.max_running_requests(),
            "token_usage": round(used / capacity, 4) if capacity else 0.0,
            "gen_throughput": round(snap["gen_throughput"], 2), "cache_hit_rate": 0.0, "utilization": 0.0,
            "total_prefill_uncached_tokens": 0, "total_prefill_busy_us": 0,
        }  # fmt: skip
        sections = {
            "memory": ("memory", {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": capacity}),
            "disagg": ("disaggregation", {
                "mode": st.role,
                "prefill_bootstrap_queue_reqs": snap["bootstrapping"] if st.role == "prefill" else 0,
                "prefill_inflight_queue_reqs": snap["transferring"] if st.role == "prefill" else 0,
                "decode_prealloc_queue_reqs": 0,
                "decode_transfer_queue_reqs": snap["awaiting_kv"] if st.role == "decode" else 0,
                "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0}),
            "queues": ("queues", {"waiting": snap["num_queue_reqs"], "grammar": 0, "paused": 0, "retracted": 0,
                                  "prealloc_ready": 0}),
        }  # fmt: skip
        if wanted != {"core"}:
            for name, (field, section) in sections.items():
                if wanted is None or "all" in wanted or name in wanted:
                    load[field] = section
        self.send_json(200, {
            "timestamp": datetime.now(UTC).isoformat(), "version": SGLANG_VERSION, "accelerator": None,
            "num_accelerators": st.args.tp_size or 1, "loads": [load],
        })  # fmt: skip
