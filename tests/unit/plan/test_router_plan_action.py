"""The router's plan in one task, disagg.sglang.router_plan (an action plugin: its inputs from the host's variables,
the plan on the controller), through `ansible` itself on an inventory host of every role with the sandbox
inventory's variables: it plans the unit router_plan.router_plan plans of the inputs the action derives (test_rules'
preflight derives them by the same function), says which program the deployed router runs and whether its command
line still needs the parser's check, and fails with the rules' messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleError
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


def two_host_router_plan(tmp_path, workers, router_vars, worker_vars):
    """router_plan on router-only host r1 in front of worker host w1 (WORKERS' specs moved there), each host with its
    own variables (ROUTER_VARS, WORKER_VARS: host variables of the inventory), the rest the sandbox inventory's."""
    _templar, variables, v = host_vars(host=HOST, extra={})
    own = set(router_vars) | set(worker_vars)
    values = {}
    for name in variables:
        if name.startswith("sglang_") and name not in own:
            try:
                values[name] = v(name)
            except AnsibleError:
                continue
    (tmp_path / "vars.json").write_text(json.dumps(values))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"r1": {**local, **router_vars}, "w1": {**local, **worker_vars}}
    children = {
        "prefill": {"hosts": {"w1": None}},
        "decode": {"hosts": {"w1": None}},
        "router": {"hosts": {"r1": None}},
    }
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": hosts, "children": children}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    moved = [dict(s, host="w1") for s in workers]
    args = {"workers": moved, "look": {"paths": {}, "listeners": {}}, "variables": "sglang_router"}
    argv = [str(Path(sys.executable).with_name("ansible")), "r1", "-i", str(tmp_path / "hosts.yml"), "-o",
            "-e", f"@{tmp_path / 'vars.json'}", "-m", "disagg.sglang.router_plan", "-a", json.dumps(args)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=REPO, timeout=120)
    head, sep, body = proc.stdout.partition("=> ")
    assert sep, proc.stdout + proc.stderr
    return head.strip(), json.loads(body)


def keyed(workers):
    """The worker specs as a worker host with sglang_worker_api_key set plans them (units.worker_units)."""
    return [dict(s, secret_env={**s["secret_env"], "SGLANG_WORKER_API_KEY": "sglang_worker_api_key"}) for s in workers]


@pytest.mark.parametrize(
    ("router_vars", "worker_vars", "expect"),
    [
        pytest.param({"sglang_router_api_key": "k"}, {"sglang_worker_api_key": "k"}, None,
                     id="the worker group's key is the router's, the router group sets no worker key"),
        pytest.param({"sglang_router_api_key": "r"}, {"sglang_worker_api_key": "w"},
                     "sglang_worker_api_key differs from sglang_router_api_key (on w1):",
                     id="the worker group's own key differs from the router's"),
        pytest.param({"sglang_router_api_key": "", "sglang_worker_api_key": ""}, {"sglang_worker_api_key": "w"},
                     "sglang_worker_api_key is set (on w1) but sglang_router_api_key is empty",
                     id="the workers take a key the router host does not have"),
        pytest.param({"sglang_router_api_key": "r", "sglang_worker_api_key": "x"}, {"sglang_worker_api_key": "r"},
                     "sglang_worker_api_key differs from sglang_router_api_key (on r1):",
                     id="the router host registers the workers with another key"),
    ],
)  # fmt: skip
def test_the_workers_key_is_read_on_each_worker_host_not_on_the_router_host(
    planned, tmp_path, router_vars, worker_vars, expect
):
    """Each host's sglang_worker_api_key is judged where it is used: the worker host's own (its workers refuse a
    request without it), and the router host's (its router registers the workers with it)."""
    workers, _router = planned
    status, result = two_host_router_plan(tmp_path, keyed(workers), router_vars, worker_vars)
    if expect is None:
        assert status == "r1 | SUCCESS", result
    else:
        assert status.endswith("FAILED!") and result["msg"].startswith(expect), result
