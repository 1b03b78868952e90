"""Deterministic fake tokens: the same prompt always yields the same text, on every worker."""

from __future__ import annotations

import hashlib

WORDS = (
    "the of and to in is was for on are with as by at from that this be it an or have not but which "
    "kernel page cache prefill decode token router tensor expert batch stream graph memory transfer "
    "bootstrap room worker shard layer rank queue model weight latency throughput node socket buffer "
    "request answer value index vector matrix sample signal"
).split()
VOCAB_BASE = 1000


def prompt_key(obj) -> str:
    """A stable text form of whatever the prompt was (text, token ids, chat messages)."""
    if obj is None:
        return ""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, list | tuple):
        return "\x1f".join(prompt_key(x) for x in obj)
    if isinstance(obj, dict):
        return "\x1e".join(f"{k}={prompt_key(obj[k])}" for k in sorted(obj))
    return str(obj)


def count_prompt_tokens(obj) -> int:
    if obj is None:
        return 1
    if isinstance(obj, list) and obj and all(isinstance(x, int) for x in obj):
        return len(obj)
    return max(1, len(prompt_key(obj).split()))


def fake_tokens(key: str, n: int) -> list[tuple[int, str]]:
    """n (token_id, piece) pairs derived from the prompt key."""
    seed = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    out = []
    for i in range(n):
        h = int.from_bytes(hashlib.blake2b(seed + i.to_bytes(4, "big"), digest_size=8).digest(), "big")
        idx = h % len(WORDS)
        out.append((VOCAB_BASE + idx, " " + WORDS[idx]))
    return out
