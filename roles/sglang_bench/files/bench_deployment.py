"""What was measured: the reports kept so far, and the deployment a run measured, read on the controller from the
run's meta.json (the unit files of every host, the installed versions, the collection). bench_tool.py and
accuracy.py put it into their reports; split from bench_report.py (the report's contents) at this seam."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path


def load_reports(inventory_dir: Path, name: str) -> list[dict]:
    """The readable reports NAME (report.json, accuracy.json) of an inventory's runs, each with its directory."""
    reports = []
    for path in sorted(inventory_dir.glob(f"*/{name}")):
        try:
            report = json.loads(path.read_text())
        except ValueError:
            continue
        report["_dir"] = str(path.parent)
        reports.append(report)
    return reports


def collection_info(root: Path) -> dict:
    info = {"name": None, "version": None, "commit": None, "dirty": None}
    galaxy, manifest = root / "galaxy.yml", root / "MANIFEST.json"
    if galaxy.exists():
        for line in galaxy.read_text().splitlines():
            key, _unused, value = line.partition(":")
            if key in ("namespace", "name", "version") and value.strip():
                info[key] = value.strip().strip("\"'")
        if info.get("namespace"):
            info["name"] = f"{info.pop('namespace')}.{info['name']}"
    elif manifest.exists():
        ci = json.loads(manifest.read_text()).get("collection_info", {})
        info.update(name=f"{ci.get('namespace')}.{ci.get('name')}", version=ci.get("version"))
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        if commit.returncode == 0:
            info["commit"] = commit.stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            info["dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def deployment(meta: dict) -> dict:
    units, versions, simulated = {}, {}, False
    for host, h in sorted((meta.get("hosts") or {}).items()):
        versions[host] = h.get("versions") or {}
        for name, text in sorted((h.get("units") or {}).items()):
            unit = parse_unit(text)
            units[name] = {
                "host": host,
                "module": unit["module"],
                "flags": unit["flags"],
                "placement": placement_of(unit),
            }
        for info in (h.get("server_info") or {}).values():
            if isinstance(info, dict) and info.get("simulator"):
                simulated = True
    return {
        "collection": collection_info(Path(meta["collection_root"])),
        "profile": meta.get("profile"),
        "units": units,
        "versions": versions,
        "simulated": simulated,
        "routers": routers(units),
        "model": model(meta, units),
    }


WORKER_ROLES = ("prefill", "decode")


def model(meta: dict, units: dict) -> dict:
    """The model the measured workers served: {revision, workers {unit@host: revision}}. A worker's revision is its
    record's model_revision, which the plan's spec named (the commit of sglang_model_source; roles/sglang/tasks/
    units.yml writes the record), or "managed outside: <directory>" where the spec has none (no model source: the
    collection does not know what sglang_model_path holds; the directory is the record's model_path, else the
    unit's --model-path). revision: the one revision of every worker, or "mixed: ..." (the plan refuses that:
    rules.model_revision_problems), or None without a worker record."""
    workers = {}
    for host, h in sorted((meta.get("hosts") or {}).items()):
        for name, record in sorted((h.get("records") or {}).items()):
            if not isinstance(record, dict) or record.get("role") not in WORKER_ROLES:
                continue
            unit_name = record.get("unit") or name
            revision = record.get("model_revision")
            if revision is None:
                flags = (units.get(f"{unit_name}.service") or {}).get("flags") or {}
                path = record.get("model_path") or (flags.get("--model-path") or [None])[0]
                revision = f"managed outside: {path}"
            workers[f"{unit_name}@{host}"] = revision
    found = sorted(set(workers.values()))
    return {
        "revision": found[0] if len(found) == 1 else (f"mixed: {', '.join(found)}" if found else None),
        "workers": workers,
    }


# The router programs a unit may run (sglang_router_impl; plugins/module_utils/units/router_flags.py ROUTER_IMPLS)
ROUTER_MODULES = {"sglang_router.launch_router": "sglang_router", "smg.launch_router": "smg"}
ROUTER_LIST_FLAGS = ("--pd-disaggregation", "--prefill", "--decode")


def routers(units: dict) -> dict:
    """{unit: {impl, module, settings}} of the router units measured: which program routed, and the settings it was
    started with (every flag but its worker list), SMG's written-out routing defaults among them."""
    return {
        name: {
            "impl": ROUTER_MODULES[unit["module"]],
            "module": unit["module"],
            "settings": {k: v for k, v in unit["flags"].items() if k not in ROUTER_LIST_FLAGS},
        }
        for name, unit in units.items()
        if unit.get("module") in ROUTER_MODULES
    }


# --------------------------------------------------------------------------------------------------
# The deployment that was measured: unit files -> flags and placement
# --------------------------------------------------------------------------------------------------


def parse_unit(text: str) -> dict:
    """{argv, module, flags {--flag: [values]}, numactl [...], environment {k: v}} of a rendered unit."""
    joined = re.sub(r"\\\n\s*", " ", text or "")
    m = re.search(r"^ExecStart=(.*)$", joined, re.MULTILINE)
    argv = shlex.split(m.group(1).replace("%%", "%").replace("$$", "$")) if m else []
    env = {}
    for line in re.findall(r"^Environment=(.*)$", joined, re.MULTILINE):
        for item in shlex.split(line):
            if "=" in item:
                k, v = item.split("=", 1)
                env[k] = v
    numactl, module, flags, start = [], None, {}, len(argv)
    for i, tok in enumerate(argv):
        if tok == "-m" and i + 1 < len(argv):
            module, start = argv[i + 1], i + 2
            break
        # the secret launcher (module_utils/units/units.py): python -c '... run_module("MOD" ...'
        launched = (
            re.search(r'runpy\.run_module\("([\w.]+)"', argv[i + 1]) if tok == "-c" and i + 1 < len(argv) else None
        )
        if launched:
            module, start = launched.group(1), i + 2
            break
    if argv and "numactl" in argv[0]:
        for tok in argv[1:]:
            if not tok.startswith("-"):
                break
            numactl.append(tok)
    if module is None:  # a binary with flags (`sglang serve ...`)
        start = next((i for i, t in enumerate(argv) if t.startswith("--") and "numactl" not in argv[0]), len(argv))
    current = None
    for tok in argv[start:]:
        if tok.startswith("--"):
            current = tok
            flags[current] = []
        elif current is not None:
            flags[current].append(tok)
        elif module and tok not in ("serve",):
            flags.setdefault("(args)", []).append(tok)
    return {"argv": argv, "module": module, "flags": flags, "numactl": numactl, "environment": env}


def placement_of(unit: dict) -> dict:
    env, flags = unit["environment"], unit["flags"]
    return {
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "numactl": " ".join(unit["numactl"]) or None,
        "tp_size": (flags.get("--tp-size") or [None])[0],
        "base_gpu_id": (flags.get("--base-gpu-id") or [None])[0],
    }
