"""scrape_targets: the file_sd target groups of a PD deployment, through the filter plugin (table cases)."""

import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.filter.monitoring import FilterModule
from ansible_collections.disagg.sglang.plugins.module_utils.router import lb

scrape_targets = FilterModule().filters()["scrape_targets"]


def worker(host, name, role, port, gpus, node, address=None):  # noqa: PLR0917 (a table row)
    return {
        "unit": f"sglang-{name}",
        "name": name,
        "role": role,
        "host": host,
        "advertise_address": address or f"addr-{host}",
        "port": port,
        "gpus": gpus,
        "numa_node": node,
    }


ROUTER = {"unit": "sglang-router", "host": "gw", "prometheus_address": "10.0.0.9", "prometheus_port": 29000}

# Two 8-GPU hosts with 2P2D of TP2 each (a multi-instance inventory) and a router host of its own.
MULTI = [
    worker(h, n, r, p, g, node)
    for h in ("gpu1", "gpu2")
    for n, r, p, g, node in (
        ("prefill0", "prefill", 30000, [0, 1], 0),
        ("prefill1", "prefill", 30010, [2, 3], 0),
        ("decode0", "decode", 30001, [4, 5], 1),
        ("decode1", "decode", 30011, [6, 7], 1),
    )
]


def group(target, **labels):
    return {"targets": [target], "labels": labels}


OK_CASES = [
    pytest.param(
        [worker("demo-1", "prefill0", "prefill", 30000, [0, 1, 2, 3], 0, "127.0.0.1"),
         worker("demo-1", "decode0", "decode", 30001, [4, 5, 6, 7], 1, "127.0.0.1")],
        [{"unit": "sglang-router", "host": "demo-1", "prometheus_address": "127.0.0.1", "prometheus_port": 29000}],
        "sandbox",
        [
            group("127.0.0.1:30000", cluster="sandbox", role="prefill", instance="prefill0", host="demo-1",
                  gpus="0,1,2,3", numa_node="0"),
            group("127.0.0.1:30001", cluster="sandbox", role="decode", instance="decode0", host="demo-1",
                  gpus="4,5,6,7", numa_node="1"),
            group("127.0.0.1:29000", cluster="sandbox", role="router", instance="router", host="demo-1"),
        ],
        id="one-host-1p1d",
    ),
    pytest.param(
        MULTI,
        ROUTER,  # a single router spec (as the fact holds it) is a list of one
        "prod",
        [
            group(f"addr-{h}:{p}", cluster="prod", role=r, instance=n, host=h, gpus=g, numa_node=node)
            for h in ("gpu1", "gpu2")
            for n, r, p, g, node in (
                ("prefill0", "prefill", 30000, "0,1", "0"),
                ("prefill1", "prefill", 30010, "2,3", "0"),
                ("decode0", "decode", 30001, "4,5", "1"),
                ("decode1", "decode", 30011, "6,7", "1"),
            )
        ]
        + [group("10.0.0.9:29000", cluster="prod", role="router", instance="router", host="gw")],
        id="two-hosts-2p2d-each-router-apart",
    ),
    pytest.param(
        [worker("gpu1", "prefill0", "prefill", 30000, [0, 4], None, "fd00::11")],
        [{"unit": "sglang-router", "host": "gw", "prometheus_address": "0.0.0.0", "prometheus_port": "29000",
          "advertise_address": "10.0.0.9"}],
        "c1",
        [
            group("[fd00::11]:30000", cluster="c1", role="prefill", instance="prefill0", host="gpu1", gpus="0,4"),
            group("10.0.0.9:29000", cluster="c1", role="router", instance="router", host="gw"),
        ],
        id="ipv6-worker-spanning-nodes-router-on-wildcard",
    ),
    pytest.param(
        [],
        [{"unit": "sglang-router", "host": "gw", "prometheus_address": "::", "prometheus_port": 29000}],
        "c1",
        [group("gw:29000", cluster="c1", role="router", instance="router", host="gw")],
        id="router-only-wildcard-falls-back-to-host",
    ),
    pytest.param([], [], "c1", [], id="nothing"),
]  # fmt: skip


def planned(host, name, role, port, bind, url_host, gpus=(0,), node=0):  # noqa: PLR0917 (a table row)
    """A worker spec as site.yml's preflight plans it (plugins/module_utils/units/units.py): metrics_url, flags."""
    return {"unit": f"sglang-{name}", "name": name, "role": role, "host": host, "port": port,
            "metrics_url": f"http://{url_host}:{port}/metrics", "flags": {"host": bind, "port": port},
            "gpus": list(gpus), "numa_node": node, "cpus": "0-31", "lines": []}  # fmt: skip


def planned_router(host, bind, url_host, port=29000, path="/metrics"):
    return {"unit": "sglang-router", "name": "router", "role": "router", "host": host,
            "metrics_url": f"http://{url_host}:{port}{path}",
            "flags": {"prometheus-host": bind, "prometheus-port": port}, "url": "http://127.0.0.1:8000"}  # fmt: skip


PLANNED_CASES = yaml.safe_load((Path(__file__).parent / "scrape_target_cases.yml").read_text())


@pytest.mark.parametrize("name", PLANNED_CASES)
def test_targets_from_the_planned_unit_specs(name):
    case = PLANNED_CASES[name]
    worker = planned(*case["worker"])
    got = scrape_targets([worker], [planned_router(*case["router"])], "c", case["addresses"])
    assert [g["targets"][0] for g in got] == case["targets"]
    assert got[0]["labels"] == {"cluster": "c", "role": worker["role"], "instance": worker["name"],
                                "host": worker["host"], "gpus": "0", "numa_node": "0"}  # fmt: skip


def test_a_metrics_path_other_than_metrics_is_kept():
    got = scrape_targets([], [planned_router("gw", "10.0.0.9", "10.0.0.9", path="/prom")], "c")
    assert got == [group("10.0.0.9:29000", cluster="c", role="router", instance="router", host="gw",
                         __metrics_path__="/prom")]  # fmt: skip


@pytest.mark.parametrize(("workers", "routers", "cluster", "expect"), OK_CASES)
def test_targets(workers, routers, cluster, expect):
    got = scrape_targets(workers, routers, cluster)
    assert got == expect
    json.dumps(got)  # file_sd is JSON: plain types only


def test_multi_instance_inventory_one_target_per_worker():
    got = scrape_targets(MULTI, [ROUTER], "prod")
    workers = [g for g in got if g["labels"]["role"] != "router"]
    assert len(workers) == len(MULTI) == 8
    assert len({g["targets"][0] for g in got}) == len(got)
    assert {(g["labels"]["host"], g["labels"]["instance"]) for g in workers} == {(w["host"], w["name"]) for w in MULTI}
    for g in got:
        assert set(g["labels"]) <= {"cluster", "role", "instance", "host", "gpus", "numa_node"}


def test_changing_the_inventory_changes_the_targets():
    before = scrape_targets(MULTI, [ROUTER], "prod")
    after = scrape_targets(MULTI[:-1], [ROUTER], "prod")
    assert len(after) == len(before) - 1
    assert after == before[:7] + before[8:]


ERROR_CASES = [
    pytest.param([worker("h", "p0", "prefill", 30000, [0], 0)] * 2, [], "c", r"both scraped at addr-h:30000",
                 id="same-address-twice"),
    pytest.param([worker("h", "p0", "prefill", 30000, [0], 0), worker("h", "p0", "prefill", 30002, [1], 0)], [],
                 "c", r"two prefill targets named p0 on h", id="same-name-twice"),
    pytest.param([worker("h", "p0", "router", 30000, [0], 0)], [], "c", r"role 'router' is not one of",
                 id="bad-role"),
    pytest.param([worker("h", "p0", "prefill", 70000, [0], 0)], [], "c", r"port 70000 is not a port",
                 id="bad-port"),
    pytest.param([{**worker("h", "p0", "prefill", 30000, [0], 0), "advertise_address": "0.0.0.0"}], [], "c",
                 r"advertise_address '0.0.0.0' cannot be scraped; set sglang_advertise_address of h",
                 id="wildcard-worker-address"),
    pytest.param([{k: v for k, v in worker("h", "p0", "prefill", 30000, [0], 0).items() if k != "host"}], [], "c",
                 r"worker sglang-p0: host is missing", id="no-host"),
    pytest.param([worker("h", "p0", "prefill", 30000, "0,1", 0)], [], "c", r"gpus must be a list",
                 id="gpus-not-a-list"),
    pytest.param([], [{"unit": "sglang-router", "host": "gw", "prometheus_address": "x"}], "c",
                 r"router sglang-router: prometheus_port None is not a port", id="router-without-port"),
    pytest.param([], [], "bad cluster", r"set sglang_monitoring_cluster", id="bad-cluster"),
    pytest.param("prefill0", [], "c", r"must be lists", id="workers-not-a-list"),
    pytest.param([{**worker("h", "p0", "prefill", 30000, [0], 0), "metrics_url": "ftp://x"}], [], "c",
                 r"worker sglang-p0: metrics_url 'ftp://x' is not an http URL", id="bad-metrics-url"),
    pytest.param([], [{"unit": "sglang-router", "host": "127.0.0.1", "metrics_url": "http://127.0.0.1:29000/metrics",
                       "flags": {"prometheus-host": "0.0.0.0"}}], "c",
                 r"no address of 127.0.0.1 to scrape it at; set sglang_advertise_address", id="no-address-to-scrape"),
]  # fmt: skip


@pytest.mark.parametrize(("workers", "routers", "cluster", "error"), ERROR_CASES)
def test_errors_name_the_entry_and_the_fix(workers, routers, cluster, error):
    with pytest.raises(AnsibleFilterError, match=error):
        scrape_targets(workers, routers, cluster)


# --------------------------------------------------------------------------------------------------
# several routers behind HAProxy (issue 39): every router unit of every router host, and each host's HAProxy
# --------------------------------------------------------------------------------------------------


def instance(host, name, port, bind="0.0.0.0", url_host="127.0.0.1"):
    """A router unit of sglang_router_instances as the plan holds it (units.router_unit: <prefix><name>)."""
    return {**planned_router(host, bind, url_host, port), "unit": f"sglang-{name}", "name": name}


def lb_fact(stats_host, port=8405):
    """gw's sglang_router_lb as the router role plans it (router/lb.py plan over gw's two router instances), its
    exporter bound to STATS_HOST (sglang_router_prometheus_host) on PORT (sglang_router_lb_stats_port)."""
    servers = [{"name": lb.server_name("gw", n), "host": "127.0.0.1", "port": p, "health_port": None,
                "impl": "sglang_router"} for n, p in (("router-a", 8001), ("router-b", 8002))]  # fmt: skip
    listen = {"host": "0.0.0.0", "port": 8000, "stats_host": stats_host, "stats_port": port}
    planned = lb.plan({"gw": servers}, listen)
    assert planned["problems"] == [], planned["problems"]
    return planned["spec"]


def test_two_router_hosts_each_with_two_routers_and_haproxy():
    routers = [instance(h, n, p) for h in ("gw1", "gw2") for n, p in (("router-a", 29000), ("router-b", 29001))]
    workers = [planned("gpu1", "prefill0", "prefill", 30000, "0.0.0.0", "10.0.0.11")]
    balancers = {"gw1": lb_fact("0.0.0.0"), "gw2": lb_fact("0.0.0.0")}
    got = scrape_targets(workers, routers, "c", {"gw1": "10.0.0.8", "gw2": "10.0.0.9"}, balancers)
    assert [(g["labels"]["role"], g["labels"]["instance"], g["labels"]["host"], g["targets"][0]) for g in got[1:]] == [
        ("router", "router-a", "gw1", "10.0.0.8:29000"),
        ("router", "router-b", "gw1", "10.0.0.8:29001"),
        ("router", "router-a", "gw2", "10.0.0.9:29000"),
        ("router", "router-b", "gw2", "10.0.0.9:29001"),
        ("haproxy", "haproxy", "gw1", "10.0.0.8:8405"),
        ("haproxy", "haproxy", "gw2", "10.0.0.9:8405"),
    ]
    assert got[-1] == group("10.0.0.9:8405", cluster="c", role="haproxy", instance="haproxy", host="gw2")


@pytest.mark.parametrize(
    ("balancers", "expect"),
    [
        pytest.param({"gw": None}, [], id="none-one-router-no-haproxy"),
        pytest.param({"gw": {}}, [], id="fact-not-set"),
        pytest.param(None, [], id="no-balancers-given"),
        pytest.param({"gw": lb_fact("127.0.0.1")}, ["127.0.0.1:8405"], id="loopback-stays-on-loopback"),
        pytest.param({"gw": lb_fact("10.0.0.9", 9405)}, ["10.0.0.9:9405"], id="its-own-address-and-port"),
        pytest.param({"gw": lb_fact("::")}, ["10.0.0.9:8405"], id="ipv6-wildcard-at-the-host-address"),
    ],
)
def test_haproxy_target_of_a_router_host(balancers, expect):
    """The plan's metrics_url says loopback for a wildcard bind (lb.haproxy_spec, as seen from the host itself): the
    target is then the host's address (its metrics_bind), as a router's Prometheus listener bound to all addresses."""
    got = scrape_targets([], [instance("gw", "router", 29000)], "c", {"gw": "10.0.0.9"}, balancers)
    assert [g["targets"][0] for g in got if g["labels"]["role"] == "haproxy"] == expect
    assert got[0]["targets"] == ["10.0.0.9:29000"]


LB_ERROR_CASES = [
    pytest.param({"gw": {"backend": "sglang_routers"}}, r"HAProxy on gw: sglang_router_lb has no metrics_url",
                 id="no-metrics-url"),
    pytest.param({"gw": "http://10.0.0.9:8405/metrics"}, r"HAProxy on gw: sglang_router_lb must be a mapping",
                 id="url-not-a-fact"),
    pytest.param({"gw": lb_fact("10.0.0.9", 29000)}, r"gw/haproxy and gw/router are both scraped at 10.0.0.9:29000",
                 id="same-port-as-a-router"),
    pytest.param([lb_fact("10.0.0.9")], r"balancers must be a mapping of router host", id="a-list"),
]  # fmt: skip


@pytest.mark.parametrize(("balancers", "error"), LB_ERROR_CASES)
def test_haproxy_errors_name_the_host(balancers, error):
    with pytest.raises(AnsibleFilterError, match=error):
        scrape_targets([], [instance("gw", "router", 29000)], "c", {"gw": "10.0.0.9"}, balancers)
