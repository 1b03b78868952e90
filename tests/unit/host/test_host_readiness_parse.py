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


def test_system_readings_of_the_h200_vm():
    text = fixture(H200, "system.txt")
    lines = text.splitlines()
    assert readiness.numa_balancing(text) == 0
    assert readiness.thp_selected(text) == "madvise"
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
        (readiness.cpu_governor, "performance\n", "performance"),
        (readiness.cpu_governor, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor=powersave\n", "powersave"),
        (readiness.cpu_governor, "", None),
    ],
)
def test_sysctl_like_readers(reader, text, expected):
    assert reader(text) == expected
