"""Capture real `python -m sglang.bench_serving` results for the bench report's fixtures (issue 14).

sglang.bench_serving imports torch, so it cannot run on the controller; the lent GPU machine has torch.
There, with sglang 0.5.23 unpacked on PYTHONPATH, this starts two simulators (prefill, decode) and the
real sglang-router in PD mode, and runs the role's own step runner (roles/sglang_bench/files/bench_step.py)
with client=bench_serving at each concurrency, as the bench playbook does. The server side is the
simulator, so its latencies are simulated; the client, its command line and its output file are real.

    python3 tests/hardware/capture_bench_serving.py OUTDIR [CONCURRENCY ...]

Writes per concurrency: bench_serving-c{N}.jsonl (the client's --output-file, as written), step-c{N}.json
(bench_step.py's printed object), client-c{N}.log; and servers.log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))
sys.path.insert(0, str(ROOT))  # tests.http_client
from fakegpu import render_model  # noqa: E402  (the sandbox's tiny real tokenizer)

from tests.http_client import free_port, http  # noqa: E402

# The sandbox's bench settings (tests/integration/test_bench.py): a token latency so TPOT has a value,
# a decode batch factor and a per-token prefill cost so the shapes are those of the report.
SIM_ENV = {
    "SGLANG_SIM_TOKEN_LATENCY": "0.01",
    "SGLANG_SIM_DECODE_BATCH_FACTOR": "0.05",
    "SGLANG_SIM_PREFILL_TOKEN_LATENCY": "0.0001",
}
INPUT_LEN, OUTPUT_LEN = 256, 64


def wait_ok(url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if http("GET", url, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"not healthy in time: {url}")


def main(argv: list[str]) -> int:
    out = Path(argv[1])
    concurrencies = [int(c) for c in argv[2:]] or [4, 8]
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bsv-"))
    model = work / "model"
    render_model(model)
    log = open(out / "servers.log", "wb")  # open for the servers' lifetime
    pythonpath = [str(ROOT / "tests/sandbox/pdsim"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath))
    procs = []
    ports = {"prefill": free_port(), "decode": free_port(), "bootstrap": free_port(), "router": free_port()}
    try:
        for role in ("prefill", "decode"):
            argv_sim = [sys.executable, "-m", "sglang_pd_sim", "serve", "--model-path", str(model),
                        "--served-model-name", "sim", "--host", "127.0.0.1", "--port", str(ports[role]),
                        "--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl",
                        "--enable-metrics"]  # fmt: skip
            if role == "prefill":
                argv_sim += ["--disaggregation-bootstrap-port", str(ports["bootstrap"])]
            procs.append(subprocess.Popen(argv_sim, stdout=log, stderr=subprocess.STDOUT, env=env | SIM_ENV))
        for role in ("prefill", "decode"):
            wait_ok(f"http://127.0.0.1:{ports[role]}/health", time.monotonic() + 60)
        router = [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
                  "--prefill", f"http://127.0.0.1:{ports['prefill']}", str(ports["bootstrap"]),
                  "--decode", f"http://127.0.0.1:{ports['decode']}",
                  "--host", "127.0.0.1", "--port", str(ports["router"]),
                  "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
                  "--worker-startup-check-interval", "1", "--request-timeout-secs", "120",
                  "--log-level", "warn"]  # fmt: skip
        procs.append(subprocess.Popen(router, stdout=log, stderr=subprocess.STDOUT, env=env))
        wait_ok(f"http://127.0.0.1:{ports['router']}/readiness", time.monotonic() + 90)
        for c in concurrencies:
            cfg = {
                "client": "bench_serving", "python": sys.executable,
                "url": f"http://127.0.0.1:{ports['router']}", "endpoint": "completions",
                "model": "sim", "tokenizer": str(model), "concurrency": c, "requests": 5 * c,
                "warmup": 2, "input_len": INPUT_LEN, "output_len": OUTPUT_LEN, "request_rate": "inf",
                "slo_ttft_ms": 200, "slo_tpot_ms": 20, "seed": 1, "request_timeout": 120, "deadline": 240,
                "metrics_urls": {
                    "prefill": f"http://127.0.0.1:{ports['prefill']}/metrics",
                    "decode": f"http://127.0.0.1:{ports['decode']}/metrics",
                },
                "metric_names": ["sglang:kv_transfer", "sglang:num_queue_reqs", "sglang:num_running_reqs"],
                "workdir": str(work / "steps"), "keep_workdir": True,
            }  # fmt: skip
            cfg_path = work / f"step-c{c}.cfg.json"
            cfg_path.write_text(json.dumps(cfg))
            step = ROOT / "roles/sglang_bench/files/bench_step.py"
            started = time.monotonic()
            cmd = [sys.executable, str(step), str(cfg_path)]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            print(f"c={c}: step rc {res.returncode} in {time.monotonic() - started:.1f} s", flush=True)
            (out / f"step-c{c}.json").write_text(res.stdout + res.stderr)
            for result in (work / "steps").glob(f"bench-c{c}-*/result.jsonl"):
                shutil.copy(result, out / f"bench_serving-c{c}.jsonl")
            for client_log in (work / "steps").glob(f"bench-c{c}-*/client.log"):
                shutil.copy(client_log, out / f"client-c{c}.log")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
