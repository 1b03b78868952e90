"""A small model repository generated from a seed, byte for byte the same on every machine.

config.json, generation_config.json, tokenizer files, .gitattributes and N safetensors shards (real safetensors
files: an 8-byte header length, the JSON header, the tensors' bytes) with model.safetensors.index.json naming the
shard of each tensor, as sglang's loader reads them (the index's weight_map). The shards are LFS files, as on the
hub (.gitattributes' `*.safetensors filter=lfs`); the others are plain git blobs.

A revision is a commit: 40 hex digits derived from the files' git blob ids, so two seeds give two revisions.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
# The size of an LFS pointer file (`version https://git-lfs.github.com/spec/v1`, `oid sha256:...`, `size N`),
# which the hub reports as pointerSize.
LFS_POINTER_SIZE = 134


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob (`git hash-object`): sha1 of `blob <size>\\0<bytes>`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str) -> bool:
    return path.endswith((".safetensors", ".bin"))


@dataclass(frozen=True)
class Revision:
    commit: str
    files: dict[str, bytes] = field(repr=False)

    def entry(self, path: str) -> dict:
        """What the hub's tree listing says of one file (huggingface_hub hf_api.py RepoFile: path, size, oid, lfs)."""
        data = self.files[path]
        blob = git_blob_id(data)
        if not is_lfs(path):
            return {"type": "file", "path": path, "size": len(data), "oid": blob}
        sha256 = hashlib.sha256(data).hexdigest()
        # For an LFS file the tree's oid is the pointer's blob id and size the file's size.
        return {
            "type": "file",
            "path": path,
            "size": len(data),
            "oid": git_blob_id(pointer(sha256, len(data))),
            "lfs": {"oid": sha256, "size": len(data), "pointerSize": LFS_POINTER_SIZE},
        }

    def sibling(self, path: str) -> dict:
        """What model info with blobs=true says of one file (hf_api.py ModelInfo.siblings: rfilename, size,
        blobId, lfs {size, sha256, pointerSize})."""
        tree = self.entry(path)
        out = {"rfilename": path, "size": tree["size"], "blobId": tree["oid"]}
        if "lfs" in tree:
            out["lfs"] = {"size": tree["lfs"]["size"], "sha256": tree["lfs"]["oid"], "pointerSize": LFS_POINTER_SIZE}
        return out

    @property
    def total_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())


def pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def safetensors_file(tensors: dict[str, bytes]) -> bytes:
    """A safetensors file of uint8 tensors of one dimension (safetensors' format: u64 little-endian header length,
    the JSON header with each tensor's dtype, shape and data_offsets, the data)."""
    header, offset = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
    return len(text).to_bytes(8, "little") + text + b"".join(tensors.values())


# Broken revisions, for a rollback test: every file the hub lists verifies against the hub's own checksums (a stage
# of it succeeds), but sglang cannot load it (the double fails as sglang does: tests/sandbox/pdsim/sglang_pd_sim/
# model_dir.py). "header": the last shard's safetensors header length is 10^12 (safetensors' "header too large",
# raised when the load reaches that shard; the size is unchanged); "missing-shard": the index names a last shard the
# repository does not hold ("model.safetensors.index.json references 1 shard file(s) missing", when the load starts).
BROKEN = ("header", "missing-shard")


def generate(
    seed: int = 0, shards: int = 3, shard_bytes: int = 1 << 20, layers: int = 4, broken: str | None = None
) -> Revision:
    """The repository of `seed`: `shards` safetensors shards of about `shard_bytes` each; `broken` (BROKEN) makes it
    one sglang cannot load, of another commit than the good one."""
    if broken is not None and broken not in BROKEN:
        raise ValueError(f"broken must be one of {BROKEN}, not {broken!r}")
    rng = random.Random(seed)
    files: dict[str, bytes] = {}
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "vocab_size": 256,
        "torch_dtype": "bfloat16",
        "hubsim_seed": seed,
    }
    files["config.json"] = json.dumps(config, indent=2).encode() + b"\n"
    files["generation_config.json"] = json.dumps({"bos_token_id": 1, "eos_token_id": 2}).encode() + b"\n"
    vocab = {f"<{i}>": i for i in range(256)}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    files["tokenizer.json"] = json.dumps(tokenizer).encode() + b"\n"
    files["tokenizer_config.json"] = json.dumps(
        {"model_max_length": 4096, "tokenizer_class": "LlamaTokenizer"}
    ).encode()
    files[".gitattributes"] = GITATTRIBUTES
    names = [f"model.layers.{i}.weight" for i in range(layers * shards)]
    per_tensor = max(shard_bytes // layers, 1)
    weight_map = {}
    for shard in range(shards):
        path = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {name: rng.randbytes(per_tensor) for name in names[shard * layers : (shard + 1) * layers]}
        files[path] = safetensors_file(tensors)
        weight_map.update(dict.fromkeys(tensors, path))
    index = {"metadata": {"total_size": per_tensor * len(names)}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = json.dumps(index, indent=2).encode() + b"\n"
    last = f"model-{shards:05d}-of-{shards:05d}.safetensors"
    if broken == "header":
        files[last] = (10**12).to_bytes(8, "little") + files[last][8:]
    elif broken == "missing-shard":
        del files[last]
    commit = hashlib.sha1("".join(f"{p}\0{git_blob_id(d)}\n" for p, d in sorted(files.items())).encode()).hexdigest()
    return Revision(commit=commit, files=files)
