# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The host readiness reader on real readings of a CI machine (tests/fixtures/host_readiness/ci-vm-2026-12-05): the
root rebuilt from raw.json, read by readiness_look.look as on a host, and the rules on what it reads."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness, readiness_look  # noqa: E402
from ansible_collections.disagg.sglang.plugins.module_utils.plan import readiness_rules as rr  # noqa: E402

RAW = json.loads((REPO / "tests/fixtures/host_readiness/ci-vm-2026-12-05/raw.json").read_text())


def rebuild(root):
    """The captured files under ROOT as the kernel lays them out (a config space at its resolved path, linked from
    sys/bus/pci/devices as sysfs links it)."""
    for key, value in RAW.items():
        if key.startswith("listing:"):
            if value is not None:
                (root / key.split(":", 1)[1]).mkdir(parents=True, exist_ok=True)
            continue
        if value is None:
            continue
        if key.startswith("hex:"):
            path = root / key[4:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes.fromhex(value))
            link = root / "sys/bus/pci/devices" / path.parent.name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path.parent)
        else:
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_text(value)
    return root


def test_the_real_command_line_and_policies_read_as_the_host_has_them(tmp_path):
    facts = readiness_look.look(str(rebuild(tmp_path / "root")), run=lambda argv: (127, "", "no nvidia-smi here"))
    assert facts["cmdline"] == {"params": {}, "iommu_mode": "unknown"}  # no IOMMU parameter on this kernel's line
    assert facts["iommu_groups"] == {"groups": 0, "types": [], "translated": False}
    assert (facts["aspm_policy"], facts["numa_balancing"], facts["thp"]) == ("default", 0, "madvise")
    assert facts["governors"] == {} and facts["gpus"] == {} and facts["acs"] == {}


def test_real_config_spaces_walk_to_no_acs_capability():
    """A 4096-byte host bridge whose extended space is empty (header 0) and 256-byte virtio functions (no extended
    space at all): the walk ends without a capability, as the kernel's pci_find_next_ext_capability does."""
    sizes = {}
    for key, value in RAW.items():
        if key.startswith("hex:"):
            data = bytes.fromhex(value)
            sizes[len(data)] = sizes.get(len(data), 0) + 1
            assert readiness.pci_config_acs(data) is None, key
    assert sizes == {4096: 1, 256: 5}


def test_the_real_aspm_policy_is_a_finding_where_the_host_would_hold_a_kv_lane(tmp_path):
    facts = readiness_look.look(str(rebuild(tmp_path / "root")), run=lambda argv: (127, "", "no nvidia-smi here"))
    specs = [{"role": "prefill", "gpus": [0]}, {"role": "decode", "gpus": [1]}]
    found = rr.findings(facts, specs, {"gpus": []})
    assert [(f["id"], f["subject"]) for f in found] == [
        ("aspm", "pcie_aspm policy default, pcie_aspm=not set on the kernel command line")
    ]
