"""The router's plan in one task, disagg.sglang.router_plan (an action plugin: its inputs from the host's variables,
the plan on the controller), through `ansible` itself on an inventory host of every role with the sandbox
inventory's variables: it plans the unit plan.router_plan plans of the inputs the action derives (test_rules'
preflight derives them by the same function), says which program the deployed router runs and whether its command
line still needs the parser's check, and fails with the rules' messages."""

import json
from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.units import units
from inventory_vars import adhoc_module, host_vars
from plan_stages import preflight

REPO = Path(__file__).resolve().parents[3]
HOST = "pytest-badinv-1"


@pytest.fixture(scope="module")
def planned(topology):
    """The worker specs and the router spec of the sandbox inventory, one host of every role."""
    messages, specs = preflight(topology, with_units=True)
    assert messages == []
    return specs[:-1], specs[-1]


def router_plan(tmp_path, workers, **changed):
    """(status such as "HOST | SUCCESS", result) of router_plan as roles/sglang_router/tasks/plan.yml calls it."""
    _templar, variables, v = host_vars(host=HOST, extra=changed)
    args = {"workers": workers, "look": {"paths": {}, "listeners": {}}, "variables": "sglang_router"}
    return adhoc_module(tmp_path, "router_plan", variables, v, args=args)


def test_router_plan_plans_the_unit_the_plan_plans_from_the_workers_specs(planned, tmp_path):
    workers, router = planned
    status, result = router_plan(tmp_path, workers)
    assert status == f"{HOST} | SUCCESS" and result["changed"] is False, result
    assert result["unit"] == json.loads(json.dumps(router))
    # nothing deployed: the planned program runs next, and the command line was never checked
    assert result["running_impl"] == router["impl"] == "sglang_router" and result["cli_check"] is True


def test_router_plan_reads_the_running_program_and_the_checked_command_line_from_the_record(planned, tmp_path):
    workers, router = planned
    record = {"impl": "smg", "module": "smg.launch_router", "argv_key": units.argv_key(router)}
    status, result = router_plan(tmp_path, workers, sglang_deployed={router["unit"]: record})
    assert status == f"{HOST} | SUCCESS", result
    assert result["running_impl"] == "smg" and result["cli_check"] is False


def test_router_plan_fails_when_the_workers_key_is_not_the_routers(planned, tmp_path):
    workers, _router = planned
    status, result = router_plan(tmp_path, workers, sglang_worker_api_key="w", sglang_router_api_key="r")
    assert status.endswith("FAILED!") and "unit" not in result
    assert result["msg"].startswith("sglang_worker_api_key differs from sglang_router_api_key")


def test_router_plan_checks_the_routers_variables_against_the_table_first(planned, tmp_path):
    workers, _router = planned
    status, result = router_plan(tmp_path, workers, sglang_router_port="80a", sglang_router_impl="nginx")
    assert status.endswith("FAILED!") and "sglang_router_port" in result["msg"], result


def test_router_plan_names_a_router_program_the_collection_does_not_run(planned, tmp_path):
    workers, _router = planned
    status, result = router_plan(tmp_path, workers, sglang_router_impl="nginx")
    assert status.endswith("FAILED!") and "sglang_router_impl 'nginx' is not a router" in result["msg"], result


def test_router_plan_plans_a_unit_per_router_instance_through_ansible(planned, tmp_path):
    """sglang_router_instances as an inventory gives it, through the action: two units, the first also as unit."""
    workers, _router = planned
    instances = [{"name": "router-a", "port": 8001, "prometheus_port": 29001},
                 {"name": "router-b", "port": 8002, "prometheus_port": 29002}]  # fmt: skip
    status, result = router_plan(tmp_path, workers, sglang_router_instances=instances)
    assert status == f"{HOST} | SUCCESS", result
    assert [u["unit"] for u in result["units"]] == ["sglang-router-a", "sglang-router-b"]
    assert result["unit"] == result["units"][0]
    assert result["running_impls"] == {"sglang-router-a": "sglang_router", "sglang-router-b": "sglang_router"}
    # where the rolling and retire steps reach each of them (roles/sglang_worker/tasks/router_key.yml)
    assert result["endpoints"] == [
        {"unit": f"sglang-router-{n}", "host": HOST, "url": f"http://127.0.0.1:{port}",
         "health_url": f"http://127.0.0.1:{port}/readiness", "implementation": "sglang_router"}
        for n, port in (("a", 8001), ("b", 8002))
    ]  # fmt: skip
    assert [e["health_url"] for e in result["endpoints"]] == [u["health_url"] for u in result["units"]]
    # HAProxy's servers: named <host>-<instance>, dialled at sglang_router_instance_host (one router host: loopback)
    assert [(r["server"], r["host"], r["port"], r["unit"]) for r in result["lb_routers"]] == [
        (f"{HOST}-router-a", "127.0.0.1", 8001, "sglang-router-a"),
        (f"{HOST}-router-b", "127.0.0.1", 8002, "sglang-router-b"),
    ]


def test_router_plan_without_instances_plans_no_load_balancer(planned, tmp_path):
    workers, _router = planned
    status, result = router_plan(tmp_path, workers)
    assert status == f"{HOST} | SUCCESS" and result["lb_routers"] == [], result


def test_router_plan_fails_naming_the_router_instance_and_the_fix(planned, tmp_path):
    workers, _router = planned
    instances = [{"name": "router-a", "port": 8001, "prometheus_port": 29001},
                 {"name": "router-a", "port": 8002, "prometheus_port": 29002}]  # fmt: skip
    status, result = router_plan(tmp_path, workers, sglang_router_instances=instances)
    assert status.endswith("FAILED!") and "units" not in result, result
    assert result["msg"].startswith("sglang_router_instances names router-a more than once"), result["msg"]


def test_router_plan_refuses_an_untested_combination_unless_allowed_knowingly(planned, tmp_path):
    workers, _router = planned
    untested = {"sglang_router_impl": "smg", "sglang_deps_router_packages": ["smg==1.11.0"]}
    status, result = router_plan(tmp_path, workers, **untested)
    assert status.endswith("FAILED!"), result
    assert result["msg"].startswith("This deployment runs a combination that was never tested together: router smg "
                                    "1.11.0, engine sglang-pd-sim 0.1.0, nixl 1.5.1."), result["msg"]  # fmt: skip
    status, result = router_plan(tmp_path, workers, **untested, sglang_router_allow_untested_combination=True)
    assert status == f"{HOST} | SUCCESS" and result["unit"]["impl"] == "smg", result


def test_router_plan_reaches_a_router_where_its_record_says_it_answers_until_the_run_moves_it(planned, tmp_path):
    """A second router host joins: sglang_router_instance_host leaves loopback, so the plan moves every router to the
    host's address. The workers' play runs before the router's: its rolling and retire steps must reach each router
    where it runs now (its record's URLs), and the planned unit keeps the new address for the router's restart."""
    workers, _router = planned
    instances = [{"name": "router-a", "port": 8001, "prometheus_port": 29001},
                 {"name": "router-b", "port": 8002, "prometheus_port": 29002}]  # fmt: skip
    moved = {"sglang_router_instances": instances, "sglang_router_instance_host": "10.0.0.7"}
    record = {"impl": "sglang_router", "module": "sglang_router.launch_router",
              "url": "http://127.0.0.1:8001", "health_url": "http://127.0.0.1:8001/readiness"}  # fmt: skip
    status, result = router_plan(tmp_path, workers, **moved, sglang_deployed={"sglang-router-a": record})
    assert status == f"{HOST} | SUCCESS", result
    assert [u["url"] for u in result["units"]] == ["http://10.0.0.7:8001", "http://10.0.0.7:8002"]
    # router-a is deployed at loopback: reached there; router-b was never deployed: reached where it will start
    assert [(e["url"], e["health_url"]) for e in result["endpoints"]] == [
        ("http://127.0.0.1:8001", "http://127.0.0.1:8001/readiness"),
        ("http://10.0.0.7:8002", "http://10.0.0.7:8002/readiness"),
    ]
    # a record from before the records kept the URLs: the planned ones
    status, result = router_plan(tmp_path, workers, **moved, sglang_deployed={"sglang-router-a": {"impl": "smg"}})
    assert result["endpoints"][0]["url"] == "http://10.0.0.7:8001" and result["endpoints"][0]["implementation"] == "smg"
