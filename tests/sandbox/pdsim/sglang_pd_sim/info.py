"""Information routes of the worker: /model_info, /v1/models, /get_load."""

from __future__ import annotations

from sglang_pd_sim.httpbase import BaseHandler


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
                    "created": int(st.started),
                    "owned_by": "sglang",
                    "root": st.args.model_path,
                    "parent": None,
                    "max_model_len": st.args.context_length or 163840,
                }
            ],
        }

    def load(self) -> list:
        with self.state.lock:
            n = self.state.inflight
        return [{"dp_rank": 0, "num_reqs": n, "num_waiting_reqs": 0, "num_tokens": 0}]
