"""The router instances of a router host (sglang_router_instances, plugins/module_utils/plan/router_rules.py): the
rules as a table, and what router_plan.router_plans makes of a list - a hardened unit per instance, every one with
the same workers - and of no list: exactly the single router of sglang_router_port."""

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.plan import router_rules as rr
from plan_stages import preflight

A = {"name": "router-a", "port": 8001, "prometheus_port": 29001}
B = {"name": "router-b", "port": 8002, "prometheus_port": 29002}


@pytest.mark.parametrize(
    ("instances", "expect"),
    [
        pytest.param(None, [], id="unset"),
        pytest.param([], [], id="empty: the single router"),
        pytest.param([A], [], id="one"),
        pytest.param([A, B], [], id="two"),
        pytest.param([{**A, "port": "8001"}], [], id="a templated port"),
        pytest.param("router-a", ["sglang_router_instances must be a list of router instances (name, port, "
                                  "prometheus_port), got str"], id="a string"),
        pytest.param(A, ["sglang_router_instances must be a list of router instances (name, port, prometheus_port), "
                         "got dict: put '- ' before each instance (a list of mappings)"], id="a mapping"),
        pytest.param(["router-a"], ["sglang_router_instances[0] must be a mapping (name, port, prometheus_port), got "
                                    "'router-a'"], id="a member not a mapping"),
        pytest.param([{**A, "name": "Router_A"}],
                     ["sglang_router_instances[0] (Router_A): name must be lowercase letters, digits, - or _ (it "
                      "becomes sglang-<name>.service), e.g. router-a"], id="name with capitals"),
        pytest.param([{"port": 8001, "prometheus_port": 29001}],
                     ["sglang_router_instances[0]: name must be lowercase letters, digits, - or _ (it becomes "
                      "sglang-<name>.service), e.g. router-a"], id="no name"),
        pytest.param([{**A, "name": "r" * 65}],
                     [f"sglang_router_instances[0] ({'r' * 65}): name must be at most 64 characters (it becomes "
                      "sglang-<name>.service)"], id="name too long"),
        pytest.param([A, {**B, "name": "router-a"}],
                     ["sglang_router_instances names router-a more than once: each instance is a unit of its own "
                      "(sglang-<name>.service), so each needs its own name"], id="a name twice"),
        pytest.param([{**A, "prometheus_port": 8001}],
                     ["sglang_router_instances[0] (router-a).port and sglang_router_instances[0] "
                      "(router-a).prometheus_port are all port 8001: every listener of the router instances of a "
                      "host needs a port of its own"], id="its two ports equal"),
        pytest.param([A, {**B, "port": 8001}],
                     ["sglang_router_instances[0] (router-a).port and sglang_router_instances[1] (router-b).port are "
                      "all port 8001: every listener of the router instances of a host needs a port of its own"],
                     id="two instances on one port"),
        pytest.param([{"name": "router-a", "port": 0}],
                     ["sglang_router_instances[0] (router-a): port 0 is not a port in 1-65535",
                      "sglang_router_instances[0] (router-a): prometheus_port is missing (a port in 1-65535)"],
                     id="a bad port and a missing one"),
        pytest.param([{**A, "policy": "cache_aware"}],
                     ["sglang_router_instances[0] (router-a): unknown key(s) policy: a router instance takes name, "
                      "port, prometheus_port (a misspelt key would be ignored; the other router settings are the "
                      "sglang_router_* variables, the same for every instance)"], id="an unknown key"),
    ],
)  # fmt: skip
def test_router_instance_rules(instances, expect):
    assert rr.router_instance_problems(instances) == expect


def test_a_router_unit_that_is_a_worker_unit_of_its_host_is_named():
    assert rr.router_unit_clash_problems("h1", ["sglang-router-a", "sglang-decode0"], ["sglang-decode0"]) == [
        "sglang_router_instances on h1: sglang-decode0 is also a worker unit on that host (sglang_prefill_instances / "
        "sglang_decode_instances name an instance so): rename the router instance (e.g. router-a)"
    ]
    assert rr.router_unit_clash_problems("h1", ["sglang-router-a"], ["sglang-decode0"]) == []


def test_no_list_is_the_one_router_of_the_older_variables():
    ports = {"sglang_router_port": 8000, "sglang_router_prometheus_port": 29000}
    assert rr.router_instances([], ports) == [
        {"name": "router", "port": 8000, "prometheus_port": 29000, "ports": ports}
    ]
    assert rr.router_instances([A], ports)[0]["ports"] == {
        "sglang_router_instances[0] (router-a).port": 8001,
        "sglang_router_instances[0] (router-a).prometheus_port": 29001,
    }


def _routers(topology, **extra):
    messages, specs = preflight(topology, extra=extra, with_units=True)
    assert messages == []
    return [s for s in specs if s["role"] == "router"], [s for s in specs if s["role"] != "router"]


def test_the_single_router_inventory_plans_one_router_unit_as_before(topology):
    routers, _workers = _routers(topology)
    assert len(routers) == 1
    router = routers[0]
    assert (router["unit"], router["name"], router["port"]) == ("sglang-router", "router", 8000)
    assert router["description"] == "SGLang router: 1 prefill, 1 decode"
    assert router["metrics_url"] == "http://127.0.0.1:29000/metrics"
    # a list puts HAProxy in front on sglang_router_port: spelling the older variables out as a list is refused
    spelt = [{"name": "router", "port": 8000, "prometheus_port": 29000}]
    assert preflight(topology, extra={"sglang_router_instances": spelt}) == [
        "sglang_router_instances[0] (router).port is port 8000, sglang_router_port, where HAProxy listens on every "
        "router host (the clients' address): give the router instance another port"
    ]
    # on another port it is the same unit but for its listener
    moved, _workers = _routers(topology, sglang_router_instances=[{**spelt[0], "port": 8001}])
    differ = {k for k in routers[0] if routers[0][k] != moved[0][k]}
    assert differ == {"port", "url", "health_url", "flags", "lines", "systemd", "restart_key"}, differ


def test_each_router_instance_is_a_hardened_unit_of_its_own_with_the_same_workers(topology):
    routers, workers = _routers(topology, sglang_router_instances=[A, B])
    assert [r["unit"] for r in routers] == ["sglang-router-a", "sglang-router-b"]
    assert [(r["port"], r["flags"]["prometheus-port"]) for r in routers] == [(8001, 29001), (8002, 29002)]
    assert [r["url"] for r in routers] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert [r["environment_file"] for r in routers] == ["/etc/sglang/sglang-router-a.env",
                                                        "/etc/sglang/sglang-router-b.env"]  # fmt: skip
    # every router dials every worker at its spec's URL, in the same order
    urls = [w["url"] for w in workers]
    assert routers[0]["worker_urls"] == routers[1]["worker_urls"] == urls
    worker_lines = [[line for line in r["lines"] if line[0] in ("--prefill", "--decode")] for r in routers]
    assert worker_lines[0] == worker_lines[1] and len(worker_lines[0]) == len(workers)
    # each is hardened as the single router is: the service kind, the same settings
    single, _workers = _routers(topology)
    assert all(r["hardening_kind"] == "service" and r["hardening"] == single[0]["hardening"] for r in routers)
    # apart from their listeners (and what derives from them), the instances are one unit
    assert routers[0]["restart_key"] != routers[1]["restart_key"]


def test_router_instances_may_hold_their_own_ports_on_a_converged_host(topology):
    """A rerun: the listeners the preflight finds are the router instances' own units, not a conflict."""
    extra = {"sglang_router_instances": [A, B]}
    listeners = {8001: "sglang-router-a.service", 29002: "sglang-router-b.service", 30000: "sglang-prefill0.service"}
    assert preflight(topology, extra=extra, listeners=listeners) == []
    assert preflight(topology, extra=extra, listeners={8002: "nginx.service"}) == [
        "sglang_router_instances[1] (router-b).port is port 8002, which nginx.service already listens on, on "
        "pytest-badinv-1: choose a free port, or stop nginx.service first (sglang_conflicting_units stops a unit "
        "before the workers start)"
    ]


LB = {"instance_host": "127.0.0.1", "router_hosts": ["h1"], "public_port": 8000, "stats_port": 8405}
PORTS = {"sglang_router_port": 8000, "sglang_router_prometheus_port": 29000}


@pytest.mark.parametrize(
    ("lb", "instances", "expect"),
    [
        pytest.param(LB, [A, B], [], id="one router host on loopback"),
        pytest.param({**LB, "instance_host": "10.0.0.1", "router_hosts": ["h1", "h2"]}, [A, B], [],
                     id="two router hosts, the host's address"),
        pytest.param({**LB, "router_hosts": ["h1", "h2"]}, [A],
                     ["sglang_router_instance_host is 127.0.0.1 on h1, a loopback address, but HAProxy on the other "
                      "router host(s) h2 dials this host's router instances too: set an address of h1 they reach (its "
                      "sglang_advertise_address, the default with several router hosts), or leave it unset"],
                     id="loopback with two router hosts"),
        pytest.param({**LB, "instance_host": "0.0.0.0"}, [A],
                     ["sglang_router_instance_host is '0.0.0.0' on h1: HAProxy dials each router instance at this "
                      "address, so it must be one address, not a wildcard: set an address of the host (127.0.0.1 "
                      "with one router host, else one every router host reaches, e.g. its sglang_advertise_address), "
                      "or leave it unset"], id="a wildcard"),
        pytest.param({**LB, "stats_port": 8000}, [A],
                     ["sglang_router_lb_stats_port (8000) is sglang_router_port, where HAProxy serves the clients: "
                      "give HAProxy's Prometheus exporter a port of its own"], id="exporter on the public port"),
        pytest.param(LB, [{**A, "port": 8000}, {**B, "prometheus_port": 8405}],
                     ["sglang_router_instances[0] (router-a).port is port 8000, sglang_router_port, where HAProxy "
                      "listens on every router host (the clients' address): give the router instance another port",
                      "sglang_router_instances[1] (router-b).prometheus_port is port 8405, "
                      "sglang_router_lb_stats_port, where HAProxy listens on every router host (its Prometheus "
                      "exporter): give the router instance another port"], id="instances on HAProxy's ports"),
    ],
)  # fmt: skip
def test_router_instances_haproxy_cannot_front_are_named(lb, instances, expect):
    assert rr.lb_problems("h1", rr.router_instances(instances, PORTS), lb) == expect


def test_router_instances_bind_their_instance_host_and_are_haproxys_servers(topology):
    extra = {"sglang_router_instances": [A, B], "sglang_router_instance_host": "10.1.2.3"}
    routers, _workers = _routers(topology, **extra)
    assert [(r["flags"]["host"], r["url"]) for r in routers] == [("10.1.2.3", "http://10.1.2.3:8001"),
                                                                 ("10.1.2.3", "http://10.1.2.3:8002")]  # fmt: skip
