# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Command lines of the sglang workers and the router, built in one place.

A *profile* (``profiles/<name>.yml``) holds the model's flags as data; the
inventory holds the instances (ports, tp size, extra flags). The functions here merge them into
ordered flag mappings and render those as argument lines, one flag per line, for the unit template
and for the flag check. The flags the collection owns are tabled here (IDENTITY_FLAGS, ROUTER_FLAGS);
rules.py names, beside them, the flags a user may not set because they would undo what the collection derives.
"""

import re

WORKER_ROLES = ("prefill", "decode")

# Flags derived from the inventory and placement. Profiles and extra flags may not set them:
# each has exactly one source, named in the error.
IDENTITY_FLAGS = {
    "model-path": "sglang_model_path",
    "served-model-name": "sglang_served_model_name",
    "disaggregation-mode": "the role (prefill or decode)",
    "tp-size": "the instance's tp",
    "host": "sglang_bind_host",
    "port": "the instance's port",
    "disaggregation-bootstrap-port": "the instance's bootstrap_port",
    "dist-init-addr": "the instance's dist_init_port",
}


class FlagError(ValueError):
    """An input that cannot be turned into a command line; the message names the variable."""


def merge_flags(*layers):
    """Merge flag mappings left to right; later layers win, order of first appearance is kept."""
    merged = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            merged[str(key).lstrip("-")] = value
    return merged


# Other spellings argparse maps onto the identity flags (sglang 0.5.23 aliases).
IDENTITY_ALIASES = {
    "model": "model-path",
    "tensor-parallel-size": "tp-size",
    "nccl-init-addr": "dist-init-addr",
}


def _identity_of(name):
    """The identity flag a key would set on sglang's command line, through an alias or a prefix."""
    if name in IDENTITY_FLAGS:
        return name
    if name in IDENTITY_ALIASES:
        return IDENTITY_ALIASES[name]
    # argparse takes any unique prefix (allow_abbrev) and the last occurrence wins.
    for full in list(IDENTITY_FLAGS) + list(IDENTITY_ALIASES):
        if full.startswith(name):
            return IDENTITY_ALIASES.get(full, full)
    return None


def _check_no_identity(flags, where):
    for key in flags or {}:
        name = str(key).lstrip("-")
        identity = _identity_of(name)
        if identity:
            spelled = "" if identity == name else f" (spelled --{name})"
            raise FlagError(
                f"{where} sets --{identity}{spelled}, which the collection derives from "
                f"{IDENTITY_FLAGS[identity]}; set that instead"
            )


def worker_flags(profile, role, instance, settings):
    """Ordered flags of one worker instance.

    profile:  the profile mapping (keys ``flags`` -> ``common``/``prefill``/``decode``).
    role:     ``prefill`` or ``decode``.
    instance: {name, tp, port, bootstrap_port, dist_init_port, flags}.
    settings: {model_path, served_model_name, host, dist_init_host, extra_flags}.
    """
    if role not in WORKER_ROLES:
        raise FlagError("role must be one of {}, got {!r}".format(", ".join(WORKER_ROLES), role))
    name = instance.get("name", "?")
    profile_flags = profile.get("flags", {})
    _check_no_identity(profile_flags.get("common"), "the profile's common flags")
    _check_no_identity(profile_flags.get(role), f"the profile's {role} flags")
    _check_no_identity(settings.get("extra_flags"), f"sglang_{role}_extra_flags")
    _check_no_identity(instance.get("flags"), f"the flags of {role} instance {name}")
    if not settings.get("model_path"):
        raise FlagError("sglang_model_path is empty: set it to the model directory on the host")

    identity = {
        "model-path": settings["model_path"],
        "served-model-name": settings.get("served_model_name"),
        "disaggregation-mode": role,
        "tp-size": instance["tp"],
        "host": settings.get("host", "127.0.0.1"),
        "port": instance["port"],
        "disaggregation-bootstrap-port": instance.get("bootstrap_port"),
        "dist-init-addr": (
            "{}:{}".format(settings.get("dist_init_host", "127.0.0.1"), instance["dist_init_port"])
            if instance.get("dist_init_port") is not None
            else None
        ),
    }
    return merge_flags(
        identity,
        profile_flags.get("common"),
        profile_flags.get(role),
        settings.get("extra_flags"),
        instance.get("flags"),
    )


# sglang's own settings the collection renders into every worker's environment, each from one variable: the health
# check's patience (SGLANG_HEALTH_CHECK_TIMEOUT, sglang/srt/entrypoints/http_server.py) and the decode's side of the
# PD handoff (sglang/srt/environ.py; read in sglang/srt/disaggregation/common/conn.py), set rather than inherited.
ENGINE_ENV = {
    "SGLANG_HEALTH_CHECK_TIMEOUT": "sglang_health_check_timeout",
    "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "sglang_disagg_heartbeat_interval",
    "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "sglang_disagg_heartbeat_max_failure",
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "sglang_disagg_waiting_timeout",
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "sglang_disagg_bootstrap_timeout",
}


def worker_env(profile, role, instance, settings):
    """Environment of one worker instance: the engine settings (ENGINE_ENV, settings["engine_env"]), then the profile
    env, then extra env, then the instance's."""
    envs = profile.get("env", {})
    merged = {}
    layers = (
        settings.get("engine_env"),
        envs.get("common"),
        envs.get(role),
        settings.get("extra_env"),
        instance.get("env"),
    )
    for layer in layers:
        merged.update({str(k): str(v) for k, v in (layer or {}).items()})
    return merged


# The router flags the collection sets, each from one variable: {flag: variable}. The router's plan
# (roles/sglang_router/tasks/plan.yml) reads exactly these variables and router_flags() turns them into flags;
# sglang_router_extra_flags may not set one of them (rules.router_flag_problems), nor an alias below.
ROUTER_FLAGS = {
    "host": "sglang_router_host",
    "port": "sglang_router_port",
    "prometheus-host": "sglang_router_prometheus_host",
    "prometheus-port": "sglang_router_prometheus_port",
    "prefill-policy": "sglang_router_prefill_policy",
    "decode-policy": "sglang_router_decode_policy",
    "tokenizer-path": "sglang_router_tokenizer_path",
    "cb-timeout-duration-secs": "sglang_router_circuit_breaker_timeout",
    "cb-failure-threshold": "sglang_router_circuit_breaker_failure_threshold",
    "health-check-interval-secs": "sglang_router_health_check_interval",
    "health-failure-threshold": "sglang_router_health_failure_threshold",
    "health-check-timeout-secs": "sglang_router_health_check_timeout",
    "health-check-endpoint": "sglang_router_health_check_endpoint",
    "retry-max-retries": "sglang_router_retry_max_retries",
}
# SMG 1.13's routing settings whose defaults change PD behaviour (smg 1.13.0 wheel, smg/router_args.py), each written
# out from one variable of the router role (docs/variables.md and roles/sglang_router/defaults say why each value).
# A switch set false renders its off spelling (SWITCH_OFF), so both states stand on the command line.
SMG_FLAGS = {
    "worker-overload-protection": "sglang_router_smg_overload_protection",
    "worker-overload-waiting-requests": "sglang_router_smg_overload_waiting_requests",
    "worker-overload-token-usage": "sglang_router_smg_overload_token_usage",
    "worker-stall-secs": "sglang_router_smg_worker_stall_secs",
    "worker-wedge-secs": "sglang_router_smg_worker_wedge_secs",
    "pd-admission-wait-secs": "sglang_router_smg_pd_admission_wait_secs",
    "upstream-pool-idle-timeout-secs": "sglang_router_smg_upstream_pool_idle_timeout",
    "shutdown-grace-period-secs": "sglang_router_smg_shutdown_grace_period",
}
SWITCH_OFF = {"worker-overload-protection": "disable-worker-overload-protection"}

# The router programs (sglang_router_impl): the module the unit runs (python -m), its distribution, and the flags
# the collection sets on it ({flag: variable}). Both take the same PD syntax (--pd-disaggregation --prefill URL PORT
# --decode URL) and the ROUTER_FLAGS.
ROUTER_IMPLS = {
    "sglang_router": {"module": "sglang_router.launch_router", "dist": "sglang-router", "flags": ROUTER_FLAGS},
    "smg": {"module": "smg.launch_router", "dist": "smg", "flags": {**ROUTER_FLAGS, **SMG_FLAGS}},
}
# Router flags (sglang-router 0.3.2's and SMG's launch_router) that would set one of the above under another name.
ROUTER_FLAG_ALIASES = {
    "policy": "sglang_router_prefill_policy and sglang_router_decode_policy",
    "model-path": "sglang_router_tokenizer_path",
    "disable-worker-overload-protection": "sglang_router_smg_overload_protection",
}


def router_impl(name):
    """The row of ROUTER_IMPLS for sglang_router_impl NAME; FlagError naming the choices for another."""
    if not isinstance(name, str) or name not in ROUTER_IMPLS:
        raise FlagError(f"sglang_router_impl {name!r} is not a router this collection runs: one of "
                        f"{', '.join(ROUTER_IMPLS)}")  # fmt: skip
    return ROUTER_IMPLS[name]


def router_verify_args(name):
    """verify_venv.py's arguments (roles/sglang_deps/files/verify_venv.py) for the router venv of sglang_router_impl
    NAME: the module the unit runs, its distribution, and the other routers' distributions, which must not be
    installed beside it (sglang-router 0.3.2 and smg both ship an `smg` command). FlagError for an unknown NAME."""
    row = router_impl(name)
    others = ",".join(r["dist"] for other, r in ROUTER_IMPLS.items() if other != name)
    return ["--router-module", row["module"], "--router-dist", row["dist"], "--other-router-dists", others]


def running_impl(record, planned_impl):
    """The router program a deployed router unit runs: its record's impl (records before SMG name only the module),
    or PLANNED_IMPL where there is no record. A run that switches routers talks to the running one until it
    restarts it."""
    if not isinstance(record, dict) or not record:
        return planned_impl
    if isinstance(record.get("impl"), str) and record["impl"] in ROUTER_IMPLS:
        return record["impl"]
    return next((name for name, row in ROUTER_IMPLS.items() if row["module"] == record.get("module")), planned_impl)


def running_urls(record, unit):
    """{url, health_url} where a deployed router unit answers now: its RECORD's (both strings), else the planned
    UNIT's (nothing deployed yet, or a record without them). A run that moves a router (a second router host joins,
    so sglang_router_instance_host leaves loopback) reaches it at its old address until it restarts it."""
    if isinstance(record, dict) and isinstance(record.get("url"), str) and isinstance(record.get("health_url"), str):
        return {"url": record["url"], "health_url": record["health_url"]}
    return {"url": unit["url"], "health_url": unit["health_url"]}


def router_flags(values, extra_flags=None, impl="sglang_router"):
    """The router's flags: the flags of IMPL (ROUTER_IMPLS) from their variables' values ({variable: value}), then
    the user's extra flags (which the rules keep off those)."""
    table = router_impl(impl)["flags"]
    missing = sorted(v for v in table.values() if v not in (values or {}))
    if missing:
        raise FlagError(f"the router's plan was given no value for {', '.join(missing)}")
    own = {}
    for flag, variable in table.items():
        value = values[variable]
        if value is False and flag in SWITCH_OFF:
            own[SWITCH_OFF[flag]] = True
        else:
            own[flag] = value
    return merge_flags(own, extra_flags if isinstance(extra_flags, dict) else {})


def router_lines(prefills, decodes, settings):
    """Argument lines of the router in PD mode.

    prefills: [{url, bootstrap_port}], decodes: [{url}], settings: flags mapping of the router
    (host, port, prometheus-host, prometheus-port, policies, ...).
    """
    if not prefills:
        raise FlagError("the router has no prefill worker: put hosts with sglang_prefill_instances in group prefill")
    if not decodes:
        raise FlagError("the router has no decode worker: put hosts with sglang_decode_instances in group decode")
    for key in settings:
        name = str(key).lstrip("-")
        if name in ("pd-disaggregation", "prefill", "decode", "worker-urls"):
            raise FlagError(
                f"sglang_router_extra_flags sets --{name}, which the collection generates from the inventory's "
                "prefill and decode instances; change the instances or the groups instead"
            )
    lines = [["--pd-disaggregation"]]
    for worker in prefills:
        if worker.get("bootstrap_port") is None:
            raise FlagError(f"prefill worker {worker['url']} has no bootstrap_port; the router must be given it")
        lines.append(["--prefill", worker["url"], str(worker["bootstrap_port"])])
    for worker in decodes:
        lines.append(["--decode", worker["url"]])
    lines.extend(render_lines(settings))
    return lines


NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$")


def _value(value):
    if isinstance(value, float):
        return repr(value)
    return str(value)


def render_lines(flags):
    """Flag mapping -> list of argument lines: [["--page-size", "256"], ["--enable-metrics"]].

    ``true`` renders a bare switch; ``false`` and null leave the flag out (so sglang's default holds:
    to switch off a flag that defaults on, set its ``no-<flag>: true`` spelling); a list repeats values
    after one flag (argparse nargs).
    """
    lines = []
    for key, value in flags.items():
        flag = "--" + str(key).lstrip("-")
        if value is None or value is False:
            continue
        if value is True:
            lines.append([flag])
        elif isinstance(value, (list, tuple)):
            lines.append([flag] + [_value(v) for v in value])
        elif _value(value).startswith("-") and not NUMBER.match(_value(value)):
            # argparse would take a separate token that starts with a dash for an option: keep it the value.
            lines.append([f"{flag}={_value(value)}"])
        else:
            lines.append([flag, _value(value)])
    return lines


def argv(lines):
    """Argument lines -> flat argv list."""
    return [token for line in lines for token in line]


_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def systemd_quote(token):
    """Quote one token for a systemd Exec line (specifiers and variables escaped)."""
    token = str(token).replace("%", "%%").replace("$", "$$")
    if _SAFE.match(token):
        return token
    return '"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_env_quote(pair):
    """Quote NAME=value for a systemd Environment= line.

    Environment= expands specifiers (%) but not variables: a $ stays as written (doubling it, as ExecStart=
    needs, would reach the process as $$). Checked against systemd 252 in the sandbox
    (tests/integration/test_robust_values.py). Backslashes and double quotes are escaped inside the quotes.
    """
    text = str(pair).replace("%", "%%")
    if _SAFE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
