"""The deployment-wide step of the preflight in one task, disagg.sglang.deployment_plan (an action plugin on the
controller), through `ansible` itself: what each host's host_plan returned, joined once (plan.deployment), the KV
agreement of prefill and decode (plan.pd_problems), the role totals and the groups of the flag check
(plan.cli_check_groups, each to run on a host that has its venv), as roles/sglang/tasks/plan.yml reads them."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan
from ansible_collections.disagg.sglang.plugins.module_utils.units import units
from plan_stages import preflight

REPO = Path(__file__).resolve().parents[3]
COMPATIBLE = []
BATCH = 1


@pytest.fixture(scope="module")
def workers(topology):
    """The worker specs the sandbox inventory plans on the fake 8-GPU host (one prefill, one decode)."""
    messages, specs = preflight(topology, groups=("prefill", "decode"), with_units=True)
    assert messages == [] and [s["role"] for s in specs] == ["prefill", "decode"]
    return specs


def deployment_plan(tmp_path, looks):
    (tmp_path / "vars.json").write_text(
        json.dumps({"sglang_engine_compatible_versions": COMPATIBLE, "sglang_rolling_batch": BATCH})
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    argv = [str(Path(sys.executable).with_name("ansible")), "localhost", "-o", "-e", f"@{tmp_path / 'vars.json'}",
            "-m", "disagg.sglang.deployment_plan", "-a", json.dumps({"looks": looks})]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=REPO, timeout=120)
    head, sep, body = proc.stdout.partition("=> ")
    assert sep, proc.stdout + proc.stderr
    return head.strip(), json.loads(body)


# a retired unit's record, as host_plan returns it (rolling.retired)
OLD = {"unit": "sglang-old0", "role": "decode", "host": "g2"}


def looks_of(workers):
    """Two worker hosts of the same venv: g1 has it, g2 not yet; g2's decode was checked before (its record); r1 (a
    router host) did not plan workers."""
    g1 = [dict(s, host="g1") for s in workers]
    g2 = [dict(s, host="g2") for s in workers]
    python = workers[0]["python"]
    record = {"argv_key": units.argv_key(g2[1])}
    return {
        "g1": {"plan": {"units": g1, "retired": []}, "records": {}, "exists": {python: True}, "bind": {},
               "lines": ["sglang-prefill0: GPUs 0"]},
        "g2": {"plan": {"units": g2, "retired": [OLD]}, "records": {g2[1]["unit"]: record},
               "exists": {python: False}, "bind": {}},
        "r1": {},
    }  # fmt: skip


def test_the_deployment_is_joined_once_with_its_totals_and_one_flag_check_per_program(workers, tmp_path):
    looks = looks_of(workers)
    status, result = deployment_plan(tmp_path, looks)
    assert status == "localhost | SUCCESS" and result["changed"] is False, result
    joined = json.loads(json.dumps(plan.deployment(looks)))
    assert {key: result[key] for key in joined} == joined
    assert result["retired"] == [OLD] and list(result["lines"]) == ["g1"]
    # a decode retired while the deployment keeps two: the retire check says nothing
    assert result["retire_problems"] == []
    assert result["role_totals"] == {"prefill": 2, "decode": 2} and result["pd_problems"] == []
    # one group for the one venv, run on g1 (it has the venv), g2's decode left out (its record says it was checked)
    [group] = result["cli_checks"]
    assert group["delegate"] == "g1" and group["hosts"] == ["g1", "g2"]
    assert sorted(group["argvs"]) == ["g1 decode0", "g1 prefill0", "g2 prefill0"]
    assert group["owners"] == {"g1 prefill0": "g1", "g1 decode0": "g1", "g2 prefill0": "g2"}


def test_prefill_and_decode_that_disagree_on_the_kv_handoff_are_named(workers, tmp_path):
    looks = looks_of(workers)
    decode = looks["g2"]["plan"]["units"][1]
    decode["flags"] = dict(decode["flags"], **{"page-size": 999})
    status, result = deployment_plan(tmp_path, looks)
    assert status == "localhost | SUCCESS", result
    specs = looks["g1"]["plan"]["units"] + looks["g2"]["plan"]["units"]
    settings = {"compatible": COMPATIBLE, "batch": BATCH, "deployed": plan.deployment(looks)["deployed"]}
    expect = plan.pd_problems(copy.deepcopy(specs), settings)
    assert expect and result["pd_problems"] == expect
    assert any("999" in message for message in result["pd_problems"]), result["pd_problems"]
