# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Prometheus scrape targets of a PD deployment (plugins/filter/monitoring.py, roles/sglang_monitoring).

scrape_targets(workers, routers, cluster) -> Prometheus file_sd list: one target group per worker metrics
endpoint (sglang's /metrics on the worker's HTTP port, with --enable-metrics) and one per router Prometheus
listener (sglang-router's --prometheus-host/--prometheus-port, /metrics there).

Input, the unit specs the roles planned:
  workers: [{unit, name, role, host, advertise_address, port, gpus: [...], numa_node}]
           host is the inventory hostname; advertise_address where the worker's port is reached.
  routers: [{unit, host, prometheus_address, prometheus_port}] (advertise_address optional: used when
           prometheus_address is a wildcard such as 0.0.0.0, then host).
Labels of every group: cluster, role (prefill, decode, router), instance (the worker's name; the router's
unit without the sglang- prefix, usually "router"), host (inventory hostname), gpus ("0,1,2,3"), numa_node.
gpus and numa_node are left out where they are unknown (routers; a worker spanning nodes).
The result depends only on the input, in its order: workers first, then routers.
"""

from __future__ import annotations

import re

WORKER_ROLES = ("prefill", "decode")
WILDCARDS = ("", "0.0.0.0", "::", "[::]")
# Prometheus label values are free text, but keep the names of the inventory readable and safe in PromQL.
_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


class MonitoringError(ValueError):
    """The specs cannot produce valid targets; the message names the entry and the fix."""


def _port(value, where, key):
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise MonitoringError(f"{where}: {key} {value!r} is not a port in 1-65535") from None
    if not 1 <= port <= 65535 or isinstance(value, bool):
        raise MonitoringError(f"{where}: {key} {value!r} is not a port in 1-65535")
    return port


def address(host, port):
    """host:port as Prometheus wants it (IPv6 literals in brackets)."""
    host = str(host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _need(spec, key, where):
    value = spec.get(key)
    if value in (None, ""):
        raise MonitoringError(f"{where}: {key} is missing")
    return value


def _gpus(value, where):
    if value in (None, ""):
        return None
    if not isinstance(value, (list, tuple)):
        raise MonitoringError(f"{where}: gpus must be a list of GPU indices, got {value!r}")
    try:
        return ",".join(str(int(g)) for g in value)
    except (TypeError, ValueError):
        raise MonitoringError(f"{where}: gpus must be a list of GPU indices, got {value!r}") from None


def worker_group(spec, cluster, index=0):
    """The target group of one worker spec."""
    if not isinstance(spec, dict):
        raise MonitoringError(f"sglang_worker_units[{index}] must be a mapping (unit spec), got {spec!r}")
    where = f"worker {spec.get('unit') or spec.get('name') or index}"
    role = _need(spec, "role", where)
    if role not in WORKER_ROLES:
        raise MonitoringError(f"{where}: role {role!r} is not one of {', '.join(WORKER_ROLES)}")
    name, host = str(_need(spec, "name", where)), str(_need(spec, "host", where))
    reach = spec.get("advertise_address")
    if reach in WILDCARDS or reach is None:
        raise MonitoringError(
            f"{where}: advertise_address {reach!r} cannot be scraped; set sglang_advertise_address of {host}"
        )
    labels = {"cluster": cluster, "role": role, "instance": name, "host": host}
    gpus = _gpus(spec.get("gpus"), where)
    if gpus is not None:
        labels["gpus"] = gpus
    if spec.get("numa_node") not in (None, ""):
        labels["numa_node"] = str(spec["numa_node"])
    return {"targets": [address(reach, _port(spec.get("port"), where, "port"))], "labels": labels}


def router_group(spec, cluster, index=0):
    """The target group of one router spec (its Prometheus listener)."""
    if not isinstance(spec, dict):
        raise MonitoringError(f"sglang_router_unit [{index}] must be a mapping (unit spec), got {spec!r}")
    unit = str(spec.get("unit") or "sglang-router")
    where = f"router {unit}"
    host = str(_need(spec, "host", where))
    reach = spec.get("prometheus_address")
    if reach in WILDCARDS or reach is None:
        reach = spec.get("advertise_address") or host
    port = _port(spec.get("prometheus_port"), where, "prometheus_port")
    instance = spec.get("name") or re.sub(r"^sglang-", "", unit)
    labels = {"cluster": cluster, "role": "router", "instance": str(instance), "host": host}
    return {"targets": [address(reach, port)], "labels": labels}


def scrape_targets(workers, routers, cluster):
    """Prometheus file_sd target groups for the workers and routers (see the module docstring)."""
    cluster = str(cluster or "")
    if not _CLUSTER.match(cluster):
        raise MonitoringError(
            f"cluster {cluster!r} must be letters, digits, '.', '_', ':' or '-' (set sglang_monitoring_cluster)"
        )
    if workers is None:
        workers = []
    if routers is None:
        routers = []
    if isinstance(routers, dict):
        routers = [routers]
    if not isinstance(workers, list) or not isinstance(routers, list):
        raise MonitoringError("workers and routers must be lists of unit specs")
    groups = [worker_group(w, cluster, i) for i, w in enumerate(workers)]
    groups += [router_group(r, cluster, i) for i, r in enumerate(routers)]
    seen = {}
    for group in groups:
        target = group["targets"][0]
        who = f"{group['labels']['host']}/{group['labels']['instance']}"
        if target in seen:
            raise MonitoringError(
                f"{who} and {seen[target]} are both scraped at {target}: give them distinct ports "
                "(or advertise addresses)"
            )
        seen[target] = who
    identities = {}
    for group in groups:
        key = (group["labels"]["host"], group["labels"]["role"], group["labels"]["instance"])
        if key in identities:
            raise MonitoringError(
                f"two {key[1]} targets named {key[2]} on {key[0]}: instance names must be unique per host"
            )
        identities[key] = True
    return groups
