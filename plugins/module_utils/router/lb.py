# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""The load balancer in front of several routers: HAProxy's configuration as a plan, from the router
instances, rendered as is by roles/sglang_router/templates/haproxy.cfg.j2 (nothing is decided in the template).

One frontend on the public address, one backend with a server per router, each checked at its readiness route:
- SMG 1.13 serves /liveness, /readiness and /health on its main port and, with --health-check-port, also on a
  dedicated probe listener that the request runtime cannot starve; /readiness answers 503 ("draining") from the
  moment its graceful shutdown begins (SIGTERM) while it keeps serving for its grace period
  (smg-project/smg model_gateway/src/health.rs, ProbeState::readiness_response). Where a health port is set, the check
  goes there.
- sglang-router 0.3.2 serves /liveness, /readiness and /health on its router port only (no health port flag: see
  /work/shared/reference/sglang-router-0.3.2-launch_router-help.txt and the routes in its sglang_router_rs binary);
  /readiness answers 503 while it lacks a healthy prefill and decode, as the single-router wait already uses
  (units/units.py router_unit health_url).

Detection: HAProxy marks a server down after FALL consecutive failed checks spaced INTER apart, so a router killed
just after a good check is out after FALL x INTER (connection refused at once); a router that hangs adds the check's
own timeout to the last check: FALL x INTER + TIMEOUT_CHECK. With 500 ms, 3 and 500 ms: 1.5 s refused, 2.0 s hung.
It is back after RISE good checks: 2 x 500 ms = 1 s after it is ready.

The runtime socket (`stats socket ... level admin`) is what community.general.haproxy drains and enables servers
through; the stats frontend serves HAProxy's built-in Prometheus exporter (Debian 12's haproxy 2.6.12 is built with
it: `haproxy -vv` says "Built with the Prometheus exporter as a service").

Every router host runs HAProxy over every router instance of the deployment (plan(): one backend, the same servers
on each host), so one router per host on two hosts still leaves a second router to send to while one rolls. Each
server is named <inventory_hostname>-<instance name> (server_name()), unique over the deployment: the name the roll's
community.general.haproxy calls address (roles/sglang_router/tasks/roll_one.yml).
"""

import re

IMPLS = ("sglang_router", "smg")
# The readiness route of each router program; the port is the health port where one is set (SMG only).
HEALTH_PATH = {"sglang_router": "/readiness", "smg": "/readiness"}
HEALTH_PORT_FLAG = {"sglang_router": None, "smg": "--health-check-port"}

DEFAULTS = {
    "inter_ms": 500,
    "fall": 3,
    "rise": 2,
    "timeout_check_ms": 500,
    "timeout_connect_ms": 1000,
    # A generation holds its connection for minutes (streamed or not): the client and server timeouts bound a stuck
    # request, not a slow one.
    "timeout_client_s": 3600,
    "timeout_server_s": 3600,
    "socket": "/run/haproxy/admin.sock",
    "backend": "sglang_routers",
    "frontend": "sglang_public",
    "stats_path": "/metrics",
}


# sglang 0.5.23's PD path cannot serve parallel sampling (n > 1): every sample is sent with the first bootstrap room
# while the routers send one room per sample, so the samples never get their KV and the decode answers 500 only when
# its KV wait ends, after each of the router's attempts (sglang/srt/managers/io_struct.py _normalize_bootstrap_params).
# HAProxy refuses such a request at once, before any router: an "n" key of 2 or more in the JSON body (the OpenAI
# routes' n, /generate's sampling_params.n). A key inside a JSON string is escaped (\"n\") and never matches. Only
# the buffered start of the body is read (tune.bufsize, 16 kB): an "n" past it is not seen.
# (a double quote outside quotes is escaped with a backslash in HAProxy's configuration: section 2.2 of its manual)
N_ABOVE_1 = r"\"n\"[[:space:]]*:[[:space:]]*0*([2-9]|[1-9][0-9]+)"
REFUSED_N = (
    '{"object":"error","type":"BadRequestError","code":400,"message":"n > 1 (parallel sampling) is not served by '
    'prefill-decode disaggregation (sglang 0.5.23): send n requests with n = 1"}'
)
REFUSE_N_LINE = (
    f"http-request return status 400 content-type application/json string '{REFUSED_N}' "
    f"if {{ method POST }} {{ req.body -m reg {N_ABOVE_1} }}"
)


# HAProxy takes letters, digits and - _ . : in a proxy or server name (haproxy 2.6 configuration.txt, section 2.4
# "proxy and server names": "invalid character" otherwise); anything else becomes -.
NAME_REFUSED = re.compile(r"[^A-Za-z0-9_.:-]")


def server_name(inventory_host, instance):
    """The backend server name of router instance INSTANCE of router host INVENTORY_HOST: unique over the deployment
    (the inventory's host names are), in the characters HAProxy accepts."""
    return NAME_REFUSED.sub("-", f"{inventory_host}-{instance}")


def detection_ms(inter_ms, fall, timeout_check_ms):
    """(refused, hung): how long after its last good check a dead router is still in the backend."""
    return fall * inter_ms, fall * inter_ms + timeout_check_ms


def problems(routers, listen):
    """Messages for router instances and a public listener the load balancer cannot front, each saying what to
    change. routers: [{name, host, port, health_port or None, impl}]; listen: {host, port, stats_host, stats_port}."""
    out = []
    if not routers:
        return ["the load balancer needs at least one router instance (sglang_router_instances)"]
    names = {}
    addresses = {}
    lb_ports = {listen.get("port"): "public port", listen.get("stats_port"): "metrics port"}
    for router in routers:
        name = router.get("server") or router.get("name")
        impl = router.get("impl")
        where = f"router {router.get('name')} on {router.get('inventory_host') or router.get('host')}"
        if name in names:
            out.append(f"two router instances are named {name}: give each its own name")
        names[name] = router
        if impl not in IMPLS:
            out.append(f"{where}: impl {impl!r} is none of {', '.join(IMPLS)}")
            continue
        if router.get("health_port") is not None and HEALTH_PORT_FLAG[impl] is None:
            out.append(f"{where}: {impl} has no health port (only smg's {HEALTH_PORT_FLAG['smg']}): drop health_port")
        for key in ("port", "health_port"):
            port = router.get(key)
            if port is None:
                continue
            address = (router.get("host"), port)
            if address in addresses:
                out.append(f"{where}: {key} {port} is taken by {addresses[address]} on the same host")
            addresses[address] = f"router {router.get('name')}'s {key}"
            # HAProxy runs on every router host and binds its ports there.
            if port in lb_ports:
                out.append(f"{where}: {key} {port} is the load balancer's {lb_ports[port]}: give the router another")
    return out


def server(router, settings):
    """The backend's server line of one router, checked at its readiness route on its health port where it has
    one."""
    check_port = router.get("health_port")
    name = router.get("server") or router["name"]
    words = [f"server {name} {router['host']}:{router['port']}", "check"]
    if check_port is not None:
        words.append(f"port {check_port}")
    words += [f"inter {settings['inter_ms']}", f"fall {settings['fall']}", f"rise {settings['rise']}"]
    return {
        "name": name,
        # the router unit behind it and its host (the roll restarts that unit there)
        "unit": router.get("unit"),
        "inventory_host": router.get("inventory_host"),
        "address": f"{router['host']}:{router['port']}",
        "check_port": router["port"] if check_port is None else check_port,
        "check_path": HEALTH_PATH[router["impl"]],
        "line": " ".join(words),
    }


def haproxy_spec(routers, listen, **overrides):
    """The HAProxy configuration for the router instances: {sections: [{header, lines}], servers, backend,
    frontend, socket, metrics_url, metrics_bind, url, detection_ms: {refused, hung}}. Call problems() first: this
    assumes them none.

    listen: {host, port, stats_host, stats_port}; overrides: any key of DEFAULTS (inter_ms, fall, rise, ...).
    Every router of a backend has one readiness route (HEALTH_PATH is the same for both programs), so the backend
    carries one http-check and the servers differ only in address and check port."""
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
    s = {**DEFAULTS, **overrides}
    servers = [server(router, s) for router in routers]
    paths = sorted({srv["check_path"] for srv in servers})
    if len(paths) != 1:
        raise ValueError(f"routers of one backend answer readiness at different paths: {paths}")
    refused, hung = detection_ms(s["inter_ms"], s["fall"], s["timeout_check_ms"])
    sections = haproxy_sections(s, listen, paths[0], [srv["line"] for srv in servers])
    return {
        "sections": sections,
        "servers": servers,
        "backend": s["backend"],
        "frontend": s["frontend"],
        "socket": s["socket"],
        "metrics_url": f"http://{_local(listen['stats_host'])}:{listen['stats_port']}{s['stats_path']}",
        # the exporter's bind address: a wildcard one (metrics_url then says loopback) is scraped at the host's address
        # (monitoring/monitoring.py lb_group, as a router's flags.prometheus-host)
        "metrics_bind": listen["stats_host"],
        # the clients' address: what the run's smoke request goes through
        "url": f"http://{_local(listen['host'])}:{listen['port']}",
        "detection_ms": {"refused": refused, "hung": hung},
    }


def haproxy_sections(s, listen, check_path, server_lines):
    """The sections of haproxy.cfg ({header, lines}): global (the admin socket), defaults (timeouts, retries on a
    refused connection), the clients' frontend, the backend of the routers (leastconn, one readiness check at
    CHECK_PATH, SERVER_LINES) and the exporter's frontend. S: DEFAULTS with the overrides; LISTEN: as haproxy_spec's."""
    return [
        {
            "header": "global",
            "lines": [
                # community.general.haproxy drains and enables servers through this socket (level admin).
                f"stats socket {s['socket']} mode 660 level admin expose-fd listeners",
                "stats timeout 30s",
                "log /dev/log local0",
                # the distribution package's account, as its own haproxy.cfg: the workers drop root once bound
                "user haproxy",
                "group haproxy",
            ],
        },
        {
            "header": "defaults",
            "lines": [
                "mode http",
                "log global",
                "option httplog",
                "option dontlognull",
                f"timeout connect {s['timeout_connect_ms']}ms",
                f"timeout client {s['timeout_client_s']}s",
                f"timeout server {s['timeout_server_s']}s",
                f"timeout check {s['timeout_check_ms']}ms",
                # A request a router never answered goes to another router (layer-7 retries, on every attempt
                # another server: redispatch 1): one whose connection was refused (a dead router), and one whose
                # connection closed before the first answer byte (a router killed while it held the request).
                # HAProxy keeps the request to replay it, so the body is read whole first (http-buffer-request); a
                # request larger than one buffer (tune.bufsize, 16 kB) is never retried. An answer already begun
                # (a stream) is never replayed: the client sees it cut.
                "retries 2",
                "option redispatch 1",
                "option http-buffer-request",
                "retry-on conn-failure empty-response",
            ],
        },
        {
            "header": f"frontend {s['frontend']}",
            "lines": [f"bind {listen['host']}:{listen['port']}", REFUSE_N_LINE, f"default_backend {s['backend']}"],
        },
        {
            "header": f"backend {s['backend']}",
            "lines": [
                # Generations are long and uneven: the router with the fewest open requests takes the next one.
                "balance leastconn",
                "option httpchk",
                f"http-check send meth GET uri {check_path}",
                "http-check expect status 200",
                *server_lines,
            ],
        },
        {
            "header": "frontend stats",
            "lines": [
                f"bind {listen['stats_host']}:{listen['stats_port']}",
                f"http-request use-service prometheus-exporter if {{ path {s['stats_path']} }}",
            ],
        },
    ]


def _local(host):
    """Where a listener on HOST is reached from its own host (a wildcard bind: loopback), as units.py's."""
    return "127.0.0.1" if host in (None, "", "0.0.0.0", "::") else host


def plan(by_host, listen, **overrides):
    """The load balancer of one router host: {spec: haproxy_spec or None, problems: [message]}.

    BY_HOST: {router host: [its router instances as HAProxy servers]} for every router host of the deployment, in
    inventory order (each host's router plan: router_plan.router_plans lb_routers; empty where the host declares no
    sglang_router_instances); LISTEN: this host's {host, port, stats_host, stats_port}. No host with instances: no
    load balancer (the single router on sglang_router_port, as before), spec None. Some hosts with and some without:
    refused, HAProxy would bind the public port where a router listens on it."""
    hosts = list(by_host or {})
    declared = [h for h in hosts if by_host[h]]
    if not declared:
        return {"spec": None, "problems": []}
    bare = [h for h in hosts if not by_host[h]]
    if bare:
        return {
            "spec": None,
            "problems": [
                f"sglang_router_instances is set on {', '.join(declared)} but not on {', '.join(bare)}: HAProxy fronts "
                "every router of the deployment on every router host, on sglang_router_port, where a single router "
                "would listen: declare sglang_router_instances on every router host, or on none"
            ],
        }
    routers = [r for h in hosts for r in by_host[h]]
    found = problems(routers, listen)
    if found:
        return {"spec": None, "problems": found}
    return {"spec": haproxy_spec(routers, listen, **overrides), "problems": []}
