"""The steps of plan.host_plan, each on its own, as tables: input_problems (settings, profile, instances, the host's
ports), place_instances, worker_specs, host_findings, port_owner_problems. The inputs are the sandbox inventory's,
derived as the preflight's host_plan action derives them (plan_inputs.host_plan), with one change per row."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan, plan_inputs
from inventory_vars import GROUPS, Resolved, host_vars

REPO = Path(__file__).resolve().parents[3]
HOST = "pytest-badinv-1"


def inputs_for(topology, extra=None, groups=GROUPS, **look):
    """host_plan's inputs for the sandbox host with EXTRA variables, in GROUPS; LOOK: what the host's look read
    (listeners, deployed), nothing by default."""
    _templar, variables, v = host_vars(extra=extra, groups=groups)
    values = Resolved(variables, v)
    context = {"host": HOST, "group_names": list(groups), "colocated": variables["_sglang_colocated"],
               "topology": topology}  # fmt: skip
    found = plan_inputs.profile_file(v("sglang_profile"), str(REPO / "inventories/sandbox"), str(REPO / "profiles"))
    profile = {"path": found["path"], "content": yaml.safe_load(Path(found["path"]).read_text())}
    inputs = plan_inputs.host_plan(values, context, v("sglang_deps_venv_paths"), profile)
    return {**inputs, "host_paths": {}, "listeners": {}, "deployed": {}, "model": None, **look}


def placed(topology, **kwargs):
    """(inputs, placement) of the sandbox host."""
    inputs = inputs_for(topology, **kwargs)
    placement, problems = plan.place_instances(inputs, plan.input_problems(inputs)[2])
    assert problems == []
    return inputs, placement


@pytest.mark.parametrize(
    ("extra", "groups", "problem", "warnings", "instances"),
    [
        pytest.param({}, GROUPS, None, 0, ["prefill0", "decode0"], id="the sandbox host"),
        pytest.param({}, ("router",), None, 0, [], id="a router-only host: no instance, no instance rule"),
        pytest.param({"sglang_decode_instances": []}, GROUPS, None, 1, ["prefill0"], id="an empty role warns"),
        pytest.param({"sglang_prefill_extra_flags": {"numa-node": 1}}, GROUPS,
                     "sglang_prefill_extra_flags sets --numa-node, which the collection owns", 0,
                     ["prefill0", "decode0"], id="a derived flag in a role's extra flags"),
        pytest.param({"sglang_prefill_instances": [{"name": "prefill0", "tp": 4, "port": 80, "bootstrap_port": 8998,
                                                    "dist_init_port": 30335}]}, GROUPS,
                     "sglang_prefill_instances (prefill0).port (80) on pytest-badinv-1: ports below 1024", 0,
                     ["prefill0", "decode0"], id="a privileged port"),
        pytest.param({"sglang_health_poll": 0}, GROUPS, "sglang_health_timeout (300) and sglang_health_poll (0)", 0,
                     ["prefill0", "decode0"], id="a shared setting"),
    ],
)  # fmt: skip
def test_input_problems(topology, extra, groups, problem, warnings, instances):  # noqa: PLR0917
    found_problems, found_warnings, found_instances = plan.input_problems(inputs_for(topology, extra, groups))
    assert (found_problems == []) if problem is None else any(problem in p for p in found_problems), found_problems
    assert len(found_warnings) == warnings, found_warnings
    assert [i["name"] for i in found_instances] == instances


@pytest.mark.parametrize(
    ("extra", "facts", "problem"),
    [
        pytest.param({}, True, None, id="both TP4 instances on the 8 GPUs"),
        pytest.param({"sglang_decode_instances": [{"name": "decode0", "tp": 8, "port": 30001, "bootstrap_port": 8999,
                                                   "dist_init_port": 30435}]}, True,
                     "Fix sglang_prefill_instances / sglang_decode_instances of pytest-badinv-1",
                     id="12 GPUs asked of 8"),
        pytest.param({}, False, "The host has 0 GPUs", id="no topology read"),
    ],
)  # fmt: skip
def test_place_instances(topology, extra, facts, problem):
    inputs = inputs_for(topology if facts else None, extra)
    placement, problems = plan.place_instances(inputs, plan.input_problems(inputs)[2])
    if problem is None:
        assert problems == [] and [slot["name"] for slot in placement] == ["prefill0", "decode0"]
        assert not set(placement[0]["gpus"]) & set(placement[1]["gpus"])
    else:
        assert placement == [] and len(problems) == 1 and problems[0].startswith("pd_placement: "), problems
        assert problem in problems[0], problems


@pytest.mark.parametrize(
    ("extra", "problem", "nixl"),
    [
        pytest.param({}, None, "nixl 1.5.1", id="the sandbox's specs, each with its host's NIXL"),
        pytest.param({"sglang_deps_packages_nodeps": []}, None, "nixl (not pinned with ==)", id="NIXL not pinned"),
        pytest.param({"sglang_decode_extra_env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
                     "sglang_decode_extra_env sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "nixl 1.5.1",
                     id="an allocator setting that pushes NIXL's KV transfers off GPU peer-to-peer"),
    ],
)  # fmt: skip
def test_worker_specs(topology, extra, problem, nixl):
    inputs, placement = placed(topology, extra=extra)
    specs, problems = plan.worker_specs(inputs, placement)
    assert [(s["unit"], s["nixl"], s["engine"]) for s in specs] == [
        ("sglang-prefill0", nixl, "sglang-pd-sim 0.1.0"),
        ("sglang-decode0", nixl, "sglang-pd-sim 0.1.0"),
    ]
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    ("policy", "warned", "refused"),
    [
        pytest.param("off", False, False, id="p2p policy off"),
        pytest.param("warn", True, False, id="p2p policy warn"),
        pytest.param("fail", False, True, id="p2p policy fail"),
    ],
)
def test_host_findings(topology, policy, warned, refused):
    """The sandbox's RTX PRO 6000 host reads P2P as not supported between its GPUs: the policy decides what that is."""
    inputs, placement = placed(topology, extra={"sglang_kv_p2p_policy": policy})
    specs, _problems = plan.worker_specs(inputs, placement)
    warnings, problems, readiness = plan.host_findings(inputs, specs)
    assert any("peer-to-peer" in w for w in warnings) is warned, warnings
    assert any("peer-to-peer" in p for p in problems) is refused, problems
    assert isinstance(readiness, list)


@pytest.mark.parametrize(
    ("look", "conflicting", "problem"),
    [
        pytest.param({}, None, None, id="nothing listens"),
        pytest.param({"listeners": {"30000": "sglang-prefill0.service"}}, None, None, id="the unit itself"),
        pytest.param({"listeners": {"30000": "nginx"}}, None,
                     "sglang-prefill0 port (sglang_prefill_instances) is port 30000, which nginx already listens on",
                     id="another program"),
        pytest.param({"listeners": {"30000": "old-server.service"}}, ["old-server"], None,
                     id="a unit the run stops first"),
        pytest.param({"listeners": {"30000": "sglang-old.service"}, "deployed": {"sglang-old": {"role": "prefill"}}},
                     None, None, id="a retired unit of the collection"),
        pytest.param({}, ["sglang-decode0"], "sglang_conflicting_units names sglang-decode0, a unit this deployment "
                     "manages", id="a managed unit named conflicting"),
    ],
)  # fmt: skip
def test_port_owner_problems(topology, look, conflicting, problem):
    inputs, placement = placed(topology, extra={"sglang_conflicting_units": conflicting or []})
    specs, _problems = plan.worker_specs(inputs, placement)
    inputs.update(look)
    problems = plan.port_owner_problems(inputs, specs, inputs["deployed"])
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


def test_host_plan_is_its_steps(topology):
    """host_plan returns what its steps found, in their order."""
    inputs, placement = placed(topology, listeners={"30001": "nginx"})
    specs, _problems = plan.worker_specs(inputs, placement)
    planned = plan.host_plan(inputs)
    assert planned["placement"] == placement and planned["units"] == []
    assert planned["problems"] == plan.port_owner_problems(inputs, specs, {})
