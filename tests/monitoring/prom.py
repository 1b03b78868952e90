"""What the monitoring tests share: Debian's Prometheus binaries (installed when missing), the expressions of the
dashboard and of the rendered alert rules, and the metric names they use.

Used by tests/unit/monitoring/test_monitoring_role.py and tests/integration/test_monitoring.py.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "sglang_monitoring"
DASHBOARD = ROLE / "files" / "sglang-pd-dashboard.json"
RULES_TEST = Path(__file__).resolve().parent / "sglang-alerts.test.yml"
FIXTURE = REPO / "tests" / "fixtures" / "metrics" / "dashboard-metrics.txt"
SIM_FIXTURE = REPO / "tests" / "fixtures" / "metrics" / "sglang-0.5.23-metrics.txt"
HAPROXY_FIXTURE = REPO / "tests" / "fixtures" / "metrics" / "haproxy-2.6.12-exporter.txt"
METRIC = re.compile(r"\b(sglang:[A-Za-z0-9_]+|smg_[a-z0-9_]+)")


def ensure_prometheus():
    """{'prometheus': path, 'promtool': path}; installs Debian's `prometheus` package when one is missing."""
    found = {name: shutil.which(name) for name in ("prometheus", "promtool")}
    if not all(found.values()):
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=300, env=env, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
            check=True,
            timeout=600,
            env=env,
            capture_output=True,
        )
        found = {name: shutil.which(name) or f"/usr/bin/{name}" for name in found}
    return found


def dashboard_queries(dashboard=None):
    """[(panel title, refId, expr)] of every panel target, in dashboard order."""
    dashboard = dashboard or json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["refId"], target["expr"]))
    return out


def dashboard_variable_queries(dashboard=None):
    """[(variable name, label_values(...) query)] of the dashboard's query variables."""
    dashboard = dashboard or json.loads(DASHBOARD.read_text())
    return [(v["name"], v["definition"]) for v in dashboard["templating"]["list"] if v["type"] == "query"]


def live(expr, rate_interval="1m"):
    """A dashboard expression with Grafana's variables as a plain query sees them: every value."""
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = expr.replace('role=~"$role"', 'role=~"prefill|decode"')
    return re.sub(r'=~"\$\w+"', '=~".*"', expr)


def rule_alerts(rules_path):
    """[(alert name, expr)] of a rendered rules file."""
    doc = yaml.safe_load(Path(rules_path).read_text())
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"] if "alert" in r]


def base_name(name):
    return re.sub(r"_(bucket|sum|count)$", "", name)


def metric_names(text):
    """Metric names in a text of PromQL, histograms by their base name."""
    return {base_name(m) for m in METRIC.findall(text)}


def fixture_names(path=FIXTURE):
    """{name: source line} of tests/fixtures/metrics/dashboard-metrics.txt."""
    names = {}
    for line in Path(path).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            names[line.split("\t")[0]] = line
    return names
