"""The load balancer's plan (plugins/module_utils/router/lb.py) and its template: one frontend on the public port, a
server per router checked at its readiness route (SMG's health port where it has one), a dead router out within
about 2 s, the admin socket community.general.haproxy needs and the Prometheus exporter; problems() names what the
user must change."""

from pathlib import Path

import jinja2
import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.router import lb

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / "roles/sglang_router/templates/haproxy.cfg.j2"
LISTEN = {"host": "0.0.0.0", "port": 8000, "stats_host": "0.0.0.0", "stats_port": 8405}
SMG = {"name": "r1", "host": "10.0.0.1", "port": 8001, "health_port": 8081, "impl": "smg"}
SGL = {"name": "r2", "host": "10.0.0.2", "port": 8001, "health_port": None, "impl": "sglang_router"}


def render(spec):
    """The template as the template module renders it (trim_blocks), with the comment filter's default form."""
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    return env.from_string(TEMPLATE.read_text()).render(sglang_router_lb=spec, ansible_managed="Ansible managed")


def sections(text):
    """{header: [lines]} of a rendered HAProxy configuration: a header at column 0, its lines indented."""
    out, header = {}, None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():
            out[header].append(line.strip())
        else:
            header = line.strip()
            assert header not in out, f"section {header} twice"
            out[header] = []
    return out


def test_each_router_is_a_server_checked_at_its_readiness_port():
    spec = lb.haproxy_spec([SMG, SGL], LISTEN)
    assert [s["line"] for s in spec["servers"]] == [
        "server r1 10.0.0.1:8001 check port 8081 inter 500 fall 3 rise 2",
        "server r2 10.0.0.2:8001 check inter 500 fall 3 rise 2",
    ]
    assert [(s["check_port"], s["check_path"]) for s in spec["servers"]] == [(8081, "/readiness"), (8001, "/readiness")]


def test_a_dead_router_is_out_within_two_seconds():
    spec = lb.haproxy_spec([SMG, SGL], LISTEN)
    assert spec["detection_ms"] == {"refused": 1500, "hung": 2000}
    slower = lb.haproxy_spec([SMG], LISTEN, inter_ms=1000, fall=2, timeout_check_ms=700)
    assert slower["detection_ms"] == {"refused": 2000, "hung": 2700}
    assert slower["servers"][0]["line"].endswith("inter 1000 fall 2 rise 2")


def test_the_rendered_configuration_has_the_public_frontend_the_backend_the_socket_and_the_exporter():
    text = render(lb.haproxy_spec([SMG, SGL], LISTEN))
    got = sections(text)
    assert list(got) == ["global", "defaults", "frontend sglang_public", "backend sglang_routers", "frontend stats"]
    assert "stats socket /run/haproxy/admin.sock mode 660 level admin expose-fd listeners" in got["global"]
    assert got["frontend sglang_public"] == ["bind 0.0.0.0:8000", lb.REFUSE_N_LINE, "default_backend sglang_routers"]
    backend = got["backend sglang_routers"]
    assert backend[:4] == ["balance leastconn", "option httpchk", "http-check send meth GET uri /readiness",
                           "http-check expect status 200"]  # fmt: skip
    assert [line for line in backend if line.startswith("server ")] == [
        "server r1 10.0.0.1:8001 check port 8081 inter 500 fall 3 rise 2",
        "server r2 10.0.0.2:8001 check inter 500 fall 3 rise 2",
    ]
    assert "timeout check 500ms" in got["defaults"]
    # a request a killed router held (no answer byte yet) goes to another router: layer-7 retries on a buffered body
    assert {"retries 2", "option redispatch 1", "option http-buffer-request",
            "retry-on conn-failure empty-response"} <= set(got["defaults"])  # fmt: skip
    assert "http-request use-service prometheus-exporter if { path /metrics }" in got["frontend stats"]
    assert "bind 0.0.0.0:8405" in got["frontend stats"]


def test_the_template_renders_only_the_planned_lines():
    spec = lb.haproxy_spec([SGL], LISTEN, backend="b", frontend="f")
    planned = [line for s in spec["sections"] for line in [s["header"], *s["lines"]]]
    rendered = [line.strip() for line in render(spec).splitlines() if line.strip() and not line.startswith("#")]
    assert rendered == planned


def test_unknown_settings_are_refused():
    with pytest.raises(ValueError, match="inter"):
        lb.haproxy_spec([SGL], LISTEN, inter=500)


@pytest.mark.parametrize(
    ("routers", "message"),
    [
        ([], "the load balancer needs at least one router instance"),
        ([SMG, {**SGL, "name": "r1"}], "two router instances are named r1"),
        ([{**SGL, "impl": "vllm_router"}], "router r2 on 10.0.0.2: impl 'vllm_router' is none of sglang_router, smg"),
        ([{**SGL, "health_port": 8082}], "router r2 on 10.0.0.2: sglang_router has no health port"),
        ([{**SMG, "health_port": 8001}], "router r1 on 10.0.0.1: health_port 8001 is taken by router r1's port"),
        ([SMG, {**SGL, "host": "10.0.0.1"}], "router r2 on 10.0.0.1: port 8001 is taken by router r1's port"),
        ([{**SGL, "port": 8000}], "router r2 on 10.0.0.2: port 8000 is the load balancer's public port"),
        ([{**SMG, "health_port": 8405}], "router r1 on 10.0.0.1: health_port 8405 is the load balancer's metrics"),
    ],
)
def test_problems_name_what_to_change(routers, message):
    found = lb.problems(routers, LISTEN)
    assert len(found) == 1, found
    assert found[0].startswith(message), found


def test_routers_on_distinct_addresses_have_no_problem():
    assert lb.problems([SMG, SGL, {**SGL, "name": "r3", "port": 8002}], LISTEN) == []


@pytest.mark.parametrize(
    ("host", "instance", "name"),
    [
        ("pytest-rtr-1", "router-a", "pytest-rtr-1-router-a"),
        ("gpu-1.example.org", "router_b", "gpu-1.example.org-router_b"),
        ("10.0.0.1", "r1", "10.0.0.1-r1"),
        ("host with space", "r/1", "host-with-space-r-1"),
    ],
)
def test_a_server_is_named_by_its_host_and_instance_in_characters_haproxy_takes(host, instance, name):
    assert lb.server_name(host, instance) == name


def _instances(host, address, *names, port=8001):
    return [
        {"server": lb.server_name(host, n), "inventory_host": host, "unit": f"sglang-{n}", "name": n,
         "host": address, "port": port + i, "health_port": None, "impl": "sglang_router"}
        for i, n in enumerate(names)
    ]  # fmt: skip


def test_every_router_host_balances_over_every_router_instance_of_the_deployment():
    by_host = {
        "h1": _instances("h1", "10.0.0.1", "router-a", "router-b"),
        "h2": _instances("h2", "10.0.0.2", "router-a"),
    }
    listen = {"host": "0.0.0.0", "port": 8000, "stats_host": "127.0.0.1", "stats_port": 8405}
    found = lb.plan(by_host, listen)
    assert found["problems"] == []
    spec = found["spec"]
    assert [(s["name"], s["address"], s["unit"], s["inventory_host"]) for s in spec["servers"]] == [
        ("h1-router-a", "10.0.0.1:8001", "sglang-router-a", "h1"),
        ("h1-router-b", "10.0.0.1:8002", "sglang-router-b", "h1"),
        ("h2-router-a", "10.0.0.2:8001", "sglang-router-a", "h2"),
    ]
    # the clients keep their address; the exporter and the public URL as the host reaches them
    assert spec["url"] == "http://127.0.0.1:8000"
    assert spec["metrics_url"] == "http://127.0.0.1:8405/metrics"
    assert sections(render(spec))["frontend sglang_public"][0] == "bind 0.0.0.0:8000"


def test_no_router_instances_is_no_load_balancer():
    assert lb.plan({"h1": [], "h2": []}, LISTEN) == {"spec": None, "problems": []}


@pytest.mark.parametrize(
    ("by_host", "message"),
    [
        (
            {"h1": _instances("h1", "10.0.0.1", "r1"), "h2": []},
            "sglang_router_instances is set on h1 but not on h2: HAProxy fronts every router of the deployment on "
            "every router host, on sglang_router_port",
        ),
        (
            {"h1": _instances("h1", "10.0.0.9", "r1"), "h2": _instances("h2", "10.0.0.9", "r1")},
            "router r1 on h2: port 8001 is taken by router r1's port on the same host",
        ),
        (
            {"a b": _instances("a b", "10.0.0.1", "r1"), "a-b": _instances("a-b", "10.0.0.2", "r1")},
            "two router instances are named a-b-r1",
        ),
    ],
)
def test_a_deployment_haproxy_cannot_front_is_named(by_host, message):
    found = lb.plan(by_host, LISTEN)
    assert found["spec"] is None
    assert len(found["problems"]) == 1 and found["problems"][0].startswith(message), found
