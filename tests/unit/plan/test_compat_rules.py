"""The tested (router, engine, NIXL) combinations (plugins/module_utils/plan/compat_rules.py): the rule as a table,
and every inventory this repository ships - with either router, and with each of the sandbox simulator's releases -
planning inside the table, so nothing that runs today is refused."""

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.plan import compat_rules as cr
from plan_stages import preflight

ROUTER = "sglang-router 0.3.2"
ENGINE = "sglang 0.5.23"
NIXL = "nixl 1.5.1"
SIM1 = "sglang-pd-sim 0.1.0"
SIM2 = "sglang-pd-sim 0.2.0"


@pytest.mark.parametrize(
    ("router", "engines", "nixl", "outside"),
    [
        pytest.param(ROUTER, [ENGINE], NIXL, [], id="the defaults"),
        pytest.param("smg 1.13.0", [ENGINE], NIXL, [], id="smg with the default engine"),
        pytest.param(ROUTER, ["sglang-pd-sim 0.1.0", "sglang-pd-sim 0.2.0"], NIXL, [], id="the simulator mid-roll"),
        pytest.param("smg 1.13.0", ["sglang-pd-sim 0.2.1"], NIXL, [], id="smg with the simulator"),
        pytest.param("smg 1.12.0", ["sglang-pd-sim 0.1.0"], NIXL, [], id="the older smg, the simulator"),
        pytest.param("smg 1.12.0", [SIM2], NIXL, [SIM2], id="the older smg, sim 0.2.0"),
        pytest.param(
            "sglang-router 0.3.1", [SIM1], NIXL, [SIM1], id="sglang-router 0.3.1, which did not start reliably"
        ),
        pytest.param(ROUTER, ["sglang 0.5.24"], NIXL, ["sglang 0.5.24"], id="an engine never tested"),
        pytest.param("smg 1.12.0", [ENGINE], NIXL, [ENGINE], id="a router version never tested"),
        pytest.param(ROUTER, [ENGINE], "nixl 1.5.2", [ENGINE], id="a NIXL never tested"),
        pytest.param(ROUTER, [ENGINE], "nixl (not pinned with ==)", [ENGINE], id="NIXL not pinned"),
        pytest.param(ROUTER, [ENGINE, "sglang 0.5.22"], NIXL, ["sglang 0.5.22"], id="one engine of two outside"),
        pytest.param(ROUTER, [], NIXL, [], id="no worker planned (the router's own rules say so)"),
    ],
)
def test_a_combination_outside_the_table_is_refused_naming_it(router, engines, nixl, outside):
    problems = cr.combination_problems(router, engines, nixl)
    if not outside:
        assert problems == []
        return
    [message] = problems
    named = "; ".join(f"router {router}, engine {e}, {nixl}" for e in outside)
    assert message.startswith(f"This deployment runs a combination that was never tested together: {named}. Tested: ")
    assert message.endswith("or set sglang_router_allow_untested_combination: true to run it knowingly")
    # allowed knowingly: planned, and said
    assert cr.combination_problems(router, engines, nixl, allow=True) == []
    assert cr.untested_warnings(router, engines, nixl, allow=True)[0].startswith(
        f"This deployment runs a combination that was never tested together: {named}."
    )
    assert cr.untested_warnings(router, engines, nixl, allow=False) == []


def test_the_message_lists_every_tested_row():
    [message] = cr.combination_problems(ROUTER, ["sglang 0.5.24"], NIXL)
    for row in cr.TESTED:
        assert f"{' or '.join(row['routers'])} with {' or '.join(row['engines'])}" in message


def test_a_pin_is_read_as_the_venvs_read_the_engines():
    assert cr.pinned("smg", ["smg==1.13.0"]) == "smg 1.13.0"
    assert cr.pinned("sglang-router", ["SGLang_Router==0.3.2"]) == "sglang-router 0.3.2"
    assert cr.pinned("nixl", ["nixl-cu13==1.5.1", "nixl==1.5.1"]) == NIXL
    assert cr.pinned("nixl", ["nixl>=1.5"]) == "nixl (not pinned with ==)"
    assert cr.pinned("nixl", []) == "nixl (not pinned with ==)"


def test_every_row_names_its_evidence():
    assert all(row["evidence"] and row["routers"] and row["engines"] and row["nixl"] for row in cr.TESTED)


@pytest.mark.parametrize("impl", ["sglang_router", "smg"])
@pytest.mark.parametrize("inventory", ["inventories/sandbox", "inventories/rtxpro6000-8x"])
def test_the_shipped_inventories_plan_inside_the_table_with_either_router(topology, inventory, impl):
    assert preflight(topology, inventory=inventory, extra={"sglang_router_impl": impl}) == []


@pytest.mark.parametrize("release", ["0.1.0", "0.2.0", "0.2.1"])
def test_each_release_of_the_sandbox_simulator_plans_inside_the_table(topology, release):
    packages = ["nvidia-ml-py==13.615.71", f"sglang-pd-sim=={release}", "numpy"]
    assert preflight(topology, extra={"sglang_deps_packages": packages}) == []


def test_the_older_smg_release_plans_inside_the_table(topology):
    """smg 1.12.0 (the sandbox wheelhouse holds it beside 1.13.0) with the sandbox's simulator 0.1.0: the start of
    the router version change of tests/integration/test_routers.py; the release before it is refused, naming it."""
    older = {"sglang_router_impl": "smg"}
    assert preflight(topology, extra={**older, "sglang_deps_router_packages": ["smg==1.12.0"]}) == []
    refused = preflight(topology, extra={**older, "sglang_deps_router_packages": ["smg==1.11.0"]})
    assert any("router smg 1.11.0, engine sglang-pd-sim 0.1.0, nixl 1.5.1" in m for m in refused), refused


def test_an_untested_engine_allowed_knowingly_plans(topology):
    packages = ["nvidia-ml-py==13.615.71", "sglang-pd-sim==0.3.0", "numpy"]
    assert preflight(topology, extra={"sglang_deps_packages": packages}) != []
    allowed = {"sglang_deps_packages": packages, "sglang_router_allow_untested_combination": True}
    messages, specs = preflight(topology, extra=allowed, with_units=True)
    assert messages == [] and [s["unit"] for s in specs if s["role"] == "router"] == ["sglang-router"]
