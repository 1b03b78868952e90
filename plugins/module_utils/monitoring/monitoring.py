# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Prometheus scrape targets of a PD deployment (plugins/filter/monitoring.py, roles/sglang_monitoring).

scrape_targets(workers, routers, cluster, addresses, balancers) -> Prometheus file_sd list: one target group per
worker metrics endpoint (sglang's /metrics on the worker's HTTP port, with --enable-metrics), one per router
Prometheus listener (sglang-router's --prometheus-host/--prometheus-port, /metrics there), and one per router host's
HAProxy (its built-in Prometheus exporter).

Input, the unit specs the roles planned (site.yml's preflight: sglang_worker_units, sglang_router_units):
  workers: [{unit, name, role, host, metrics_url, gpus: [...], numa_node, flags: {host}}]
           or, without metrics_url, {..., advertise_address, port}. host is the inventory hostname.
  routers: [{unit, name, host, metrics_url, flags: {prometheus-host}}], every router unit of every router host
           (sglang_router_instances: several per host) or, without metrics_url, {unit, host, prometheus_address,
           prometheus_port}.
  balancers: optional {router host: its sglang_router_lb fact} (router/lb.py haproxy_spec: metrics_url is
           http://<sglang_router_prometheus_host>:<sglang_router_lb_stats_port>/metrics, loopback for a wildcard,
           metrics_bind the bind address, read as a router's flags.prometheus-host). A host whose fact is
           None or {} (no router instances, so no HAProxy; {} where the fact is not set) has no such target.
  addresses: optional {inventory host: address Prometheus reaches it at}. A listener bound to all addresses
           (flags host / prometheus-host 0.0.0.0 or ::) whose planned URL says loopback (the planner's view
           from the host itself, e.g. one host holding prefill, decode and router) is scraped at that address;
           without one, at the spec's advertise_address, else at the inventory hostname.
           A listener bound to loopback stays on loopback: only a Prometheus on that host reaches it.
Labels of every group: cluster, role (prefill, decode, router, haproxy), instance (the worker's name; the router
instance's name, "router" for the single router; "haproxy"), host (inventory hostname), gpus ("0,1,2,3"), numa_node.
gpus and numa_node are left out where they are unknown (routers, HAProxy; a worker spanning nodes).
The result depends only on the input, in its order: workers first, then routers, then the HAProxy of each host in
the order of the balancers mapping.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

WORKER_ROLES = ("prefill", "decode")
WILDCARDS = ("", "0.0.0.0", "::", "[::]")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
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


def _endpoint(spec, where, keys, addresses):
    """(address, port, metrics path) where Prometheus scrapes this listener.

    keys: (address key, port key) of a spec without metrics_url, then the flag that holds the bind address.
    """
    address_key, port_key, bind_key = keys
    url = spec.get("metrics_url")
    if url:
        parts = urlsplit(str(url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise MonitoringError(f"{where}: metrics_url {url!r} is not an http URL")
        try:
            port = parts.port
        except ValueError:
            port = None
        reach, port, path = parts.hostname, _port(port, where, "metrics_url port"), parts.path or "/metrics"
    else:
        reach = spec.get(address_key)
        port, path = _port(spec.get(port_key), where, port_key), "/metrics"
    bind = str((spec.get("flags") or {}).get(bind_key) or "")
    host = str(spec.get("host") or "")
    if reach in WILDCARDS or reach is None or (reach in LOOPBACK and bind in WILDCARDS[1:]):
        reach = (addresses or {}).get(host) or spec.get("advertise_address") or host
        if reach in WILDCARDS or reach in LOOPBACK:
            raise MonitoringError(
                f"{where}: listens on all addresses but no address of {host} to scrape it at; "
                f"set sglang_advertise_address of {host}"
            )
    return str(reach), port, path


def _group(target, path, labels):
    group = {"targets": [target], "labels": labels}
    if path != "/metrics":
        labels["__metrics_path__"] = path
    return group


def worker_group(spec, cluster, index=0, addresses=None):
    """The target group of one worker spec."""
    if not isinstance(spec, dict):
        raise MonitoringError(f"sglang_worker_units[{index}] must be a mapping (unit spec), got {spec!r}")
    where = f"worker {spec.get('unit') or spec.get('name') or index}"
    role = _need(spec, "role", where)
    if role not in WORKER_ROLES:
        raise MonitoringError(f"{where}: role {role!r} is not one of {', '.join(WORKER_ROLES)}")
    name, host = str(_need(spec, "name", where)), str(_need(spec, "host", where))
    if not spec.get("metrics_url") and spec.get("advertise_address") in (*WILDCARDS, None):
        raise MonitoringError(
            f"{where}: advertise_address {spec.get('advertise_address')!r} cannot be scraped; "
            f"set sglang_advertise_address of {host}"
        )
    reach, port, path = _endpoint(spec, where, ("advertise_address", "port", "host"), addresses)
    labels = {"cluster": cluster, "role": role, "instance": name, "host": host}
    gpus = _gpus(spec.get("gpus"), where)
    if gpus is not None:
        labels["gpus"] = gpus
    if spec.get("numa_node") not in (None, ""):
        labels["numa_node"] = str(spec["numa_node"])
    return _group(address(reach, port), path, labels)


def router_group(spec, cluster, index=0, addresses=None):
    """The target group of one router spec (its Prometheus listener)."""
    if not isinstance(spec, dict):
        raise MonitoringError(f"sglang_router_unit [{index}] must be a mapping (unit spec), got {spec!r}")
    unit = str(spec.get("unit") or "sglang-router")
    where = f"router {unit}"
    host = str(_need(spec, "host", where))
    reach, port, path = _endpoint(spec, where, ("prometheus_address", "prometheus_port", "prometheus-host"), addresses)
    instance = spec.get("name") or re.sub(r"^sglang-", "", unit)
    labels = {"cluster": cluster, "role": "router", "instance": str(instance), "host": host}
    return _group(address(reach, port), path, labels)


# The labels of a router host's HAProxy target (its exporter serves the whole host's backend of routers).
LB_ROLE = LB_INSTANCE = "haproxy"


def lb_group(host, spec, cluster, addresses=None):
    """The target group of one router host's HAProxy exporter (SPEC: its sglang_router_lb fact, router/lb.py)."""
    where = f"HAProxy on {host}"
    if not isinstance(spec, dict):
        raise MonitoringError(f"{where}: sglang_router_lb must be a mapping (router/lb.py haproxy_spec), got {spec!r}")
    if not spec.get("metrics_url"):
        raise MonitoringError(f"{where}: sglang_router_lb has no metrics_url")
    # metrics_url says loopback where the exporter binds all addresses (lb.haproxy_spec: metrics_bind, its stats_host):
    # scraped at the host's address then, as a router whose flags.prometheus-host is a wildcard.
    bound = {**spec, "host": host, "flags": {"bind": spec.get("metrics_bind")}}
    reach, port, path = _endpoint(bound, where, (None, None, "bind"), addresses)
    labels = {"cluster": cluster, "role": LB_ROLE, "instance": LB_INSTANCE, "host": str(host)}
    return _group(address(reach, port), path, labels)


def scrape_targets(workers, routers, cluster, addresses=None, balancers=None):
    """Prometheus file_sd target groups for the workers, routers and load balancers (see the module docstring)."""
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
    if addresses is not None and not isinstance(addresses, dict):
        raise MonitoringError("addresses must be a mapping of inventory host -> address")
    groups = [worker_group(w, cluster, i, addresses) for i, w in enumerate(workers)]
    groups += [router_group(r, cluster, i, addresses) for i, r in enumerate(routers)]
    if balancers is None:
        balancers = {}
    if not isinstance(balancers, dict):
        raise MonitoringError("balancers must be a mapping of router host -> its sglang_router_lb (or none)")
    # none, or {} where the fact is not set at all (the role's default): that host runs no HAProxy
    groups += [lb_group(host, spec, cluster, addresses) for host, spec in balancers.items() if spec not in (None, {})]
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
