"""The module disagg.sglang.host_readiness on a booted sandbox host, over ssh: the fake box reads clean, and once
tests/sandbox/fakegpu.set_readiness re-renders the running host with an ACS-redirecting root port and a translating
IOMMU it reads those, while the topology module still reads the same topology and the host runs on (boots one host:
about 2 s once the rootfs is cached)."""

import json

import pytest
from sandbox_hosts import down, run, up

from tests.sandbox import fakegpu, nspawn

NAME = "pytest-readiness"
HOST = f"{NAME}-1"

pytestmark = pytest.mark.usefixtures("sandbox_root")  # not root: fails, never skips (conftest.py)


@pytest.fixture(scope="module")
def host():
    up(NAME)
    try:
        yield HOST
    finally:
        down(NAME)


def module(name, args=""):
    """One module run on the host, its result (`ansible -o` prints `HOST | SUCCESS => {result}` on one line)."""
    proc = run(["ansible", "-i", str(nspawn.state_dir(NAME) / "inventory.yml"), HOST, "-o", "-m", name, "-a", args])
    line = next(line for line in proc.stdout.splitlines() if line.startswith(f"{HOST} | "))
    assert " | SUCCESS => " in line, line
    return json.loads(line.split(" => ", 1)[1])


def readiness_facts():
    args = f"root={fakegpu.SYSFS_ROOT} nvidia_smi_path={fakegpu.NVIDIA_SMI}"
    return module("disagg.sglang.host_readiness", args)["ansible_facts"]["host_readiness"]


def test_a_running_host_reads_clean_then_reads_what_set_readiness_renders(host):
    clean = readiness_facts()
    assert clean["unread"] == {}
    assert clean["cmdline"]["iommu_mode"] == "passthrough"
    assert clean["iommu_groups"]["types"] == ["identity"]
    assert {g["persistence_mode"] for g in clean["gpus"].values()} == {"Enabled"} and len(clean["gpus"]) == 8
    assert not any(c["ReqRedir"] or c["CmpltRedir"] for c in clean["acs"].values())

    try:
        fakegpu.set_readiness(
            NAME,
            host,
            acs_redirect=[4],
            cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu.passthrough=0",
            iommu_group_type="DMA",
        )
        blocked = readiness_facts()
        assert blocked["gpus"]["0000:99:00.0"]["bridges"] == ["0000:98:01.0"]
        assert [b for b, c in blocked["acs"].items() if c["ReqRedir"] and c["CmpltRedir"]] == ["0000:98:01.0"]
        assert blocked["cmdline"]["iommu_mode"] == "translated"
        assert blocked["iommu_groups"] == {"groups": 16, "types": ["DMA"], "translated": True}
        topology = module("disagg.sglang.gpu_topology", f"sysfs_root={fakegpu.SYSFS_ROOT}")
        gpus = topology["ansible_facts"]["gpu_topology"]["gpus"]
        assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    finally:
        fakegpu.set_readiness(NAME, host)
    assert readiness_facts() == clean
