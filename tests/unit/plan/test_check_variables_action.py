"""A role's variables against the table in one task, disagg.sglang.check_variables (an action plugin: the task's
variables templated and checked on the controller), through `ansible` itself: a public role run on its own refuses a
bad value with the table's message, takes the good ones, templates a variable from another, and names the roles it
knows when given another."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def check(tmp_path, role, variables):
    """(status such as "localhost | SUCCESS", result) of check_variables with the extra VARIABLES."""
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    argv = [str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "localhost,", "-c", "local", "-o",
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'vars.json'}",
            "-m", "disagg.sglang.check_variables", "-a", json.dumps({"role": role})]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=REPO, timeout=120)
    head, sep, body = proc.stdout.partition("=> ")
    assert sep, proc.stdout + proc.stderr
    return head.strip(), json.loads(body)


def test_a_bad_monitoring_value_fails_naming_the_variable_and_the_fix(tmp_path):
    status, result = check(tmp_path, "sglang_monitoring", {"sglang_monitoring_slo_quantile": 95,
                                                           "sglang_monitoring_slo_for": "5 minutes"})  # fmt: skip
    assert status.endswith("localhost | FAILED!"), (status, result)
    assert result["problems"] == [
        "sglang_monitoring_slo_quantile is 95 (a number): it must be a fraction 0.5-0.999 (a fraction: 0.95 for 95 %) "
        "(a quantile (0.95, not 95))",
        "sglang_monitoring_slo_for is '5 minutes' (a string): it must be a Prometheus duration (`5m`)",
    ]
    assert result["msg"] == ". ".join(result["problems"]) + "."


def test_good_values_and_a_templated_one_pass(tmp_path):
    status, result = check(tmp_path, "sglang_bench", {
        "sglang_bench_accuracy_floor": 0.9,
        "sglang_bench_concurrencies": [1, 4],
        "sglang_bench_accuracy_questions": "{{ 100 + 19 }}",
        "sglang_router_port": "not the bench role's: not checked here",
    })  # fmt: skip
    assert status == "localhost | SUCCESS" and result == {"changed": False, "problems": []}, result


def test_the_topology_role_checks_the_internal_roles_topology_rows(tmp_path):
    status, result = check(tmp_path, "sglang_topology", {"sglang_topology_sysfs_root": "sys"})
    assert status.endswith("localhost | FAILED!"), result
    assert result["problems"] == ["sglang_topology_sysfs_root is 'sys' (a string): it must be an absolute path"]


@pytest.mark.parametrize("role", ["sglang_nope", "prefill"])
def test_a_role_the_table_lacks_is_named_with_those_it_has(tmp_path, role):
    status, result = check(tmp_path, role, {})
    assert status.endswith("localhost | FAILED!"), result
    assert f"{role!r} is not a role of the variable table (one of sglang, sglang_deps" in result["msg"], result
