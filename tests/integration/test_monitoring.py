"""A real Prometheus (Debian's package, started by the test on loopback) scrapes a converged sandbox through the
targets that roles/sglang_monitoring writes; every target is up, and every dashboard and alert expression is
run against what it scraped after requests went through the router. Each query is printed with its result count.

One sandbox host (mon-1) holds prefill, decode and two router instances (router-a, router-b; issue 39) behind its
HAProxy on the public port; workers, the routers' Prometheus listeners and HAProxy's exporter bind to all addresses
so that the controller's Prometheus reaches them at the guest's address. The routers check worker health every 2 s.
After the normal traffic, two short faults under requests (the simulator's prefill dropping its KV transfers, then
the prefill stopped) make the series appear that exist only once something failed (KV transfer and bootstrap
failures, router errors and retries, failed health checks). Alerts whose expression stays empty in this run must be
proven to fire by the promtool unit tests (tests/monitoring/sglang-alerts.test.yml). Last, the routers' own alerts
live: a worker added by hand to router-b only makes SGLangRoutersDisagree pending for that worker, and router-b
stopped makes SGLangRouterOutOfLoadBalancer pending for it in HAProxy.

The monitoring play runs in the same ansible-playbook run as site.yml, after it: it reads the units that
site.yml's preflight planned (the facts sglang_worker_units, sglang_router_units and sglang_router_lb), as a play in
site.yml would.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml
from sandbox_hosts import REPO, VENV_BIN, down, run, ssh_config, up, wait_until, write_inventory

sys.path.insert(0, str(REPO / "tests" / "monitoring"))
import prom

from tests.http_client import free_port, http

SANDBOX = "mon"
HOST = f"{SANDBOX}-1"
ROUTER_PORT, PROM_PORT = 8000, 29000  # with router instances: HAProxy's public port
# Two routers on mon-1 behind HAProxy (sglang_router_instances): each its own unit and Prometheus listener.
ROUTERS = [{"name": "router-a", "port": 8001, "prometheus_port": 29001},
           {"name": "router-b", "port": 8002, "prometheus_port": 29002}]  # fmt: skip
LB_STATS_PORT = 8405  # sglang_router_lb_stats_port's default
ROUTER_ALERT_WAIT = 90  # seconds: a scrape and an evaluation (2 s each) after the router's own health check (2 s)
REQUESTS = 24
RATE = "3m"  # $__rate_interval of the live queries: wide enough to still hold the traffic of this run
# The alert a failed KV transfer raises (roles/sglang_monitoring/templates/sglang-alerts.yml.j2): it has no `for:`,
# so it fires at the first evaluation (2 s) after a scrape (2 s) that saw a failed-transfer counter rise.
KV_ALERT = "SGLangKVTransferFailures"
PREFILL_PORT = 30000  # inventories/sandbox/group_vars/prefill.yml
DECODE_PORT = 30001  # inventories/sandbox/group_vars/decode.yml
PREFILL_BOOTSTRAP_PORT = 8998  # inventories/sandbox/group_vars/prefill.yml
KV_ALERT_WAIT = 60  # seconds: decode's handoff timeout (3 s) per request, a scrape, an evaluation, with room


def http_status(method, url, body=None, timeout=30):
    """The status of one request; 0 when nothing answered (not listening yet, timed out)."""
    try:
        return http(method, url, body, timeout=timeout)[0]
    except OSError:
        return 0


class Prometheus:
    def __init__(self, binary, workdir, rules, file_sd):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "sglang", "file_sd_configs": [{"files": [str(file_sd)], "refresh_interval": "5s"}]}
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        env = {k: v for k, v in os.environ.items() if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def api(self, path, **params):
        status, body = http("GET", f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10)
        assert status == 200, f"{path} {params}: {status} {str(body)[:500]}\n{self.log.read_text()[-2000:]}"
        return body["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    binaries = prom.ensure_prometheus()
    work = tmp_path_factory.mktemp("monitoring")
    up(SANDBOX)
    try:
        hosts = json.loads((REPO / ".cache" / "sandbox" / SANDBOX / "hosts.json").read_text())
        address = next((h["address"] for h in hosts if h["name"] == HOST), None)
        assert address, f"{HOST} is not in the sandbox's hosts"
        host_vars = {
            "sglang_bind_host": "0.0.0.0",
            "sglang_router_host": "0.0.0.0",
            "sglang_router_prometheus_host": "0.0.0.0",
            "sglang_router_port": ROUTER_PORT,
            "sglang_router_prometheus_port": PROM_PORT,
            "sglang_router_health_check_interval": 2,
            "sglang_router_instances": ROUTERS,
            # decode gives up on a KV handoff after 3 s (sglang: its bootstrap / waiting timeouts, 300 s); each
            # room's KV bytes go through the real NIXL/UCX in host memory (tests/sandbox/pdsim nixl_handoff.py).
            # While the simulator made its NIXL agents at the first request, that handoff took 1.6 s on this 2-core
            # machine beside three busy loops (0.28 s once they are made at load) and the canary's first try failed
            # on CI three times under the 2 s this test had.
            "sglang_decode_extra_env": {"SGLANG_SIM_HANDOFF_TIMEOUT": "3", "SGLANG_SIM_KV_NIXL": "1"},
            "sglang_prefill_extra_env": {"SGLANG_SIM_KV_NIXL": "1"},
            # where the controller's Prometheus reaches mon-1 (its listeners bind all addresses; the plan's
            # URLs say loopback, as prefill, decode and router share the host)
            "sglang_advertise_address": address,
        }
        inv = write_inventory(work / "inventory", SANDBOX, HOST, host_vars=host_vars)
        out = work / "out"
        playbook = work / "site-and-monitoring.yml"
        playbook.write_text(
            yaml.safe_dump(
                [
                    {"name": "Converge", "ansible.builtin.import_playbook": str(REPO / "site.yml")},
                    {
                        "name": "Monitoring files",
                        "hosts": "prefill:decode:router",
                        "gather_facts": False,
                        "roles": [{"role": "disagg.sglang.sglang_monitoring"}],
                    },
                ]
            )
        )
        extra = {
            "sglang_monitoring_cluster": "mon",
            "sglang_monitoring_file_sd_path": str(out / "file_sd" / "sglang.json"),
            "sglang_monitoring_rules_path": str(out / "rules" / "sglang-alerts.yml"),
            "sglang_monitoring_dashboard_path": str(out / "dashboards" / "sglang-pd.json"),
            "sglang_monitoring_promtool": binaries["promtool"],
        }
        run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(playbook), "-e", json.dumps(extra)])
        server = Prometheus(
            binaries["prometheus"], work, out / "rules" / "sglang-alerts.yml", out / "file_sd" / "*.json"
        )
        try:
            wait_until(lambda: http_status("GET", f"{server.url}/-/ready") == 200, 60, "Prometheus ready")
            yield {"prometheus": server, "address": address, "out": out, "work": work}
        finally:
            server.stop()
    finally:
        down(SANDBOX)


def alert_rule(server, name):
    """The rule `name` as Prometheus's /api/v1/rules reports it: state (inactive, pending, firing), alerts."""
    rules = [r for g in server.api("rules", type="alert")["groups"] for r in g["rules"] if r["name"] == name]
    assert len(rules) == 1, f"{name}: {len(rules)} rules of that name loaded"
    return rules[0]


def kv_alert_on_decode(server):
    """The KV transfer failure alert's rule while it is pending or firing for decode0, else None."""
    rule = alert_rule(server, KV_ALERT)
    alerts = [
        a
        for a in rule["alerts"]
        if a["state"] in ("pending", "firing") and a["labels"].get("role") == "decode"
        and a["labels"].get("instance") == "decode0"
    ]  # fmt: skip
    return rule if rule["state"] in ("pending", "firing") and alerts else None


def on_host(command):
    return run(["ssh", "-F", str(ssh_config(SANDBOX)), HOST, command])


@pytest.fixture(scope="module")
def traffic(deployment):
    """Requests through the router, then two faults under requests, then everything ready again.

    1. The prefill restarted with the simulator's `handoff:drop` (its KV transfers never complete): decode
       gives up after its handoff timeout, as sglang counts a failed transfer.
    2. The prefill stopped: decode's bootstrap never connects (a failed bootstrap), the router's requests to
       the prefill fail (errors, retries, failed health checks).
    """
    router = f"http://{deployment['address']}:{ROUTER_PORT}"
    statuses, faults = [], {}
    for i in range(REQUESTS):
        if i % 4 == 3:
            body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": f"question {i}"}],
                    "max_tokens": 16, "stream": True}  # fmt: skip
            statuses.append(http_status("POST", f"{router}/v1/chat/completions", body))
        else:
            body = {"text": f"The capital of France is {i}", "sampling_params": {"max_new_tokens": 16}}
            statuses.append(http_status("POST", f"{router}/generate", body))
    assert statuses.count(200) == REQUESTS, statuses
    print(f"{REQUESTS} requests through the router: all 200")

    def ready():
        return http_status("GET", f"{router}/readiness") == 200

    def prefill_serving():
        """The restarted prefill answers its own health check, and the router takes requests. The router's
        /readiness alone can be 200 before it has seen the restart (3 failed checks at 2 s): requests sent then
        meet a prefill still loading, and decode counts failed bootstraps, never the dropped transfers."""
        up = http_status("GET", f"http://{deployment['address']}:{PREFILL_PORT}/health", timeout=10) == 200
        return up and ready()

    def one(text):
        return http_status("POST", f"{router}/generate", {"text": text, "sampling_params": {"max_new_tokens": 4}}, 60)

    faults["kv_alert_before"] = alert_rule(deployment["prometheus"], KV_ALERT)  # no failure yet: inactive
    try:
        # systemd's manager environment reaches units started after it is set
        on_host("systemctl set-environment SGLANG_SIM_FAIL=handoff:drop && systemctl restart sglang-prefill0")
        wait_until(prefill_serving, 120, "the dropping prefill healthy and the router ready")
        print(f"prefill dropping KV transfers: {[one(f'drop {i}') for i in range(2)]}")
        # Before the prefill is stopped (its failed bootstraps raise the same alert): only the dropped transfers
        # can raise it here. Decode counts them (sglang:num_transfer_failed_reqs_total{role="decode"}).
        kv_alert = wait_until(lambda: kv_alert_on_decode(deployment["prometheus"]), KV_ALERT_WAIT)
        faults["kv_alert_during_drop"] = kv_alert or alert_rule(deployment["prometheus"], KV_ALERT)
        faults["transfer_failed"] = deployment["prometheus"].query(
            'sglang:num_transfer_failed_reqs_total{cluster="mon",role="decode"}'
        )
    finally:
        on_host("systemctl unset-environment SGLANG_SIM_FAIL && systemctl restart sglang-prefill0")
    wait_until(prefill_serving, 120, "the prefill healthy again and the router ready")
    on_host("systemctl stop sglang-prefill0")
    try:
        print(f"prefill stopped: {[one(f'down {i}') for i in range(2)]}")
        # The router's decode half of those may be cancelled when its prefill half fails first, before decode's
        # bootstrap gives up: one request straight to decode, as the router sends it (the stopped prefill's
        # bootstrap server and a room), makes decode count a failed bootstrap every time.
        direct = {"text": "down direct", "sampling_params": {"max_new_tokens": 4}, "bootstrap_room": 7070707,
                  "bootstrap_host": deployment["address"], "bootstrap_port": PREFILL_BOOTSTRAP_PORT}  # fmt: skip
        decode = f"http://{deployment['address']}:{DECODE_PORT}/generate"
        status = http_status("POST", decode, direct, 60)
        print(f"straight to decode, bootstrap never connects: {status}")
        assert status == 500, f"decode answered {status} for a room whose prefill is stopped"
        time.sleep(4)  # > 3 failed health checks at 2 s
    finally:
        on_host("systemctl start sglang-prefill0")
    wait_until(prefill_serving, 120, "the prefill healthy again and the router ready")
    # the breaker of a healthy worker may still be open: retry until one request passes, then a few more
    wait_until(lambda: one("after") == 200, 60, "a request after recovery")
    for _unused in range(4):
        one("more")
    time.sleep(6)  # three scrapes at 2 s
    return {"statuses": statuses, **faults}


def test_every_generated_target_is_up(deployment, traffic):
    server = deployment["prometheus"]
    written = json.loads((deployment["out"] / "file_sd" / "sglang.json").read_text())
    assert [g["labels"]["role"] for g in written] == ["prefill", "decode", "router", "router", "haproxy"]
    address = deployment["address"]
    assert [g["targets"] for g in written[2:]] == [[f"{address}:29001"], [f"{address}:29002"],
                                                   [f"{address}:{LB_STATS_PORT}"]]  # fmt: skip

    def all_up():
        active = server.api("targets", state="active")["activeTargets"]
        return len(active) == len(written) and all(t["health"] == "up" for t in active) and active

    active = wait_until(all_up, 60, "every target up")
    for target in active:
        labels = target["labels"]
        print(f"target {target['scrapeUrl']}: {target['health']} {labels}")
        want = next(g for g in written if g["targets"] == [target["discoveredLabels"]["__address__"]])
        assert {k: labels[k] for k in want["labels"]} == want["labels"]
    up = server.query('up{cluster="mon"}')
    assert sorted(r["metric"]["instance"] for r in up) == ["decode0", "haproxy", "prefill0", "router-a", "router-b"]
    assert all(r["value"][1] == "1" for r in up)


def test_every_metric_of_the_fixture_has_series(deployment, traffic):
    server = deployment["prometheus"]
    missing = []
    for name in prom.fixture_names():
        count = len(server.query(f'{{__name__=~"{re.escape(name)}(_bucket)?",cluster="mon"}}'))
        print(f"[{count:3d}] {name}")
        if count == 0:
            missing.append(name)
    assert not missing, f"scraped no series of {missing}"


def test_every_dashboard_query_returns_data(deployment, traffic):
    server = deployment["prometheus"]
    empty = []
    for title, ref, expr in prom.dashboard_queries():
        query = prom.live(expr, RATE)
        count = len(server.query(query))
        print(f"[{count:3d}] {title} {ref}: {query}")
        if count == 0:
            empty.append(f"{title} {ref}")
    for name, definition in prom.dashboard_variable_queries():
        selector = prom.live(definition[len("label_values(") :].rsplit(",", 1)[0])
        label = definition.rsplit(",", 1)[1].strip(" )")
        values = sorted({r["metric"].get(label) for r in server.query(selector)} - {None})
        print(f"[{len(values):3d}] variable {name}: {definition} -> {values}")
        if not values:
            empty.append(f"variable {name}")
    assert not empty, f"dashboard queries without data: {empty}"


def test_every_alert_expression_returns_data_or_is_proven_by_promtool(deployment, traffic):
    server = deployment["prometheus"]
    rules = deployment["out"] / "rules" / "sglang-alerts.yml"
    tested = set(re.findall(r"^\s+alertname: (\w+)$", prom.RULES_TEST.read_text(), re.MULTILINE))
    unproven, no_series = [], []
    for alert, expr in prom.rule_alerts(rules):
        count = len(server.query(expr))
        how = (
            "fires here" if count else ("quiet here; promtool test proves it fires" if alert in tested else "UNPROVEN")
        )
        print(f"[{count:3d}] {alert}: {' '.join(expr.split())}  ({how})")
        if not count and alert not in tested:
            unproven.append(alert)
        for name in sorted(prom.metric_names(expr)):
            series = len(server.query(f'{{__name__=~"{re.escape(name)}(_bucket)?",cluster="mon"}}'))
            if series == 0:
                no_series.append(f"{alert}: {name}")
    state = server.api("rules", type="alert")["groups"]
    print("alert states: " + ", ".join(f"{r['name']}={r['state']}" for g in state for r in g["rules"]))
    assert not unproven
    assert not no_series, f"alert expressions over series that were never scraped: {no_series}"


def test_the_kv_transfer_failure_alert_fires_while_the_prefill_drops_its_transfers(deployment, traffic):
    """The live rule in the real Prometheus: inactive after the normal traffic, firing (it has no `for:`) for
    decode0 while the prefill drops its KV transfers, before the prefill is stopped; still firing after the faults
    (its window is 5m)."""
    before = traffic["kv_alert_before"]
    assert before["state"] == "inactive", f"{KV_ALERT} before any fault: {before}"
    during = traffic["kv_alert_during_drop"]
    counted = {r["metric"]["instance"]: float(r["value"][1]) for r in traffic["transfer_failed"]}
    print(f"{KV_ALERT} while the prefill dropped KV transfers: {during['state']} {during['alerts']}; "
          f"decode's failed transfers then: {counted}")  # fmt: skip
    assert counted.get("decode0", 0) >= 1, f"decode counted no failed KV transfer: {traffic['transfer_failed']}"
    assert during["state"] == "firing", f"{KV_ALERT} was not firing within {KV_ALERT_WAIT}s of the fault: {during}"
    firing = [a for a in during["alerts"] if a["state"] == "firing"]
    on_decode = [a for a in firing if (a["labels"]["role"], a["labels"]["instance"]) == ("decode", "decode0")]
    assert len(on_decode) == 1, during
    assert on_decode[0]["annotations"]["summary"] == f"KV transfers failing on decode decode0 ({HOST})", on_decode
    after = alert_rule(deployment["prometheus"], KV_ALERT)
    assert after["state"] == "firing", f"{KV_ALERT} after the faults: {after}"


def test_kv_bytes_went_through_real_nixl_under_the_units_hardening(deployment, traffic):
    """With SGLANG_SIM_KV_NIXL=1 the prefill unit WRITEs each room's KV bytes into the decode unit through the
    installed NIXL/UCX (host memory), both under the workers' systemd hardening, and the decode checks every byte
    before it answers: the rooms it lists at GET /sim/nixl."""
    status, seen = http("GET", f"http://{deployment['address']}:{DECODE_PORT}/sim/nixl", timeout=30)
    assert status == 200, seen
    assert seen["on"] is True, f"the NIXL handoff is off in the decode unit: {seen['why']}"
    good = [r for r in seen["rooms"] if r["bytes"] > 0 and r["bytes_verified"] == r["bytes"]]
    print(f"{len(good)} rooms over NIXL, {sum(r['bytes'] for r in good)} bytes verified, from {seen['rooms'][:1]}")
    assert len(good) == len(seen["rooms"]) >= REQUESTS, seen["rooms"][-3:]


def router_api(port, command=""):
    """curl on mon-1 against the worker API of the router instance on PORT (bound to loopback: one router host): its
    answer."""
    return on_host(f"curl -sS --noproxy '*' {command} http://127.0.0.1:{port}/workers").stdout


def router_lists(port):
    """{url: id} of the workers the router instance on PORT lists (GET /workers)."""
    return {w["url"]: w["id"] for w in json.loads(router_api(port))["workers"]}


def remove_worker(port, url):
    """DELETE of URL from the router instance on PORT (the router answers "removal queued" and removes it in the
    background): True once the router no longer lists it, so the test judges the routers' agreement only after the
    removal took effect."""
    listed = router_lists(port)
    if url not in listed:
        return True
    answer = on_host(f"curl -sS --noproxy '*' -X DELETE http://127.0.0.1:{port}/workers/{listed[url]}").stdout
    print(f"router on {port}, DELETE {url}: {answer}")
    time.sleep(1.0)
    return url not in router_lists(port)


def rule_alerts_matching(prometheus, name, **labels):
    """The pending or firing alerts of rule NAME whose labels include LABELS."""
    rule = alert_rule(prometheus, name)
    return [a for a in rule["alerts"] if a["state"] in ("pending", "firing")
            and all(a["labels"].get(k) == v for k, v in labels.items())]  # fmt: skip


@pytest.fixture(scope="module")
def router_disagreement(deployment, traffic):
    """After the traffic: the routers agree; then a worker added to router-b by hand (the decode again under another
    URL, so it is healthy: a router out of step, sglang#22835), and taken out again."""
    server, rules = deployment["prometheus"], deployment["out"] / "rules" / "sglang-alerts.yml"
    disagree = dict(prom.rule_alerts(rules))["SGLangRoutersDisagree"]
    health = 'smg_worker_health{cluster="mon",role="router"}'
    seen = {}

    def both_routers_count_both_workers():
        counted = {r["metric"]["instance"]: float(r["value"][1]) for r in server.query(f"sum by (instance) ({health})")}
        return counted if counted == {"router-a": 2.0, "router-b": 2.0} else None

    seen["healthy_before"] = wait_until(both_routers_count_both_workers, ROUTER_ALERT_WAIT, "both routers count 2")
    seen["disagree_before"] = server.query(disagree)
    # the decode, bound to all addresses, at the guest's address: the routers dial it on loopback (one host's plan)
    extra = seen["extra"] = f"http://{deployment['address']}:{DECODE_PORT}"
    assert extra not in router_lists(8002), f"router-b already lists {extra}: this test would take it out"
    body = json.dumps({"url": extra, "worker_type": "decode"})
    answer = router_api(8002, f"-X POST -H 'Content-Type: application/json' -d {shlex.quote(body)}")
    print(f"router-b, POST /workers {body}: {answer}")
    try:
        # the router registers it in the background (POST answers 202 at once)
        seen["listed"] = wait_until(lambda: extra in router_lists(8002), 60)
        seen["disagree_pending"] = wait_until(
            lambda: rule_alerts_matching(server, "SGLangRoutersDisagree", worker=extra), ROUTER_ALERT_WAIT
        )
        seen["disagree_query"] = server.query(disagree)
        seen["health_series"] = [(r["metric"]["instance"], r["metric"]["worker"], r["value"][1])
                                 for r in server.query(health)]  # fmt: skip
        seen["router_b_workers"] = router_api(8002)
    finally:
        seen["removed"] = wait_until(lambda: remove_worker(8002, extra), 60)
    seen["disagree_after"] = wait_until(lambda: not server.query(disagree) and "agree", ROUTER_ALERT_WAIT)
    seen["disagree_left"] = [r["metric"]["worker"] for r in server.query(disagree)]
    # what router-b itself exports for its workers then (its own /metrics), to tell a stale series from a late scrape
    metrics = on_host(f"curl -sS --noproxy '*' http://127.0.0.1:{ROUTERS[1]['prometheus_port']}/metrics").stdout
    seen["router_b_health_after"] = [ln for ln in metrics.splitlines() if ln.startswith("smg_worker_health{")]
    return seen


@pytest.fixture(scope="module")
def router_stopped(deployment, traffic):
    """router-b stopped under a few requests through HAProxy's public port, then started again."""
    server, seen = deployment["prometheus"], {}
    on_host("systemctl stop sglang-router-b")
    try:
        seen["out_pending"] = wait_until(
            lambda: rule_alerts_matching(server, "SGLangRouterOutOfLoadBalancer", server="mon-1-router-b"),
            ROUTER_ALERT_WAIT,
        )
        seen["active_servers"] = server.query('haproxy_backend_active_servers{cluster="mon"}')
        router = f"http://{deployment['address']}:{ROUTER_PORT}"
        body = {"text": "one router left", "sampling_params": {"max_new_tokens": 4}}
        seen["statuses_one_router"] = [http_status("POST", f"{router}/generate", body, 60) for _unused in range(4)]
    finally:
        on_host("systemctl start sglang-router-b")
    seen["back"] = wait_until(
        lambda: server.query('haproxy_server_status{cluster="mon",server="mon-1-router-b",state="UP"} == 1'),
        ROUTER_ALERT_WAIT,
    )
    return seen


def test_the_routers_agree_and_a_worker_one_router_lists_alone_makes_the_disagreement_alert_pending(
    router_disagreement,
):
    """smg_worker_health of both real routers (sglang-router 0.3.2) counts the same two workers, and the alert's
    expression is empty; a worker only router-b lists is what the expression returns, its rule pending (for: 3m);
    taken out, the routers agree again, or router-b's stale series of it is the only disagreement left."""
    print(f"healthy workers by router: {router_disagreement['healthy_before']}; the alert before: "
          f"{router_disagreement['disagree_before']}; while router-b listed one more: "
          f"{router_disagreement['disagree_query']}")  # fmt: skip
    print(f"router-b listed it: {router_disagreement['listed']}; series: {router_disagreement['health_series']}; "
          f"router-b's workers: {router_disagreement['router_b_workers']}")  # fmt: skip
    assert router_disagreement["disagree_before"] == []
    assert router_disagreement["listed"], "router-b never listed the worker added by hand"
    pending = router_disagreement["disagree_pending"]
    assert [a["labels"]["worker"] for a in pending] == [router_disagreement["extra"]], pending
    assert pending[0]["state"] == "pending" and pending[0]["labels"]["cluster"] == "mon"
    assert [(r["metric"]["worker"], r["value"][1]) for r in router_disagreement["disagree_query"]] == [
        (router_disagreement["extra"], "1")
    ]
    assert router_disagreement["removed"], "router-b still lists the worker added by hand"
    # Taken out, the routers agree again, except for a known limit of sglang-router 0.3.2 seen in 3 of 6 runs on
    # 2026-12-07: a worker removed through its API (DELETE /workers/{id}, answered "removal queued") stays in the
    # router's own export after the router no longer lists it, at -1 (the routers agree) or, in those 3 runs, at 1,
    # and the alert stays pending (how long was not measured). Then the only disagreement left must be that worker,
    # exported by router-b alone; any other is a failure.
    extra, exported = router_disagreement["extra"], router_disagreement["router_b_health_after"]
    stale = f'smg_worker_health{{worker="{extra}"}} 1' in exported
    left = router_disagreement["disagree_left"]
    print(f"after the removal: {router_disagreement['disagree_after'] or 'disagree'}; left {left}; router-b exports "
          f"{exported} (stale series: {stale})")  # fmt: skip
    if router_disagreement["disagree_after"] != "agree":
        assert stale and left == [extra], (left, exported)


def test_a_stopped_router_is_down_in_haproxy_and_its_alert_pending_while_the_other_router_serves(router_stopped):
    """router-b stopped: HAProxy's own exporter has it DOWN (SGLangRouterOutOfLoadBalancer pending, for: 5m) and one
    active server; requests through HAProxy's public port still get 200 from router-a; started, it is UP again."""
    pending = router_stopped["out_pending"]
    print(f"router-b stopped: {pending}; active servers {router_stopped['active_servers']}; requests "
          f"{router_stopped['statuses_one_router']}")  # fmt: skip
    assert [(a["labels"]["server"], a["labels"]["state"], a["state"]) for a in pending] == [
        ("mon-1-router-b", "DOWN", "pending")
    ]
    assert [r["value"][1] for r in router_stopped["active_servers"]] == ["1"]
    assert router_stopped["statuses_one_router"] == [200] * 4
    assert router_stopped["back"]
