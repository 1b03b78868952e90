# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Unit specs: what one systemd unit of the collection runs, from placement, profile and inventory.

A spec is a plain dict that ``roles/sglang/templates/sglang.service.j2`` renders, and the template only renders:
the command line, the environment, the service account and the hardening (hardening(), chosen by the kind of
unit: a GPU worker or a plain service) all come from the spec. Worker and router units use the same spec shape.
"""

import hashlib
import json

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import format_cpulist
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf


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


# The state directory holds HOME and every cache the services write (ProtectSystem=strict leaves it the one
# writable path); GPU workers add the JIT compilers' caches, which torch inductor would otherwise keep in the
# private /tmp and rebuild after every restart.
def state_env(state_dir, gpu):
    env = {"HOME": state_dir, "XDG_CACHE_HOME": f"{state_dir}/cache", "HF_HOME": f"{state_dir}/cache/huggingface"}
    if gpu:
        env.update(
            {
                "TRITON_CACHE_DIR": f"{state_dir}/cache/triton",
                "TORCHINDUCTOR_CACHE_DIR": f"{state_dir}/cache/torchinductor",
                "FLASHINFER_WORKSPACE_BASE": state_dir,
                "CUDA_CACHE_PATH": f"{state_dir}/cache/nv/ComputeCache",
            }
        )
    return env


# Hardening of every unit, by kind: the settings in order, each with the reason it has its value where the
# reason is not obvious. The template renders them; the KV transport probe passes the same settings to its
# transient unit (systemd-run -p), so it proves what the workers get.
COMMON_HARDENING = [
    ("NoNewPrivileges", "yes"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("ProtectProc", "invisible"),
    ("RestrictNamespaces", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("LockPersonality", "yes"),
    ("SystemCallArchitectures", "native"),
    ("SystemCallErrorNumber", "EPERM"),
    ("KeyringMode", "private"),
    ("RemoveIPC", "yes"),
    ("UMask", "0077"),
]
GPU_HARDENING_NOTES = [
    "GPU worker. Left off or weakened, each for a reason:",
    "- PrivateDevices=: CUDA needs /dev/nvidia*, NIXL/UCX over RDMA /dev/infiniband/*. Instead the device",
    "  cgroup allows only those (DevicePolicy/DeviceAllow below) besides the standard pseudo devices.",
    "  nvidia-uvm must be loaded and its nodes made at boot (the driver's udev rule or nvidia-persistenced):",
    "  the setuid nvidia-modprobe cannot do it for an unprivileged service with NoNewPrivileges.",
    "- MemoryDenyWriteExecute=: the JIT compilers (triton, torch inductor, flashinfer, DeepGEMM, CUDA's PTX",
    "  JIT) map memory writable and executable.",
    "- PrivateIPC=, PrivateUsers=: NIXL/UCX shared memory (SysV/POSIX) and CUDA IPC work between the prefill",
    "  and decode units of one host; separate IPC or user namespaces would cut them apart.",
    "- ProcSubset=pid: torch, psutil, numactl and the NVIDIA driver read /proc/meminfo, /proc/cpuinfo and",
    "  /proc/driver/nvidia.",
    "- PrivateNetwork=, IPAddressDeny=: workers serve the router and move KV cache between hosts.",
    "- RestrictAddressFamilies= keeps AF_NETLINK: UCX, NCCL and rdma-core enumerate interfaces and RDMA",
    "  devices over netlink (RDMA verbs themselves go through /dev/infiniband, not sockets).",
    "- SystemCallFilter= (@system-service without @privileged) keeps @resources (numactl's set_mempolicy",
    "  and mbind, sched_setaffinity of sglang and NCCL) and adds pidfd_getfd (@debug), with which torch",
    "  shares CUDA memory between processes (expandable segments); @ipc stays (UCX CMA's process_vm_readv).",
    "- LimitMEMLOCK=infinity: RDMA memory registration pins pages; without CAP_IPC_LOCK only this allows it.",
]
SERVICE_HARDENING_NOTES = [
    "Router (a network service that needs no GPU): no devices, its own user and IPC namespaces, only its",
    "process's part of /proc, no writable-executable memory, no privileged or scheduling/NUMA system calls.",
    "Left off: PrivateNetwork= and IPAddressDeny= (it serves clients and dials the workers on other hosts).",
]


def hardening(kind, settings):
    """[(key, value)] of the unit's hardening: the common settings, then those of its kind ('gpu' or 'service').

    settings: {state_dir, read_write_paths, device_policy, device_allow}.
    """
    if kind not in ("gpu", "service"):
        raise sf.FlagError(f"hardening kind must be gpu or service, got {kind!r}")
    writable = " ".join(sf.systemd_quote(p) for p in [settings["state_dir"], *(settings.get("read_write_paths") or [])])
    entries = [*COMMON_HARDENING]
    entries.insert(entries.index(("ProtectHome", "yes")), ("ReadWritePaths", writable))
    if kind == "gpu":
        entries += [
            ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK"),
            ("DevicePolicy", settings.get("device_policy", "closed")),
            *(("DeviceAllow", entry) for entry in settings.get("device_allow") or []),
            ("SystemCallFilter", "@system-service pidfd_getfd"),
            ("SystemCallFilter", "~@privileged"),
            ("LimitMEMLOCK", "infinity"),
        ]
    else:
        entries += [
            ("PrivateDevices", "yes"),
            ("PrivateUsers", "yes"),
            ("PrivateIPC", "yes"),
            ("ProcSubset", "pid"),
            ("MemoryDenyWriteExecute", "yes"),
            ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
            ("SystemCallFilter", "@system-service"),
            ("SystemCallFilter", "~@privileged @resources"),
        ]
    return [list(entry) for entry in entries]


def secret_launcher(exec_argv, env_flags):
    """python -m MODULE -> python -c LAUNCHER for flags whose values are secrets in the environment.

    env_flags: {flag: VARIABLE}. The launcher takes each VARIABLE out of the environment and puts --flag=value
    into sys.argv inside the process (one token, so a value that starts with a dash stays the flag's value),
    then runs MODULE as __main__: the kernel's copy of the command line (ps, /proc/PID/cmdline) never holds
    the secret.
    """
    if not env_flags:
        return list(exec_argv)
    at = exec_argv.index("-m")
    pairs = sorted(env_flags.items())
    launcher = (
        f'import os, runpy, sys; sys.argv[1:1] = [f + "=" + os.environ.pop(v) for f, v in {pairs!r}]; '
        f'runpy.run_module("{exec_argv[at + 1]}", run_name="__main__", alter_sys=True)'
    )
    return [*exec_argv[:at], "-c", launcher, *exec_argv[at + 2 :]]


def _service(kind, settings):
    """The unit settings every kind shares: account, environment file, restart and start limits, hardening."""
    return {
        "user": settings.get("user", "sglang"),
        "group": settings.get("group", "sglang"),
        "environment_file": f"{settings.get('env_dir', '/etc/sglang')}/{{unit}}.env",
        "restart_sec": settings.get("restart_sec", 10),
        "start_limit_burst": settings.get("start_limit_burst", 5),
        "start_limit_interval": settings.get("start_limit_interval", 600),
        "timeout_start_sec": settings.get("health_timeout", 1800),
        "timeout_stop_sec": settings.get("stop_timeout", 60),
        "hardening_kind": kind,
        "hardening_notes": GPU_HARDENING_NOTES if kind == "gpu" else SERVICE_HARDENING_NOTES,
        "hardening": hardening(
            kind,
            {
                "state_dir": settings.get("state_dir", "/var/lib/sglang"),
                "read_write_paths": settings.get("read_write_paths") or [],
                "device_policy": settings.get("device_policy", "closed"),
                "device_allow": settings.get("device_allow") or [],
            },
        ),
    }


def systemd_text(spec):
    """What the unit template writes of SPEC's command line and environment, quoted for systemd: {exec: the
    ExecStart= tokens of spec["exec"], lines: each argument line of spec["lines"] (sf.systemd_quote), environment:
    each NAME=value of spec["environment"] for an Environment= line (sf.systemd_env_quote), by name as Jinja's
    dictsort orders them (case-insensitive)}. Derived from those keys, so restart_key leaves it out."""
    return {
        "exec": " ".join(sf.systemd_quote(t) for t in spec["exec"]),
        "lines": [" ".join(sf.systemd_quote(t) for t in line) for line in spec["lines"]],
        "environment": [sf.systemd_env_quote(f"{key}={value}")
                        for key, value in sorted(spec["environment"].items(), key=lambda kv: kv[0].lower())],
    }  # fmt: skip


def _finish(spec, kind, settings):
    """Fill in what every spec carries: the environment over the state dir's, the service settings, and the command
    line and environment as the unit file writes them (systemd_text)."""
    service = _service(kind, settings)
    service["environment_file"] = service["environment_file"].format(unit=spec["unit"])
    spec["environment"] = {**state_env(settings.get("state_dir", "/var/lib/sglang"), kind == "gpu"), **spec["env"]}
    spec.update(service)
    spec["systemd"] = systemd_text(spec)
    return spec


def worker_units(instances, placement, profile, role, settings):
    """Specs of the worker units of one role on one host.

    instances: the role's instance list from the inventory.
    placement: the pd_placement result for this host ([{name, gpus, numa_node, cpus, warnings}]).
    settings:  {model_path, served_model_name, host, dist_init_host, advertise_address, inventory_host, venv,
                server_module, numactl_path, extra_flags, extra_env, unit_prefix} and the service settings
                (user, group, env_dir, state_dir, read_write_paths, device_policy, device_allow, restart_sec,
                start_limit_burst, start_limit_interval, health_timeout, stop_timeout, hf_token_set).
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
        unit = f"{settings.get('unit_prefix', 'sglang-')}{name}"
        advertise = settings.get("advertise_address") or _local(settings.get("host"))
        secret_env = {"HF_TOKEN": "sglang_hf_token"} if settings.get("hf_token_set") else {}
        env_flags = {}
        if settings.get("worker_api_key_set"):
            # sglang's --api-key is a secret: from the environment file into argv inside the process.
            secret_env["SGLANG_WORKER_API_KEY"] = "sglang_worker_api_key"
            env_flags["--api-key"] = "SGLANG_WORKER_API_KEY"
        python = f"{settings['venv']}/bin/python"
        spec = {
            "unit": unit,
            "name": name,
            "role": role,
            "host": settings.get("inventory_host"),
            "description": f"SGLang {role} worker {name} (GPUs {env['CUDA_VISIBLE_DEVICES']})",
            "after": ["network-online.target", "nvidia-persistenced.service"],
            "python": f"{settings['venv']}/bin/python",
            "module": settings["server_module"],
            # the engine it runs ("dist version", venvs.engine_of): part of its KV contract
            "engine": settings.get("engine"),
            # the model directory it loads and that directory's revision (the model source's commit; None where the
            # directory is managed outside): prefill and decode must load the same one
            "model_path": settings["model_path"],
            "model_revision": settings.get("model_revision"),
            "exec": secret_launcher([*binding, python, "-m", settings["server_module"]], env_flags),
            "lines": lines,
            "flags": flags,
            "env": env,
            "secret_env": secret_env,
            "port": instance["port"],
            "bootstrap_port": instance.get("bootstrap_port") if role == "prefill" else None,
            "url": f"http://{advertise}:{instance['port']}",
            "health_url": f"http://{_local(settings.get('host'))}:{instance['port']}/health",
            "metrics_url": f"http://{advertise}:{instance['port']}/metrics",
            "gpus": slot["gpus"],
            "numa_node": slot.get("numa_node"),
            "cpus": cpu_list(slot.get("cpus") or []),
            "warnings": slot.get("warnings") or [],
        }
        specs.append(_finish(spec, "gpu", settings))
    return specs


# What every prefill and decode instance must agree on: SGLang refuses a KV handoff between workers that
# differ in page size or KV cache dtype at connect time; the transfer backend and the speculative
# algorithm (its draft input travels with the KV) must match on both sides too.
KV_CONTRACT = ("page-size", "kv-cache-dtype", "disaggregation-transfer-backend", "speculative-algorithm")


def kv_contract(spec):
    """The part of a worker unit spec that its PD peers must share: the KV flags and the engine ("dist version")."""
    values = {key: spec["flags"].get(key) for key in KV_CONTRACT}
    values["engine"] = spec.get("engine")
    return {
        "unit": spec["unit"],
        "role": spec["role"],
        "values": {k: None if v is None else str(v) for k, v in values.items()},
    }


def router_unit(prefills, decodes, settings):
    """Spec of the router unit, built from the worker specs (their ``url`` and ``bootstrap_port``).

    settings: {venv, unit, name (the router instance's), flags (router flags mapping), env, api_key_set,
    hf_token_set, inventory_host} and the service settings of worker_units.
    """
    lines = rf.router_lines(prefills, decodes, settings["flags"])
    impl = settings.get("impl", "sglang_router")
    module = rf.router_impl(impl)["module"]
    venv = settings.get("router_venv") or settings["venv"]  # the router's own venv (venvs.py)
    flags = settings["flags"]
    secret_env = {}
    env_flags = {}
    if settings.get("api_key_set"):
        # The router's --api-key is a secret: it comes from the environment file, into argv inside the process.
        secret_env["SGLANG_ROUTER_API_KEY"] = "sglang_router_api_key"
        env_flags["--api-key"] = "SGLANG_ROUTER_API_KEY"
    if settings.get("hf_token_set") and not str(flags.get("tokenizer-path") or "").startswith("/"):
        secret_env["HF_TOKEN"] = "sglang_hf_token"
    unit = settings.get("unit", "sglang-router")
    name = settings.get("name") or "router"
    spec = {
        "unit": unit,
        # the router instance (sglang_router_instances; "router" for the one instance of the older variables)
        "name": name,
        "role": "router",
        "host": settings.get("inventory_host"),
        "description": f"SGLang router{'' if name == 'router' else ' ' + name}: {len(prefills)} prefill, "
        f"{len(decodes)} decode",
        "after": ["network-online.target"],
        "python": f"{venv}/bin/python",
        "impl": impl,
        "module": module,
        "exec": secret_launcher([f"{venv}/bin/python", "-m", module], env_flags),
        "lines": lines,
        "flags": dict(flags),
        "env": dict(settings.get("env") or {}),
        "secret_env": secret_env,
        "port": flags.get("port"),
        "url": f"http://{_local(flags.get('host'))}:{flags.get('port')}",
        "health_url": f"http://{_local(flags.get('host'))}:{flags.get('port')}/readiness",
        "metrics_url": f"http://{_local(flags.get('prometheus-host'))}:{flags.get('prometheus-port')}/metrics",
        "expected_workers": len(prefills) + len(decodes),
        "workers": [w["unit"] for w in [*prefills, *decodes] if "unit" in w],
        "worker_urls": [w["url"] for w in [*prefills, *decodes]],
    }
    spec = _finish(spec, "service", settings)
    spec["restart_key"] = restart_key(spec)
    return spec


# What a running router can take through its worker API without a restart: its worker list (the --prefill and
# --decode lines) and what is derived from it. Everything else of its unit needs a restart.
ROUTER_LIST_KEYS = ("description", "expected_workers", "workers", "worker_urls", "restart_key")
ROUTER_LIST_FLAGS = ("--prefill", "--decode")


def restart_key(spec):
    """A digest of everything in a router spec but its worker list: two specs with the same key differ only in
    workers, which the running router takes through its worker API (roles/sglang_router/tasks/main.yml)."""
    # systemd: the quoted form of exec, lines and environment (systemd_text), which the key holds already
    kept = {k: v for k, v in spec.items() if k not in ROUTER_LIST_KEYS and k != "systemd"}
    kept["lines"] = [line for line in spec.get("lines") or [] if not line or line[0] not in ROUTER_LIST_FLAGS]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


# The record of a deployed unit (roles/sglang/tasks/units.yml writes it beside the unit, with a backup as the unit
# file has; the preflight reads every record of a host): what the next run, the removal of an instance, the bench
# and monitoring roles need to know of it, as data.
RECORD_KEYS = ("unit", "name", "role", "host", "url", "health_url", "metrics_url", "python", "module", "impl",
               "engine", "kv_contract", "port", "model_path", "model_revision",
               "bootstrap_port", "gpus", "environment_file", "expected_workers", "restart_key",
               "worker_urls")  # fmt: skip


def record(spec, unit_dir):
    """The record of SPEC as deployed: its RECORD_KEYS, where its unit file lies and its argv_key."""
    kept = {k: spec[k] for k in RECORD_KEYS if k in spec}
    if spec.get("role") in sf.WORKER_ROLES:
        kept["kv_contract"] = kv_contract(spec)["values"]
    return {**kept, "unit_file": f"{unit_dir}/{spec['unit']}.service", "argv_key": argv_key(spec)}


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flatten(item)]
    return [value]


def checked_argv(spec):
    """The command line of SPEC as the flag check parses it (disagg.sglang.cli_check): the tokens of its lines."""
    return [str(t) for t in _flatten(spec.get("lines") or []) if t is not None]


def argv_key(spec):
    """A digest of what the flag check of SPEC asks: its python (the venv, named by the digest of its package set),
    its module and checked_argv. A run checks a unit's command line before it writes the unit, so a spec whose key
    is its record's was accepted by this same parser when the record was written: plan.cli_check_groups does not
    ask again."""
    asked = [str(spec.get("python")), str(spec.get("module")), checked_argv(spec)]
    return hashlib.sha256(json.dumps(asked).encode()).hexdigest()[:16]
