"""The deps role's own dependency checks in one task, disagg.sglang.deps_plan (an action plugin on the controller),
through `ansible` itself on a host of every role with the sandbox inventory's variables: it names the venvs
plan_inputs.venv_paths names (as the preflight's host_plan does where no venvs are named yet), and fails with
plan_inputs.deps_problems' messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan_inputs
from inventory_vars import Resolved, host_vars

REPO = Path(__file__).resolve().parents[2]
HOST = "pytest-badinv-1"
GROUPS = ["prefill", "decode", "router"]


def deps_plan(tmp_path, **changed):
    """(status, result, the variables as Resolved) of deps_plan on HOST with CHANGED beside the inventory's."""
    _templar, variables, v = host_vars(host=HOST, extra=changed)
    values = {}
    for name in variables:
        if name.startswith("sglang_") and name != "sglang_deps_venv_paths":
            try:
                values[name] = v(name)
            except AnsibleError:  # a variable of another role that this inventory cannot template
                continue
    (tmp_path / "vars.json").write_text(json.dumps(values))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    groups = {role: {"hosts": {HOST: None}} for role in GROUPS}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {HOST: local}, "children": groups}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    argv = [str(Path(sys.executable).with_name("ansible")), HOST, "-i", str(tmp_path / "hosts.yml"), "-o",
            "-e", f"@{tmp_path / 'vars.json'}", "-m", "disagg.sglang.deps_plan"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=REPO, timeout=120)
    head, sep, body = proc.stdout.partition("=> ")
    assert sep, proc.stdout + proc.stderr
    resolved = Resolved({n: x for n, x in variables.items() if n != "sglang_deps_venv_paths"}, v)
    return head.strip(), json.loads(body), resolved


def test_deps_plan_names_this_runs_venvs_as_the_preflight_names_them(tmp_path):
    status, result, resolved = deps_plan(tmp_path)
    assert status == f"{HOST} | SUCCESS" and result["changed"] is False, result
    assert result["venv_paths"] == json.loads(json.dumps(plan_inputs.venv_paths(resolved)))
    assert result["venv_paths"]["router_verify"][:2] == ["--router-module", "sglang_router.launch_router"]


def test_deps_plan_fails_with_the_dependency_checks_messages(tmp_path):
    status, result, resolved = deps_plan(tmp_path, sglang_deps_router_packages=["smg==1.0.0"])
    expect = plan_inputs.deps_problems(resolved, GROUPS)
    assert status.endswith("FAILED!") and expect and "venv_paths" not in result
    assert result["msg"] == ". ".join(expect) + "."
    assert "does not install sglang-router" in result["msg"]
