"""The worker guard's decisions (plugins/module_utils/guard/verdict.py), driven by the table guard_cases.yml, and its
preflight rule, default bound and metrics."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.guard import verdict

CASES = yaml.safe_load((Path(__file__).parent / "guard_cases.yml").read_text())


@pytest.mark.parametrize("name", list(CASES))
def test_the_guard_judges_each_reading_as_the_table_says(name):
    case = CASES[name]
    config = case["config"]
    first = case["readings"][0][0]
    state = verdict.new_state(first[0], pid=first[2])
    got, want = [], []
    for (at, active, pid, health, loads), (action, phase, silent_s) in case["readings"]:
        reading = {"active": active, "pid": pid, "health": health, "loads": loads, "at": at}
        state, event = verdict.look(state, reading, at, config)
        got.append((at, event["action"], event["phase"], event["silent_s"]))
        want.append((at, action, phase, float(silent_s)))
    assert got == want


def test_a_kill_says_why_and_a_hold_names_the_budget():
    config = {"bound": 10, "budget": 1, "window": 600}
    state = verdict.new_state(0, pid=7)
    state, kill = verdict.look(state, {"active": "active", "pid": 7, "health": "timeout", "loads": [0.0]}, 12, config)
    assert kill["action"] == verdict.KILL
    assert kill["reason"] == (
        "silent for 12 s (bound 10 s): /health unanswered and the scheduler published no load snapshot (it is stalled)"
    )
    state, _event = verdict.look(state, {"active": "active", "pid": 8, "health": "timeout", "loads": None}, 14, config)
    state, hold = verdict.look(state, {"active": "active", "pid": 8, "health": "timeout", "loads": None}, 25, config)
    assert hold["action"] == verdict.HOLD
    assert "neither /health nor /v1/loads answered" in hold["reason"]
    assert hold["reason"].endswith("kill budget spent (1 kills in 600 s)")
    assert verdict.budget_spent(state, 25, config)
    assert not verdict.budget_spent(state, 700, config)


@pytest.mark.parametrize(
    ("stall_timeout", "health_check_timeout", "bound"), [(30, 20, 30), (10, 20, 20), (20, 20, 20), (5, 8, 8)]
)
def test_the_default_bound_is_the_stall_timeout_never_below_sglangs_health_check_timeout(
    stall_timeout, health_check_timeout, bound
):
    assert verdict.default_bound(stall_timeout, health_check_timeout) == bound


BOUND_RULES = [
    ("within", 30, 20, {"sglang_prefill_extra_env": {"SGLANG_HEALTH_CHECK_TIMEOUT": "30"}}, 5, []),
    ("the rendered timeout above the bound", 20, 25, {}, 5, ["sglang_health_check_timeout is 25 s, above "
                                                             "sglang_guard_silence_bound (20 s)"]),
    ("an extra env above the bound", 20, 20, {"sglang_decode_extra_env": {"SGLANG_HEALTH_CHECK_TIMEOUT": 60}}, 5,
     ["sglang_decode_extra_env sets SGLANG_HEALTH_CHECK_TIMEOUT=60, above sglang_guard_silence_bound (20 s)"]),
    ("an extra env not an integer", 20, 20, {"sglang_prefill_extra_env": {"SGLANG_HEALTH_CHECK_TIMEOUT": "2.5"}}, 5,
     ["sglang_prefill_extra_env sets SGLANG_HEALTH_CHECK_TIMEOUT=2.5: sglang reads it as an integer"]),
    ("a probe as long as the bound", 10, 10, {}, 10, ["sglang_guard_probe_timeout (10 s) must be shorter"]),
    ("a bound of the wrong type is the table's to report", "20", 30, {}, 5, []),
]  # fmt: skip


@pytest.mark.parametrize("row", BOUND_RULES, ids=[r[0] for r in BOUND_RULES])
def test_the_preflight_refuses_a_health_check_timeout_above_the_guards_bound(row):
    _name, bound, hct, envs, probe, want = row
    problems = verdict.bound_problems(bound, hct, envs, probe)
    assert len(problems) == len(want), problems
    for problem, start in zip(problems, want, strict=True):
        assert problem.startswith(start), problem


def test_the_metrics_show_kills_budget_and_silence_per_unit():
    config = {"bound": 20, "budget": 1, "window": 600}
    state = {**verdict.new_state(0, 5), "kills": [100.0]}
    text = verdict.metrics_text(
        {"sglang-prefill0": {"state": state, "silent_s": 3.5, "kills_total": 1},
         "sglang-decode0": {"state": verdict.new_state(0, 6), "silent_s": 0.0, "kills_total": 0}},
        150,
        config,
    )  # fmt: skip
    lines = set(text.splitlines())
    assert 'sglang_guard_kills_total{unit="sglang-prefill0"} 1' in lines
    assert 'sglang_guard_budget_spent{unit="sglang-prefill0"} 1' in lines
    assert 'sglang_guard_budget_spent{unit="sglang-decode0"} 0' in lines
    assert 'sglang_guard_silent_seconds{unit="sglang-prefill0"} 3.5' in lines
    assert "sglang_guard_up 1" in lines
