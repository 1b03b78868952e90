"""The host readiness reader on the real capture of the lent H100 VM (tests/fixtures/host_readiness/h100-vm-2026-12-05,
written by tests/hardware/run_readiness.py on 2026-12-05): a root rebuilt from every file the reader opened there
reads back as the facts it returned there, and the rules judge its one GPU as the machine is."""

import json
import os
from pathlib import Path

from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness_look
from ansible_collections.disagg.sglang.plugins.module_utils.plan import readiness_rules

CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "host_readiness" / "h100-vm-2026-12-05"
RAW = json.loads((CAPTURE / "raw.json").read_text())
FACTS = json.loads((CAPTURE / "facts.json").read_text())
SMI = (CAPTURE / "smi-q.txt").read_text()
GPU = "0000:00:06.0"


def rebuild(root):
    """Every captured file under ROOT; a PCI device's files in its device directory under /sys/devices, which
    /sys/bus/pci/devices links to, as sysfs lays them out."""
    for path, text in RAW.items():
        assert not text.startswith(("hex:", "error:")), f"{path}: the H100 VM read no config space and no error"
        rel = path.lstrip("/")
        if rel.startswith("sys/bus/pci/devices/"):
            bdf, name = rel.split("/")[4:6]
            device = root / "sys/devices/pci0000:00" / bdf
            device.mkdir(parents=True, exist_ok=True)
            (device / name).write_text(text)
            link = root / "sys/bus/pci/devices" / bdf
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(os.path.relpath(device, link.parent))
            continue
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    # nvidia is loaded but sysfs shows none of its parameters (nv-linux.h declares them with permission 0): the
    # reader opened no file of it, and found its directory
    (root / "sys/module/nvidia/parameters").mkdir(parents=True)


def look(root):
    rebuild(root)
    calls = []

    def run(argv):
        calls.append(argv)
        return (0, SMI, "") if argv[1:] == ["-q"] else (2, "", "not captured")

    return readiness_look.look(str(root), run=run, nvidia_smi="/usr/bin/nvidia-smi"), calls


def test_the_rebuilt_h100_root_reads_back_as_the_machine_read_it(tmp_path):
    facts, calls = look(tmp_path)

    assert calls == [["/usr/bin/nvidia-smi", "-q"]]
    assert {k: v for k, v in facts.items() if k != "root"} == {k: v for k, v in FACTS.items() if k != "root"}
    gpu = facts["gpus"][GPU]
    # what the machine's nvidia-smi -q said, read by the parser: BAR1 128 GiB, a Gen5 x16 link, no bridge above
    assert (gpu["bar1_total_mib"], gpu["persistence_mode"], gpu["bridges"]) == (131072, "Enabled", [])
    assert (gpu["pcie_gen_current"], gpu["pcie_width_current"]) == (5, 16)
    assert facts["modules"]["nvidia_uvm"]["uvm_disable_hmm"] == "N"
    assert facts["aspm_policy"] == "default" and facts["cmdline"]["iommu_mode"] == "unknown"
    assert facts["unread"] == {}


def test_one_gpu_is_no_kv_lane_and_the_same_readings_on_a_pair_judge_its_real_numbers(tmp_path):
    facts, _calls = look(tmp_path)
    memory = 81559  # FB Memory Usage Total, smi-q.txt
    one = {"gpus": [{"index": 0, "pci_bus_id": GPU, "memory_total_mib": memory}]}
    both = [{"role": "prefill", "gpus": [0]}, {"role": "decode", "gpus": [0]}]

    # as the machine is: one GPU holds no prefill->decode pair, so uvm_disable_hmm=N is no finding; persistence is
    # Enabled, NUMA balancing 0 and there is no governor: no tuning finding either
    assert readiness_rules.findings(facts, both, one) == []

    # the same readings on a host with a second such GPU (prefill on one, decode on the other): the stability rows
    # for uvm_disable_hmm=N and the ASPM policy [default], and no bar1 row, since this H100's BAR1 (131072 MiB)
    # covers its memory
    other = "0000:00:07.0"
    pair = json.loads(json.dumps(facts))
    pair["gpus"][other] = pair["gpus"][GPU]
    two = {"gpus": [*one["gpus"], {"index": 1, "pci_bus_id": other, "memory_total_mib": memory}]}
    split = [{"role": "prefill", "gpus": [0]}, {"role": "decode", "gpus": [1]}]
    assert [f["id"] for f in readiness_rules.findings(pair, split, two)] == ["uvm_hmm", "aspm"]

    pair["gpus"][other] = {**pair["gpus"][GPU], "bar1_total_mib": 65536}
    found = readiness_rules.findings(pair, split, two)
    assert [f["id"] for f in found] == ["bar1", "uvm_hmm", "aspm"]
    assert found[0]["subject"] == f"GPU 1 BAR1 65536 MiB < its memory {memory} MiB"
