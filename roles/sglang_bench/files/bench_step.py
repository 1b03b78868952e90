"""One benchmark step on the client host: the client at one concurrency, the workers' /metrics around it.

Run by roles/sglang_bench/tasks/step.yml with the host's python3 (standard library only):

    python3 bench_step.py CONFIG.json

CONFIG keys: client (aiperf | bench_serving), python (the client's interpreter), url, endpoint
(completions | chat), model, tokenizer, concurrency, requests, warmup, input_len, output_len,
request_rate ("inf" or a number), slo_ttft_ms, slo_tpot_ms, seed, request_timeout, deadline (seconds
for the whole step), metrics_urls {name: url}, metrics_interval, metric_names (prefixes kept), workdir.
The API key, if any, comes in the environment as SGLANG_BENCH_API_KEY.

Prints one JSON object: rc, seconds, timed_out, command (the key masked), raw (the client's result),
output_tail, metrics {name: {before, after, samples}}.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def build_command(cfg: dict, outdir: str, api_key: str = "") -> list[str]:
    """The client's command line; every request loop in it has a count (requests, warm-up)."""
    c = int(cfg["concurrency"])
    rate = str(cfg.get("request_rate", "inf"))
    if cfg["client"] == "aiperf":
        cmd = [
            cfg["python"], "-m", "aiperf", "profile",
            "--model", cfg["model"], "--tokenizer", cfg["tokenizer"],
            "--url", cfg["url"], "--endpoint-type", cfg["endpoint"], "--streaming",
            "--concurrency", str(c), "--request-count", str(cfg["requests"]),
            "--isl", str(cfg["input_len"]), "--isl-stddev", "0",
            "--osl", str(cfg["output_len"]), "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true",
            "--random-seed", str(cfg["seed"]),
            "--request-timeout-seconds", str(cfg["request_timeout"]),
            "--goodput", f"time_to_first_token:{cfg['slo_ttft_ms']} inter_token_latency:{cfg['slo_tpot_ms']}",
            "--use-server-token-count",
            "--no-server-metrics", "--no-gpu-telemetry", "--ui-type", "none",
            "--output-artifact-dir", outdir,
        ]  # fmt: skip
        if int(cfg.get("warmup", 0)) > 0:
            cmd += ["--warmup-request-count", str(cfg["warmup"])]
        if rate not in ("inf", ""):
            cmd += ["--request-rate", rate]
        if api_key:
            cmd += ["--api-key", api_key]
        return cmd
    if cfg["client"] == "bench_serving":
        backend = {"completions": "sglang-oai", "chat": "sglang-oai-chat"}[cfg["endpoint"]]
        return [
            cfg["python"], "-m", "sglang.bench_serving",
            "--backend", backend, "--base-url", cfg["url"],
            "--model", cfg["model"], "--tokenizer", cfg["tokenizer"],
            "--dataset-name", "random-ids", "--random-range-ratio", "1.0",
            "--random-input-len", str(cfg["input_len"]), "--random-output-len", str(cfg["output_len"]),
            "--num-prompts", str(cfg["requests"]), "--max-concurrency", str(c),
            "--request-rate", rate, "--warmup-requests", str(cfg.get("warmup", 0)),
            "--seed", str(cfg["seed"]), "--ready-check-timeout-sec", "0",
            "--goodput", f"ttft:{cfg['slo_ttft_ms']}", f"tpot:{cfg['slo_tpot_ms']}",
            "--disable-tqdm", "--output-file", str(Path(outdir) / "result.jsonl"),
        ]  # fmt: skip
    raise SystemExit(f"unknown client {cfg['client']!r}")


def client_env(environ, client: str, api_key: str = "") -> dict:
    """The client's environment: no proxy (the router is reached directly), no hub lookups, the key."""
    env = {k: v for k, v in environ.items() if k != "SGLANG_BENCH_API_KEY"}
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(var, None)
    if client == "bench_serving":
        # The tokenizer is a local directory, yet bench_serving 0.5.23 still asks the Hugging Face hub for
        # the served model name's config; on a host without internet each step then waits about 62 s on
        # retries (seen on the lent GPU machine, tests/fixtures/bench/README.md). Offline, it does not ask.
        # Not for AIPerf 0.13.0: offline, it looks a local directory up as a hub repo id and fails
        # (aiperf/common/tokenizer.py, _load_from_hub -> _resolve_local_snapshot); online it loads it.
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        if api_key:
            env["OPENAI_API_KEY"] = api_key
    return env


def read_result(client: str, outdir: str):
    if client == "aiperf":
        path = Path(outdir) / "profile_export_aiperf.json"
        return json.loads(path.read_text()) if path.exists() else None
    path = Path(outdir) / "result.jsonl"
    if not path.exists():
        return None
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else None


def scrape(url: str, names: list[str], timeout: float = 5.0) -> str:
    """The lines of one /metrics page whose metric name starts with one of names ('' when unreachable)."""
    try:
        with DIRECT.open(url, timeout=timeout) as resp:
            text = resp.read().decode(errors="replace")
    except OSError as exc:
        return f"# scrape failed: {exc}\n"
    keep = tuple(names)
    return "".join(line + "\n" for line in text.splitlines() if line.startswith(keep))


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text())
    api_key = os.environ.get("SGLANG_BENCH_API_KEY", "")
    urls = cfg.get("metrics_urls") or {}
    names = cfg.get("metric_names") or ["sglang:"]
    gauges = tuple(cfg.get("gauge_names") or ())
    workdir = Path(cfg.get("workdir") or tempfile.gettempdir())
    workdir.mkdir(parents=True, exist_ok=True)
    outdir = tempfile.mkdtemp(prefix=f"bench-c{cfg['concurrency']}-", dir=workdir)
    metrics = {name: {"before": scrape(url, names), "samples": []} for name, url in urls.items()}

    stop = threading.Event()

    def sampler():
        while not stop.wait(float(cfg.get("metrics_interval", 2))):
            for name, url in urls.items():
                text = scrape(url, gauges or names, timeout=2.0)
                metrics[name]["samples"].append(text)
                del metrics[name]["samples"][:-500]  # bounded

    thread = threading.Thread(target=sampler, daemon=True)
    cmd = build_command(cfg, outdir, api_key)
    env = client_env(os.environ, cfg["client"], api_key)
    started = time.monotonic()
    deadline = float(cfg["deadline"])
    timed_out = False
    thread.start()
    with open(Path(outdir) / "client.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=outdir, start_new_session=True)
        try:
            rc = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
    seconds = time.monotonic() - started
    stop.set()
    thread.join(timeout=10)
    for name, url in urls.items():
        metrics[name]["after"] = scrape(url, names)
    tail = (Path(outdir) / "client.log").read_text(errors="replace").splitlines()[-40:]
    try:
        raw = read_result(cfg["client"], outdir)
    except ValueError as exc:
        raw, tail = None, [*tail, f"unreadable result: {exc}"]
    shown = [("***" if api_key and part == api_key else part) for part in cmd]
    print(
        json.dumps(
            {
                "rc": rc,
                "seconds": round(seconds, 3),
                "timed_out": timed_out,
                "command": shown,
                "raw": raw,
                "output_tail": "\n".join(tail).replace(api_key, "***") if api_key else "\n".join(tail),
                "metrics": metrics,
            }
        )
    )
    if not cfg.get("keep_workdir"):
        shutil.rmtree(outdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
