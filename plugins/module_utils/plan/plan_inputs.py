# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What a host's variables become before its plan: the one place of these derivations.

The preflight's host_plan (plugins/action/host_plan.py), the router's plan (plugins/action/router_plan.py) and the
deps role's own checks (plugins/action/deps_plan.py) call them with the task's variables on the controller.
They were Jinja in roles/sglang/vars/main.yml: Ansible compiles every template anew each time it renders it, in a
worker forked for each host, and at 256 hosts the inputs of one host's plan cost more than the look at the host.

Every function takes V, the host's variables: a mapping whose values are templated (the action templates each one
when it is read); a variable that is not defined is not in it.
"""

from __future__ import annotations

import os

from ansible_collections.disagg.sglang.plugins.module_utils.deps import deps_rules, venvs
from ansible_collections.disagg.sglang.plugins.module_utils.model import source
from ansible_collections.disagg.sglang.plugins.module_utils.plan import (
    compat_rules,
    plan,
    readiness_rules,
    router_rules,
    variables,
)
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf

# setting of the plan (plan.host_plan's and router_plan.router_plan's `settings`) -> the variable it is, as it is
SETTINGS = {
    "served_model_name": "sglang_served_model_name",
    "host": "sglang_bind_host",
    "venvs_dir": "sglang_venvs_dir",
    "engine_compatible": "sglang_engine_compatible_versions",
    "server_module": "sglang_server_module",
    "numactl_path": "sglang_numactl_path",
    "unit_prefix": "sglang_unit_prefix",
    "user": "sglang_user",
    "group": "sglang_group",
    "env_dir": "sglang_env_dir",
    "state_dir": "sglang_state_dir",
    "read_write_paths": "sglang_read_write_paths",
    "device_policy": "sglang_gpu_device_policy",
    "device_allow": "sglang_gpu_device_allow",
    "restart_sec": "sglang_restart_sec",
    "start_limit_burst": "sglang_start_limit_burst",
    "start_limit_interval": "sglang_start_limit_interval",
    "health_timeout": "sglang_health_timeout",
    "health_poll": "sglang_health_poll",
    "stop_timeout": "sglang_stop_timeout",
    "drain_timeout": "sglang_rolling_drain_timeout",
    "health_check_timeout": "sglang_health_check_timeout",
    "guard_enabled": "sglang_guard_enabled",
    "guard_bound": "sglang_guard_silence_bound",
    "guard_probe_timeout": "sglang_guard_probe_timeout",
    "stall_timeout": "sglang_stall_timeout",
}
SECRETS = ("sglang_hf_token", "sglang_hub_token", "sglang_router_api_key", "sglang_worker_api_key")
# the variables the account rule looks at beyond the settings (plan.settings_problems)
USER_VARS = (
    "sglang_unit_dir",
    "sglang_gpu_groups",
    "sglang_deps_wheelhouse",
    "sglang_model_source",
    "sglang_models_dir",
)
WORKER_ROLES = plan.WORKER_ROLES
# the venvs' package lists, their Python and the wheelhouse: shared defaults (roles/sglang), which the deps role builds
LISTS = (
    "sglang_deps_python",
    "sglang_deps_packages",
    "sglang_deps_packages_nodeps",
    "sglang_deps_router_impl_packages",
    "sglang_deps_router_packages",
    "sglang_deps_wheelhouse",
)


def colocated(groups):
    """Whether one host serves every role (prefill, decode, router). A group of more than one host is not colocated;
    the hosts are made unique only where every group is that short."""
    lists = [list((groups or {}).get(g) or []) for g in (*WORKER_ROLES, "router")]
    return all(len(hosts) <= 1 for hosts in lists) and len({host for hosts in lists for host in hosts}) == 1


def worker_roles(v, group_names):
    """{role: {instances, extra_flags, extra_env}} of the worker roles whose group this host is in."""
    return {
        role: {
            "instances": v.get(f"sglang_{role}_instances"),
            "extra_flags": v.get(f"sglang_{role}_extra_flags"),
            "extra_env": v.get(f"sglang_{role}_extra_env"),
        }
        for role in WORKER_ROLES
        if role in group_names
    }


def staged(v):
    """The model source of the host when it stages one (a good sglang_model_source), else None: the directory is
    sglang_model_path, managed outside."""
    src = v.get("sglang_model_source")
    return src if src and not source.problems(src) else None


def model(v):
    """{path, revision}: the directory the workers load and its revision. With a model source it is the staged
    directory <sglang_models_dir>/<name>-<revision> (source.staged_dir), planned here once; without one,
    sglang_model_path, whose revision the collection does not know (None)."""
    src = staged(v)
    if src is None:
        return {"path": v.get("sglang_model_path"), "revision": None}
    return {"path": source.staged_dir(v.get("sglang_models_dir"), src), "revision": src["revision"]}


def settings(v, is_colocated, venv_paths):
    """What every unit of a host shares. VENV_PATHS: this run's venvs (venvs.venvs), {} before they are named."""
    bind = v.get("sglang_bind_host")
    found_model = model(v)
    found = {
        "model_path": found_model["path"],
        "model_revision": found_model["revision"],
        "dist_init_host": "127.0.0.1" if bind == "0.0.0.0" else bind,
        "advertise_address": "127.0.0.1" if is_colocated else v.get("sglang_advertise_address"),
        "venv": venv_paths.get("engine", ""),
        "router_venv": venv_paths.get("router", ""),
        "engine": venv_paths.get("engine_pin"),
        # the NIXL the host's engine venv pins ("nixl VERSION"): what its workers run, judged with the router's version
        # by the router's plan (compat_rules)
        "nixl": engine_nixl(v),
        "worker_api_key_set": len(str(v.get("sglang_worker_api_key", ""))) > 0,
    }
    found.update({key: v.get(name) for key, name in SETTINGS.items()})
    # the engine's own settings every worker gets in its environment (sglang_flags.ENGINE_ENV)
    found["engine_env"] = {env: v[name] for env, name in sf.ENGINE_ENV.items() if v.get(name) is not None}
    return found


def engine_nixl(v):
    """ "nixl VERSION" of the NIXL a host's engine venv pins (sglang_deps_packages_nodeps, else sglang_deps_packages),
    or "nixl (not pinned with ==)"; a list that is not one of strings is named by the deps checks."""
    lists = (v.get("sglang_deps_packages_nodeps"), v.get("sglang_deps_packages"))
    return compat_rules.pinned("nixl", [p for li in lists if isinstance(li, list) for p in li if isinstance(p, str)])


def secrets(v):
    """The secrets as strings: the rules check them (single line) and a unit only learns whether it gets one."""
    return {name: str(v.get(name, "")) for name in SECRETS}


def user_vars(v):
    """The variables beyond the settings that the account rule (and the model source's) looks at."""
    return {name: v.get(name, "") if name == "sglang_deps_wheelhouse" else v.get(name) for name in USER_VARS}


def profile_file(name, inventory_dir, shipped_dir):
    """{path, problems}: the first existing file sglang_profile names, or a message naming where it looked."""
    candidates = plan.profile_candidates(name, inventory_dir, shipped_dir)
    for path in candidates:
        if os.path.isfile(path):
            return {"path": path, "problems": []}
    names = os.listdir(shipped_dir) if os.path.isdir(shipped_dir) else []
    shipped = sorted(f[:-4] for f in names if f.endswith(".yml"))
    return {
        "path": None,
        "problems": [
            f"sglang_profile '{name}' is not a shipped profile nor a file of the inventory (looked for "
            f"{', '.join(candidates)}); choose one of {', '.join(shipped)}, put {name}.yml into the inventory's "
            "profiles/ directory, or give the path of a profile file"
        ],
    }


def table_problems(v, role, names=None):
    """ROLE's defined variables among NAMES (default: all of ROLE's) against the collection's variable table."""
    names = variables.names(role) if names is None else names
    return variables.variable_problems(role, {n: v[n] for n in names if n in v})


def deps_problems(v, group_names):
    """The dependency checks of a host, in order, each only where the one before found nothing (the later ones read
    what the earlier ones check): the deps role's variables against the variable table, the package lists, the
    variables no longer read."""
    # the deps role's own variables, and the package lists (shared defaults: the internal role's rows of the table)
    problems = table_problems(v, "sglang_deps") + table_problems(v, "sglang", LISTS)
    if problems:
        return problems
    packages = v.get("sglang_deps_packages")
    router_packages = v.get("sglang_deps_router_packages")
    workers = any(role in group_names for role in WORKER_ROLES)
    problems = deps_rules.deps_problems(packages, v.get("sglang_deps_packages_nodeps"), v.get("sglang_deps_wheelhouse"),
                                        router_packages, engine=workers, router="router" in group_names)  # fmt: skip
    if not problems and workers:
        problems = venvs.engine_problems(v.get("sglang_server_module"), packages)
    if "router" in group_names:
        problems = problems + router_rules.router_packages_problems(router_packages, v.get("sglang_router_impl"))
    return problems or variables.removed_problems({n: v[n] for n in variables.REMOVED if n in v})


def venv_paths(v):
    """This run's venvs of a host, each named by its package set (venvs.venvs): sglang_deps_venv_paths. Also
    router_verify: the verification's arguments for the router venv (rf.router_verify_args; [] for a router the
    collection does not run, which the router host's dependency checks refuse first)."""
    impl = v.get("sglang_router_impl")
    paths = venvs.venvs(
        {
            "dir": v.get("sglang_venvs_dir"),
            "packages": v.get("sglang_deps_packages"),
            "nodeps": v.get("sglang_deps_packages_nodeps"),
            "router_packages": v.get("sglang_deps_router_packages"),
            "python": v.get("sglang_deps_python"),
            "wheelhouse": v.get("sglang_deps_wheelhouse"),
            "module": v.get("sglang_server_module"),
        }
    )
    paths["router_verify"] = rf.router_verify_args(impl) if isinstance(impl, str) and impl in rf.ROUTER_IMPLS else []
    return paths


def host_look(v, roles, venv_paths, read_topology):
    """The options of host_look for this host: the absolute paths the units rely on (the model directory only where
    workers run), the unit records, the bind address where workers bind, this run's engine python and, on a worker
    host, the guard's files (_sglang_guard_files), and the topology and the host readiness where READ_TOPOLOGY (a
    worker host in site.yml's preflight)."""
    engine = venv_paths.get("engine")
    bind = v.get("sglang_bind_host")
    # a staged model is checked after its staging step (it may not be there yet); one managed outside, here
    outside = v.get("sglang_model_path") if roles and not v.get("sglang_model_source") else None
    paths = {
        "sglang_model_path": outside,
        "sglang_deps_wheelhouse": v.get("sglang_deps_wheelhouse", ""),
        "sglang_read_write_paths": v.get("sglang_read_write_paths"),
    }
    topology = {
        "sysfs_root": v.get("sglang_topology_sysfs_root"),
        "nvidia_smi_path": v.get("sglang_topology_nvidia_smi_path") or None,
        "nvml_venv": engine,
    }
    return {
        "paths": plan.host_paths(paths),
        "record_dir": v.get("sglang_record_dir"),
        "bind": [bind] if roles and isinstance(bind, str) else [],
        # the engine's python (where flags are checked); on a worker host the guard's files (guard.yml removes them only
        # where some exist)
        "exists": ([f"{engine}/bin/python"] if engine is not None else [])
        + (sorted(p for p in (v.get("_sglang_guard_files") or {}).values() if isinstance(p, str)) if roles else []),
        "model": outside,
        "topology": topology if read_topology and roles else None,
        # the host's readiness (IOMMU, ACS, BAR1, module options, ...), read with the topology, under the same root
        "readiness": (
            {"root": topology["sysfs_root"], "nvidia_smi_path": topology["nvidia_smi_path"]}
            if read_topology and roles
            else None
        ),
    }


def host_plan(v, context, venv_paths, profile):
    """The input of plan.host_plan without what the look reads. CONTEXT: {host, group_names, colocated, topology
    (the gpu_topology fact a public role's topology step set, else None)}. PROFILE: {path, content} (the action's
    read_profile)."""
    roles = worker_roles(v, context["group_names"])
    return {
        "host": context["host"],
        "roles": roles,
        "settings": settings(v, context["colocated"], venv_paths),
        "secrets": secrets(v),
        "topology": context.get("topology"),
        "variables": user_vars(v),
        "conflicting_units": v.get("sglang_conflicting_units"),
        "strict": v.get("sglang_topology_strict"),
        "kv_p2p_policy": v.get("sglang_kv_p2p_policy"),
        "readiness_policies": {cls: v.get(var) for cls, var in readiness_rules.POLICY_VARS.items() if var in v},
        "readiness_apply": v.get(readiness_rules.APPLY_VAR) or [],
        "profile": profile.get("content") or {},
        "profile_name": profile.get("path") or v.get("sglang_profile"),
    }
