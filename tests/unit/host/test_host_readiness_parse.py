"""Parsers of host-readiness facts (plugins/module_utils/host/readiness.py) over real captures in
tests/fixtures/host_readiness/ (README there says which are real and which hand-made): tables of cases."""

import os
from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness
from samples import H200_VM_GPU

FIXTURES = str(Path(__file__).resolve().parents[2] / "fixtures" / "host_readiness")


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as f:
        return f.read()


H200 = "h200-vm-2026-12-04"

# hand-made command lines; the rule is the kernel's admin-guide kernel-parameters.txt
CMDLINES = [
    ("", {}, "unknown"),
    ("BOOT_IMAGE=/vmlinuz ro quiet", {}, "unknown"),
    ("ro intel_iommu=on iommu=pt", {"intel_iommu": "on", "iommu": "pt"}, "passthrough"),
    ("ro amd_iommu=on iommu.passthrough=1", {"amd_iommu": "on", "iommu.passthrough": "1"}, "passthrough"),
    (
        "ro intel_iommu=on iommu.passthrough=0 iommu.strict=1",
        {"intel_iommu": "on", "iommu.passthrough": "0", "iommu.strict": "1"},
        "translated",
    ),
    ("ro intel_iommu=off", {"intel_iommu": "off"}, "off"),
    ("ro amd_iommu=off iommu=pt", {"amd_iommu": "off", "iommu": "pt"}, "off"),
    ("ro iommu=pt iommu=nopt", {"iommu": "nopt"}, "translated"),
    (
        "ro pcie_aspm=off pcie_acs_override=downstream,multifunction",
        {"pcie_aspm": "off", "pcie_acs_override": "downstream,multifunction"},
        "unknown",
    ),
]


@pytest.mark.parametrize(("text", "params", "mode"), CMDLINES)
def test_kernel_cmdline_reads_the_iommu_parameters_and_the_mode_they_decide(text, params, mode):
    got = readiness.kernel_cmdline(text)
    assert got == {"params": params, "iommu_mode": mode}


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ({}, {"groups": 0, "types": [], "translated": False}),
        ({"0": "identity\n", "1": "identity\n"}, {"groups": 2, "types": ["identity"], "translated": False}),
        ({"0": "DMA-FQ\n", "1": "identity\n"}, {"groups": 2, "types": ["DMA-FQ", "identity"], "translated": True}),
        ({"0": "DMA\n"}, {"groups": 1, "types": ["DMA"], "translated": True}),
        ({"0": "blocked\n"}, {"groups": 1, "types": ["blocked"], "translated": False}),
    ],
)
def test_iommu_group_types_summarise_whether_any_group_translates(mapping, expected):
    assert readiness.iommu_group_types(mapping) == expected


def test_module_params_of_the_h200_vm():
    got = readiness.module_params(fixture(H200, "nvidia-modules.txt"))
    assert set(got) == {"nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "/proc/driver/nvidia/params"}
    assert got["nvidia"] == {}
    assert got["nvidia_uvm"]["uvm_disable_hmm"] == "N"
    assert got["nvidia_uvm"]["uvm_page_table_location"] == "(null)"
    assert got["nvidia_uvm"]["uvm_peer_copy"] == "phys"
    assert len(got["nvidia_uvm"]) == 53
    nv = got["/proc/driver/nvidia/params"]
    assert nv["NvLinkDisable"] == "1"
    assert nv["ResmanDebugLevel"] == "4294967295"
    assert nv["DynamicPowerManagement"] == "3"
    assert readiness.param_bool(got["nvidia_uvm"]["uvm_disable_hmm"]) is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [("Y", True), ("N", False), ("1", True), ("0", False), ("y\n", True), ("", None), (None, None), ("phys", None)],
)
def test_param_bool_reads_sysfs_bools_and_ints(value, expected):
    assert readiness.param_bool(value) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("== nvidia_uvm\nuvm_disable_hmm=1\n", {"nvidia_uvm": {"uvm_disable_hmm": "1"}}),
        ("", {}),
        ("uvm_disable_hmm=1\n", {}),  # no module header: nothing to attribute it to
        ("== /proc/driver/nvidia/params\nEnableMSI: 1\n", {"/proc/driver/nvidia/params": {"EnableMSI": "1"}}),
    ],
)
def test_module_params_edge_cases(text, expected):
    assert readiness.module_params(text) == expected


def test_nvidia_smi_q_of_the_h200_vm():
    got = readiness.nvidia_smi_q(fixture(H200, "nvidia-smi-q.txt"))
    assert got == {"00000000:00:06.0": H200_VM_GPU}


def test_nvidia_smi_q_of_nothing_and_of_a_gpu_without_the_sections():
    assert readiness.nvidia_smi_q("") == {}
    got = readiness.nvidia_smi_q("GPU 00000000:01:00.0\n    Persistence Mode : Disabled\n")
    assert got["00000000:01:00.0"]["persistence_mode"] == "Disabled"
    assert got["00000000:01:00.0"]["bar1_total_mib"] is None


ON = dict.fromkeys(("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"), True)
ALL_OFF = dict.fromkeys(
    ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"), False
)
REDIRECTING = {**ALL_OFF, **ON}


def test_acs_lines_posted_in_nccl_issues_523_and_304():
    lines = fixture("acs-lspci", "nccl-issue-523-acsctl.txt").splitlines()
    lines += fixture("acs-lspci", "nccl-issue-304-acsctl-tabs.txt").splitlines()
    ctls = [readiness.acs_ctl(line.strip()) for line in lines]
    assert ctls[0] == REDIRECTING
    assert ctls[1] == {**ALL_OFF, "SrcValid": True}
    assert ctls[2] == ALL_OFF
    assert ctls[3] == {**ALL_OFF, "ReqRedir": True, "CmpltRedir": True}
    assert ctls[4] == REDIRECTING  # tab after the colon
    assert ctls[5] == ALL_OFF
    assert [readiness.acs_blocks_p2p(c) for c in ctls] == [True, False, False, True, True, False]


def test_lspci_acs_keys_by_device_and_skips_a_device_without_the_capability():
    got = readiness.lspci_acs(fixture("acs-lspci", "handmade-switch-and-gpu.txt"))
    assert got == {"0000:03:00.0": {"ACSCtl": REDIRECTING}, "0000:04:08.0": {"ACSCtl": ALL_OFF}}
    assert readiness.acs_blocks_p2p(got["0000:03:00.0"]["ACSCtl"]) is True
    assert readiness.acs_blocks_p2p(got["0000:04:08.0"]["ACSCtl"]) is False
    assert readiness.lspci_acs("") == {}


@pytest.mark.parametrize(
    ("ctl", "expected"),
    [
        ({}, False),
        (None, False),
        ({**ALL_OFF, "ReqRedir": True}, True),
        ({**ALL_OFF, "CmpltRedir": True}, True),
        ({**ALL_OFF, "SrcValid": True, "UpstreamFwd": True}, False),
    ],
)
def test_acs_blocks_p2p_on_either_redirect_flag(ctl, expected):
    assert readiness.acs_blocks_p2p(ctl) is expected


def test_system_readings_of_the_h200_vm():
    text = fixture(H200, "system.txt")
    lines = text.splitlines()
    assert readiness.numa_balancing(text) == 0
    assert readiness.thp_selected(text) == "madvise"
    assert readiness.memlock_limit(text) == "unlimited"
    assert readiness.cpu_governor(lines[6]) is None


@pytest.mark.parametrize(
    ("reader", "text", "expected"),
    [
        (readiness.numa_balancing, "kernel.numa_balancing = 1\n", 1),
        (readiness.numa_balancing, "1\n", 1),
        (readiness.numa_balancing, "", None),
        (readiness.numa_balancing, "vm.nr_hugepages = 0\n", None),
        (readiness.thp_selected, "[always] madvise never\n", "always"),
        (readiness.thp_selected, "always madvise [never]\n", "never"),
        (readiness.thp_selected, "", None),
        (
            readiness.memlock_limit,
            "Max locked memory         8388608              8388608              bytes\n",
            8388608,
        ),
        (readiness.memlock_limit, "Max open files            1024                 1048576              files\n", None),
        (readiness.cpu_governor, "performance\n", "performance"),
        (readiness.cpu_governor, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor=powersave\n", "powersave"),
        (readiness.cpu_governor, "", None),
    ],
)
def test_sysctl_like_readers(reader, text, expected):
    assert reader(text) == expected
