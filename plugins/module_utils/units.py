# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Unit specs: what one systemd unit of the collection runs, from placement, profile and inventory.

A spec is a plain dict that ``roles/sglang/templates/sglang.service.j2`` renders: the command line and
environment come from the spec only; the template adds the service account and the hardening, chosen by
the kind of unit (a GPU worker or a plain service). Worker and router units use the same spec shape.
"""

import re

from ansible_collections.disagg.sglang.plugins.module_utils import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.module_utils.gpu_topology import format_cpulist


def cpu_list(cpus):
    """[0, 1, 2, 5, 6] -> "0-2,5-6" (the kernel's cpulist format)."""
    return format_cpulist(int(c) for c in cpus)


def _local(host):
    """Address to probe a listener on from its own host."""
    return "127.0.0.1" if host in (None, "", "0.0.0.0", "::") else host


def _binding(numactl, slot):
    """numactl prefix for a placement slot: node binding when the node is known, else CPU binding."""
    if slot.get("numa_node") is not None:
        node = slot["numa_node"]
        return [numactl, f"--cpunodebind={node}", f"--membind={node}"]
    if slot.get("cpus"):
        return [numactl, f"--physcpubind={cpu_list(slot['cpus'])}"]
    return []


_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def _port_ok(value):
    try:
        return 1 <= int(value) <= 65535
    except (TypeError, ValueError):
        return False


def instance_problems(instances, role):
    """What is wrong with a role's instance list, one message per problem, each naming the entry and the fix."""
    var = f"sglang_{role}_instances"
    problems = []
    if not isinstance(instances, list):
        return [f"{var} must be a list of instances, got {type(instances).__name__}"]
    names = []
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict):
            problems.append(f"{var}[{index}] must be a mapping (name, tp, port, ...), got {instance!r}")
            continue
        name = instance.get("name")
        where = f"{var}[{index}] ({name})" if name else f"{var}[{index}]"
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(
                f"{where}: name must be lowercase letters, digits, - or _ (it becomes sglang-<name>.service)"
            )
        names.append(name)
        tp, gpus = instance.get("tp"), instance.get("gpus")
        if tp is None and gpus is None:
            problems.append(f"{where}: give tp (the topology role picks the GPUs) or gpus (explicit indices)")
        if gpus is not None and (not isinstance(gpus, list) or len(set(map(str, gpus))) != len(gpus)):
            problems.append(f"{where}: gpus must be a list of distinct GPU indices, got {gpus!r}")
        elif tp is not None and gpus is not None and int(tp) != len(gpus):
            problems.append(
                f"{where}: tp {tp} but {len(gpus)} gpus listed {gpus}: make tp the number of gpus, "
                "or give only one of them"
            )
        for key in ("port", "dist_init_port") + (("bootstrap_port",) if role == "prefill" else ()):
            if key not in instance:
                problems.append(f"{where}: {key} is missing (a port in 1-65535)")
            elif not _port_ok(instance[key]):
                problems.append(f"{where}: {key} {instance[key]!r} is not a port in 1-65535")
        if "bootstrap_port" in instance and role != "prefill" and not _port_ok(instance["bootstrap_port"]):
            problems.append(f"{where}: bootstrap_port {instance['bootstrap_port']!r} is not a port in 1-65535")
    duplicates = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if duplicates:
        problems.append(
            f"{var} has duplicate names ({', '.join(duplicates)}): each instance becomes unit "
            "sglang-<name>.service, so names must differ"
        )
    return problems


def worker_units(instances, placement, profile, role, settings):
    """Specs of the worker units of one role on one host.

    instances: the role's instance list from the inventory.
    placement: the pd_placement result for this host ([{name, gpus, numa_node, cpus, warnings}]).
    settings:  {model_path, served_model_name, host, dist_init_host, venv, server_module,
                numactl_path, extra_flags, extra_env, unit_prefix}.
    """
    slots = {slot["name"]: slot for slot in placement}
    specs = []
    for instance in instances:
        name = instance["name"]
        if name not in slots:
            raise sf.FlagError(f"{role} instance {name} has no placement: the topology role did not place it")
        slot = slots[name]
        instance = dict(instance, tp=instance.get("tp") or len(slot["gpus"]))  # noqa: PLW2901
        flags = sf.worker_flags(profile, role, instance, settings)
        lines = sf.render_lines(flags)
        binding = _binding(settings["numactl_path"], slot)
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in slot["gpus"])}
        if binding:
            # The unit owns NUMA binding; sglang 0.5.23 would otherwise re-bind every GPU subprocess
            # itself (sglang/srt/utils/numa_utils.py, get_numa_node_if_available).
            env["SGLANG_AUTO_NUMA_BIND"] = "0"
        env.update(sf.worker_env(profile, role, instance, settings))
        specs.append(
            {
                "unit": f"{settings.get('unit_prefix', 'sglang-')}{name}",
                "name": name,
                "role": role,
                "description": f"SGLang {role} worker {name} (GPUs {env['CUDA_VISIBLE_DEVICES']})",
                "exec": [*binding, f"{settings['venv']}/bin/python", "-m", settings["server_module"]],
                "lines": lines,
                "flags": flags,
                "env": env,
                "port": instance["port"],
                "health_url": f"http://{_local(settings.get('host'))}:{instance['port']}/health",
                "gpus": slot["gpus"],
                "numa_node": slot.get("numa_node"),
                "cpus": cpu_list(slot.get("cpus") or []),
                "warnings": slot.get("warnings") or [],
            }
        )
    return specs


# What every prefill and decode instance must agree on: SGLang refuses a KV handoff between workers that
# differ in page size or KV cache dtype at connect time; the transfer backend and the speculative
# algorithm (its draft input travels with the KV) must match on both sides too.
KV_CONTRACT = ("page-size", "kv-cache-dtype", "disaggregation-transfer-backend", "speculative-algorithm")


def kv_contract(spec):
    """The part of a worker unit spec that its PD peers must share."""
    values = {key: spec["flags"].get(key) for key in KV_CONTRACT}
    return {
        "unit": spec["unit"],
        "role": spec["role"],
        "values": {k: None if v is None else str(v) for k, v in values.items()},
    }


def kv_mismatches(contracts):
    """Messages for each KV_CONTRACT flag on which the given worker contracts disagree (empty: all agree)."""
    messages = []
    for key in KV_CONTRACT:
        seen = {}
        for contract in contracts:
            where = f"{contract['unit']}@{contract.get('host', '?')}"
            seen.setdefault(contract["values"].get(key), []).append(where)
        if len(seen) > 1:
            parts = "; ".join(
                f"{value if value is not None else 'unset'} on {', '.join(units)}" for value, units in seen.items()
            )
            messages.append(f"--{key} differs between PD workers: {parts}")
    return messages


def pd_workers(hosts_by_role, host_vars, colocated):
    """The router's view of the workers: [{role, host, name, url, bootstrap_port}].

    hosts_by_role: {"prefill": [host, ...], "decode": [...]} (the inventory groups).
    host_vars:     mapping host -> its variables (sglang_<role>_instances, sglang_advertise_address,
                   ansible_host). Workers are dialled on loopback when everything shares one host.
    """
    workers = []
    for role in sf.WORKER_ROLES:
        for host in hosts_by_role.get(role) or []:
            hvars = host_vars[host]
            address = (
                "127.0.0.1" if colocated else hvars.get("sglang_advertise_address") or hvars.get("ansible_host", host)
            )
            for instance in hvars.get(f"sglang_{role}_instances") or []:
                workers.append(
                    {
                        "role": role,
                        "host": host,
                        "name": instance["name"],
                        "url": f"http://{address}:{instance['port']}",
                        "bootstrap_port": instance.get("bootstrap_port"),
                    }
                )
    return workers


def router_unit(prefills, decodes, settings):
    """Spec of the router unit. settings: {venv, unit, flags (router flags mapping), env}."""
    lines = sf.router_lines(prefills, decodes, settings["flags"])
    flags = settings["flags"]
    return {
        "unit": settings.get("unit", "sglang-router"),
        "name": "router",
        "role": "router",
        "description": f"SGLang router: {len(prefills)} prefill, {len(decodes)} decode",
        "exec": [f"{settings['venv']}/bin/python", "-m", "sglang_router.launch_router"],
        "lines": lines,
        "env": dict(settings.get("env") or {}),
        "port": flags.get("port"),
        "health_url": f"http://{_local(flags.get('host'))}:{flags.get('port')}/readiness",
        "expected_workers": len(prefills) + len(decodes),
    }
