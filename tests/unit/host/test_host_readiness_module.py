"""The module disagg.sglang.host_readiness (and host_look's `readiness`) on the sandbox's fake GPU box
(tests/sandbox/fakegpu.py rendered into tmp_path, its fake nvidia-smi answering `-q`): a clean box reads clean, a box
re-rendered with blocking settings reads them, and the fake still gives the topology module the sandbox's topology."""

import json

import pytest
import topology_fakes as tf
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness
from ansible_collections.disagg.sglang.plugins.modules import gpu_topology as topology_module
from ansible_collections.disagg.sglang.plugins.modules import host_look as look_module
from ansible_collections.disagg.sglang.plugins.modules import host_readiness as module

from tests.sandbox import fakegpu

BRIDGES = {0: "0000:16:01.0", 1: "0000:29:01.0", 2: "0000:3c:01.0", 3: "0000:62:01.0",
           4: "0000:98:01.0", 5: "0000:aa:01.0", 6: "0000:bc:01.0", 7: "0000:da:01.0"}  # fmt: skip
GPUS = {0: "0000:17:00.0", 1: "0000:2a:00.0", 2: "0000:3d:00.0", 3: "0000:63:00.0",
        4: "0000:99:00.0", 5: "0000:ab:00.0", 6: "0000:bd:00.0", 7: "0000:db:00.0"}  # fmt: skip


@pytest.fixture
def box(tmp_path, monkeypatch):
    """The default sandbox box rendered as `up` renders a guest; the fake nvidia-smi reads this root's files."""
    topo = fakegpu.render(tmp_path, "pytest-ready-1", "rtxpro6000-8x")
    monkeypatch.setenv("FAKEGPU_ROOT", str(tmp_path / fakegpu.FAKEGPU))
    return {
        "guest": tmp_path,
        "topo": topo,
        "root": str(tmp_path / fakegpu.SYSFS_ROOT.lstrip("/")),
        "smi": str(tmp_path / fakegpu.NVIDIA_SMI.lstrip("/")),
    }


def run_module(args, capsys, main=module.main):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        main()
    return done.value.code, json.loads(capsys.readouterr().out)


def read(box, capsys, check_mode=False):
    rc, out = run_module(
        {"root": box["root"], "nvidia_smi_path": box["smi"], "_ansible_check_mode": check_mode}, capsys
    )
    assert rc == 0 and out["changed"] is False, out
    return out["ansible_facts"]["host_readiness"]


def redirecting(facts):
    # ReqRedir or CmpltRedir sends peer-to-peer traffic up to the root complex (plan/readiness_rules.py's acs rule)
    return sorted(b for b, ctl in facts["acs"].items() if ctl.get("ReqRedir") or ctl.get("CmpltRedir"))


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_clean_fake_box_reads_clean(box, capsys, check_mode):
    facts = read(box, capsys, check_mode)

    assert facts["unread"] == {}
    assert facts["cmdline"] == {"params": {"iommu": "pt", "pcie_aspm": "off"}, "iommu_mode": "passthrough"}
    assert facts["iommu_groups"] == {"groups": 16, "types": ["identity"], "translated": False}
    assert facts["modules"]["nvidia"] == {}, "the nvidia module's NVreg options have no sysfs file"
    assert facts["modules"]["nvidia_uvm"]["uvm_disable_hmm"] == "Y"
    assert facts["modules"]["/proc/driver/nvidia/params"]["EnableResizableBar"] == "0"
    assert facts["aspm_policy"] == "performance"
    assert sorted(facts["gpus"]) == sorted(GPUS.values())
    for index, bus in GPUS.items():
        assert facts["gpus"][bus] == {
            "persistence_mode": "Enabled",
            "bar1_total_mib": 131072,
            "ecc_mode_current": "Enabled",
            "max_sm_clock_mhz": 3090,
            "pcie_gen_current": 5,
            "pcie_width_current": 16,
            "bridges": [BRIDGES[index]],
        }
    assert sorted(facts["acs"]) == sorted(BRIDGES.values())
    assert redirecting(facts) == []
    assert (facts["numa_balancing"], facts["thp"], facts["governors"]) == (0, "madvise", {"performance": 64})


def test_a_box_rendered_with_blocking_settings_reads_them_and_a_rerender_puts_the_clean_ones_back(box, capsys):
    fakegpu.render_readiness(
        box["guest"],
        box["topo"],
        acs_redirect=[4],
        cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu.passthrough=0",
        iommu_group_type="DMA",
        persistence="Disabled",
        bar1_mib=256,
        uvm_disable_hmm="N",
        numa_balancing=1,
        governor="powersave",
        aspm_policy="default",
    )
    facts = read(box, capsys)

    assert redirecting(facts) == [BRIDGES[4]]
    assert facts["acs"][BRIDGES[4]] == dict.fromkeys(readiness.ACS_FLAGS, False) | {
        "SrcValid": True, "ReqRedir": True, "CmpltRedir": True, "UpstreamFwd": True}  # fmt: skip
    assert facts["cmdline"]["iommu_mode"] == "translated"
    assert facts["iommu_groups"] == {"groups": 16, "types": ["DMA"], "translated": True}
    assert {g["persistence_mode"] for g in facts["gpus"].values()} == {"Disabled"}
    assert {g["bar1_total_mib"] for g in facts["gpus"].values()} == {256}
    assert facts["modules"]["nvidia_uvm"]["uvm_disable_hmm"] == "N"
    assert (facts["numa_balancing"], facts["governors"], facts["aspm_policy"]) == (1, {"powersave": 64}, "default")

    fakegpu.render_readiness(box["guest"], box["topo"], iommu_group_type=None)
    again = read(box, capsys)
    assert redirecting(again) == [] and again["iommu_groups"]["groups"] == 0
    assert again["cmdline"]["iommu_mode"] == "passthrough"
    assert {g["persistence_mode"] for g in again["gpus"].values()} == {"Enabled"}


def test_a_topology_specs_readiness_block_is_the_hosts_own_and_unknown_keys_are_refused(box, capsys):
    topo = dict(box["topo"], spec_readiness={"acs_redirect": [0, 7], "thp": "never"})
    ready = fakegpu.render_readiness(box["guest"], topo)
    assert ready["acs_redirect"] == [0, 7] and ready["bar1_mib"] == 131072
    facts = read(box, capsys)
    assert redirecting(facts) == [BRIDGES[0], BRIDGES[7]] and facts["thp"] == "never"
    with pytest.raises(ValueError, match=r"unknown readiness keys \['acs'\]"):
        fakegpu.render_readiness(box["guest"], topo, acs=[1])
    with pytest.raises(ValueError, match=r"acs_redirect \[8\]"):
        fakegpu.render_readiness(box["guest"], topo, acs_redirect=[8])


def test_host_look_reads_the_readiness_as_the_module_does_beside_the_topology(box, capsys, tmp_path):
    alone = read(box, capsys)
    rc, out = run_module(
        {
            "readiness": {"root": box["root"], "nvidia_smi_path": box["smi"]},
            "topology": {"sysfs_root": box["root"], "nvidia_smi_path": box["smi"]},
            "record_dir": str(tmp_path / "records"),
            "listeners": False,
        },
        capsys,
        look_module.main,
    )
    assert rc == 0 and out["changed"] is False
    assert out["ansible_facts"]["host_readiness"] == alone
    assert len(out["ansible_facts"]["gpu_topology"]["gpus"]) == 8


def test_a_bad_nvidia_smi_path_fails_naming_it(tmp_path, capsys):
    rc, out = run_module({"root": str(tmp_path), "nvidia_smi_path": str(tmp_path / "missing")}, capsys)
    assert rc == 1 and out["msg"] == f"nvidia_smi_path {tmp_path / 'missing'} is not an executable file"
    rc, out = run_module({"readiness": {"nvidia_smi_path": str(tmp_path / "missing")}}, capsys, look_module.main)
    assert rc == 1 and out["msg"] == f"nvidia_smi_path {tmp_path / 'missing'} is not an executable file"


def test_the_fake_box_still_gives_the_topology_module_the_sandbox_topology(box, capsys):
    """The root ports the readiness needs are real directories now; the topology read through them is the fixture's
    (tests/fixtures/topology/rtxpro6000-8x, whose topo -m is the fake's), UUIDs aside (the fake derives its own)."""
    spec = tf.load_host("rtxpro6000-8x")
    rc, out = run_module(
        {"sysfs_root": box["root"], "nvidia_smi_path": box["smi"], "source": "nvidia-smi"}, capsys,
        topology_module.main,
    )  # fmt: skip
    assert rc == 0
    facts = out["ansible_facts"]["gpu_topology"]
    expect = spec["expect"]
    for want, got in zip(expect["gpus"], facts["gpus"], strict=True):
        for key, value in {**expect["all_gpus"], **want}.items():
            assert got[key] == (tf.cpus(value) if key == "cpu_affinity" else value), (got["index"], key)
    assert facts["numa_nodes"] == [{"id": n["id"], "cpus": tf.cpus(n["cpus"])} for n in expect["numa_nodes"]]
    assert facts["links"] == tf.link_matrix(expect["links"])
    assert facts["warnings"] == [] and facts["reason"] is None
