# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Rules of a deployment over several hosts: worker API keys, advertise addresses and reachability.

Pure functions returning messages (each names the variable and the fix), plus the two socket probes the
address_check module runs on a host (`bind_outcome`, `connect_outcome`), with the socket calls injectable so
the tables in tests/unit/test_cluster_rules.py run without a network.
"""

import errno
import socket


def worker_api_key_problems(worker_key, router_key):
    """The workers' key must be the router's: sglang-router 0.3.2 presents its --api-key to the workers for its
    own calls (registration, health) and passes each client's Authorization header through to them."""
    worker_key = "" if worker_key is None else str(worker_key)
    router_key = "" if router_key is None else str(router_key)
    if not worker_key or worker_key == router_key:
        return []
    if not router_key:
        return [
            "sglang_worker_api_key is set but sglang_router_api_key is empty: the router could not register the "
            "workers (they refuse it without the key). Set sglang_router_api_key (ansible-vault) to the same value"
        ]
    return [
        "sglang_worker_api_key differs from sglang_router_api_key: sglang-router 0.3.2 passes each client's "
        "Authorization header through to the workers, so every request would be refused. Give both the same "
        "vaulted value (or leave sglang_worker_api_key empty)"
    ]


# Outcomes of a TCP connect from the router host to a worker's address. Before the first run nothing listens,
# so "refused" (the host answered) counts as reachable; a timeout or no route means a firewall or a wrong address.
REACHABLE = ("open", "refused")


def connect_outcome(host, port, timeout=3.0, connect=None):
    """'open', 'refused', 'timeout', 'unreachable' or 'unresolved: ...' for a TCP connect to host:port."""
    if connect is None:
        connect = socket.create_connection
    try:
        conn = connect((host, int(port)), timeout)
    except socket.gaierror as exc:
        return f"unresolved: {exc.strerror or exc}"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
            return "unreachable"
        return f"unreachable: {exc.strerror or exc}"
    conn.close()
    return "open"


def bind_outcome(address, bind=None):
    """'ok' when a listener can bind ADDRESS on this host (it is one of its own addresses), else why not."""
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"unresolved: {exc.strerror or exc}"
    family, _unused, _unused2, _unused3, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        (bind or sock.bind)((sockaddr[0], 0))
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            return f"not an address of this host ({sockaddr[0]})"
        return f"cannot bind: {exc.strerror or exc}"
    finally:
        sock.close()
    return "ok"


def bind_problems(host, outcomes):
    """outcomes: {address: bind_outcome} on worker host HOST."""
    return [
        f"sglang_advertise_address {address} of {host}: {outcome}. The workers bind to it and the router dials it: "
        "set sglang_advertise_address (host_vars) to an address of that host that the router host can reach"
        for address, outcome in sorted(outcomes.items())
        if outcome != "ok"
    ]


def connect_problems(router_host, outcomes):
    """outcomes: [{unit, host, url, address, port, outcome}] probed from ROUTER_HOST."""
    return [
        f"{o['unit']} on {o['host']}: the router host {router_host} cannot reach {o['address']}:{o['port']} "
        f"({o['outcome']}). Open that port between the hosts, or set sglang_advertise_address of {o['host']} "
        "to an address the router host reaches"
        for o in outcomes
        if o["outcome"] not in REACHABLE
    ]


def connect_targets(worker_specs):
    """[{unit, host, address, port}] the router dials: each worker spec's url."""
    targets = []
    for spec in worker_specs:
        hostport = str(spec["url"]).split("://", 1)[-1].rstrip("/")
        address, _unused, port = hostport.rpartition(":")
        targets.append({"unit": spec["unit"], "host": spec.get("host"), "address": address.strip("[]"),
                        "port": int(port)})  # fmt: skip
    return targets


def deployment_bind_problems(worker_specs, bind_outcomes):
    """The bind problems of every worker host, read once for the deployment: WORKER_SPECS the planned worker specs
    (each names its host and binds to its flags' host), BIND_OUTCOMES {host: {address: outcome}} as each worker host
    found them (plugins/modules/host_look.py). An address not wildcard nor loopback that its host did not try is
    named too, never passed."""
    wanted = {}
    for spec in worker_specs or []:
        address = str((spec.get("flags") or {}).get("host") or "")
        if address and address not in UNCHECKED_BIND:
            wanted.setdefault(spec.get("host"), {}).setdefault(address, None)
    problems = []
    for host, addresses in wanted.items():
        found = (bind_outcomes or {}).get(host) or {}
        outcomes = {a: found.get(a) or "not checked on the host (its preflight look did not try it)" for a in addresses}
        problems += bind_problems(host, outcomes)
    return problems


# Addresses every host has: the bind check leaves them out.
UNCHECKED_BIND = ("0.0.0.0", "::", "127.0.0.1", "localhost")
