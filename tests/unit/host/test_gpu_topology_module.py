"""The Ansible module disagg.sglang.gpu_topology: in-process (options, check mode, failures) and once
through `ansible` itself, against a fake nvidia-smi that answers only the query and `topo -m`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import topology_fakes as tf
import yaml
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology, readiness_look
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan, plan_inputs
from ansible_collections.disagg.sglang.plugins.modules import gpu_topology as module
from ansible_collections.disagg.sglang.plugins.modules import host_look as look_module

from tests.sandbox import fakegpu
from tests.sandbox.shell import CACHE

REPO = Path(__file__).resolve().parents[3]
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
    monkeypatch.setattr("ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology.NVIDIA_SMI_DIRS", [])
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
    # the preflight's words (rules.no_gpu_problems), naming the host the topology role passes
    assert out["msg"].startswith("this host shows no GPU (no GPU found: nvidia-smi")
    assert out["msg"].endswith("Check the driver (nvidia-smi), or set sglang_topology_nvidia_smi_path.")


def test_require_gpus_names_the_host_it_is_given(tmp_path, capsys):
    rc, out = run_module({"source": "nvml", "require_gpus": True, "sysfs_root": str(tmp_path), "name": "gpu-7"}, capsys)
    assert rc == 1 and out["msg"].startswith("gpu-7 shows no GPU (")


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


# The preflight's one task per host, disagg.sglang.host_plan (an action plugin: its inputs from the host's variables
# and the plan on the controller, the look on the host), through `ansible` itself on an inventory host in the groups
# prefill and decode with the sandbox inventory's variables: what it plans is plan.host_plan's plan of the inputs
# plan_inputs derives and of what its look read, and a host that shows no GPU, or a look that fails, fails the task
# with the message the preflight shows.
HOST = "pytest-badinv-1"


def plan_through_ansible(tmp_path, smi, sysfs_root, named=True, **changed):
    """host_plan with topology on HOST; CHANGED: variables set beside the sandbox inventory's (the model directory
    one that exists outside the trees the units cannot see, wherever the checkout lies); NAMED: whether this
    run's venvs are named already (a public role after the deps role), else host_plan checks the dependency lists and
    names them (site.yml's preflight). Returns (the plan the same inputs get from plan.host_plan, the status such as
    "HOST | SUCCESS", the result)."""
    from inventory_vars import Resolved, adhoc_module, host_vars  # noqa: PLC0415 (the sandbox inventory's variables)

    # a whole model directory (config.json, the index and its shards) where the units could see it: not under /tmp
    # or /home (the hardening rule), so in the sandbox cache (tests/sandbox/shell.py CACHE), written once
    model = CACHE / "test-models" / "whole"
    if not (model / "model.safetensors.index.json").exists():
        fakegpu.render_model(model)
    extra = {"sglang_topology_nvidia_smi_path": smi, "sglang_topology_sysfs_root": sysfs_root,
             "sglang_record_dir": str(tmp_path / "records"), "sglang_model_path": str(model),
             "sglang_deps_wheelhouse": "", **changed}  # fmt: skip
    _templar, variables, v = host_vars(host=HOST, extra=extra)
    # as roles/sglang/tasks/plan.yml calls it in site.yml's preflight
    args = {"topology": True, "variables": "sglang"}
    keep = None if named else (lambda n: n != "sglang_deps_venv_paths")
    status, result = adhoc_module(tmp_path, "host_plan", variables, v, groups=("prefill", "decode"), args=args,
                                  keep=keep)  # fmt: skip
    facts = read_topology(sysfs_root, smi) if "plan" in result else None  # what the look read, read here again
    ready = readiness_look.look(sysfs_root, run=run_smi, nvidia_smi=smi) if "plan" in result else None
    r = Resolved(variables, v)
    roles = plan_inputs.worker_roles(r, ["prefill", "decode"])
    found = plan_inputs.profile_file(r.get("sglang_profile"), "", str(REPO / "profiles"))
    content = yaml.safe_load(Path(found["path"]).read_text()) if found["path"] else {}
    profile = {"path": found["path"], "content": content}
    # one host in prefill and decode, no router: colocated (the workers are advertised at loopback)
    colocated = plan_inputs.colocated({"prefill": [HOST], "decode": [HOST]})
    context = {"host": HOST, "group_names": ["prefill", "decode"], "colocated": colocated, "topology": None}
    inputs = plan_inputs.host_plan(r, context, variables["sglang_deps_venv_paths"], profile)
    assert roles == inputs["roles"]
    expect = plan.host_plan({**inputs, "topology": facts, "readiness": ready, "model": result.get("model"),
                             "host_paths": result.get("paths"),
                             "listeners": result.get("listeners"), "deployed": result.get("records")})  # fmt: skip
    return expect, status, result


def run_smi(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, "LC_ALL": "C"})
    return proc.returncode, proc.stdout, proc.stderr


def read_topology(sysfs_root, smi):
    """The topology as the look reads it (gpu_topology.read, the same code), for the plan the test expects."""

    def run_command(argv, environ_update=None):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, **environ_update})
        return proc.returncode, proc.stdout, proc.stderr

    facts, error = gpu_topology.read(sysfs_root, smi, run_command=run_command, get_bin_path=lambda *_a, **_k: None)
    assert error is None, error
    return facts


def test_host_plan_plans_what_the_filter_plans_on_what_the_look_read(host, tmp_path):
    expect, status, result = plan_through_ansible(tmp_path, host["smi"], host["root"])
    assert status == f"{HOST} | SUCCESS" and result["changed"] is False and result["records"] == {}, result
    # the topology is planned on, not returned as a fact (the topology role sets gpu_topology)
    assert "ansible_facts" not in result and len(read_topology(host["root"], host["smi"])["gpus"]) == 8
    # the sandbox inventory's prefill and decode on the fake 8-GPU box
    assert result["plan"] == expect and [u["role"] for u in expect["units"]] == ["prefill", "decode"]
    assert result["lines"] == expect["warnings"] + plan.placement_lines(expect["units"])
    assert result["lines"][-1].startswith("sglang-decode") and "GPUs " in result["lines"][-1]
    assert expect["units"][0]["url"] == "http://127.0.0.1:30000"  # colocated
    assert result["venv_paths"] == json.loads(json.dumps(expect_venvs()))


def expect_venvs():
    from inventory_vars import Resolved, host_vars  # noqa: PLC0415

    _templar, variables, v = host_vars(host=HOST, extra={"sglang_deps_wheelhouse": ""})
    return plan_inputs.venv_paths(Resolved(variables, v))


def test_host_plan_fails_with_the_plans_own_messages(host, tmp_path):
    missing = str(tmp_path / "no-model")
    expect, status, result = plan_through_ansible(tmp_path, host["smi"], host["root"], sglang_model_path=missing)
    assert status.endswith("FAILED!") and expect["problems"] and expect["units"] == []
    assert result["msg"] == ". ".join(expect["problems"]) + "." and missing in result["msg"]


def test_host_plan_fails_naming_a_host_that_shows_no_gpu_then_the_other_problems(tmp_path):
    _inputs, status, result = plan_through_ansible(tmp_path, "/bin/false", str(tmp_path), sglang_profile="llama_sm90")
    assert status.endswith("FAILED!")
    assert result["msg"].startswith(f"{HOST} shows no GPU (")
    assert "set sglang_topology_nvidia_smi_path. sglang_profile 'llama_sm90' is not a shipped profile" in result["msg"]
    assert "ansible_facts" not in result and "plan" in result


def test_host_plan_fails_with_the_looks_own_message(tmp_path):
    missing = str(tmp_path / "missing")
    _inputs, status, result = plan_through_ansible(tmp_path, missing, str(tmp_path))
    assert status.endswith("FAILED!") and result["msg"] == f"nvidia_smi_path {missing} is not an executable file"
    assert "plan" not in result


def test_host_plan_checks_the_dependency_lists_first_where_no_venvs_are_named(host, tmp_path):
    """Without sglang_deps_venv_paths (site.yml's preflight), host_plan checks the dependency lists before anything
    else and names this run's venvs; the variable table's message comes before the look."""
    _inputs, status, result = plan_through_ansible(tmp_path, host["smi"], host["root"], named=False)
    assert status == f"{HOST} | SUCCESS", result
    assert result["venv_paths"] == json.loads(json.dumps(expect_venvs()))
    assert result["venv_paths"]["engine"].split("/")[-1].startswith("engine-")
    unpinned = ["sglang>=0.5.23", "nvidia-ml-py==13.615.71"]
    bad = {"sglang_deps_packages": unpinned, "sglang_health_timeout": "soon"}
    _inputs, status, result = plan_through_ansible(tmp_path, "/bin/false", str(tmp_path), named=False, **bad)
    assert status.endswith("FAILED!") and "sglang_deps_packages" in result["msg"] and "==" in result["msg"], result
    # the dependency lists fail first: no look ran (nothing it reads), the variable table was not reached
    assert "paths" not in result and "sglang_health_timeout" not in result["msg"]
    bad = {"sglang_health_timeout": "soon"}
    _inputs, status, result = plan_through_ansible(tmp_path, "/bin/false", str(tmp_path), named=False, **bad)
    assert status.endswith("FAILED!") and "sglang_health_timeout" in result["msg"] and "paths" not in result
