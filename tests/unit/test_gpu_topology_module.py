"""The Ansible module disagg.sglang.gpu_topology: in-process (options, check mode, failures) and once
through `ansible` itself, against a fake nvidia-smi that answers only the query and `topo -m`."""

import json
import os
import sys
from pathlib import Path

import pytest
import topology_fakes as tf
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils import plan
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


# The preflight's one task per host, disagg.sglang.host_plan (an action plugin: the look on the host, the plan on the
# controller), through `ansible` itself: what it plans is the filter host_plan's plan of what its look read, and a
# host that shows no GPU, or a look that fails, fails the task with the message the preflight shows.
def plan_through_ansible(tmp_path, topology, problems=(), paths=None):
    from inventory_vars import host_vars  # noqa: PLC0415 (the sandbox inventory's variables, templated)

    _templar, _variables, v = host_vars()
    inputs = {
        "host": "pytest-badinv-1",
        "roles": v("_sglang_worker_roles"),
        "settings": v("_sglang_settings"),
        "secrets": v("_sglang_secrets"),
        "variables": v("_sglang_user_vars"),
        "conflicting_units": v("sglang_conflicting_units"),
        "strict": v("sglang_topology_strict"),
        "kv_p2p_policy": v("sglang_kv_p2p_policy"),
        "profile": {},
        "profile_name": "none",
    }
    look = {"paths": paths or {}, "record_dir": str(tmp_path / "records"), "listeners": False, "topology": topology}
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    ansible = Path(sys.executable).with_name("ansible")
    args = json.dumps({"look": look, "plan": inputs, "problems": list(problems)})
    proc, status, result = adhoc([str(ansible)], "disagg.sglang.host_plan", [args], env=env, cwd=REPO, timeout=120)
    assert result is not None, proc.stdout + proc.stderr
    facts = (result.get("ansible_facts") or {}).get("gpu_topology")
    expect = plan.host_plan({**inputs, "topology": facts, "host_paths": result.get("paths"),
                             "listeners": result.get("listeners"), "deployed": result.get("records")})  # fmt: skip
    return expect, status, result


def test_host_plan_plans_what_the_filter_plans_on_what_the_look_read(host, tmp_path):
    expect, status, result = plan_through_ansible(
        tmp_path, {"nvidia_smi_path": host["smi"], "sysfs_root": host["root"]}
    )
    assert status == "localhost | SUCCESS" and result["changed"] is False and result["records"] == {}
    assert len(result["ansible_facts"]["gpu_topology"]["gpus"]) == 8
    # the sandbox inventory's prefill and decode on the fake 8-GPU box
    assert result["plan"] == expect and [u["role"] for u in expect["units"]] == ["prefill", "decode"]
    assert result["lines"] == expect["warnings"] + plan.placement_lines(expect["units"])
    assert result["lines"][-1].startswith("sglang-decode") and "GPUs " in result["lines"][-1]


def test_host_plan_fails_with_the_plans_own_messages(host, tmp_path):
    missing = str(tmp_path / "no-model")
    expect, status, result = plan_through_ansible(
        tmp_path,
        {"nvidia_smi_path": host["smi"], "sysfs_root": host["root"]},
        paths={"sglang_model_path": missing},
    )
    assert status.endswith("FAILED!") and expect["problems"] and expect["units"] == []
    assert result["msg"] == ". ".join(expect["problems"]) + "." and missing in result["msg"]


def test_host_plan_fails_naming_a_host_that_shows_no_gpu_then_the_other_problems(tmp_path):
    _inputs, status, result = plan_through_ansible(
        tmp_path, {"nvidia_smi_path": "/bin/false", "sysfs_root": str(tmp_path)}, problems=["the profile is bad"]
    )
    assert status.endswith("FAILED!")
    assert result["msg"].startswith("pytest-badinv-1 shows no GPU (")
    assert "set sglang_topology_nvidia_smi_path. the profile is bad. " in result["msg"]
    assert result["ansible_facts"]["gpu_topology"]["gpus"] == []


def test_host_plan_fails_with_the_looks_own_message(tmp_path):
    _inputs, status, result = plan_through_ansible(tmp_path, {"nvidia_smi_path": str(tmp_path / "missing")})
    assert (
        status.endswith("FAILED!")
        and result["msg"] == f"nvidia_smi_path {tmp_path / 'missing'} is not an executable file"
    )
    assert "plan" not in result
