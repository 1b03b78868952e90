"""Each rule that spans hosts, judged where what it reads is used: layouts whose router group and worker groups set
different values. A worker host plans as site.yml's preflight plans it (test_rules.preflight, the sandbox inventory
in groups prefill and decode); a router-only host (r1, group router) runs its preflight steps: its dependency checks,
its host plan (no workers), its router plan from the worker host's specs.

The rules and where each reads its settings:
  compat_rules.combination_problems   the router's version on the router host; each worker's engine and NIXL on its
                                      worker host (the spec's engine and nixl)
  deps_rules.deps_problems            the engine lists' content where the engine venv is built (worker hosts), the
                                      router list's where the router venv is (router hosts)
  rules.drain_timeout_problems        where workers drain and stop (worker hosts)
  plan.transition_problems            each worker host's own sglang_rolling_batch (its restart rule reads it)
  revision_rules.model_revision_problems  the worker specs (the router loads no weights)
  cluster_rules.deployment_api_key_problems  each worker host's key and the router host's: through Ansible, in
                                      tests/unit/plan/test_router_plan_action.py
                                      (test_the_workers_key_is_read_on_each_...)
"""

import pytest
from ansible_collections.disagg.sglang.plugins.action import router_plan as router_plan_action
from ansible_collections.disagg.sglang.plugins.action.deployment_plan import deployment_plan
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan as plan_mod
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan_inputs, router_plan
from ansible_collections.disagg.sglang.plugins.module_utils.units import units
from inventory_vars import Resolved, host_vars
from plan_stages import preflight

WORKER_GROUPS = ("prefill", "decode")
WORKER = "pytest-badinv-1"
ROUTER = "r1"
DEPLOYMENT_GROUPS = {"prefill": [WORKER], "decode": [WORKER], "router": [ROUTER]}
# the router group: its own engine lists, holding no engine and no NIXL (the router host builds no engine venv)
ROUTER_ONLY_LISTS = {"sglang_deps_packages": ["nvidia-ml-py==13.615.71"], "sglang_deps_packages_nodeps": []}
ROUTER_ONLY = {"sglang_deps_packages": ["sgl-kernel==0.3.0"], "sglang_deps_packages_nodeps": []}


def worker_host(topology, extra=None):
    """(messages, worker specs) of the worker host with EXTRA as its group's variables."""
    return preflight(topology, groups=WORKER_GROUPS, extra=extra, with_units=True)


def router_host(workers, extra=None):
    """The messages of the router-only host's preflight steps, in order (the first step that speaks), with EXTRA as
    its group's variables: its dependency checks, its host plan (no worker role) and its router plan."""
    _templar, variables, v = host_vars(host=ROUTER, groups=("router",), extra=extra)
    variables["groups"] = DEPLOYMENT_GROUPS
    values = Resolved(variables, v)
    deps = plan_inputs.deps_problems(values, ["router"])
    if deps:
        return deps
    settings = plan_inputs.settings(values, False, v("sglang_deps_venv_paths"))
    own = plan_mod.host_plan({"host": ROUTER, "roles": {}, "settings": settings, "secrets": plan_inputs.secrets(values),
                              "variables": plan_inputs.user_vars(values)})  # fmt: skip
    if own["problems"]:
        return own["problems"]
    look = {"paths": {}, "listeners": {}}
    inputs = router_plan_action.router_inputs(values, ROUTER, DEPLOYMENT_GROUPS, look)
    return router_plan.router_plans(workers, inputs)["problems"]


def test_the_worker_host_of_these_layouts_plans_alone(topology):
    messages, specs = worker_host(topology)
    assert messages == [] and {s["nixl"] for s in specs} == {"nixl 1.5.1"}, messages


@pytest.mark.parametrize(
    ("router_vars", "worker_vars", "expect"),
    [
        pytest.param(ROUTER_ONLY_LISTS, {}, None, id="router group without engine and NIXL, workers pin a tested one"),
        pytest.param({"sglang_deps_packages_nodeps": ["nixl==1.5.2"]}, {}, None,
                     id="the router host's NIXL pin is not what the workers run"),
        pytest.param(ROUTER_ONLY_LISTS, {"sglang_deps_packages_nodeps": ["nixl==1.5.2", "nixl-cu13==1.5.2"]},
                     "router sglang-router 0.3.2, engine sglang-pd-sim 0.1.0, nixl 1.5.2",
                     id="the workers pin an untested NIXL, the router group none"),
        pytest.param({**ROUTER_ONLY_LISTS, "sglang_deps_router_packages": ["sglang-router==0.3.1"]}, {},
                     "router sglang-router 0.3.1, engine sglang-pd-sim 0.1.0, nixl 1.5.1",
                     id="the router group pins an untested router"),
    ],
)  # fmt: skip
def test_the_tested_combination_is_judged_where_each_part_runs(topology, router_vars, worker_vars, expect):
    messages, workers = worker_host(topology, worker_vars)
    assert messages == []
    found = router_host(workers, router_vars)
    if expect is None:
        assert found == [], found
    else:
        assert len(found) == 1 and found[0].startswith(f"This deployment runs a combination that was never tested "
                                                       f"together: {expect}. Tested: "), found  # fmt: skip


@pytest.mark.parametrize(
    ("router_vars", "worker_vars", "expect"),
    [
        pytest.param(ROUTER_ONLY, {}, [], id="sgl-kernel in the router group's engine list: no engine venv there"),
        pytest.param({}, ROUTER_ONLY, ["lists sgl-kernel"], id="sgl-kernel in the worker group's engine list"),
        pytest.param({"sglang_deps_packages": ["nixl==1.5.1"]}, {}, [],
                     id="nixl with its dependencies in the router group's engine list"),
        pytest.param({}, {"sglang_deps_router_packages": ["sglang-router==0.3.2", "sglang-router==0.3.1"]}, [],
                     id="the router package twice in the worker group's router list: no router venv there"),
        pytest.param({"sglang_deps_router_packages": ["sglang-router==0.3.2", "sglang-router==0.3.1"]}, {},
                     ["sglang_deps_router_packages names sglang-router twice with different requirements"],
                     id="the router package twice in the router group's router list"),
    ],
)  # fmt: skip
def test_each_package_list_is_judged_where_its_venv_is_built(topology, router_vars, worker_vars, expect):
    messages, workers = worker_host(topology, worker_vars)
    found = messages if worker_vars else router_host(workers, router_vars)
    assert (found == []) == (expect == []) and all(any(e in m for m in found) for e in expect), found
    if not worker_vars:
        assert messages == []


@pytest.mark.parametrize(
    ("router_vars", "worker_vars", "refused"),
    [
        pytest.param({"sglang_stop_timeout": 20}, {}, False, id="a short stop timeout on the router-only host"),
        pytest.param({}, {"sglang_stop_timeout": 20}, True, id="the same stop timeout on the worker host"),
    ],
)
def test_the_drain_timeout_is_judged_where_workers_drain(topology, router_vars, worker_vars, refused):
    messages, workers = worker_host(topology, worker_vars)
    assert any("leaves sglang_stop_timeout (20) too short" in m for m in messages) is refused, messages
    if not refused:
        assert router_host(workers, router_vars) == []


def _moved_contract(specs):
    """Records of SPECS as deployed with another page size: this run moves each to another KV contract."""
    records = {}
    for spec in specs:
        record = units.record(spec, "/etc/systemd/system")
        record["kv_contract"] = dict(record["kv_contract"], **{"page-size": "1"})
        records[spec["unit"]] = record
    return records


@pytest.mark.parametrize(
    ("router_batch", "worker_batch", "refused"),
    [
        pytest.param(1, 0, False, id="worker hosts restart at once, the router host's batch is 1"),
        pytest.param(0, 1, True, id="worker hosts roll, the router host's batch is 0"),
    ],
)
def test_a_kv_contract_change_is_judged_by_the_worker_hosts_batch(topology, router_batch, worker_batch, refused):
    """deployment_plan runs once (run_once: on the play's first host, here the router host, whose batch it reads);
    each worker host's restart rule reads its own sglang_rolling_batch, which its plan returns."""
    messages, specs = worker_host(topology)
    assert messages == []
    # a second worker host with the same instances, so that a role has more than one instance (the rolling step
    # never restarts every instance of a role at once)
    other = [dict(s, host="w2") for s in specs]
    looks = {
        ROUTER: {"plan": {"units": [], "retired": []}},
        WORKER: {"plan": {"units": specs}, "records": _moved_contract(specs), "rolling_batch": worker_batch},
        "w2": {"plan": {"units": other}, "records": _moved_contract(other), "rolling_batch": worker_batch},
    }
    found = deployment_plan(looks, [["0.1.0", "0.2.0", "0.2.1"]], router_batch)["pd_problems"]
    assert any("to another KV contract" in m for m in found) is refused, found


@pytest.mark.parametrize(
    ("router_vars", "decode_revision", "refused"),
    [
        pytest.param({"sglang_model_source": {"hub": "org/other", "revision": "1" * 40}}, "0" * 40, False,
                     id="the router group names another model source (the router loads no weights)"),
        pytest.param({}, "1" * 40, True, id="prefill and decode hosts load different revisions"),
    ],
)  # fmt: skip
def test_the_model_revision_is_judged_on_the_workers_specs(topology, router_vars, decode_revision, refused):
    source = {"hub": "deepseek-ai/DeepSeek-V4-Flash", "revision": "0" * 40}
    messages, specs = worker_host(topology, {"sglang_model_source": source})
    assert messages == []
    decode = dict(next(s for s in specs if s["role"] == "decode"), host="w2", model_revision=decode_revision)
    workers = [*(s for s in specs if s["role"] == "prefill"), decode]
    assert any("The model revision differs" in m for m in plan_mod.pd_problems(workers, {})) is refused
    assert router_host(workers, router_vars) == []
