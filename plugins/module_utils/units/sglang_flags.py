# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Command lines of the sglang workers, and the rendering every command line of the collection goes through.

A *profile* (``profiles/<name>.yml``) holds the model's flags as data; the
inventory holds the instances (ports, tp size, extra flags). The functions here merge them into
ordered flag mappings and render those as argument lines, one flag per line, for the unit template
and for the flag check (render_lines, argv, and the systemd quoting of the unit's lines). The worker flags the
collection owns are tabled here (IDENTITY_FLAGS), and the engine settings it renders into each worker's environment
(ENGINE_ENV); plan/rules.py names, beside them, the flags a user may not set because they would undo what the
collection derives. The router's flag tables and its command line are units/router_flags.py's, rendered with the
helpers here.
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
