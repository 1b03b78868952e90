"""Every row of tests/cases/bad_inventories.yml on the plan's pure functions, in the order the preflight play runs
them (dependency lists, profile, host plan, PD contract, router plan): each fails with its message fragments.
The same inputs, without the row's change, plan cleanly. Rows that need the installed program's parser or a look
at the host are proved elsewhere (tests/unit/cli/test_cli_check.py, the sandbox rows)."""

import inspect
import os
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.deps import deps_rules
from ansible_collections.disagg.sglang.plugins.module_utils.model import revision_rules
from ansible_collections.disagg.sglang.plugins.module_utils.plan import (
    cluster_rules,
    compat_rules,
    kv_rules,
    plan_inputs,
    profile_rules,
    router_flag_rules,
    router_rules,
    rules,
)
from ansible_collections.disagg.sglang.plugins.module_utils.plan import variables as vt
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.module_utils.units import units
from inventory_vars import GROUPS, Resolved, host_vars
from plan_stages import gather, preflight

REPO = Path(__file__).resolve().parents[3]
ROWS = yaml.safe_load((REPO / "tests/cases/bad_inventories.yml").read_text())


@pytest.fixture(scope="module")
def topologies(tmp_path_factory, topology):
    """Facts by fixture name, gathered once each (rows name one with `topology`)."""
    cache = {"rtxpro6000-8x": topology}

    def get(name):
        if name not in cache:
            cache[name] = gather(name, tmp_path_factory.mktemp("sysfs"))
        return cache[name]

    return get


def collapse(text):
    return " ".join(str(text).split())


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, id=r["id"]) for r in ROWS if r.get("checked_by", "rules") == "rules" and not r.get("xfail")],
)
def test_bad_inventory_row_fails_with_its_message(topologies, row):
    messages = preflight(
        topologies(row.get("topology") or "rtxpro6000-8x"),
        groups=tuple(row.get("groups") or GROUPS),
        extra=row.get("extra"),
        host_extra=row.get("host_vars"),
        missing=tuple(row.get("host_missing") or ()),
        listeners=row.get("host_listeners"),
    )
    text = collapse(". ".join(messages) + ".")
    assert messages, f"{row['id']}: planned without a problem"
    missing = [fragment for fragment in row["expect"] if collapse(fragment) not in text]
    assert not missing, f"{row['id']}: {missing} not in: {text}"


# Rules the bad-inventory rows cannot reach through the plan, and the test that trips each of them.
RULES_TESTED_ELSEWHERE = {
    "cluster_rules.worker_api_key_problems": "disagg.sglang.router_plan checks it beside the plan: "
    "tests/unit/plan/test_cluster_rules.py, tests/unit/plan/test_router_plan_action.py",
    "cluster_rules.deployment_api_key_problems": "each worker host's key as its own variables give it, in "
    "disagg.sglang.router_plan: tests/unit/plan/test_cross_host_rules.py, tests/unit/plan/test_router_plan_action.py",
    "kv_rules.p2p_policy_problems": "the p2p policy's own variable: tests/unit/plan/test_kv_rules.py",
    "cluster_rules.bind_problems": "the address_check module on the hosts: tests/unit/plan/test_cluster_rules.py, and "
    "tests/integration/test_multihost.py on three sandbox hosts",
    "cluster_rules.connect_problems": "the address_check module on the router host: "
    "tests/unit/plan/test_cluster_rules.py",
    "cluster_rules.deployment_bind_problems": "each worker host's look (host_look's bind), read once by the "
    "router host's address_check: tests/unit/host/test_host_look.py, tests/unit/plan/test_cluster_rules.py",
    "cluster_rules.retire_problems": (
        "deployment-wide, on the records the hosts hold: tests/unit/plan/test_cluster_rules.py"
    ),
    "revision_rules.model_revision_problems": "deployment-wide, over the worker specs of every host (a row plans one "
    "host: one model source for all its units): tests/unit/model/test_model_revision_rule.py",
    "rules.no_gpu_problems": "the topology facts, not the inventory: "
    "test_a_worker_host_showing_no_gpu_is_named_with_why",
}


@pytest.mark.parametrize(
    ("facts", "expect"),
    [
        ({"gpus": [{"index": 0}], "reason": None}, []),
        (
            {"gpus": [], "reason": "no GPU found: nvidia-smi: not found on PATH"},
            ["gpu-1 shows no GPU (no GPU found: nvidia-smi: not found on PATH). Check the driver (nvidia-smi), or set "
             "sglang_topology_nvidia_smi_path"],
        ),
        ({"gpus": []}, ["gpu-1 shows no GPU (no reason given). Check the driver (nvidia-smi), or set "
                        "sglang_topology_nvidia_smi_path"]),
        (None, ["gpu-1 shows no GPU (no reason given). Check the driver (nvidia-smi), or set "
                "sglang_topology_nvidia_smi_path"]),
    ],
)  # fmt: skip
def test_a_worker_host_showing_no_gpu_is_named_with_why(facts, expect):
    """The topology role's assert and site.yml's preflight (plan.yml) both say it through this one rule."""
    assert rules.no_gpu_problems(facts, "gpu-1") == expect


def _rules():
    """Every preflight rule: the public *_problems functions of the rule modules."""
    return {
        f"{module.__name__.rsplit('.', 1)[1]}.{name}": (module, name)
        for module in (
            rules,
            kv_rules,
            profile_rules,
            cluster_rules,
            router_rules,
            router_flag_rules,
            compat_rules,
            deps_rules,
            revision_rules,
        )
        for name, fn in inspect.getmembers(module, inspect.isfunction)
        if name.endswith("_problems") and fn.__module__ == module.__name__
    }


def test_every_preflight_rule_has_a_row_that_trips_it(topologies, monkeypatch):
    """A rule added without a row of tests/cases/bad_inventories.yml that makes it speak fails here."""
    spoke = set()

    def traced(rule, key):
        def call(*args, **kwargs):
            messages = rule(*args, **kwargs)
            if messages:
                spoke.add(key)
            return messages

        return call

    every = _rules()  # before the patching (a traced rule is a function of this file)
    assert len(every) > 20, every
    for key, (module, name) in every.items():
        monkeypatch.setattr(module, name, traced(getattr(module, name), key))
    for row in ROWS:
        if row.get("checked_by", "rules") == "rules" and not row.get("xfail"):
            preflight(topologies(row.get("topology") or "rtxpro6000-8x"), groups=tuple(row.get("groups") or GROUPS),
                      extra=row.get("extra"), host_extra=row.get("host_vars"),
                      missing=tuple(row.get("host_missing") or ()), listeners=row.get("host_listeners"))  # fmt: skip
    silent = sorted(set(every) - spoke - set(RULES_TESTED_ELSEWHERE))
    assert silent == [], f"rules no bad-inventory row trips: {silent}"


def test_the_sandbox_inventory_plans_cleanly(topology):
    assert preflight(topology) == []


def test_the_table_has_distinct_rows():
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------------------------------
# valid values must plan, and odd ones must give messages, never an exception
# --------------------------------------------------------------------------------------------------

# Printable values a secret may hold: quotes, $, backticks, spaces, backslashes, %, a leading dash.
ROBUST_SECRETS = {
    "sglang_router_api_key": "-rk $HOME \"dq\" 'sq' `id` \\back %n %% ${X} ~!#&*()[]{}|;:<>?",
    "sglang_hf_token": "--hf_$(whoami)`x`\\n%i'\"",
}


def test_robust_secrets_and_a_model_path_with_a_space_plan_cleanly(topology):
    extra = {**ROBUST_SECRETS, "sglang_model_path": "/opt/models/Deep Seek V4 Flash"}
    messages, specs = preflight(topology, extra=extra, with_units=True)
    assert messages == []
    workers = [s for s in specs if s["role"] != "router"]
    assert {s["flags"]["model-path"] for s in workers} == {"/opt/models/Deep Seek V4 Flash"}
    assert all(ROBUST_SECRETS["sglang_hf_token"] not in str(s) for s in specs), "a secret entered a spec"


@pytest.mark.parametrize(
    ("listeners", "conflicting"),
    [
        pytest.param({30000: "sglang-prefill0.service", 8000: "sglang-router.service"}, [], id="own-units"),
        pytest.param({30001: "old-server.service"}, ["old-server"], id="a-unit-the-run-stops-first"),
    ],
)
def test_ports_held_by_the_deployment_or_a_unit_it_stops_first_plan(topology, listeners, conflicting):
    assert preflight(topology, extra={"sglang_conflicting_units": conflicting}, listeners=listeners) == []


ODD_VALUES = [None, 0, -1, 1.5, True, "", "x y", "/abs", [], ["a"], {}, {"a": 1}]


@pytest.mark.parametrize("variable", sorted(vt.VARIABLES))
def test_odd_values_of_every_checked_variable_give_messages_not_exceptions(variable):
    """Every value of every variable: either accepted or refused with a message naming the variable."""
    for value in ODD_VALUES:
        messages = vt.variable_problems(vt.VARIABLES[variable]["role"], {variable: value})
        assert all(isinstance(m, str) for m in messages)
        assert all(variable in m for m in messages), messages


ODD_INSTANCE_LISTS = [v for v in ODD_VALUES if v != []] + [
    [{"name": 1}],
    [None],
    [{"name": "p", "port": "x", "tp": [1]}],
]


@pytest.mark.parametrize("value", ODD_INSTANCE_LISTS)
def test_odd_instance_lists_give_messages_not_exceptions(value):
    messages = rules.instance_problems(value, "prefill")
    assert messages and all("sglang_prefill_instances" in m for m in messages)


# --------------------------------------------------------------------------------------------------
# every value reaches the process byte for byte: the quoting of ExecStart= and Environment= lines
# --------------------------------------------------------------------------------------------------

# What systemd 252 makes of a quoted token (tests/integration/test_robust_values.py proves it on the sandbox's
# systemd): in ExecStart= both % (specifiers) and $ (variables) are expanded, in Environment= only %.
# (value, ExecStart= token, Environment= assignment of V=value)
QUOTING = [
    ("plain-1.0", "plain-1.0", "V=plain-1.0"),
    ("--port", "--port", "V=--port"),
    ('{"x": 1}', '"{\\"x\\": 1}"', '"V={\\"x\\": 1}"'),
    ("a b", '"a b"', '"V=a b"'),
    ("$HOME", '"$$HOME"', '"V=$HOME"'),
    ("50%", "50%%", "V=50%%"),
    ('q"uo\\te', '"q\\"uo\\\\te"', '"V=q\\"uo\\\\te"'),
    ("`id` 'x'", "\"`id` 'x'\"", "\"V=`id` 'x'\""),
]


@pytest.mark.parametrize(("value", "exec_token", "env_line"), QUOTING)
def test_systemd_quoting_of_exec_and_environment_lines(value, exec_token, env_line):
    spec = {"exec": [value, "-m", "m"], "lines": [[value], ["--flag", value]], "environment": {"V": value, "a": "1"}}
    assert units.systemd_text(spec) == {
        "exec": f"{exec_token} -m m",
        "lines": [exec_token, f"--flag {exec_token}"],
        "environment": ["a=1", env_line],  # by name as Jinja's dictsort: case-insensitive
    }


def test_a_flag_value_that_starts_with_a_dash_stays_the_flags_value():
    assert sf.render_lines({"tokenizer-path": "-odd", "chunked-prefill-size": -1}) == [
        ["--tokenizer-path=-odd"],
        ["--chunked-prefill-size", "-1"],
    ]


def test_the_router_key_reaches_argv_as_one_token(monkeypatch):
    """A key that starts with a dash must stay the value of --api-key (argparse takes '-x' for an option)."""
    exec_argv = units.secret_launcher(["/v/bin/python", "-m", "sglang_router.launch_router"], {"--api-key": "K"})
    code = exec_argv[2].replace("runpy.run_module(", "(lambda *a, **k: None)(")
    monkeypatch.setenv("K", "-rk $x")
    monkeypatch.setattr(sys, "argv", ["launch_router", "--port", "8000"])
    exec(code, {})  # the launcher itself, with runpy's call made harmless
    assert sys.argv == ["launch_router", "--api-key=-rk $x", "--port", "8000"]
    assert "K" not in os.environ


def _user_variables():
    names = {"sglang_model_path"}
    for rel in ("roles/sglang/defaults/main.yml", "roles/sglang_router/defaults/main.yml"):
        names |= set(yaml.safe_load((REPO / rel).read_text()))
    return sorted(names)


@pytest.mark.parametrize("variable", _user_variables())
def test_a_null_or_a_mapping_in_any_variable_plans_or_says_why_never_raises(topology, variable):
    """The plan's inputs are templated as Ansible does (roles' vars included): no value of a user variable may end
    in a Jinja or Python error instead of a message. (Measured once over 10 odd values of every default of the
    internal, router and topology roles: no exception.)"""
    for value in (None, {"a": 1}):
        messages = preflight(topology, extra={variable: value})
        assert all(isinstance(m, str) for m in messages)


def test_an_empty_instance_list_is_a_warning_of_the_host_and_the_router_refuses_a_deployment_without_the_role(
    topology,
):
    """A host in group decode with sglang_decode_instances: [] plans nothing there (a scale-in retires what ran):
    the host plan warns and places nothing; a deployment left without any decode is refused by the router's rule."""
    problems = preflight(topology, extra={"sglang_decode_instances": []})
    assert len(problems) == 1 and "The router found 1 prefill and 0 decode workers" in problems[0], problems


# Issue 40: with a model source the workers load the staged directory, planned once here (source.staged_dir), and each
# worker spec names its revision (the same-revision rule of prefill and decode reads spec["model_revision"]); the
# directory managed outside has no revision the collection knows, and its path is the one the look checks.
MODEL_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("extra", "path", "revision"),
    [
        ({}, "/opt/models/DeepSeek-V4-Flash", None),
        (
            {
                "sglang_model_source": {"hub": "deepseek-ai/DeepSeek-V4-Flash", "revision": MODEL_COMMIT},
                "sglang_models_dir": "/srv/models",
            },
            f"/srv/models/DeepSeek-V4-Flash-{MODEL_COMMIT}",
            MODEL_COMMIT,
        ),
        (
            {"sglang_model_source": {"mirror": "http://10.0.0.5:8899/m/V4-" + MODEL_COMMIT, "revision": MODEL_COMMIT}},
            f"/opt/models/V4-{MODEL_COMMIT}",
            MODEL_COMMIT,
        ),
    ],
    ids=["managed-outside", "hub", "mirror"],
)
def test_workers_load_the_staged_directory_of_the_sources_revision_planned_once(topology, extra, path, revision):
    messages, specs = preflight(topology, extra=extra, with_units=True)
    assert messages == []
    workers = [s for s in specs if s["role"] in ("prefill", "decode")]
    assert workers
    for spec in workers:
        assert spec["model_path"] == path and spec["flags"]["model-path"] == path
        assert ["--model-path", path] in [list(line) for line in spec["lines"]], spec["lines"]
        assert spec["model_revision"] == revision
        assert units.record(spec, "/etc/systemd/system")["model_revision"] == revision
    _templar, _variables, v = host_vars(inventory="inventories/sandbox", groups=GROUPS, extra=extra)
    look = plan_inputs.host_look(Resolved(_variables, v), {"prefill": {}}, {}, False)
    # the look checks a directory managed outside now; a staged one after its staging step
    assert look["model"] == (None if revision else path)


@pytest.mark.parametrize(
    ("roles", "extra", "expect"),
    [
        (
            {"prefill": {}},
            {},
            ["/etc/sglang/sglang-guard.env", "/etc/sglang/sglang-guard.json",
             "/etc/systemd/system/sglang-guard.service", "/usr/local/lib/sglang-guard"],
        ),
        (
            {"decode": {}},
            {"sglang_unit_prefix": "pd-", "sglang_env_dir": "/srv/env", "sglang_guard_dir": "/srv/guard"},
            ["/etc/systemd/system/pd-guard.service", "/srv/env/pd-guard.env", "/srv/env/pd-guard.json", "/srv/guard"],
        ),
        ({}, {}, []),
    ],
    ids=["worker-defaults", "worker-own-paths", "router-only"],
)  # fmt: skip
def test_the_look_of_a_worker_host_asks_which_guard_files_exist(roles, extra, expect):
    """guard.yml removes the guard's files (the guard off) only where the look found some: the look asks for each one,
    as roles/sglang/vars/main.yml names them, on every worker host and only there."""
    _templar, variables, v = host_vars(inventory="inventories/sandbox", groups=GROUPS, extra=extra)
    look = plan_inputs.host_look(Resolved(variables, v), roles, {}, False)
    assert [path for path in look["exists"] if "guard" in path] == expect
