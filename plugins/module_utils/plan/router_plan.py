# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The router units of one router host, planned from the worker specs of the whole deployment.

    router_plans(workers, inputs)  on each router host: the router instances (sglang_router_instances,
                                   router_rules), the tested router/engine/NIXL combination (compat_rules), one
                                   router_plan per instance, and HAProxy's servers where instances are declared
                                   (lb_routers) -> {units, problems, warnings, lb_routers}
    router_plan(workers, inputs)   one router unit: the shared settings' rules (plan.settings_problems), the
                                   router's own rules (router_rules, router_flag_rules) and its spec

The worker hosts' plan is plan.py (host_plan); the disagg.sglang.router_plan action derives these inputs
(plugins/action/router_plan.py).
"""

from ansible_collections.disagg.sglang.plugins.module_utils.plan import (
    compat_rules,
    router_flag_rules,
    router_rules,
    rules,
)
from ansible_collections.disagg.sglang.plugins.module_utils.plan.plan import (
    allowed_owners,
    managed_units,
    settings_problems,
)
from ansible_collections.disagg.sglang.plugins.module_utils.router import lb as lb_plan
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.module_utils.units import units


def router_plan(worker_specs, inputs):
    """Plan the router unit of one host from the planned worker specs of the whole deployment.

    inputs: {host, impl (sglang_router_impl), settings (as host_plan's, for the service settings), flag_values
    ({variable: value} of the variables of the impl's flags, router_flags.ROUTER_IMPLS), extra_flags (as given),
    env, unit, name (the router instance's, sglang_router_instances), router_units (every router unit of the host:
    each may hold its ports), ports ({variable: value} of its listeners),
    secrets, variables, conflicting_units, host_paths, listeners (as host_plan's)}. The router dials each worker at
    the spec's url (its advertise address).
    Returns {unit: spec or None, problems: [message]}.
    """
    host = inputs["host"]
    prefills = [s for s in worker_specs if s["role"] == "prefill"]
    decodes = [s for s in worker_specs if s["role"] == "decode"]
    local_ports = [
        int(s[key])
        for s in worker_specs
        if s.get("host") == host
        for key in ("port", "bootstrap_port")
        if s.get(key) is not None
    ] + [
        int(str(s["flags"]["dist-init-addr"]).rsplit(":", 1)[1])
        for s in worker_specs
        if s.get("host") == host and s["flags"].get("dist-init-addr")
    ]
    problems = settings_problems(inputs)
    problems += router_rules.router_problems(host, prefills, decodes, inputs["ports"], sorted(local_ports))
    problems += router_flag_rules.router_flag_problems(inputs.get("extra_flags"))
    problems += router_flag_rules.smg_shutdown_problems(
        inputs.get("impl"), inputs.get("flag_values"), inputs["settings"].get("stop_timeout")
    )
    problems += rules.flags_shape_problems(inputs.get("extra_flags"), "sglang_router_extra_flags")
    problems += rules.env_problems(inputs.get("env"), "sglang_router_extra_env")
    problems += rules.privileged_port_problems(host, inputs["ports"], inputs["settings"].get("user"))
    managed = managed_units(inputs, [s for s in worker_specs if s.get("host") == host])
    problems += rules.conflicting_units_problems(inputs.get("conflicting_units"), managed)
    if not problems:
        problems += rules.listener_problems(
            host,
            {int(v): k for k, v in inputs["ports"].items()},
            inputs.get("listeners"),
            allowed_owners(inputs, managed),
        )
    if problems:
        return {"unit": None, "problems": problems}
    try:
        settings = {
            **inputs["settings"],
            "inventory_host": host,
            "unit": inputs.get("unit", "sglang-router"),
            "name": inputs.get("name", router_rules.DEFAULT_NAME),
            "impl": inputs.get("impl", "sglang_router"),
            "flags": rf.router_flags(
                inputs.get("flag_values"), inputs.get("extra_flags"), inputs.get("impl", "sglang_router")
            ),
            "env": inputs.get("env") or {},
            "api_key_set": bool((inputs.get("secrets") or {}).get("sglang_router_api_key")),
            "hf_token_set": bool((inputs.get("secrets") or {}).get("sglang_hf_token")),
        }
        return {"unit": units.router_unit(prefills, decodes, settings), "problems": []}
    except sf.FlagError as exc:
        return {"unit": None, "problems": [str(exc)]}


def router_plans(worker_specs, inputs):
    """Plan the router units of one host: one per router instance (sglang_router_instances; router_rules), each from
    the same worker specs, so every router routes to the same workers.

    inputs: router_plan's, with instances (sglang_router_instances as given), ports ({sglang_router_port,
    sglang_router_prometheus_port}: the listeners of the one instance an empty list stands for) and versions
    ({router: "dist version" as this host pins it, allow: sglang_router_allow_untested_combination}; each worker's
    engine and NIXL are its spec's, as its own host pins them: worker_combinations), whose combinations must be
    tested ones (compat_rules). Each instance's
    router_plan gets its unit (<prefix><name>), its name and its listeners, and may own any router unit of the host.
    Returns {units: [spec], problems: [message], warnings: [message]} (units empty when problems is not)."""
    host = inputs["host"]
    prefix = inputs["settings"].get("unit_prefix") or "sglang-"
    problems = router_rules.router_instance_problems(inputs.get("instances"), prefix)
    if problems:
        return {"units": [], "problems": problems}
    versions = inputs.get("versions")
    warnings = []
    if isinstance(versions, dict):  # the tested (router, engine, NIXL) combinations (compat_rules.TESTED)
        found = (
            versions["router"],
            worker_combinations(worker_specs, versions.get("nixl")),
            None,
            versions.get("allow"),
        )
        problems += compat_rules.combination_problems(*found)
        warnings += compat_rules.untested_warnings(*found)
    planned = router_rules.router_instances(inputs.get("instances"), inputs["ports"])
    names = [f"{prefix}{i['name']}" for i in planned]
    problems += router_rules.router_unit_clash_problems(
        host, names, [s["unit"] for s in worker_specs if s.get("host") == host]
    )
    # Declared instances sit behind HAProxy (module_utils/router/lb.py): each binds sglang_router_instance_host, where
    # HAProxy on every router host dials it; the public address is HAProxy's. No list: the single router binds
    # sglang_router_host as before.
    lb = inputs.get("lb") or {}
    behind = bool(inputs.get("instances"))
    if behind:
        problems += router_rules.lb_problems(host, planned, lb)
    specs = []
    for instance in planned:
        one = router_plan(
            worker_specs,
            {
                **inputs,
                "unit": f"{prefix}{instance['name']}",
                "name": instance["name"],
                "ports": instance["ports"],
                "router_units": names,
                "flag_values": {
                    **(inputs.get("flag_values") or {}),
                    **{var: instance[key] for key, var in router_rules.DEFAULT_PORT_VARS.items()},
                    **({"sglang_router_host": lb.get("instance_host")} if behind else {}),
                },
            },
        )
        problems += [p for p in one["problems"] if p not in problems]
        if one["unit"]:
            specs.append(one["unit"])
    specs = [] if problems else specs
    servers = lb_routers(specs) if behind else []
    return {"units": specs, "problems": problems, "warnings": warnings, "lb_routers": servers}


def worker_combinations(worker_specs, nixl=None):
    """The (engine, NIXL) pair of each worker spec that names its engine, as its worker host pins them (the spec's
    "engine" and "nixl", host_plan's); NIXL stands in for a spec that does not name its NIXL."""
    unpinned = f"nixl {compat_rules.UNPINNED}"
    return sorted({(str(s["engine"]), str(s.get("nixl") or nixl or unpinned)) for s in worker_specs if s.get("engine")})


def lb_routers(specs):
    """The router units of a host as HAProxy's servers (lb.haproxy_spec's routers): each named
    <inventory_hostname>-<instance> (lb.server_name), dialled at the address it binds (sglang_router_instance_host)
    and checked at its readiness route."""
    return [
        {
            "server": lb_plan.server_name(spec["host"], spec["name"]),
            "inventory_host": spec["host"],
            "unit": spec["unit"],
            "name": spec["name"],
            "host": spec["flags"]["host"],
            "port": spec["port"],
            "health_port": None,
            "impl": spec["impl"],
        }
        for spec in specs
    ]
