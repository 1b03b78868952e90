# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The host readiness rules (plan/readiness_rules.py) and the plan's use of them: a table of readings, each with the
findings it must give (setting, class, cost, remedy, policy variable), on a clean 8-GPU box and on the lent H200's
real capture (tests/fixtures/host_readiness/h200-vm-2026-12-04); the policies; the KV probe's explanation."""

import copy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness  # noqa: E402
from ansible_collections.disagg.sglang.plugins.module_utils.kv import kv_transport as kt  # noqa: E402
from ansible_collections.disagg.sglang.plugins.module_utils.plan import readiness_rules as rr  # noqa: E402

H200 = REPO / "tests/fixtures/host_readiness/h200-vm-2026-12-04"
BUS = ["0000:17:00.0", "0000:2a:00.0", "0000:3d:00.0", "0000:63:00.0",
       "0000:99:00.0", "0000:ab:00.0", "0000:bd:00.0", "0000:db:00.0"]  # fmt: skip
PORTS = ["0000:16:01.0", "0000:29:01.0", "0000:3c:01.0", "0000:62:01.0",
         "0000:98:01.0", "0000:aa:01.0", "0000:bc:01.0", "0000:da:01.0"]  # fmt: skip
TOPOLOGY = {
    "gpus": [
        {"index": i, "pci_bus_id": "0000" + b.upper(), "memory_total_mib": 97887, "name": "NVIDIA RTX PRO 6000"}
        for i, b in enumerate(BUS)
    ]
}
SPECS = [{"role": "prefill", "gpus": [0, 1, 2, 3]}, {"role": "decode", "gpus": [4, 5, 6, 7]}]
ACS_OFF = dict.fromkeys(("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl"), False)
CLEAN = {
    "root": "/",
    "cmdline": readiness.kernel_cmdline("BOOT_IMAGE=/vmlinuz ro iommu=pt pcie_aspm=off"),
    "iommu_groups": {"groups": 40, "types": ["identity"], "translated": False},
    "modules": {"nvidia": {}, "nvidia_uvm": {"uvm_disable_hmm": "Y"}},
    "aspm_policy": "performance",
    "gpus": {
        b: {"persistence_mode": "Enabled", "bar1_total_mib": 131072, "bridges": [PORTS[i]]} for i, b in enumerate(BUS)
    },
    "acs": {p: dict(ACS_OFF, SrcValid=True) for p in PORTS},
    "numa_balancing": 0,
    "thp": "madvise",
    "governors": {"performance": 64},
    "unread": {},
}


def changed(**edits):
    """CLEAN with EDITS: {dotted.path: value} (a path's last key is set)."""
    r = copy.deepcopy(CLEAN)
    for path, value in edits.items():
        *parents, last = path.split("|")
        node = r
        for key in parents:
            node = node[key]
        node[last] = value
    return r


# readings -> [(id, class, a text its subject must hold)]
TABLE = [
    ("clean", CLEAN, []),
    ("iommu translated on the command line",
     changed(cmdline=readiness.kernel_cmdline("intel_iommu=on iommu.passthrough=0"),
             iommu_groups={"groups": 40, "types": ["DMA"], "translated": True}),
     [("iommu", "p2p", "iommu mode translated")]),
    ("iommu mode from the groups when the command line does not say",
     changed(cmdline=readiness.kernel_cmdline("ro quiet pcie_aspm=off"),
             iommu_groups={"groups": 40, "types": ["DMA-FQ"], "translated": True}),
     [("iommu", "p2p", "group types ['DMA-FQ']")]),
    ("iommu off", changed(cmdline=readiness.kernel_cmdline("intel_iommu=off pcie_aspm=off")), []),
    ("ACS redirect on decode GPU 4's root port",
     changed(**{f"acs|{PORTS[4]}": dict(ACS_OFF, ReqRedir=True, CmpltRedir=True)}),
     [("acs", "p2p", f"1 bridge(s) on the prefill->decode paths: {PORTS[4]} (ReqRedir+CmpltRedir, above GPU 4); 4 "
                     "pair(s) without a direct peer-to-peer lane")]),
    ("ACS source validation alone does not redirect", changed(**{f"acs|{PORTS[4]}": dict(ACS_OFF, SrcValid=True)}),
     []),
    ("ACS redirect on a bridge no GPU sits behind", changed(**{"acs|0000:00:1c.0": dict(ACS_OFF, ReqRedir=True)}), []),
    ("small BAR1", changed(**{f"gpus|{BUS[5]}|bar1_total_mib": 256}),
     [("bar1", "p2p", "GPU 5 BAR1 256 MiB < its memory 97887 MiB")]),
    ("HMM on", changed(**{"modules|nvidia_uvm": {"uvm_disable_hmm": "N"}}),
     [("uvm_hmm", "stability", "uvm_disable_hmm=N")]),
    ("a driver without the HMM parameter", changed(**{"modules|nvidia_uvm": {}}), []),
    ("ASPM on", changed(cmdline=readiness.kernel_cmdline("iommu=pt"), aspm_policy="default"),
     [("aspm", "stability", "pcie_aspm policy default, pcie_aspm=not set")]),
    ("ASPM off by the policy", changed(cmdline=readiness.kernel_cmdline("iommu=pt"), aspm_policy="performance"), []),
    ("persistence off", changed(**{f"gpus|{BUS[0]}|persistence_mode": "Disabled",
                                   f"gpus|{BUS[7]}|persistence_mode": "Disabled"}),
     [("persistence", "tuning", "GPU(s) 0,7 persistence mode Disabled")]),
    ("numa balancing on", changed(numa_balancing=1), [("numa_balancing", "tuning", "kernel.numa_balancing = 1")]),
    ("governor", changed(governors={"performance": 60, "powersave": 4}),
     [("governor", "tuning", "4 CPU(s) powersave")]),
    ("not read is never a finding",
     changed(cmdline=None, iommu_groups=None, modules={}, aspm_policy=None, gpus={}, acs={}, numa_balancing=None,
             governors={}, unread={"nvidia-smi -q": "not found"}), []),
]  # fmt: skip


@pytest.mark.parametrize(("readings", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_each_reading_gives_its_findings(readings, expected):
    found = rr.findings(readings, SPECS, TOPOLOGY)
    assert [(f["id"], f["class"]) for f in found] == [(e[0], e[1]) for e in expected]
    for f, (_id, _cls, text) in zip(found, expected, strict=True):
        assert text in f["subject"]


def test_acs_between_gpus_behind_one_switch_looks_only_below_the_switch():
    """Two GPUs behind one PCIe switch: the root port and the switch's upstream port are shared (P2P does not pass
    them), so ACS there is no finding; a downstream port's redirect is."""
    root, up, dp0, dp1 = "0000:10:01.0", "0000:11:00.0", "0000:12:00.0", "0000:12:01.0"
    r = changed(
        gpus={
            BUS[0]: {"bridges": [root, up, dp0]},
            BUS[1]: {"bridges": [root, up, dp1]},
        },
        acs={root: dict(ACS_OFF, ReqRedir=True), up: dict(ACS_OFF, ReqRedir=True), dp0: dict(ACS_OFF)},
    )
    specs = [{"role": "prefill", "gpus": [0]}, {"role": "decode", "gpus": [1]}]
    assert rr.findings(r, specs, TOPOLOGY) == []
    r["acs"][dp1] = dict(ACS_OFF, CmpltRedir=True)
    found = rr.findings(r, specs, TOPOLOGY)
    assert [(f["id"], f["pairs"]) for f in found] == [("acs", ["0->1"])]
    assert f"{dp1} (CmpltRedir, above GPU 1)" in found[0]["subject"]


def test_the_kv_lane_rules_look_only_where_a_host_holds_prefill_and_decode():
    r = changed(
        cmdline=readiness.kernel_cmdline("intel_iommu=on iommu.passthrough=0"),
        numa_balancing=1,
        **{"modules|nvidia_uvm": {"uvm_disable_hmm": "N"}},
    )
    found = rr.findings(r, [SPECS[0]], TOPOLOGY)
    assert [f["id"] for f in found] == ["numa_balancing"]


@pytest.mark.parametrize(
    ("policies", "n_problems", "n_warnings"),
    [
        ({}, 2, 1),  # defaults: p2p fail, stability fail, tuning warn
        ({"p2p": "warn", "stability": "warn"}, 0, 3),
        ({"p2p": "off", "stability": "off", "tuning": "off"}, 0, 0),
        ({"tuning": "fail"}, 3, 0),
    ],
)
def test_policies_decide_problem_warning_or_nothing(policies, n_problems, n_warnings):
    r = changed(
        numa_balancing=1,
        **{"modules|nvidia_uvm": {"uvm_disable_hmm": "N"}, f"gpus|{BUS[4]}|bar1_total_mib": 256},
    )
    warnings, problems, kept = rr.judge("gpu-a", r, SPECS, TOPOLOGY, policies=policies)
    assert (len(problems), len(warnings), len(kept)) == (n_problems, n_warnings, n_problems + n_warnings)


def test_a_message_names_the_setting_what_it_costs_the_fix_the_reboot_and_the_variable():
    r = changed(**{f"acs|{PORTS[6]}": dict(ACS_OFF, ReqRedir=True)}, numa_balancing=1)
    warnings, problems, _kept = rr.judge("gpu-a", r, SPECS, TOPOLOGY, policies={})
    (acs,) = problems
    assert acs.startswith("gpu-a: PCIe ACS redirects peer-to-peer requests: 1 bridge(s) on the prefill->decode "
                          "paths: 0000:bc:01.0 (ReqRedir, above GPU 6)")  # fmt: skip
    assert "Costs: ACS request/completion redirect sends every peer-to-peer request up to the root complex" in acs
    assert "setpci -s <bridge> ECAP_ACS+0x6.w=0000" in acs
    assert "(needs a reboot: the run never applies it)" in acs
    assert acs.endswith("Or set sglang_host_p2p_policy: warn (or off) to accept it")
    (numa,) = warnings
    assert "kernel.numa_balancing = 0 in /etc/sysctl.d/, or add numa_balancing to sglang_host_apply" in numa
    assert "needs a reboot" not in numa
    assert numa.endswith("Or set sglang_host_tuning_policy: warn (or off) to accept it")


def test_what_was_not_read_is_said_once_as_a_warning():
    r = changed(unread={"nvidia-smi -q": "nvidia-smi not found", "acs 0000:16:01.0": "config space 64 bytes"})
    warnings, problems, _kept = rr.judge("gpu-a", r, SPECS, TOPOLOGY, policies={})
    assert problems == []
    assert warnings == [
        "gpu-a: host readiness not read: acs 0000:16:01.0 (config space 64 bytes); nvidia-smi -q (nvidia-smi not "
        "found). The rules that need these readings were not applied"
    ]


def test_the_lent_h200_capture_gives_its_real_findings():
    """The H200 VM of 2026-12-04: uvm_disable_hmm=N (a finding where it would hold prefill and decode), BAR1 262144 MiB
    over 143771 MiB of memory and numa balancing 0 (no finding)."""
    modules = readiness.module_params((H200 / "nvidia-modules.txt").read_text())
    smi = readiness.nvidia_smi_q((H200 / "nvidia-smi-q.txt").read_text())
    assert len(smi) == 1
    bus, gpu = next(iter(smi.items()))
    system = (H200 / "system.txt").read_text()
    r = {
        "modules": modules,
        "gpus": {bus[-12:].lower(): gpu},
        "numa_balancing": readiness.numa_balancing(system),
        "governors": {},
    }
    topology = {"gpus": [{"index": 0, "pci_bus_id": bus, "memory_total_mib": 143771}]}
    assert gpu["bar1_total_mib"] == 262144
    one_gpu_pd = [{"role": "prefill", "gpus": [0]}, {"role": "decode", "gpus": [0]}]
    assert rr.findings(r, one_gpu_pd, topology) == []  # one GPU: no GPU pair, no lane rule
    two = {"gpus": topology["gpus"] + [{"index": 1, "pci_bus_id": "0000:99:00.0", "memory_total_mib": 143771}]}
    found = rr.findings(r, [{"role": "prefill", "gpus": [0]}, {"role": "decode", "gpus": [1]}], two)
    assert [(f["id"], f["subject"]) for f in found] == [("uvm_hmm", "nvidia_uvm uvm_disable_hmm=N")]


def test_every_rule_has_a_check_and_a_policy_and_every_apply_item_a_rule():
    assert set(rr.RULES) == set(rr.CHECKS)
    assert {row["class"] for row in rr.RULES.values()} == set(rr.POLICY_VARS)
    assert rr.APPLY_ITEMS == ["governor", "numa_balancing", "persistence"]
    for row in rr.RULES.values():
        assert row["cost"] and row["remedy"] and isinstance(row["reboot"], bool)
        assert not (row["reboot"] and "apply" in row)  # nothing that needs a reboot is applied by a run


def test_the_kv_probe_names_the_findings_that_explain_a_pair_and_the_class_ceiling():
    r = changed(
        **{f"acs|{PORTS[4]}": dict(ACS_OFF, ReqRedir=True), f"gpus|{BUS[6]}|bar1_total_mib": 256},
        numa_balancing=1,
    )
    _w, _p, kept = rr.judge("gpu-a", r, SPECS, TOPOLOGY, policies={})
    assert [f["id"] for f in kept] == ["acs", "bar1", "numa_balancing"]
    assert len(kt.explaining_findings(kept, 0, 4)) == 1  # the ACS bridge of GPU 4
    assert len(kt.explaining_findings(kept, 0, 5)) == 0
    assert len(kt.explaining_findings(kept, 1, 6)) == 1  # GPU 6's BAR1
    verdict = {"src": 0, "dst": 4, "lane_kind": "tcp", "gbps": 0.5, "memory": "VRAM", "message": "lane tcp/lo"}
    kt.explain(verdict, kept, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "across")
    assert verdict["message"].startswith("lane tcp/lo; host readiness: gpu-a: PCIe ACS redirects peer-to-peer")
    assert verdict["message"].endswith(
        "the published P2P write ceiling of RTX PRO 6000 across NUMA nodes is 39-51 GB/s (voipmonitor/rtx6kpro "
        "hardware/pcie-bandwidth.md, PCIe P2P write, one direction): 1% of it"
    )
    clean = {"src": 0, "dst": 1, "lane_kind": "cuda_ipc", "gbps": 54.0, "memory": "VRAM", "message": "cuda_ipc"}
    kt.explain(clean, kept, "NVIDIA RTX PRO 6000", "same")
    assert clean["message"] == (
        "cuda_ipc; the published P2P write ceiling of RTX PRO 6000 on one NUMA node is 53-56 GB/s "
        "(voipmonitor/rtx6kpro hardware/pcie-bandwidth.md, PCIe P2P write, one direction): 96% of it"
    )
    slow = {"src": 0, "dst": 5, "lane_kind": "tcp", "gbps": 0.5, "memory": "VRAM", "message": "tcp"}
    kt.explain(slow, kept, "NVIDIA H200", "across")
    assert slow["message"] == (
        "tcp; host readiness found no setting that explains it (IOMMU, ACS, BAR1, nvidia_uvm all read clean or not "
        "read)"
    )


def test_the_docs_table_holds_every_rule_its_class_and_whether_it_needs_a_reboot():
    """The readiness table (docs/host-readiness.md, which the README's "Host readiness" links) is written by hand from
    RULES: a row per rule, with its setting, class and reboot column, so a rule added, moved to another class or given
    another reboot answer fails here until the table says so."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Host readiness (PCIe GPU hosts)", 1)[1].split("\n## ", 1)[0]
    assert "[docs/host-readiness.md](docs/host-readiness.md)" in section
    section = (REPO / "docs" / "host-readiness.md").read_text()
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")][1:]
    got = {cells[0].lstrip("| "): (cells[1], cells[4].rstrip(" |")) for cells in rows}
    want = {row["setting"]: (row["class"], "yes" if row["reboot"] else "no") for row in rr.RULES.values()}
    assert got == want


def test_a_setting_the_run_applies_itself_is_said_as_set_by_this_run_not_refused():
    r = changed(numa_balancing=1, governors={"powersave": 64})
    warnings, problems, kept = rr.judge(
        "gpu-a", r, SPECS, TOPOLOGY, policies={"tuning": "fail"}, apply=["numa_balancing"]
    )
    assert [f["id"] for f in kept] == ["governor"]
    assert problems == [rr.message("gpu-a", "governor", "64 CPU(s) powersave")]
    assert warnings == [
        "gpu-a: automatic NUMA balancing on: kernel.numa_balancing = 1: this run sets it (sglang_host_apply: "
        "numa_balancing)"
    ]
