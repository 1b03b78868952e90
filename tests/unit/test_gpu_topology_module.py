"""The Ansible module disagg.sglang.gpu_topology: in-process (options, check mode, failures) and once
through `ansible` itself, against a fake nvidia-smi that answers only the query and `topo -m`."""

import json
import os
import sys
from pathlib import Path

import pytest
import topology_fakes as tf
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.modules import gpu_topology as module
from ansible_collections.disagg.sglang.plugins.modules import host_look as look_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "hardware"))
from collection_path import adhoc  # noqa: E402 (the device run's module runner, tests/hardware)

SANDBOX = tf.load_host("rtxpro6000-8x")

FAKE_SMI = """#!{python}
import sys
answers = {{
    "--query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap --format=csv,noheader,nounits": {query!r},
    "topo -m": {topo!r},
}}
args = " ".join(sys.argv[1:])
if args not in answers:
    print("nvidia-smi(fake): " + args + " is not simulated")
    sys.exit(2)
sys.stdout.write(open(answers[args]).read())
"""


@pytest.fixture
def host(tmp_path):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        FAKE_SMI.format(
            python=sys.executable, query=str(SANDBOX["dir"] / "query-gpu.csv"), topo=str(SANDBOX["dir"] / "topo-m.txt")
        )
    )
    smi.chmod(0o755)
    root = tf.write_sysfs(tmp_path / "root", SANDBOX["sysfs"])
    return {"smi": str(smi), "root": root}


def run_module(args, capsys, main=module.main):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        main()
    out = json.loads(capsys.readouterr().out)
    return done.value.code, out


@pytest.mark.parametrize("check_mode", [False, True])
def test_facts(host, capsys, check_mode):
    rc, out = run_module(
        {
            "nvidia_smi_path": host["smi"],
            "sysfs_root": host["root"],
            "source": "nvidia-smi",
            "_ansible_check_mode": check_mode,
        },
        capsys,
    )
    assert rc == 0 and out["changed"] is False
    facts = out["ansible_facts"]["gpu_topology"]
    assert len(facts["gpus"]) == 8 and facts["reason"] is None
    assert [g["numa_node"] for g in facts["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert facts["links"]["3"]["4"] == "SYS" and facts["links"]["0"]["3"] == "NODE"
    assert facts["gpus"][7]["cpu_affinity"] == list(range(32, 64))


def test_no_gpu_is_not_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, *a, **k: None)
    monkeypatch.setattr("ansible_collections.disagg.sglang.plugins.module_utils.gpu_topology.NVIDIA_SMI_DIRS", [])
    rc, out = run_module({"source": "nvidia-smi", "sysfs_root": str(tmp_path)}, capsys)
    assert rc == 0
    facts = out["ansible_facts"]["gpu_topology"]
    assert facts["gpus"] == [] and facts["reason"].startswith("no GPU found: nvidia-smi: not found on PATH")


def test_require_gpus_fails_with_the_reason(tmp_path, capsys):
    broken = tmp_path / "nvidia-smi"
    broken.write_text(
        '#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\nexit 9\n'
    )
    broken.chmod(0o755)
    rc, out = run_module(
        {"nvidia_smi_path": str(broken), "source": "nvidia-smi", "require_gpus": True, "sysfs_root": str(tmp_path)},
        capsys,
    )
    assert rc == 1 and out["failed"] is True
    assert "couldn't communicate with the NVIDIA driver" in out["msg"]


def test_bad_nvidia_smi_path(tmp_path, capsys):
    rc, out = run_module({"nvidia_smi_path": str(tmp_path / "missing")}, capsys)
    assert rc == 1 and "is not an executable file" in out["msg"]


# site.yml's preflight reads the topology in its one host_look run per host: the same facts, by the same code
def test_host_look_reads_the_topology_as_the_module_does(host, capsys, tmp_path):
    args = {"nvidia_smi_path": host["smi"], "sysfs_root": host["root"]}
    _rc, alone = run_module(dict(args), capsys)
    rc, out = run_module(
        {"topology": args, "record_dir": str(tmp_path / "records"), "listeners": False}, capsys, look_module.main
    )
    assert rc == 0 and out["changed"] is False and out["records"] == {}
    assert out["ansible_facts"]["gpu_topology"] == alone["ansible_facts"]["gpu_topology"]
    assert len(out["ansible_facts"]["gpu_topology"]["gpus"]) == 8


def test_host_look_without_topology_sets_no_fact_and_names_a_bad_nvidia_smi_path(tmp_path, capsys):
    rc, out = run_module({"listeners": False}, capsys, look_module.main)
    assert rc == 0 and "ansible_facts" not in out
    rc, out = run_module({"topology": {"nvidia_smi_path": str(tmp_path / "missing")}}, capsys, look_module.main)
    assert rc == 1 and out["msg"] == f"nvidia_smi_path {tmp_path / 'missing'} is not an executable file"


def test_through_ansible(host, tmp_path):
    """`ansible localhost -m disagg.sglang.gpu_topology --check` with the repo's ansible.cfg."""
    ansible = Path(sys.executable).with_name("ansible")
    if not ansible.exists():
        pytest.fail(f"ansible is not installed beside {sys.executable}: the project venv is incomplete")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
        LC_ALL="C.UTF-8",
    )
    args = [f"nvidia_smi_path={host['smi']} sysfs_root={host['root']}", "--check"]
    proc, _status, result = adhoc([str(ansible)], "disagg.sglang.gpu_topology", args, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and result is not None, proc.stdout + proc.stderr
    facts = result["ansible_facts"]["gpu_topology"]
    assert result["changed"] is False and len(facts["gpus"]) == 8
    assert facts["sources"]["gpus"] == ["nvidia-smi"]
    assert facts["sources"]["skipped"][0].startswith("nvml: ")  # no NVML on the test machine
