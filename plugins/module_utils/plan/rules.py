# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The rules on one host's own inputs: the settings its units share and its worker instances.

Belong here: what one host's inventory says of itself and can be judged from that host alone: the model path, the
health and drain waits, the service account and the paths the units use, secrets' shapes, environment and flag
mappings (and the flags the collection derives itself), the worker instance lists, the worker ports of the host,
privileged and already-used ports, sglang_conflicting_units, an empty role, a worker host without GPUs.

Do not belong here (each has its file, named for its concern):
  the router: its instances, inputs, listeners, package   plan/router_rules.py
  the router's flags (sglang-router's and SMG's tables)   plan/router_flag_rules.py
  the tested router/engine/NIXL combinations              plan/compat_rules.py
  the dependency lists                                    deps/deps_rules.py (the engine pin: deps/venvs.py)
  the model source and the model revision                 model/source.py, model/revision_rules.py
  across hosts (API keys, addresses, the retire check)    plan/cluster_rules.py
  the KV path and the KV contract                         plan/kv_rules.py
  the profile's flag values                               plan/profile_rules.py
  the host's readiness (IOMMU, ACS, BAR1, ...)            plan/readiness_rules.py
  each variable's own type and range                      plan/variables.yml (the variable table)
  the state of a host at run time (health, drain, stall)  units/ and the modules that act on it, not the preflight

Each function takes plain data (inventory values, a profile, unit specs) and returns a list of messages, empty
when the input is good. A message names the variable to change and how. The plan (plan.py) calls them in the
preflight play; each role shows the messages in one assert. tests/unit/plan/test_rules.py runs every row of
tests/cases/bad_inventories.yml through them.
"""

import re

# The rules' patterns.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# systemd accepts environment variable names of letters, digits and _ that do not start with a digit.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Trees the units cannot see: ProtectHome=yes hides /home, /root and /run/user; PrivateTmp=yes gives each unit
# its own empty /tmp and /var/tmp.
HIDDEN_TREES = re.compile(r"^/(home|root|run/user|tmp|var/tmp)(/|$)")
# useradd's default NAME_REGEX (Debian's adduser is stricter still): what sglang_user and the groups may be.
ACCOUNT_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# systemd unit names: letters, digits and :-_.\ (systemd's VALID_CHARS), at most 255 characters with .service.
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")
# A whole number as an inventory gives it: an int, or a string of digits (a templated value).
WHOLE = re.compile(r"^\s*[0-9]+\s*$")
# The keys an instance may have (sglang_<role>_instances[i]).
INSTANCE_KEYS = ("name", "tp", "gpus", "port", "bootstrap_port", "dist_init_port", "flags", "env")
# Environment the collection derives for each unit, or a secret with its own variable: {NAME: use instead}.
DERIVED_ENV = {
    "CUDA_VISIBLE_DEVICES": "the instance's tp or gpus (the placement sets the GPUs a worker sees)",
    "NVIDIA_VISIBLE_DEVICES": "the instance's tp or gpus (the placement sets the GPUs a worker sees)",
    "SGLANG_AUTO_NUMA_BIND": "the placement (the unit binds each worker to its NUMA node with numactl)",
    "HF_TOKEN": "sglang_hf_token (ansible-vault)",
    "HUGGING_FACE_HUB_TOKEN": "sglang_hf_token (ansible-vault)",
    "SGLANG_ROUTER_API_KEY": "sglang_router_api_key (ansible-vault)",
}
# Worker flags (beyond the identity flags of sglang_flags.IDENTITY_FLAGS) that would undo what the collection
# derives, or put a secret on the command line: {flag: use instead}.
DERIVED_WORKER_FLAGS = {
    "base-gpu-id": "the instance's tp or gpus (CUDA_VISIBLE_DEVICES of the unit starts at the placed GPU)",
    "gpu-id-step": "the instance's tp or gpus (the placement picks the GPUs)",
    "numa-node": "the placement (the unit binds each worker to its NUMA node with numactl)",
    "api-key": "sglang_worker_api_key (ansible-vault; the unit hands it to sglang as --api-key from its environment "
    "file, so it never stands on the command line, and the router presents it when it registers the workers)",
    "admin-api-key": "nothing on the command line (ps shows it to every user): the collection has no admin key",
    "config": "sglang_<role>_extra_flags (a --config file would set flags behind the plan's checks)",
    "nnodes": "one instance per host and role (multi-node instances are not planned by the collection)",
    "node-rank": "one instance per host and role (multi-node instances are not planned by the collection)",
}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
WORKER_PORT_KEYS = ("port", "bootstrap_port", "dist_init_port")


def whole(value):
    """An int (not a bool, not a float) or a string of digits."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and bool(WHOLE.match(value)))


def port_ok(value):
    return whole(value) and 1 <= int(value) <= 65535


def positive_int(value):
    return whole(value) and int(value) > 0


def kind_of(value):
    """What a value is, in YAML's words (Ansible hands over subclasses of str, list and dict)."""
    for kind, name in ((type(None), "null"), (bool, "a boolean"), (str, "a string"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


# --------------------------------------------------------------------------------------------------
# shared settings
# --------------------------------------------------------------------------------------------------


def model_path_problems(model_path):
    if not isinstance(model_path, str) or not model_path.startswith("/"):
        return [
            f"sglang_model_path is '{model_path if model_path is not None else ''}': set it in the inventory to the "
            "absolute path of the model directory on the serving hosts (e.g. /models/DeepSeek-V4-Flash)"
        ]
    return []


def health_wait_problems(timeout, poll):
    if positive_int(timeout) and positive_int(poll) and int(poll) <= int(timeout):
        return []
    return [
        f"sglang_health_timeout ({timeout}) and sglang_health_poll ({poll}) must be positive seconds, "
        "the poll no longer than the timeout"
    ]


# sglang 0.5.23's stop after SIGTERM (sglang/srt/managers/tokenizer_manager.py `sigterm_watchdog`): the watchdog sees
# the signal at its next 5 s tick, drains what is still in flight looking every 5 s, then sends ShutdownReq and waits
# up to _SCHEDULER_EXIT_TIMEOUT_SECS (15) for its schedulers before it kills them (kill_process_tree).
SIGTERM_WATCHDOG_TICK = 5
SCHEDULER_EXIT_GRACE = 15


def sigterm_stop_seconds(drain):
    """The longest sglang takes from SIGTERM to exit when what it still holds drains within DRAIN seconds: one
    watchdog tick to see the signal, the drain seen done at a tick (rounded up to the tick), then the schedulers'
    exit grace."""
    tick = SIGTERM_WATCHDOG_TICK
    return tick + -(-int(drain) // tick) * tick + SCHEDULER_EXIT_GRACE


def drain_timeout_problems(drain, stop):
    """The unit's stop timeout must cover sglang's own stop after the rolling drain wait: what is still in flight
    when the wait ends (the wait's length again at most, the rule's assumption) drains in sglang's SIGTERM drain,
    then sglang shuts its schedulers down for up to 15 s; systemd SIGKILLs at the stop timeout."""
    if drain is None or not (positive_int(drain) and positive_int(stop)):
        return []
    need = sigterm_stop_seconds(drain)
    if need < int(stop):
        return []
    return [
        f"sglang_rolling_drain_timeout ({drain}) leaves sglang_stop_timeout ({stop}) too short: after SIGTERM sglang "
        f"needs up to {need} s (a {SIGTERM_WATCHDOG_TICK} s watchdog tick, the drain of what is still in flight seen "
        f"at a {SIGTERM_WATCHDOG_TICK} s tick, {SCHEDULER_EXIT_GRACE} s for its schedulers to exit) and systemd kills "
        f"it at the stop timeout, in the middle of its shutdown; raise sglang_stop_timeout above {need} or lower the "
        "drain timeout"
    ]


def account_problems(user, group, state_dir, paths, gpu_groups=None):
    """The service account must be unprivileged, its names valid, and every path the units use visible to them.

    paths: {variable: path} the units read (model, venv) or write (state dir, extra writable paths).
    """
    problems = []
    for var, name in (("sglang_user", user), ("sglang_group", group)):
        if not isinstance(name, str) or not name or name in ("root", "0"):
            problems.append(f"{var} ({name}) must name an unprivileged account (not root)")
        elif not ACCOUNT_NAME.match(name):
            problems.append(
                f"{var} ({name!r}) is not a user or group name useradd accepts: lowercase letters, digits, _ and -, "
                "starting with a letter or _, at most 32 characters"
            )
    if isinstance(gpu_groups, list):
        bad = [g for g in gpu_groups if not isinstance(g, str) or not ACCOUNT_NAME.match(g)]
        if bad:
            problems.append(f"sglang_gpu_groups has {bad!r}: each entry must be a group name (e.g. video, render)")
    if not isinstance(state_dir, str) or not state_dir.startswith("/"):
        problems.append(f"sglang_state_dir ({state_dir}) must be an absolute path")
    problems += path_shape_problems({"sglang_state_dir": state_dir, **paths})
    return problems


def path_shape_problems(paths):
    """paths: {variable: path}. Each must be one absolute line, outside the trees the units cannot see."""
    problems = []
    for var, path in paths.items():
        if path in (None, ""):
            continue
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"{var} ({path!r}) must be an absolute path (starting with /)")
        elif CONTROL.search(path):
            problems.append(f"{var} ({path!r}) must not contain line breaks or control characters")
        elif HIDDEN_TREES.match(path):
            problems.append(
                f"{var} ({path}) lies under /home, /root, /run/user, /tmp or /var/tmp: the units run with "
                "ProtectHome=yes and PrivateTmp=yes and cannot see those trees. Move it (e.g. the model to /models, "
                "the venv to /opt/sglang/venv)"
            )
    return problems


def host_path_problems(host, found):
    """Paths the units rely on, as the preflight found them on the host.

    found: {variable: {path, exists, isdir}} (the stat of plan.yml; a path not looked at is left out).
    """
    problems = []
    for var, item in (found or {}).items():
        if not item.get("exists"):
            problems.append(
                f"{var} ({item.get('path')}) does not exist on {host}: create the directory there first, or point "
                f"{var} at one that exists (systemd would refuse to start the unit, or it would fail while loading)"
            )
        elif item.get("isdir") is False:
            problems.append(f"{var} ({item.get('path')}) on {host} is not a directory: point {var} at a directory")
    return problems


def secret_problems(secrets):
    """secrets: {variable: value}. An environment file holds one variable a line; any other printable value works."""
    problems = []
    for var, value in secrets.items():
        if value is None:
            continue
        if isinstance(value, (dict, list, bool)):
            problems.append(f"{var} must be a string (quote it), got {kind_of(value)}")
        elif re.search(r"[\r\n]", str(value)):
            problems.append(
                f"{var} must not contain line breaks (it is written to an environment file, one variable a line)"
            )
        elif CONTROL.search(str(value)):
            problems.append(f"{var} must not contain control characters (tabs, escapes): printable characters only")
    return problems


def _not_a_mapping(value, var, what):
    """[message] when VALUE is neither left out (None) nor a mapping of WHAT."""
    return [] if value is None else [f"{var} must be a mapping of {what}, got {kind_of(value)}"]


def env_problems(env, var):
    """An environment mapping: names systemd accepts, single-line string values, nothing the collection derives."""
    if not isinstance(env, dict):
        return _not_a_mapping(env, var, "environment variables (NAME: value)")
    problems = []
    for key, value in env.items():
        if not ENV_NAME.match(str(key)):
            problems.append(f"{var}: {key!r} is not an environment variable name (letters, digits, _)")
        elif str(key) in DERIVED_ENV:
            problems.append(f"{var} sets {key}, which the collection sets itself: use {DERIVED_ENV[str(key)]} instead")
        if isinstance(value, (dict, list)):
            problems.append(f"{var}.{key} must be a string or number, got {kind_of(value)}")
        elif value is None or isinstance(value, bool):
            problems.append(
                f'{var}.{key} is {value!r}: quote the value the program expects (e.g. "1", "true" or ""); '
                "YAML's true/false/null would reach the process as True, False or None"
            )
        elif CONTROL.search(str(value)):
            problems.append(f"{var}.{key} must not contain line breaks or control characters")
    return problems


def flags_shape_problems(flags, var):
    if not isinstance(flags, dict):
        return _not_a_mapping(flags, var, "flags (name without --: value)")
    problems = []
    for key, value in flags.items():
        if isinstance(value, dict):
            problems.append(f"{var}.{key} is a mapping: a flag takes a value, a list of values, true or false")
        elif isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list)) for v in value):
            problems.append(f"{var}.{key}: a list of flag values holds plain values only")
        elif isinstance(value, (str, list)) and CONTROL.search(str(value)):
            problems.append(f"{var}.{key} must not contain line breaks or control characters")
    return problems


def flag_name(key):
    return str(key).lstrip("-").replace("_", "-")


def derived_flag_problems(flags, var, derived=None):
    """Flags of `var` that would undo what the collection derives (placement, NUMA binding, secrets)."""
    if not isinstance(flags, dict):
        return []
    derived = DERIVED_WORKER_FLAGS if derived is None else derived
    return [
        f"{var} sets --{flag_name(key)}, which the collection owns: use {derived[flag_name(key)]} instead"
        for key in flags
        if flag_name(key) in derived
    ]


# --------------------------------------------------------------------------------------------------
# worker instances
# --------------------------------------------------------------------------------------------------


def instance_problems(instances, role, unit_prefix="sglang-"):
    """What is wrong with a role's instance list, one message per problem, each naming the entry and the fix."""
    var = f"sglang_{role}_instances"
    problems = []
    if not isinstance(instances, list):
        hint = ": put '- ' before each instance (a list of mappings)" if isinstance(instances, dict) else ""
        return [f"{var} must be a list of instances, got {type(instances).__name__}{hint}"]
    names = []
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict):
            problems.append(f"{var}[{index}] must be a mapping (name, tp, port, ...), got {instance!r}")
            continue
        name = instance.get("name")
        where = f"{var}[{index}] ({name})" if name else f"{var}[{index}]"
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(
                f"{where}: name must be lowercase letters, digits, - or _ (it becomes sglang-<name>.service)"
            )
        elif len(name) > 64:
            problems.append(f"{where}: name must be at most 64 characters (it becomes {unit_prefix}<name>.service)")
        elif name == "router":
            problems.append(
                f"{where}: name router would make unit {unit_prefix}router.service, the router's own unit: "
                "choose another name (e.g. prefill0, decode0)"
            )
        names.append(name)
        unknown = sorted(str(k) for k in instance if k not in INSTANCE_KEYS)
        if unknown:
            problems.append(
                f"{where}: unknown key(s) {', '.join(unknown)}: an instance takes {', '.join(INSTANCE_KEYS)} "
                "(a misspelt key would be ignored)"
            )
        tp, gpus = instance.get("tp"), instance.get("gpus")
        if tp is None and gpus is None:
            problems.append(f"{where}: give tp (the topology role picks the GPUs) or gpus (explicit indices)")
        if tp is not None and not positive_int(tp):
            problems.append(f"{where}: tp {tp!r} must be a positive whole number (GPUs of the instance)")
        if gpus is not None and (
            not isinstance(gpus, list) or not all(whole(g) for g in gpus) or len({int(g) for g in gpus}) != len(gpus)
        ):
            problems.append(f"{where}: gpus must be a list of distinct GPU indices (whole numbers), got {gpus!r}")
        elif tp is not None and gpus is not None and positive_int(tp) and int(tp) != len(gpus):
            problems.append(
                f"{where}: tp {tp} but {len(gpus)} gpus listed {gpus}: make tp the number of gpus, "
                "or give only one of them"
            )
        for key in ("port", "dist_init_port") + (("bootstrap_port",) if role == "prefill" else ()):
            if key not in instance:
                problems.append(f"{where}: {key} is missing (a port in 1-65535)")
            elif not port_ok(instance[key]):
                problems.append(f"{where}: {key} {instance[key]!r} is not a port in 1-65535")
        if "bootstrap_port" in instance and role != "prefill" and not port_ok(instance["bootstrap_port"]):
            problems.append(f"{where}: bootstrap_port {instance['bootstrap_port']!r} is not a port in 1-65535")
        problems += flags_shape_problems(instance.get("flags"), f"{where}.flags")
        problems += derived_flag_problems(instance.get("flags"), f"{where}.flags")
        problems += env_problems(instance.get("env"), f"{where}.env")
    duplicates = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if duplicates:
        problems.append(
            f"{var} has duplicate names ({', '.join(duplicates)}): each instance becomes unit "
            "sglang-<name>.service, so names must differ"
        )
    return problems


def privileged_port_problems(host, ports, user):
    """ports: {where: port}. The units run as an unprivileged user without capabilities: no port below 1024."""
    low = {where: port for where, port in ports.items() if port_ok(port) and int(port) < 1024}
    if not low:
        return []
    return [
        f"{', '.join(f'{w} ({p})' for w, p in low.items())} on {host}: ports below 1024 need a privilege that "
        f"the service user {user} does not have (the units run without capabilities), so it could not listen "
        "there. Choose ports from 1024 up"
    ]


def listener_problems(host, planned, listeners, managed):
    """Planned ports that another program already listens on (it would fail to bind only after the health wait).

    planned: {port: 'what (variable)'}; listeners: {port: owner} as the preflight read them on the host (owner:
    the systemd unit, else the process name); managed: unit names of the collection (they may hold their ports).
    """
    problems = []
    for port, what in sorted(planned.items(), key=lambda kv: int(kv[0])):
        owner = (listeners or {}).get(str(port)) or (listeners or {}).get(int(port))
        if owner and str(owner).removesuffix(".service") not in managed:
            problems.append(
                f"{what} is port {port}, which {owner} already listens on, on {host}: choose a free port, or stop "
                f"{owner} first (sglang_conflicting_units stops a unit before the workers start)"
            )
    return problems


def conflicting_units_problems(units, managed):
    """sglang_conflicting_units: a list of unit names, none of them a unit the collection manages."""
    if units is None:
        return []
    if not isinstance(units, list) or not all(isinstance(u, str) and u.strip() for u in units):
        return [f"sglang_conflicting_units must be a list of unit names, got {units!r}"]
    problems = []
    for unit in units:
        if not UNIT_NAME.match(unit):
            problems.append(f"sglang_conflicting_units: {unit!r} is not a systemd unit name")
        elif unit.removesuffix(".service") in managed:
            problems.append(
                f"sglang_conflicting_units names {unit}, a unit this deployment manages: the run would stop it "
                "and then start it again. Remove it from the list (list only units of other programs)"
            )
    return problems


def empty_role_warnings(host, role, instances):
    """A host in a role's group with an empty instance list runs no instance of the role: a scale-in (what ran there
    is retired), or a forgotten host_vars file. Said, not refused: a deployment left with no instance of a role is
    refused by the router's rules, and retiring the last one by retire_problems."""
    if isinstance(instances, list) and not instances:
        return [
            f"{host} is in group {role} with an empty sglang_{role}_instances: no {role} instance runs there (one "
            f"deployed before is retired). Give it an instance, or take the host out of the group once it is empty"
        ]
    return []


def no_gpu_problems(facts, host):
    """A worker host must show GPUs: FACTS are its gpu_topology facts (the topology role's module, or host_look in
    site.yml's preflight), HOST its inventory name. [] when it shows some."""
    facts = facts if isinstance(facts, dict) else {}
    if facts.get("gpus"):
        return []
    return [
        f"{host} shows no GPU ({facts.get('reason') or 'no reason given'}). Check the driver (nvidia-smi), or set "
        "sglang_topology_nvidia_smi_path"
    ]


def host_port_problems(host, instances):
    """The worker ports of one host (every role's instances on it) must be distinct and in range."""
    ports = [
        instance[key]
        for instance in instances
        if isinstance(instance, dict)
        for key in WORKER_PORT_KEYS
        if key in instance and instance[key] is not None
    ]
    numbers = [int(p) if port_ok(p) else p for p in ports]
    if all(port_ok(p) for p in ports) and len(set(numbers)) == len(numbers):
        return []
    return [
        f"The ports of the prefill and decode instances on {host} (port, bootstrap_port, dist_init_port) must be "
        f"distinct and in 1-65535; they are {', '.join(str(p) for p in ports)}. "
        "Change sglang_prefill_instances / sglang_decode_instances"
    ]
