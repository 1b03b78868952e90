# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Rules of a deployment over several hosts: worker API keys, advertise addresses, reachability and the retire check.

Pure functions returning messages (each names the variable and the fix). The socket probes whose outcomes they word
run on the hosts (host/address_probes.py); tests/unit/plan/test_cluster_rules.py holds the tables.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.host.address_probes import REACHABLE


def worker_api_key_problems(worker_key, router_key, hosts=None):
    """The workers' key must be the router's: sglang-router 0.3.2 presents its --api-key to the workers for its
    own calls (registration, health) and passes each client's Authorization header through to them. HOSTS: where
    WORKER_KEY is set (named in the message; None names none)."""
    worker_key = "" if worker_key is None else str(worker_key)
    router_key = "" if router_key is None else str(router_key)
    if not worker_key or worker_key == router_key:
        return []
    where = f" (on {', '.join(hosts)})" if hosts else ""
    if not router_key:
        return [
            f"sglang_worker_api_key is set{where} but sglang_router_api_key is empty: the router could not register "
            "the workers (they refuse it without the key). Set sglang_router_api_key (ansible-vault) to the same value"
        ]
    return [
        f"sglang_worker_api_key differs from sglang_router_api_key{where}: sglang-router 0.3.2 passes each client's "
        "Authorization header through to the workers, so every request would be refused. Give both the same "
        "vaulted value (or leave sglang_worker_api_key empty)"
    ]


def deployment_api_key_problems(worker_keys, router_key):
    """The key of every host that uses sglang_worker_api_key against the router host's sglang_router_api_key, each
    read where it is used: WORKER_KEYS {host: sglang_worker_api_key} of the router host (its router registers the
    workers with it) and of each worker host (its workers refuse a request without it). One message per distinct key
    that is not the router's, naming its hosts."""
    by_key = {}
    for host, key in (worker_keys or {}).items():
        by_key.setdefault("" if key is None else str(key), []).append(str(host))
    return [m for key, hosts in by_key.items() for m in worker_api_key_problems(key, router_key, sorted(hosts))]


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


def retire_problems(retired, totals, retire_roles):
    """Refuses a run that would retire every instance of a role (the deployment would stop serving) unless
    sglang_retire_roles names the role. retired: the records to retire, of every host; totals: planned instances per
    role of the deployment."""
    problems = []
    for role in ("prefill", "decode"):
        going = [r for r in retired if r.get("role") == role]
        if going and not totals.get(role) and role not in (retire_roles or []):
            names = ", ".join(f"{r.get('unit')}@{r.get('host')}" for r in going)
            problems.append(
                f"the inventory plans no {role} instance, and the run would retire every deployed one ({names}): "
                f"the deployment would stop serving. Give sglang_{role}_instances an instance again, or set "
                f"sglang_retire_roles: [{role}] to remove them all on purpose"
            )
    return problems
