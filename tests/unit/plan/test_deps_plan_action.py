"""The deps role's own dependency checks in one task, disagg.sglang.deps_plan (an action plugin on the controller),
through `ansible` itself on a host of every role with the sandbox inventory's variables: it names the venvs
plan_inputs.venv_paths names (as the preflight's host_plan does where no venvs are named yet), and fails with
plan_inputs.deps_problems' messages."""

import json
from pathlib import Path

from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan_inputs
from inventory_vars import Resolved, adhoc_module, host_vars

REPO = Path(__file__).resolve().parents[3]
HOST = "pytest-badinv-1"
GROUPS = ["prefill", "decode", "router"]


def deps_plan(tmp_path, **changed):
    """(status, result, the variables as Resolved) of deps_plan on HOST with CHANGED beside the inventory's."""
    _templar, variables, v = host_vars(host=HOST, extra=changed)
    status, result = adhoc_module(tmp_path, "deps_plan", variables, v, keep=lambda n: n != "sglang_deps_venv_paths")
    resolved = Resolved({n: x for n, x in variables.items() if n != "sglang_deps_venv_paths"}, v)
    return status, result, resolved


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
