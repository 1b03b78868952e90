"""roles/sglang_monitoring on the controller: file_sd targets of a multi-instance inventory, the alert rules
(`promtool check rules` and `promtool test rules` on the rendered file), the dashboard, and the metric names
both use (tests/fixtures/metrics/dashboard-metrics.txt) against the installed sglang-router binary.

The inventory stands in for what site.yml's preflight plans: each worker host's sglang_worker_units and the
router host's sglang_router_units (two router instances) and sglang_router_lb (its HAProxy, router/lb.py).
promtool is Debian's (installed by tests/monitoring/prom.py when missing).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_router
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "monitoring"))
import prom
from ansible_collections.disagg.sglang.plugins.module_utils.monitoring.monitoring import scrape_targets
from ansible_collections.disagg.sglang.plugins.module_utils.router import lb
from sandbox_hosts import controller_playbook

REPO = prom.REPO
PLAY = """
- name: Monitoring files
  hosts: prefill:decode:router
  gather_facts: false
  roles:
    - role: disagg.sglang.sglang_monitoring
"""


def units(host, address):
    """2 prefill + 2 decode, TP2 each, on one 8-GPU host (the multi-instance inventory)."""
    rows = [
        ("prefill0", "prefill", 30000, [0, 1], 0),
        ("prefill1", "prefill", 30010, [2, 3], 0),
        ("decode0", "decode", 30001, [4, 5], 1),
        ("decode1", "decode", 30011, [6, 7], 1),
    ]
    # the keys the monitoring role reads of a planned spec (plugins/module_utils/units/units.py has many more)
    return [
        {"unit": f"sglang-{n}", "name": n, "role": r, "host": host, "port": p,
         "metrics_url": f"http://{address}:{p}/metrics", "flags": {"host": "0.0.0.0", "port": p},
         "gpus": g, "numa_node": node}
        for n, r, p, g, node in rows
    ]  # fmt: skip


# Two router instances on gw (sglang_router_instances) behind its HAProxy. Their listeners bind all addresses; the plan
# says loopback (probed from the host itself): the targets are the router host's ansible_host.
ROUTERS = [
    {"unit": f"sglang-{name}", "name": name, "role": "router", "host": "gw",
     "metrics_url": f"http://127.0.0.1:{port}/metrics", "flags": {"prometheus-host": "0.0.0.0"}}
    for name, port in (("router-a", 29000), ("router-b", 29001))
]  # fmt: skip
# gw's sglang_router_lb as the router role plans it (router/lb.py plan): HAProxy's exporter on
# sglang_router_prometheus_host (all addresses: its metrics_url says loopback) and sglang_router_lb_stats_port.
LB = lb.plan(
    {"gw": [{"name": lb.server_name("gw", r["name"]), "host": "127.0.0.1", "port": port, "health_port": None,
             "impl": "sglang_router"} for r, port in zip(ROUTERS, (8001, 8002), strict=True)]},
    {"host": "0.0.0.0", "port": 8000, "stats_host": "0.0.0.0", "stats_port": 8405},
)["spec"]  # fmt: skip


def inventory(directory, hosts):
    """hosts: {name: {groups: [...], vars...}} -> an inventory dir named like a cluster (its basename)."""
    directory.mkdir(parents=True, exist_ok=True)
    children = {}
    for name, spec in hosts.items():
        for group in spec["groups"]:
            children.setdefault(group, {"hosts": {}})["hosts"][name] = None
    host_vars = directory / "host_vars"
    host_vars.mkdir(exist_ok=True)
    for name, spec in hosts.items():
        (host_vars / f"{name}.yml").write_text(yaml.safe_dump({k: v for k, v in spec.items() if k != "groups"}))
    doc = {"all": {"vars": {"ansible_connection": "local"}, "children": children}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(doc))
    return directory


def converge(inv, out, check=True, **extra):
    play = out / "play.yml"
    play.write_text(PLAY)
    variables = {
        "sglang_monitoring_file_sd_path": str(out / "file_sd" / "sglang.json"),
        "sglang_monitoring_rules_path": str(out / "rules" / "sglang-alerts.yml"),
        "sglang_monitoring_dashboard_path": str(out / "dashboards" / "sglang-pd.json"),
        "sglang_monitoring_promtool": prom.ensure_prometheus()["promtool"],
        **extra,
    }
    return controller_playbook(inv, play, variables, out, check=check)


def recap(output):
    totals = {}
    for match in re.finditer(r"^\S+\s+:\s+(.*)$", output, re.MULTILINE):
        for key, value in re.findall(r"(\w+)=(\d+)", match.group(1)):
            totals[key] = totals.get(key, 0) + int(value)
    return totals


HOSTS = {
    "gpu1": {"groups": ["prefill", "decode"], "sglang_worker_units": units("gpu1", "10.0.0.11")},
    "gpu2": {"groups": ["prefill", "decode"], "sglang_worker_units": units("gpu2", "10.0.0.12")},
    "gw": {
        "groups": ["router"],
        "sglang_router_units": ROUTERS,
        "sglang_router_unit": ROUTERS[0],
        "sglang_router_lb": LB,
        "ansible_host": "10.0.0.9",
    },
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    base = tmp_path_factory.mktemp("monitoring")
    inv = inventory(base / "prod-a", HOSTS)
    out = base / "out"
    out.mkdir()
    first = converge(inv, out)
    return {"inventory": inv, "out": out, "first": first.stdout}


def test_multi_instance_inventory_writes_one_target_per_worker_router_and_haproxy(rendered):
    got = json.loads((rendered["out"] / "file_sd" / "sglang.json").read_text())
    workers = HOSTS["gpu1"]["sglang_worker_units"] + HOSTS["gpu2"]["sglang_worker_units"]
    want = scrape_targets(workers, ROUTERS, "prod-a", {"gw": "10.0.0.9"}, {"gw": LB})
    assert got == want
    assert len(got) == 11
    workers = [g for g in got if g["labels"]["role"] in ("prefill", "decode")]
    assert len(workers) == 8
    first = next(g for g in got if g["targets"] == ["10.0.0.12:30011"])
    assert first["labels"] == {"cluster": "prod-a", "role": "decode", "instance": "decode1", "host": "gpu2",
                               "gpus": "6,7", "numa_node": "1"}  # fmt: skip
    # every router unit of the host, not only the first (sglang_router_unit), then the host's HAProxy
    assert got[-3:] == [
        {"targets": ["10.0.0.9:29000"], "labels": {"cluster": "prod-a", "role": "router", "instance": "router-a",
                                                   "host": "gw"}},
        {"targets": ["10.0.0.9:29001"], "labels": {"cluster": "prod-a", "role": "router", "instance": "router-b",
                                                   "host": "gw"}},
        {"targets": ["10.0.0.9:8405"], "labels": {"cluster": "prod-a", "role": "haproxy", "instance": "haproxy",
                                                  "host": "gw"}},
    ]  # fmt: skip
    assert "11 targets in" in rendered["first"]


def test_a_router_host_without_haproxy_gets_no_haproxy_target(tmp_path):
    """One router (no sglang_router_instances): the fact sglang_router_lb is none, or not set at all."""
    one = {**ROUTERS[0], "name": "router", "unit": "sglang-router"}
    for fact in ({"sglang_router_lb": None}, {}):
        hosts = {
            **HOSTS,
            "gw": {"groups": ["router"], "sglang_router_units": [one], "ansible_host": "10.0.0.9", **fact},
        }
        out = tmp_path / str(len(fact))
        out.mkdir()
        proc = converge(inventory(out / "c", hosts), out, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        got = json.loads((out / "file_sd" / "sglang.json").read_text())
        assert [(g["labels"]["role"], g["targets"][0]) for g in got[8:]] == [("router", "10.0.0.9:29000")]


def test_rerun_changes_nothing_and_an_inventory_change_rewrites_only_the_targets(rendered, tmp_path):
    again = converge(rendered["inventory"], rendered["out"]).stdout
    assert recap(again)["changed"] == 0, again[-3000:]
    rules_before = (rendered["out"] / "rules" / "sglang-alerts.yml").read_text()
    smaller = {**HOSTS, "gpu2": {**HOSTS["gpu2"], "sglang_worker_units": units("gpu2", "10.0.0.12")[:3]}}
    inv = inventory(tmp_path / "prod-a", smaller)
    out = converge(inv, rendered["out"]).stdout
    changed = re.findall(r"^changed: \[[^\]]+\]", out, re.MULTILINE)
    assert recap(out)["changed"] == 1 and len(changed) == 1, out[-3000:]
    assert "TASK [disagg.sglang.sglang_monitoring : Write the scrape targets (file_sd)]" in out.split(changed[0])[0]
    got = json.loads((rendered["out"] / "file_sd" / "sglang.json").read_text())
    assert len(got) == 10 and "10.0.0.12:30011" not in {g["targets"][0] for g in got}
    assert (rendered["out"] / "rules" / "sglang-alerts.yml").read_text() == rules_before
    converge(rendered["inventory"], rendered["out"])  # back to the module's inventory


def test_a_host_without_planned_units_fails_instead_of_dropping_its_targets(tmp_path):
    hosts = {**HOSTS, "gpu3": {"groups": ["decode"]}}
    proc = converge(inventory(tmp_path / "c", hosts), tmp_path, check=False)
    assert proc.returncode != 0
    assert "No planned units (sglang_worker_units / sglang_router_units) on gpu3" in proc.stdout, proc.stdout[-2000:]
    assert not (tmp_path / "file_sd" / "sglang.json").exists()


def test_nothing_is_written_without_paths(tmp_path):
    proc = converge(
        inventory(tmp_path / "c", HOSTS),
        tmp_path,
        sglang_monitoring_file_sd_path="",
        sglang_monitoring_rules_path="",
        sglang_monitoring_dashboard_path="",
    )
    assert recap(proc.stdout)["changed"] == 0
    assert not any((tmp_path / d).exists() for d in ("file_sd", "rules", "dashboards"))


def test_promtool_check_and_unit_tests_of_the_rendered_rules(rendered, tmp_path):
    promtool = prom.ensure_prometheus()["promtool"]
    rules = rendered["out"] / "rules" / "sglang-alerts.yml"
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    print(check.stdout)
    assert check.returncode == 0 and "SUCCESS: 15 rules found" in check.stdout, check.stdout + check.stderr
    (tmp_path / "sglang-alerts.yml").write_text(rules.read_text())
    (tmp_path / "sglang-alerts.test.yml").write_text(prom.RULES_TEST.read_text())
    test = subprocess.run(
        [promtool, "test", "rules", "sglang-alerts.test.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    print(test.stdout)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr
    tested = set(re.findall(r"^\s+alertname: (\w+)$", prom.RULES_TEST.read_text(), re.MULTILINE))
    assert tested == {name for name, _unused in prom.rule_alerts(rules)}, "every alert has a promtool test"


def test_promtool_test_catches_a_wrong_threshold(rendered, tmp_path):
    """The unit tests are not vacuous: with a KV cache threshold of 0.99 the 'fires' case fails."""
    rules = (rendered["out"] / "rules" / "sglang-alerts.yml").read_text()
    wrong = rules.replace("(sglang:token_usage) > 0.95", "(sglang:token_usage) > 0.99")
    assert wrong != rules
    (tmp_path / "sglang-alerts.yml").write_text(wrong)
    (tmp_path / "sglang-alerts.test.yml").write_text(prom.RULES_TEST.read_text())
    test = subprocess.run(
        [prom.ensure_prometheus()["promtool"], "test", "rules", "sglang-alerts.test.yml"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert test.returncode != 0 and "SGLangKVCacheNearlyFull" in test.stdout + test.stderr


def promtool_test(rules_text, tmp_path):
    (tmp_path / "sglang-alerts.yml").write_text(rules_text)
    (tmp_path / "sglang-alerts.test.yml").write_text(prom.RULES_TEST.read_text())
    return subprocess.run(
        [prom.ensure_prometheus()["promtool"], "test", "rules", "sglang-alerts.test.yml"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "case"),
    [
        # counting every router target, the router that is down (no series) would count as one that disagrees
        (
            'count by (cluster) (up{role="router"} == 1)',
            'count by (cluster) (up{role="router"})',
            "routers agree, and a short disagreement stays quiet",
        ),
        # a worker that both routers list but one counts unhealthy is a disagreement too
        (
            '(smg_worker_health{role="router"} == 1)',
            '(smg_worker_health{role="router"} >= 0)',
            "routers disagree on their healthy workers",
        ),
        # a planned roll (MAINT for 2m) must stay quiet, a router DOWN 7m must not
        (
            'state=~"DOWN|MAINT"} == 1\n        for: 5m',
            'state=~"DOWN|MAINT"} == 1\n        for: 1m',
            "router out of HAProxy",
        ),
        # the guard's kill warns for the window after it, not for good
        (
            "increase(sglang_guard_kills_total[10m]) > 0",
            "sglang_guard_kills_total > 0",
            "guard killed a worker",
        ),
        # a spent budget is critical at once (a silent worker the guard leaves alone holds its requests)
        (
            "sglang_guard_budget_spent == 1\n        labels",
            "sglang_guard_budget_spent == 1\n        for: 5m\n        labels",
            "guard budget spent",
        ),
    ],
    ids=["down-router-counted", "unhealthy-counted-as-listed", "roll-bound", "guard-kill-window", "guard-budget-now"],
)
def test_promtool_tests_of_the_router_alerts_catch_a_wrong_rule(rendered, tmp_path, old, new, case):
    """The router and HAProxy alerts' unit tests are not vacuous: each mutation fails its case by name."""
    rules = (rendered["out"] / "rules" / "sglang-alerts.yml").read_text()
    assert rules.count(old) == 1, old
    test = promtool_test(rules.replace(old, new), tmp_path)
    assert test.returncode != 0 and case in test.stdout + test.stderr, test.stdout + test.stderr


def test_haproxy_names_and_states_of_the_rules_are_what_haproxy_exports(rendered):
    """Every haproxy_ series the rules read, with the label values they select, is in what the real HAProxy 2.6.12
    exporter answered in front of two real routers (tests/fixtures/metrics/haproxy-2.6.12-exporter.txt)."""
    rules = (rendered["out"] / "rules" / "sglang-alerts.yml").read_text()
    exported = prom.HAPROXY_FIXTURE.read_text()
    used = set(re.findall(r"\b(haproxy_[a-z_]+)\b", rules))
    assert used == {"haproxy_server_status", "haproxy_backend_active_servers"}
    for name in used:
        assert f"# TYPE {name} gauge" in exported, name
    states = set(re.findall(r'state=~"([A-Z|]+)"', rules)[0].split("|"))
    assert states == {"DOWN", "MAINT"}
    for state in states:
        assert f'haproxy_server_status{{proxy="sglang_routers",server="probe-router-a",state="{state}"}}' in exported
    # after the kill -9: DOWN is 1 for the killed router, and the backend counts one active server
    killed = exported.split("# --- probe-router-a killed")[1]
    assert 'server="probe-router-a",state="DOWN"} 1' in killed
    assert 'haproxy_backend_active_servers{proxy="sglang_routers"} 1' in killed


def test_dashboard_is_the_collection_file_and_its_queries_parse(rendered, tmp_path):
    written = json.loads((rendered["out"] / "dashboards" / "sglang-pd.json").read_text())
    assert written == json.loads(prom.DASHBOARD.read_text())
    ids = [p["id"] for p in written["panels"]]
    assert len(ids) == len(set(ids))
    queries = prom.dashboard_queries(written)
    assert len(queries) >= 30
    for panel in written["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    # promtool parses every query (Grafana's variables as a live query would see them) as a recording rule
    doc = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": prom.live(expr)} for i, (_unused, _unused2, expr) in enumerate(queries)
    ] + [{"record": f"dashboard:v{i}", "expr": prom.live(q[len("label_values("):].rsplit(",", 1)[0])}
         for i, (_unused, q) in enumerate(prom.dashboard_variable_queries(written))]}]}  # fmt: skip
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(doc))
    check = subprocess.run(
        [prom.ensure_prometheus()["promtool"], "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_fixture_lists_exactly_the_metrics_the_rules_and_dashboard_use(rendered):
    used = prom.metric_names((rendered["out"] / "rules" / "sglang-alerts.yml").read_text())
    used |= prom.metric_names("\n".join(expr for _unused, _unused2, expr in prom.dashboard_queries()))
    listed = set(prom.fixture_names())
    assert used - listed == set(), "used but not listed in dashboard-metrics.txt"
    assert listed - used == set(), "listed but used nowhere"


@pytest.mark.parametrize("impl", ["sglang_router", "smg"])
def test_router_metric_names_are_in_each_router_binary(impl, request):
    """Both routers (sglang_router_impl) register their metrics by name: each smg_* name the alerts and the dashboard
    use is a string in sglang-router 0.3.2's extension and in SMG 1.13's (its own venv: both ship `smg`)."""
    if impl == "smg":
        python = request.getfixturevalue("smg_python")
        blob = next(Path(python).parent.parent.glob("lib/python3*/site-packages/smg/smg_rs*.so")).read_bytes()
    else:
        blob = next(Path(sglang_router.__file__).parent.glob("sglang_router_rs*.so")).read_bytes()
    router_names = [n for n in prom.fixture_names() if n.startswith("smg_")]
    assert router_names
    missing = [n for n in router_names if n.encode() not in blob]
    assert not missing, f"not in the {impl} binary: {missing}"


def test_sglang_metric_names_are_in_the_simulators_list():
    """The simulator's list (tests/fixtures/metrics/sglang-0.5.23-metrics.txt, read from the 0.5.23 source)."""
    if not prom.SIM_FIXTURE.exists():
        pytest.skip(f"{prom.SIM_FIXTURE.relative_to(REPO)} not there yet (the simulator's metric list)")
    sim = set(prom.METRIC.findall(prom.SIM_FIXTURE.read_text()))
    sim |= {prom.base_name(n) for n in sim}
    ours = [n for n in prom.fixture_names() if n.startswith("sglang:")]
    missing = [n for n in ours if n not in sim]
    assert not missing, f"not in the simulator's sglang 0.5.23 list: {missing}"


def test_a_percentage_for_a_fraction_and_a_bad_duration_fail_before_anything_is_written(tmp_path):
    """The role's one variable check (module_utils/plan/variables.py, through query('ansible.builtin.varnames')): a
    threshold given in percent and a duration Prometheus cannot read fail the run with every such variable named."""
    bad = {"sglang_monitoring_kv_cache_usage_threshold": 95, "sglang_monitoring_slo_for": "5 minutes"}
    proc = converge(inventory(tmp_path / "c", HOSTS), tmp_path, check=False, **bad)
    output = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert (
        "sglang_monitoring_kv_cache_usage_threshold is 95 (a number): it must be a fraction 0.01-1 "
        "(a fraction: 0.95 for 95 %) (a share of KV cache (0.95, not 95))" in output
    ), output[-3000:]
    assert "sglang_monitoring_slo_for is '5 minutes' (a string): it must be a Prometheus duration" in output
    assert not any((tmp_path / d).exists() for d in ("file_sd", "rules", "dashboards"))
