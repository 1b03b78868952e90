"""The model directory, read as sglang 0.5.23 reads it while it starts: what a directory it cannot load does to it.

Read in the sources of the 0.5.23 wheel (and of the two libraries it pins or calls: transformers 5.19.0, safetensors
0.8.0, whose messages below were produced by the real libraries on the files the tests write):

1. config.json, in the launching process, before any listener or subprocess: `sglang serve` -> launch_server.py
   run_server -> ServerArgs.resolve_once -> arg_groups/pipeline.py run_resolution_pipeline -> model_config_of ->
   sglang/srt/utils/hf_transformers/config.py get_config -> transformers AutoConfig.from_pretrained. transformers
   5.19.0 (utils/hub.py cached_files ~466-475) returns None for a local directory without config.json, so
   configuration_utils.py get_config_dict gives {} (~793) and models/auto/configuration_auto.py raises
   `ValueError: Unrecognized model in <dir>. Should have a `model_type` key in its config.json.` (~442); a path that
   is no directory is taken for a hub id and ends in `OSError: Can't load the configuration of '<path>' ...`
   (configuration_utils.py ~862). The exception is not caught: traceback, exit status 1 (CHECK_CONFIG).
2. The weight files, in the scheduler subprocess, when the weight load starts (before any shard is read):
   sglang/srt/model_loader/loader.py DefaultModelLoader._prepare_weights (~480-600). It globs *.safetensors (then
   *.bin) in the directory; with safetensors it calls weight_utils.py filter_duplicate_safetensors_files (~757-808),
   which reads model.safetensors.index.json's weight_map and raises `RuntimeError: model.safetensors.index.json
   references N shard file(s) missing from <dir> (incomplete download?): [...]` (~801-805) when a shard it names is
   not on disk, else keeps only the indexed shards. No weight file at all (an index whose every shard is missing
   included: the glob found none, so the index is never read) is `RuntimeError: Cannot find any model weights with
   `<dir>`` (loader.py ~579-582). DeepSeek-V4's own load_weights only warns about parameters no shard filled
   ("Some weights are not initialized from checkpoints", models/deepseek_v4.py ~5633): the index check is what fails.
3. Each shard's safetensors header, as that shard is opened: weight_utils.py buffered_multi_thread_safetensors_
   weights_iterator (~1326-1395, the default: enable_multithread_load) or safetensors_weights_iterator (~1146)
   call safetensors.safe_open, whose header check (safetensors 0.8.0 SafeTensors::read_metadata) raises
   `safetensors._safetensors_rust.SafetensorError: Error while deserializing header: <reason>`. The shards are
   loaded in sorted order (SGLANG_SORT_WEIGHT_FILES 0, loader.py ~585) and the iterator raises a shard's error when
   it reaches that shard, so the load fails after the shards before it were read.

A failure in the scheduler (2, 3) ends the server this way (sglang/srt/managers/scheduler.py run_scheduler_process
~6369-6373: log "Scheduler hit an exception: <traceback>", SIGQUIT to the parent; sglang/srt/entrypoints/engine.py
launch_phase_sigquit_handler ~1976-1982: "Received sigquit from a child process. It usually means the child
failed.", then sglang/srt/utils/common.py kill_process_tree(os.getpid()) ~2507-2552, which SIGKILLs the process
itself): the process dies by SIGKILL, its HTTP port never having listened (app.py).

Not mirrored: *.bin weights are accepted without reading them (torch.load); --load-format other than auto and
safetensors skips the weight check (dummy needs no weights in sglang either); --model-checksum is not verified.
"""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass

CONFIG_NAME = "config.json"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# weight_utils.py filter_files_not_needed_for_inference: files a training run leaves beside the weights
NOT_NEEDED_FOR_INFERENCE = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
# safetensors 0.8.0 (safetensors/src/tensor.rs): MAX_HEADER_SIZE and the dtypes' sizes in bits
MAX_HEADER_SIZE = 100_000_000
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}  # fmt: skip
SAFETENSOR_ERROR = "safetensors._safetensors_rust.SafetensorError"


@dataclass(frozen=True)
class LoadFailure:
    """An exception sglang raises while it starts: its type as a traceback prints it, its message, and the sglang
    function that raises it (for the log line)."""

    exc_type: str
    message: str
    where: str

    def traceback(self) -> str:
        return f"Traceback (most recent call last):\n  (simulated) {self.where}\n{self.exc_type}: {self.message}"


@dataclass(frozen=True)
class LoadPlan:
    """The weight load of one start: the shards in load order with their sizes, and the failure if there is one,
    with the share of the load time (bytes of the shards read before it / all bytes) after which it comes."""

    shards: tuple[tuple[str, int], ...]
    failure: LoadFailure | None = None
    fails_after: float = 0.0  # share of the load, 0..1


def config_failure(model_path: str) -> LoadFailure | None:
    """What reading the model's config.json raises in the launching process (1 above), or None."""
    if str(model_path).lower() in ("none", "dummy"):  # arg_groups/pipeline.py: no model, no model resolution
        return None
    where = "transformers/models/auto/configuration_auto.py, in from_pretrained (sglang get_config)"
    if not os.path.isdir(model_path):
        return LoadFailure(
            "OSError",
            f"Can't load the configuration of '{model_path}'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
            f"Otherwise, make sure '{model_path}' is the correct path to a directory containing a config.json file",
            "transformers/configuration_utils.py, in _get_config_dict (sglang get_config)",
        )
    path = os.path.join(model_path, CONFIG_NAME)
    unrecognized = LoadFailure(
        "ValueError",
        f"Unrecognized model in {model_path}. Should have a `model_type` key in its {CONFIG_NAME}.",
        where,
    )
    if not os.path.isfile(path):
        return unrecognized
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return LoadFailure(
            "OSError",
            f"It looks like the config file at '{path}' is not a valid JSON file.",
            "transformers/configuration_utils.py, in _get_config_dict (sglang get_config)",
        )
    if not isinstance(config, dict) or "model_type" not in config:
        return unrecognized
    return None


def plan_load(model_path: str, load_format: str = "auto") -> LoadPlan:
    """The weight load sglang would run on this directory (2 and 3 above)."""
    if load_format not in ("auto", "safetensors") or str(model_path).lower() in ("none", "dummy"):
        return LoadPlan(shards=())
    files: list[str] = []
    use_safetensors = False
    patterns = ["*.safetensors", "*.bin"] if load_format == "auto" else ["*.safetensors"]
    for pattern in patterns:  # loader.py _prepare_weights: the first pattern that matches anything wins
        files = glob.glob(os.path.join(model_path, pattern))
        if files:
            use_safetensors = pattern.endswith(".safetensors")
            break
    if use_safetensors:
        try:
            files = indexed_files(files, model_path)
        except MissingShards as exc:
            return LoadPlan(shards=(), failure=LoadFailure(
                "RuntimeError", str(exc),
                "sglang/srt/model_loader/weight_utils.py, in filter_duplicate_safetensors_files"))  # fmt: skip
    else:
        files = [f for f in files if not f.endswith(NOT_NEEDED_FOR_INFERENCE)]
    if not files:
        return LoadPlan(shards=(), failure=LoadFailure(
            "RuntimeError", f"Cannot find any model weights with `{model_path}`",
            "sglang/srt/model_loader/loader.py, in _prepare_weights"))  # fmt: skip
    files.sort()  # loader.py: SGLANG_SORT_WEIGHT_FILES 0 sorts
    shards = tuple((f, os.path.getsize(f)) for f in files)
    if not use_safetensors:
        return LoadPlan(shards=shards)
    total = sum(size for _path, size in shards) or 1
    before = 0
    for path, size in shards:
        reason = safetensors_header_problem(path)
        if reason is not None:
            return LoadPlan(shards=shards, fails_after=before / total, failure=LoadFailure(
                SAFETENSOR_ERROR, f"Error while deserializing header: {reason}",
                "sglang/srt/model_loader/weight_utils.py, in _load_file (safetensors.safe_open)"))  # fmt: skip
        before += size
    return LoadPlan(shards=shards)


class MissingShards(RuntimeError):
    pass


def indexed_files(files: list[str], folder: str, index_file: str = SAFE_WEIGHTS_INDEX_NAME) -> list[str]:
    """weight_utils.py filter_duplicate_safetensors_files (0.5.23, a local folder, no allow_patterns override)."""
    index_path = os.path.join(folder, index_file)
    if not os.path.isfile(index_path):
        if len(files) == 2:  # the mistral trick: consolidated.safetensors beside model.safetensors
            files.sort()
            if files[0].endswith("consolidated.safetensors") and files[1].endswith("model.safetensors"):
                return [files[1]]
        return files
    with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    in_index = {os.path.join(folder, shard) for shard in weight_map.values()}
    missing = sorted(f for f in in_index if not os.path.isfile(f))
    if missing:
        raise MissingShards(
            f"{index_file} references {len(missing)} shard file(s) missing from {folder} (incomplete download?): "
            f"{[os.path.basename(f) for f in missing]}"
        )
    return [f for f in files if f in in_index]


def safetensors_header_problem(path: str) -> str | None:
    """Why safetensors 0.8.0's safe_open refuses this file's header (SafeTensors::read_metadata and its metadata
    validation), in its words, or None. Python's JSON and UTF-8 messages stand in for serde's after the same
    prefix."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "header too small"
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER_SIZE:
            return "header too large"
        if 8 + n > size:
            return "invalid header length"
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 in header: {exc}"
    try:
        header = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"invalid JSON in header: {exc}"
    if not isinstance(header, dict):
        return f"invalid JSON in header: invalid type: {type(header).__name__}, expected struct HashMetadata"
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        ok = (
            isinstance(info, dict)
            and info.get("dtype") in DTYPE_BITS
            and isinstance(info.get("shape"), list)
            and all(isinstance(d, int) and d >= 0 for d in info["shape"])
            and isinstance(info.get("data_offsets"), list)
            and len(info["data_offsets"]) == 2
            and all(isinstance(o, int) and o >= 0 for o in info["data_offsets"])
        )
        if not ok:
            return f"invalid JSON in header: tensor `{name}` is not a TensorInfo (dtype, shape, data_offsets)"
        tensors.append((info["data_offsets"][0], info["data_offsets"][1], name, info))
    end = 0
    for start, stop, name, info in sorted(tensors):
        if start != end or stop < start:
            return f"invalid offset for tensor `{name}`"
        bits = math.prod(info["shape"]) * DTYPE_BITS[info["dtype"]]
        if bits % 8 or bits // 8 != stop - start:
            return "invalid shape, data type, or offset for tensor"
        end = stop
    if end + 8 + n != size:
        return "incomplete metadata, file not fully covered"
    return None
