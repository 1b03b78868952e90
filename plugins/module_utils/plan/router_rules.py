# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The router's rules: its instances (sglang_router_instances), its inputs and listeners, and the router package.

The router instances of a router host: declared as the worker instances are (sglang_prefill_instances,
rules.instance_problems), a list per router host, each entry {name, port, prometheus_port}, each a unit of its own
(<sglang_unit_prefix><name>.service) from the one unit template, every one with the same worker list
(router_plan.router_plans). Empty (the default) is the single router of the older variables: one instance named
router (unit sglang-router) on sglang_router_port and sglang_router_prometheus_port, so an inventory without the list
plans exactly what it planned before.

Also here: router_problems (workers to route to, its own listeners), router_packages_problems (the router venv holds
the router sglang_router_impl names, and not the other one). The rules on the router's flags (sglang-router's and
SMG's tables) are router_flag_rules.py's; the tested router/engine/NIXL combinations compat_rules.py's.

Pure functions returning messages, each naming the variable and the fix; tests/unit/plan/test_router_rules.py holds
their table, tests/cases/bad_inventories.yml a row for each.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.deps.deps_rules import requirement_name
from ansible_collections.disagg.sglang.plugins.module_utils.plan.rules import NAME, port_ok
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf

VAR = "sglang_router_instances"
# The keys a router instance may have: its name (the unit's) and its two listeners.
ROUTER_INSTANCE_KEYS = ("name", "port", "prometheus_port")
# The name of the one instance the older variables describe (its unit is <prefix>router, as before the list).
DEFAULT_NAME = "router"
# The variables each listener of that one instance comes from.
DEFAULT_PORT_VARS = {"port": "sglang_router_port", "prometheus_port": "sglang_router_prometheus_port"}


def router_instances(instances, ports):
    """The router instances to plan: [{name, port, prometheus_port, ports: {where: port}}]. INSTANCES: the list as
    given (after router_instance_problems found nothing); PORTS: {sglang_router_port: value,
    sglang_router_prometheus_port: value}, the older variables, which make the one instance of an empty list.
    ports names each listener as a message should (the variable, or the list entry and its key)."""
    if not instances:
        one = {key: ports.get(var) for key, var in DEFAULT_PORT_VARS.items()}
        return [{"name": DEFAULT_NAME, **one, "ports": {var: ports.get(var) for var in DEFAULT_PORT_VARS.values()}}]
    return [
        {
            "name": i["name"],
            "port": i["port"],
            "prometheus_port": i["prometheus_port"],
            "ports": {f"{VAR}[{n}] ({i['name']}).{key}": i[key] for key in ("port", "prometheus_port")},
        }
        for n, i in enumerate(instances)
    ]


def router_instance_problems(instances, unit_prefix="sglang-"):
    """What is wrong with sglang_router_instances, one message per problem, each naming the entry and the fix."""
    if instances is None or instances == []:
        return []
    if not isinstance(instances, list):
        hint = ": put '- ' before each instance (a list of mappings)" if isinstance(instances, dict) else ""
        return [f"{VAR} must be a list of router instances (name, port, prometheus_port), got "
                f"{type(instances).__name__}{hint}"]  # fmt: skip
    problems = []
    names = []
    listeners = {}  # port -> [where]
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict):
            problems.append(f"{VAR}[{index}] must be a mapping (name, port, prometheus_port), got {instance!r}")
            continue
        name = instance.get("name")
        where = f"{VAR}[{index}] ({name})" if name else f"{VAR}[{index}]"
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(f"{where}: name must be lowercase letters, digits, - or _ (it becomes "
                            f"{unit_prefix}<name>.service), e.g. router-a")  # fmt: skip
        elif len(name) > 64:
            problems.append(f"{where}: name must be at most 64 characters (it becomes {unit_prefix}<name>.service)")
        else:
            names.append(name)
        unknown = sorted(str(k) for k in instance if k not in ROUTER_INSTANCE_KEYS)
        if unknown:
            problems.append(
                f"{where}: unknown key(s) {', '.join(unknown)}: a router instance takes "
                f"{', '.join(ROUTER_INSTANCE_KEYS)} (a misspelt key would be ignored; the other router settings are "
                "the sglang_router_* variables, the same for every instance)"
            )
        for key in ("port", "prometheus_port"):
            if key not in instance:
                problems.append(f"{where}: {key} is missing (a port in 1-65535)")
            elif not port_ok(instance[key]):
                problems.append(f"{where}: {key} {instance[key]!r} is not a port in 1-65535")
            else:
                listeners.setdefault(int(instance[key]), []).append(f"{where}.{key}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        problems.append(f"{VAR} names {', '.join(twice)} more than once: each instance is a unit of its own "
                        f"({unit_prefix}<name>.service), so each needs its own name")  # fmt: skip
    for port, wheres in sorted(listeners.items()):
        if len(wheres) > 1:
            problems.append(f"{' and '.join(wheres)} are all port {port}: every listener of the router instances of "
                            "a host needs a port of its own")  # fmt: skip
    return problems


def router_unit_clash_problems(host, router_units, worker_units):
    """A router instance whose unit is also a worker's unit on the same host (a worker instance named like it)."""
    clash = sorted(set(router_units) & set(worker_units))
    if not clash:
        return []
    return [
        f"{VAR} on {host}: {', '.join(clash)} is also a worker unit on that host (sglang_prefill_instances / "
        "sglang_decode_instances name an instance so): rename the router instance (e.g. router-a)"
    ]


# With sglang_router_instances, HAProxy (module_utils/router/lb.py) listens on every router host on the clients'
# address (sglang_router_host:sglang_router_port) and its exporter's (sglang_router_lb_stats_port), and dials every
# router instance of the deployment at its host's sglang_router_instance_host.
INSTANCE_HOST_VAR = "sglang_router_instance_host"
WILDCARDS = ("", "0.0.0.0", "::", "*")


def _loopback(address):
    return address in {"localhost", "::1"} or address.startswith("127.")


def lb_problems(host, instances, lb):
    """What keeps HAProxy from fronting the router instances of HOST, each naming the variable and the fix.
    INSTANCES: router_instances() of a non-empty list; LB: {instance_host (sglang_router_instance_host), router_hosts
    (the deployment's router hosts), public_port (sglang_router_port), stats_port (sglang_router_lb_stats_port)}."""
    problems = []
    address = str(lb.get("instance_host") if lb.get("instance_host") is not None else "").strip()
    others = [h for h in lb.get("router_hosts") or [] if h != host]
    if address in WILDCARDS:
        problems.append(
            f"{INSTANCE_HOST_VAR} is {lb.get('instance_host')!r} on {host}: HAProxy dials each router instance at "
            "this address, so it must be one address, not a wildcard: set an address of the host (127.0.0.1 with one "
            "router host, else one every router host reaches, e.g. its sglang_advertise_address), or leave it unset"
        )
    elif _loopback(address) and others:
        problems.append(
            f"{INSTANCE_HOST_VAR} is {address} on {host}, a loopback address, but HAProxy on the other router "
            f"host(s) {', '.join(others)} dials this host's router instances too: set an address of {host} they "
            "reach (its sglang_advertise_address, the default with several router hosts), or leave it unset"
        )
    public, stats = lb.get("public_port"), lb.get("stats_port")
    if public is not None and stats is not None and int(public) == int(stats):
        problems.append(
            f"sglang_router_lb_stats_port ({stats}) is sglang_router_port, where HAProxy serves the clients: give "
            "HAProxy's Prometheus exporter a port of its own"
        )
    taken = {"sglang_router_port": public, "sglang_router_lb_stats_port": stats}
    for instance in instances:
        for where, port in instance["ports"].items():
            for var, lb_port in taken.items():
                if lb_port is not None and port is not None and int(port) == int(lb_port):
                    what = "the clients' address" if var == "sglang_router_port" else "its Prometheus exporter"
                    problems.append(
                        f"{where} is port {port}, {var}, where HAProxy listens on every router host ({what}): give "
                        f"the router instance another port"
                    )
    return problems


def router_problems(host, prefills, decodes, ports, local_worker_ports):
    """The router's inputs: workers to route to, its own listeners.

    prefills/decodes: the planned worker specs; ports: {variable: value} of the router's listeners;
    local_worker_ports: the worker ports on the router's own host.
    """
    problems = []
    if not prefills or not decodes or any(p.get("bootstrap_port") is None for p in prefills):
        problems.append(
            f"The router found {len(prefills)} prefill and {len(decodes)} decode workers: put hosts in groups "
            "prefill and decode with sglang_prefill_instances / sglang_decode_instances, each prefill instance "
            "with its bootstrap_port"
        )
    bad = [var for var, value in ports.items() if not port_ok(value)]
    numbers = [int(v) for v in ports.values() if port_ok(v)]
    if bad or len(set(numbers)) != len(numbers):
        problems.append(
            " and ".join(f"{var} ({value})" for var, value in ports.items()) + " must be distinct ports in 1-65535"
        )
    if any(port_ok(value) and int(value) in local_worker_ports for value in ports.values()):
        problems.append(
            f"{' or '.join(f'{var} ({value})' for var, value in ports.items())} is also a worker port on {host} "
            f"({', '.join(str(p) for p in local_worker_ports)}): choose free ports"
        )
    return problems


def router_packages_problems(router_packages, impl):
    """The router's venv must hold the chosen router (sglang_router_impl) and no other: sglang-router 0.3.2 and smg
    both ship an `smg` console script, so one venv with both runs whichever was installed last."""
    if not isinstance(impl, str) or impl not in rf.ROUTER_IMPLS:
        return [f"sglang_router_impl ({impl!r}) is not a router this collection runs: one of "
                f"{', '.join(rf.ROUTER_IMPLS)}"]  # fmt: skip
    if not isinstance(router_packages, list):
        return []
    names = {requirement_name(p) for p in router_packages if isinstance(p, str)}
    want = rf.ROUTER_IMPLS[impl]["dist"]
    others = sorted(row["dist"] for name, row in rf.ROUTER_IMPLS.items() if name != impl and row["dist"] in names)
    problems = []
    if want not in names:
        problems.append(f"sglang_deps_router_packages ({', '.join(router_packages) or 'empty'}) does not install "
                        f"{want}, the router sglang_router_impl ({impl}) runs: list {want} pinned with ==, or leave "
                        "sglang_deps_router_packages unset (it follows sglang_deps_router_impl_packages)")  # fmt: skip
    if others:
        problems.append(f"sglang_deps_router_packages lists {' and '.join(others)} beside {want} (sglang_router_impl "
                        f"{impl}): the two routers both ship an `smg` command and are never installed together. "
                        f"Remove {' and '.join(others)}")  # fmt: skip
    return problems
