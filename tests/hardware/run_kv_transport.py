#!/usr/bin/env python
"""Run the KV transport probe on a real GPU host in the three cases of issue 13, and capture the
peer-to-peer status that gpu_topology reads; keep every raw output.

Run on the GPU machine from the repository root (tests/hardware/run_kv_transport.sh does this on the
device machine, with nixl + nixl-cu13 1.5.1 installed from carried wheels):
    python3 tests/hardware/run_kv_transport.py OUTDIR [--mib 1024] [--iters 3]
Writes into OUTDIR (at most 8 files, what the device tool returns):
  default.log, no-cuda-ipc.log, expandable.log   the probe's stdout+stderr in each case (UCX tables included)
  p2p.txt        `nvidia-smi topo -p2p r|w|n|a|p` outputs, each after a `$ nvidia-smi ...` line
  nvml-p2p.json  NVML's nvmlDeviceGetP2PStatus for every ordered pair and caps index 0..4, and gather()
  results.json   each case's command, environment, rc, seconds and decision (kv_transport.decide)
  (run.log is written by the shell wrapper)
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collection_path import module_utils, subprocess_runner

kt = module_utils("kv.kv_transport")
gt = module_utils("host.gpu_topology")

CASES = [
    ("default", {}),
    ("no-cuda-ipc", {"UCX_TLS": "^cuda_ipc"}),
    ("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
]
P2P_CAPS = {0: "READ", 1: "WRITE", 2: "NVLINK", 3: "ATOMICS", 4: "PROP"}


def log(*args):
    print(*args, flush=True)


def capture_p2p(outdir):
    smi = gt.find_nvidia_smi() or "nvidia-smi"
    parts = []
    for flag in ("r", "w", "n", "a", "p"):
        rc, out, err = subprocess_runner([smi, "topo", "-p2p", flag])
        parts.append(f"$ nvidia-smi topo -p2p {flag}   (rc {rc})\n{out}{err}")
    Path(outdir, "p2p.txt").write_text("".join(parts))
    log("".join(parts))
    rec = {"pairs": {}, "error": None}
    try:
        nvml = gt.load_pynvml()
        nvml.nvmlInit()
        n = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                row = {}
                for idx, name in P2P_CAPS.items():
                    try:
                        row[name] = int(nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], idx))
                    except Exception as exc:
                        row[name] = f"error: {type(exc).__name__}: {exc}"
                rec["pairs"][f"{i},{j}"] = row
        nvml.nvmlShutdown()
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["gather_nvml"] = gt.gather(source="nvml", runner=subprocess_runner)
    rec["gather_nvidia_smi"] = gt.gather(source="nvidia-smi", runner=subprocess_runner)
    Path(outdir, "nvml-p2p.json").write_text(json.dumps(rec, indent=1, default=repr) + "\n")
    log(json.dumps(rec["pairs"], indent=1))
    return len(rec["gather_nvml"]["gpus"]) or len(rec["gather_nvidia_smi"]["gpus"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--mib", type=float, default=1024)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--min-gbps", type=float, default=200)
    args = parser.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    n = capture_p2p(out)
    src, dst = 0, min(1, max(n - 1, 0))
    log(f"{n} GPUs: probe GPU {src} -> GPU {dst}")
    results = {"gpus": n, "python": sys.executable, "cases": {}}
    source = kt.worker_source()
    for name, extra in CASES:
        env = dict(os.environ, **extra)
        argv = kt.probe_argv(sys.executable, source, kt.probe_args(src, dst, args.mib, args.iters))
        shown = (
            " ".join(f"{k}={v}" for k, v in extra.items()) + " python3 -c <kv_probe_worker.py> " + " ".join(argv[3:])
        )
        log(f"== case {name}: {shown.strip()}")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, text = 124, f"{exc.stdout or ''}{exc.stderr or ''}\n(timed out after 240 s)"
        took = time.perf_counter() - t0
        (out / f"{name}.log").write_text(text)
        decision = kt.decide(text, args.min_gbps, src, dst, extra)
        results["cases"][name] = {"command": shown.strip(), "rc": rc, "wall_s": round(took, 2), "decision": decision}
        log(text[-6000:])
        log(f"-> rc {rc}, {took:.1f} s: {json.dumps(decision, indent=1)}")
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
