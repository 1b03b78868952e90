#!/usr/bin/env python
"""Read a real GPU host's readiness with the collection's reader, and keep the raw files it read (issue 41).

Run on the GPU machine from the repository root:  python3 tests/hardware/run_readiness.py OUTDIR
Needs Python 3.9+ and nvidia-smi; no Ansible (module_utils come through tests/hardware/collection_path.py).

Writes into OUTDIR:
  facts.json     readiness_look.look("/") with nvidia-smi run as the module runs it (LC_ALL=C)
  raw.json       {path under /: text, or "hex:<bytes>" for a PCI config space} of every file the reader opens
  smi-q.txt      the `nvidia-smi -q` text it parsed
  findings.json  readiness_rules.findings of this host for a prefill and a decode worker on its GPUs (every GPU
                 both roles' where it has one), and the wall time of the look
tests/unit/host/test_host_readiness_look.py rebuilds the root from raw.json and checks the reader gives facts.json
again.
"""

import builtins
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collection_path import module_utils

look_mod = module_utils("host.readiness_look")
rules = module_utils("plan.readiness_rules")


def main(out):
    out.mkdir(parents=True, exist_ok=True)
    opened = {}
    real_open = builtins.open

    def recording_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        text_path = os.fspath(path)
        if text_path.startswith(("/proc/", "/sys/")) and "r" in mode:
            try:
                with real_open(text_path, "rb") as raw:
                    data = raw.read()
                binary = text_path.endswith("/config")
                opened[text_path] = "hex:" + data.hex() if binary else data.decode("utf-8", "replace")
            except OSError as exc:
                opened[text_path] = f"error: {exc}"
        return handle

    smi_text = {}

    def run(argv):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C"))
        if argv[1:] == ["-q"]:
            smi_text["q"] = proc.stdout
        return proc.returncode, proc.stdout, proc.stderr

    builtins.open = recording_open
    try:
        started = time.monotonic()
        facts = look_mod.look("/", run=run, nvidia_smi=None)
        seconds = round(time.monotonic() - started, 3)
    finally:
        builtins.open = real_open
    gpus = sorted(facts["gpus"])
    topology = {"gpus": [{"index": i, "pci_bus_id": bus, "memory_total_mib": None} for i, bus in enumerate(gpus)]}
    specs = [{"role": "prefill", "gpus": list(range(len(gpus)))}, {"role": "decode", "gpus": list(range(len(gpus)))}]
    (out / "facts.json").write_text(json.dumps(facts, indent=1, sort_keys=True))
    (out / "raw.json").write_text(json.dumps(opened, indent=1, sort_keys=True))
    (out / "smi-q.txt").write_text(smi_text.get("q", ""))
    found = rules.findings(facts, specs, topology)
    (out / "findings.json").write_text(json.dumps({"seconds": seconds, "findings": found}, indent=1))
    print(
        json.dumps(
            {
                "seconds": seconds,
                "gpus": gpus,
                "acs": facts["acs"],
                "unread": facts["unread"],
                "cmdline": facts["cmdline"],
                "iommu_groups": facts["iommu_groups"],
                "findings": found,
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/readiness-out"))
