#!/usr/bin/env python
"""Probe a real GPU host with the collection's topology code, through both sources, and keep the raw data.

Run on the GPU machine from the repository root (tests/hardware/run_topology.sh does this on the device
machine):  python3 tests/hardware/run_topology.py OUTDIR
Needs Python 3.9+, nvidia-smi and, for the NVML path, pynvml (nvidia-ml-py). No Ansible needed: the
module_utils files are imported through tests/hardware/collection_path.py; when ansible-core is
importable the module itself also runs.

Writes into OUTDIR (8 files at most, what the device tool returns):
  topo-m.txt, query-gpu.csv, topo-p2p-r.txt  raw nvidia-smi outputs (LC_ALL=C)
  sysfs.json     {path under /: content} of the sysfs files the module reads
  nvml.json      NVML's raw answers, in the format of tests/unit/topology_fakes.FakeNVML
  results.json   facts through each source, timings, checks, environment
  module.json    the Ansible module's results (ad-hoc, both sources and check mode) when ansible-core is there
  (run.log is written by the shell wrapper)
"""

import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from collection_path import adhoc, module_utils, subprocess_runner  # noqa: E402 (this folder, put on sys.path above)

gt = module_utils("host.gpu_topology")

SOURCES = ("nvml", "nvidia-smi")
REPEATS = 5


def log(*args):
    print(*args, flush=True)


def _s(value):
    return value.decode("utf-8", "replace").rstrip("\x00") if isinstance(value, bytes) else value


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"


def capture_smi(outdir, smi):
    """The raw outputs, exactly as printed."""
    raw = {}
    for fname, args in (
        ("query-gpu.csv", gt.QUERY_ARGS),
        ("topo-m.txt", gt.TOPO_ARGS),
        ("topo-p2p-r.txt", gt.P2P_ARGS),
    ):
        t0 = time.perf_counter()
        rc, out, err = subprocess_runner([smi, *args])
        took = time.perf_counter() - t0
        Path(outdir, fname).write_text(out if rc == 0 else f"# rc {rc}\n{out}{err}")
        raw[fname] = {"argv": ["nvidia-smi", *args], "rc": rc, "seconds": round(took, 4)}
        log(f"$ nvidia-smi {' '.join(args)}   (rc {rc}, {took:.3f} s)\n{out}{err}")
    for args in (["--version"], ["-L"], ["nvlink", "-s"], ["topo", "-p2p", "n"]):
        rc, out, err = subprocess_runner([smi, *args])
        raw[" ".join(args)] = {"rc": rc, "output": (out + err)[-4000:]}
        log(f"$ nvidia-smi {' '.join(args)}   (rc {rc})\n{out}{err}")
    return raw


def capture_sysfs(outdir, bus_ids):
    files = {}
    patterns = [
        "/sys/devices/system/node/node*/cpulist",
        "/sys/devices/system/node/possible",
        "/sys/devices/system/node/online",
        "/sys/devices/system/cpu/possible",
        "/sys/devices/system/cpu/online",
    ]
    for bus in bus_ids:
        for name in ("numa_node", "local_cpulist", "local_cpus", "current_link_speed", "current_link_width"):
            patterns.append(f"/sys/bus/pci/devices/{bus}/{name}")
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                files[path.lstrip("/")] = Path(path).read_text().strip()
            except OSError as exc:
                files[path.lstrip("/")] = f"error: {exc}"
    Path(outdir, "sysfs.json").write_text(json.dumps(files, indent=1, sort_keys=True) + "\n")
    log("sysfs:", json.dumps(files, indent=1, sort_keys=True))
    return files


def record_nvml(outdir):
    """Every NVML answer the module uses, errors included, for replay in unit tests."""
    rec = {"comment": "recorded by tests/hardware/run_topology.py", "init": "ok", "gpus": [], "pairs": {}}
    try:
        nvml = gt.load_pynvml()
    except Exception as exc:
        rec["init"] = f"error: pynvml not importable: {exc}"
        Path(outdir, "nvml.json").write_text(json.dumps(rec, indent=1) + "\n")
        return rec
    rec["pynvml_max_links"] = getattr(nvml, "NVML_NVLINK_MAX_LINKS", None)
    try:
        nvml.nvmlInit()
    except Exception as exc:
        rec["init"] = f"error: {type(exc).__name__}: {exc}"
        Path(outdir, "nvml.json").write_text(json.dumps(rec, indent=1) + "\n")
        return rec
    try:
        rec["driver_version"] = _s(_call(nvml.nvmlSystemGetDriverVersion))
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        words = max(1, (gt.cpu_count("/") + 63) // 64)
        for h in handles:
            pci = _call(nvml.nvmlDeviceGetPciInfo, h)
            mem = _call(nvml.nvmlDeviceGetMemoryInfo, h)
            cc = _call(nvml.nvmlDeviceGetCudaComputeCapability, h)
            cpu = _call(nvml.nvmlDeviceGetCpuAffinity, h, words)
            node = _call(nvml.nvmlDeviceGetMemoryAffinity, h, 1, 0)
            gpu = {
                "uuid": _s(_call(nvml.nvmlDeviceGetUUID, h)),
                "name": _s(_call(nvml.nvmlDeviceGetName, h)),
                "busId": pci if isinstance(pci, str) else _s(pci.busId),
                "memory_total": mem if isinstance(mem, str) else int(mem.total),
                "cuda_cc": cc if isinstance(cc, str) else list(cc),
                "cpu_affinity": cpu if isinstance(cpu, str) else [int(w) for w in cpu],
                "memory_affinity": node if isinstance(node, str) else [int(w) for w in node],
                "numa_node_id": _call(nvml.nvmlDeviceGetNumaNodeId, h),
                "nvlinks": [],
            }
            for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
                state = _call(nvml.nvmlDeviceGetNvLinkState, h, link)
                entry = {"link": link, "state": state}
                if state == 1:
                    remote = _call(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                    entry["remote_bus"] = remote if isinstance(remote, str) else _s(remote.busId)
                    entry["remote_type"] = _call(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
                gpu["nvlinks"].append(entry)
            rec["gpus"].append(gpu)
        for i, hi in enumerate(handles):
            for j, hj in enumerate(handles):
                if i != j:
                    rec["pairs"][f"{i},{j}"] = {
                        "common_ancestor": _call(nvml.nvmlDeviceGetTopologyCommonAncestor, hi, hj),
                        "p2p_read": _call(nvml.nvmlDeviceGetP2PStatus, hi, hj, 0),
                        "p2p_write": _call(nvml.nvmlDeviceGetP2PStatus, hi, hj, 1),
                        "p2p_nvlink": _call(nvml.nvmlDeviceGetP2PStatus, hi, hj, 2),
                    }
    finally:
        _call(nvml.nvmlShutdown)
    Path(outdir, "nvml.json").write_text(json.dumps(rec, indent=1) + "\n")
    log("nvml:", json.dumps({k: v for k, v in rec.items() if k != "gpus"}, indent=1))
    for g in rec["gpus"]:
        active = [e for e in g["nvlinks"] if e.get("state") == 1]
        log(
            f"  {g['busId']} {g['name']} cc {g['cuda_cc']} mem {g['memory_total']} cpu {g['cpu_affinity']} "
            f"node {g['memory_affinity']} numa_id {g['numa_node_id']} active links {len(active)}: "
            f"{[(e.get('remote_bus'), e.get('remote_type')) for e in active][:3]}"
        )
    return rec


def once(source):
    """Child mode: one gather() in a fresh interpreter (cold: library loads, first NVML init)."""
    t0 = time.perf_counter()
    facts = gt.gather(source=source, runner=subprocess_runner)
    took = time.perf_counter() - t0
    print(json.dumps({"seconds": took, "facts": facts}))


def time_sources():
    out = {}
    for source in SOURCES:
        t0 = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--once", source], capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - t0
        cold = json.loads(child.stdout) if child.returncode == 0 else {"error": child.stderr[-2000:]}
        warm = []
        facts = None
        for _repeat in range(REPEATS):
            t1 = time.perf_counter()
            facts = gt.gather(source=source, runner=subprocess_runner)
            warm.append(time.perf_counter() - t1)
        out[source] = {
            "facts": facts,
            "cold_gather_s": round(cold.get("seconds", -1), 4),
            "cold_process_wall_s": round(wall, 4),
            "warm_gather_s": [round(t, 4) for t in warm],
            "warm_median_s": round(statistics.median(warm), 4),
            "cold_facts_equal_warm": cold.get("facts") == facts,
        }
        log(
            f"{source}: cold gather {out[source]['cold_gather_s']} s (process {wall:.3f} s), "
            f"warm median {out[source]['warm_median_s']} s of {out[source]['warm_gather_s']}"
        )
    return out


pp = module_utils("plan.pd_placement")

# The layouts of the deployment notes, by GPU count: issue 7 asks for 1P1D TP4+TP4 and 2P2D TP2 x 4 on 8 GPUs.
LAYOUTS = {
    "1P1D TP4+TP4": [{"name": "prefill0", "tp": 4}, {"name": "decode0", "tp": 4}],
    "2P2D TP2x4": [
        {"name": "prefill0", "tp": 2},
        {"name": "prefill1", "tp": 2},
        {"name": "decode0", "tp": 2},
        {"name": "decode1", "tp": 2},
    ],
    "1P1D TP1+TP1": [{"name": "prefill0", "tp": 1}, {"name": "decode0", "tp": 1}],
}


def placements(facts):
    """pd_placement of each layout that fits the host's GPUs (the error text for those that don't)."""
    out = {}
    for layout, instances in LAYOUTS.items():
        try:
            out[layout] = pp.place(facts, instances)
        except pp.PlacementError as exc:
            out[layout] = {"error": str(exc)}
    return out


def checks(timed):
    a, b = timed["nvml"]["facts"], timed["nvidia-smi"]["facts"]
    res = {}
    for name, facts in (("nvml", a), ("nvidia-smi", b)):
        gpus = facts["gpus"]
        res[f"{name}: source used"] = facts["sources"]["gpus"] == [name]
        res[f"{name}: GPU count"] = len(gpus)
        res[f"{name}: compute capabilities"] = sorted({g["compute_capability"] or "?" for g in gpus})
        res[f"{name}: links"] = facts["links"]
        res[f"{name}: under 0.5 s warm"] = timed[name]["warm_median_s"] < 0.5
        res[f"{name}: under 0.5 s cold"] = 0 <= timed[name]["cold_gather_s"] < 0.5
    for part in ("gpus", "links", "numa_nodes", "p2p"):
        res[f"agree: {part}"] = a[part] == b[part]
    return res


def run_module():
    """The real module through ansible-core, when it can be imported (carried as a wheel)."""
    try:
        import ansible  # noqa: F401, PLC0415  (optional here)
    except ImportError:
        return {"skipped": "ansible-core is not importable"}
    tmp = Path(tempfile.mkdtemp(prefix="topo-ansible-"))
    link = tmp / "ansible_collections" / "disagg" / "sglang"
    link.parent.mkdir(parents=True)
    link.symlink_to(REPO)
    cfg = tmp / "ansible.cfg"
    cfg.write_text(
        f"[defaults]\ncollections_path = {tmp}\ninterpreter_python = auto_silent\nlocal_tmp = /tmp/.ansible-local\n"
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), LC_ALL="C.UTF-8", LANG="C.UTF-8", ANSIBLE_NOCOLOR="1")
    runs = []
    for args in (["source=nvml"], ["source=nvidia-smi"], ["source=auto", "--check"]):
        t0 = time.perf_counter()
        proc, status, result = adhoc([sys.executable, "-m", "ansible", "adhoc"], "disagg.sglang.gpu_topology", args,
                                     env=env)  # fmt: skip
        wall = time.perf_counter() - t0
        entry = {"argv": ["ansible", *proc.args[3:]], "rc": proc.returncode, "wall_s": round(wall, 3)}
        entry["result"] = result
        if entry["result"] is None:
            entry["stdout"] = proc.stdout[-4000:]
        entry["stderr"] = proc.stderr[-2000:]
        entry["status"] = status
        runs.append(entry)
        log(f"ansible {' '.join(args)}: rc {proc.returncode}, {wall:.2f} s, {status}")
    return {"runs": runs}


def main(argv):
    if len(argv) == 3 and argv[1] == "--once":
        return once(argv[2])
    outdir = Path(argv[1] if len(argv) > 1 else os.environ.get("OUT", "/tmp/topology-out"))
    outdir.mkdir(parents=True, exist_ok=True)
    smi = gt.find_nvidia_smi()
    env = {
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "nvidia_smi": smi,
        "cpu_count": os.cpu_count(),
        "sysfs_cpu_count": gt.cpu_count("/"),
    }
    try:
        from importlib.metadata import version  # noqa: PLC0415

        env["nvidia-ml-py"] = version("nvidia-ml-py")
    except Exception as exc:
        env["nvidia-ml-py"] = f"unknown: {exc}"
    log("environment:", json.dumps(env))
    raw = capture_smi(outdir, smi) if smi else {}
    timed = time_sources()
    bus_ids = sorted({g["pci_bus_id"] for s in SOURCES for g in timed[s]["facts"]["gpus"] if g["pci_bus_id"]})
    capture_sysfs(outdir, bus_ids)
    nvml = record_nvml(outdir)
    env["driver_version"] = nvml.get("driver_version")
    result = {
        "environment": env,
        "nvidia_smi_runs": raw,
        "timings": timed,
        "checks": checks(timed),
        "placements": {source: placements(timed[source]["facts"]) for source in SOURCES},
    }
    Path(outdir, "results.json").write_text(json.dumps(result, indent=1) + "\n")
    log("checks:", json.dumps(result["checks"], indent=1))
    for source in SOURCES:
        log(f"facts via {source}:", json.dumps(timed[source]["facts"], indent=1))
        log(f"placements via {source}:", json.dumps(result["placements"][source], indent=1))
    module = run_module()
    Path(outdir, "module.json").write_text(json.dumps(module, indent=1) + "\n")
    shutil.rmtree("/tmp/.ansible-local", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
