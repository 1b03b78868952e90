# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Every preflight rule of the collection, as pure functions that return messages.

Each function takes plain data (inventory values, a profile, unit specs) and returns a list of messages, empty
when the input is good. A message names the variable to change and how. The plan (plan.py) calls them in the
preflight play; each role shows the messages in one assert. tests/unit/test_rules.py holds their table.
"""

import re

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# systemd accepts environment variable names of letters, digits and _ that do not start with a digit.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Trees the units cannot see (ProtectHome=yes).
HIDDEN_TREES = re.compile(r"^/(home|root|run/user)(/|$)")
WORKER_PORT_KEYS = ("port", "bootstrap_port", "dist_init_port")
# Speculative algorithms whose draft input sglang 0.5.23 hands from prefill to decode
# (SpeculativeInfo.build_disagg_draft_input in sglang/srt/speculative/spec_info.py: EAGLE family,
# DSPARK, DFLASH; NEXTN is an alias of EAGLE). NGRAM, STANDALONE and UNO have no PD handoff.
PD_SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP", "DSPARK", "DFLASH")


def port_ok(value):
    if isinstance(value, bool):
        return False
    try:
        return 1 <= int(value) <= 65535
    except (TypeError, ValueError):
        return False


def _positive_int(value):
    if isinstance(value, bool):
        return False
    try:
        return int(str(value)) > 0
    except (TypeError, ValueError):
        return False


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
    if _positive_int(timeout) and _positive_int(poll) and int(poll) <= int(timeout):
        return []
    return [
        f"sglang_health_timeout ({timeout}) and sglang_health_poll ({poll}) must be positive seconds, "
        "the poll no longer than the timeout"
    ]


def positive_int_problems(values):
    """values: {variable: value} that must be positive integers (seconds, counts)."""
    return [
        f"{var} is {value!r}: it must be a positive whole number"
        for var, value in values.items()
        if not _positive_int(value)
    ]


def account_problems(user, group, state_dir, paths):
    """The service account must be unprivileged and every path the units use visible to them.

    paths: {variable: path} the units read (model, venv) or write (state dir, extra writable paths).
    """
    problems = []
    if not isinstance(user, str) or not user or user in ("root", "0"):
        problems.append(f"sglang_user ({user}) must name an unprivileged account (not root)")
    if not isinstance(group, str) or not group or group in ("root", "0"):
        problems.append(f"sglang_group ({group}) must name an unprivileged group (not root)")
    if not isinstance(state_dir, str) or not state_dir.startswith("/"):
        problems.append(f"sglang_state_dir ({state_dir}) must be an absolute path")
    for var, path in {"sglang_state_dir": state_dir, **paths}.items():
        if isinstance(path, str) and HIDDEN_TREES.match(path):
            problems.append(
                f"{var} ({path}) lies under /home, /root or /run/user: the units run with ProtectHome=yes and "
                "cannot see those trees. Move it (e.g. the model to /models, the venv to /opt/sglang/venv)"
            )
    return problems


def secret_problems(secrets):
    """secrets: {variable: value}. An environment file holds one variable a line."""
    return [
        f"{var} must not contain line breaks (it is written to an environment file, one variable a line)"
        for var, value in secrets.items()
        if re.search(r"[\r\n]", str(value or ""))
    ]


def env_problems(env, var):
    """An environment mapping: names systemd accepts, single-line values."""
    if env is None:
        return []
    if not isinstance(env, dict):
        return [f"{var} must be a mapping of environment variables (NAME: value), got {type(env).__name__}"]
    problems = []
    for key, value in env.items():
        if not ENV_NAME.match(str(key)):
            problems.append(f"{var}: {key!r} is not an environment variable name (letters, digits, _)")
        if isinstance(value, (dict, list)):
            problems.append(f"{var}.{key} must be a string or number, got {type(value).__name__}")
        elif re.search(r"[\r\n]", str(value)):
            problems.append(f"{var}.{key} must not contain line breaks")
    return problems


def flags_shape_problems(flags, var):
    if flags is None or isinstance(flags, dict):
        return []
    return [f"{var} must be a mapping of flags (name without --: value), got {type(flags).__name__}"]


# --------------------------------------------------------------------------------------------------
# worker instances
# --------------------------------------------------------------------------------------------------


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
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(
                f"{where}: name must be lowercase letters, digits, - or _ (it becomes sglang-<name>.service)"
            )
        names.append(name)
        tp, gpus = instance.get("tp"), instance.get("gpus")
        if tp is None and gpus is None:
            problems.append(f"{where}: give tp (the topology role picks the GPUs) or gpus (explicit indices)")
        if tp is not None and not _positive_int(tp):
            problems.append(f"{where}: tp {tp!r} must be a positive whole number (GPUs of the instance)")
        if gpus is not None and (not isinstance(gpus, list) or len(set(map(str, gpus))) != len(gpus)):
            problems.append(f"{where}: gpus must be a list of distinct GPU indices, got {gpus!r}")
        elif tp is not None and gpus is not None and _positive_int(tp) and int(tp) != len(gpus):
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
        problems += env_problems(instance.get("env"), f"{where}.env")
    duplicates = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if duplicates:
        problems.append(
            f"{var} has duplicate names ({', '.join(duplicates)}): each instance becomes unit "
            "sglang-<name>.service, so names must differ"
        )
    return problems


def empty_role_problems(host, role, instances):
    if isinstance(instances, list) and not instances:
        bootstrap = ", bootstrap_port" if role == "prefill" else ""
        return [
            f"{host} is in group {role} but sglang_{role}_instances is empty: give it at least one instance "
            f"(name, tp, port, dist_init_port{bootstrap}) or take the host out of the group"
        ]
    return []


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


# --------------------------------------------------------------------------------------------------
# flag values of a planned worker unit
# --------------------------------------------------------------------------------------------------


def _int_or(value, default):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def flag_value_problems(spec, profile_name, limits=None):
    """What sglang would refuse at start or at the KV handoff, and the profile's own limits, for one unit spec."""
    flags, role, name = spec["flags"], spec["role"], spec["name"]
    found = []
    page = _int_or(flags.get("page-size", 1), 0)
    chunk = _int_or(flags.get("chunked-prefill-size", -1), 0)
    if "page-size" in flags and page <= 0:
        found.append(f"page-size {flags['page-size']} must be a positive number")
    elif not (chunk == -1 or (page > 0 and chunk > 0 and chunk % page == 0)):
        found.append(f"chunked-prefill-size {chunk} is not a multiple of page-size {page} (sglang refuses it)")
    memfrac = flags.get("mem-fraction-static")
    if memfrac is not None:
        try:
            ok = 0 < float(memfrac) < 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            found.append(f"mem-fraction-static {memfrac} must lie strictly between 0 and 1")
    spec_algo = flags.get("speculative-algorithm")
    if spec_algo is not None and str(spec_algo).upper() not in PD_SPECULATIVE_ALGORITHMS:
        found.append(
            f"speculative-algorithm {spec_algo} has no PD draft handoff in sglang 0.5.23 (use one of "
            f"{', '.join(PD_SPECULATIVE_ALGORITHMS)})"
        )
    found += limit_problems(flags, limits)
    if not found:
        return []
    return [
        f"{role} instance {name}: {'; '.join(found)}; fix it in the profile {profile_name}, "
        f"sglang_{role}_extra_flags or the instance's flags"
    ]


def limit_problems(flags, limits):
    """A profile's limits: {flag: {min, max, below, multiple_of, reason}} checked against the merged flags."""
    found = []
    for flag, limit in (limits or {}).items():
        if flag not in flags or flags[flag] in (None, False):
            continue
        value = flags[flag]
        try:
            number = float(value)
        except (TypeError, ValueError):
            found.append(f"{flag} {value!r} must be a number (the profile limits it)")
            continue
        why = f" ({limit['reason']})" if limit.get("reason") else ""
        if "min" in limit and number < float(limit["min"]):
            found.append(f"{flag} {value} is below the profile's minimum {limit['min']}{why}")
        if "max" in limit and number > float(limit["max"]):
            found.append(f"{flag} {value} is above the profile's maximum {limit['max']}{why}")
        if "below" in limit and number >= float(limit["below"]):
            found.append(f"{flag} {value} must stay below {limit['below']}{why}")
    return found


def profile_problems(profile, source):
    """The shape of a loaded profile."""
    if not isinstance(profile, dict):
        return [f"the profile {source} must be a mapping with flags and env, got {type(profile).__name__}"]
    problems = []
    for section in ("flags", "env"):
        value = profile.get(section) or {}
        if not isinstance(value, dict):
            problems.append(f"the profile {source}: {section} must be a mapping of common/prefill/decode")
            continue
        for part, entries in value.items():
            if part not in ("common", "prefill", "decode"):
                problems.append(f"the profile {source}: {section}.{part} is not one of common, prefill, decode")
            elif section == "flags":
                problems += flags_shape_problems(entries, f"the profile {source}: flags.{part}")
            else:
                problems += env_problems(entries, f"the profile {source}: env.{part}")
    limits = profile.get("limits") or {}
    if not isinstance(limits, dict) or not all(isinstance(v, dict) for v in limits.values()):
        problems.append(f"the profile {source}: limits must map a flag to {{min, max, below, reason}}")
    return problems


# --------------------------------------------------------------------------------------------------
# across the deployment
# --------------------------------------------------------------------------------------------------


def kv_mismatches(contracts, keys):
    """Messages for each KV contract flag on which the given worker contracts disagree (empty: all agree)."""
    messages = []
    for key in keys:
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


def router_flag_problems(extra_flags):
    """Router flags that would put a secret on its command line."""
    names = {str(k).lstrip("-") for k in (extra_flags or {})} & {"api-key", "control-plane-api-keys"}
    if names:
        return [
            f"sglang_router_extra_flags sets {' and '.join(sorted(names))}: those would stand on the router's "
            "command line, which every user of the host sees in ps. Set sglang_router_api_key (ansible-vault) instead"
        ]
    return []


# --------------------------------------------------------------------------------------------------
# dependencies
# --------------------------------------------------------------------------------------------------


def deps_problems(packages, packages_nodeps, wheelhouse):
    """The venv's package lists: shapes, sgl-kernel beside sglang-kernel, NIXL without its dependencies."""
    problems = []
    for var, value in (("sglang_deps_packages", packages), ("sglang_deps_packages_nodeps", packages_nodeps)):
        if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
            problems.append(f"{var} must be a list of pip requirement strings, got {value!r}")
    if problems:
        return problems
    if any(re.match(r"^sgl[-_]kernel([<>=!~ \[]|$)", p) for p in packages + packages_nodeps):
        problems.append(
            "sglang_deps_packages or sglang_deps_packages_nodeps lists sgl-kernel: sglang 0.5.23 brings "
            "sglang-kernel, which ships the same import name (sgl_kernel). Remove sgl-kernel from the list"
        )
    nixl = [p for p in packages if p.startswith("nixl")]
    if nixl:
        problems.append(
            f"sglang_deps_packages names {', '.join(nixl)}: with its dependencies the nixl meta package pulls both "
            "nixl-cu12 and nixl-cu13 and torch. Move the NIXL packages to sglang_deps_packages_nodeps (nixl==1.5.1 "
            "and nixl-cu13==1.5.1 for sglang 0.5.23's CUDA 13 stack)"
        )
    if wheelhouse and not str(wheelhouse).startswith("/"):
        problems.append(f"sglang_deps_wheelhouse ({wheelhouse}) must be an absolute path on the host")
    return problems
