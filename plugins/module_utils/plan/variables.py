# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Every variable a user of the collection sets: its role, its kind, and its range or choices. One table.

Each role's preflight checks the variables of that role against it in one step (the filter
``disagg.sglang.variable_problems``, given the role's name and the values of its defined variables, which
``query('ansible.builtin.varnames', role | disagg.sglang.variable_pattern)`` names), before anything on a host
changes. Rules that relate two variables
(the drain below the stop timeout), or look inside a structured one (instances, packages, flags, secrets, the
account), are in rules.py; this table checks each variable on its own. tests/unit/test_variables.py fails when a
role's argument specs name a variable this table lacks, when the two disagree on its type or choices, and when a
numeric variable has no range; docs/variables.md is written from this table
(`python3 tests/unit/test_variables.py --write`).
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


def _v(role, kind, span=(None, None), what="", *, choices=None, also=()):
    """One row: span is (min, max) of a numeric kind; what says what the value means (docs/variables.md)."""
    return {"role": role, "kind": kind, "min": span[0], "max": span[1], "choices": choices, "also": list(also),
            "what": what}  # fmt: skip


S, D, T, W, R, B, M = ROLES
# The table: one row per variable, every row of one shape on purpose (`duplicates` pairs runs of them).
# kind: bool | str (not empty) | text (may be empty) | path (absolute) | path_or_empty | host | port | int | float |
# fraction (a float in its range, where 0.9 means 90 %) | choice | duration | mode | list_of_str (each member one of
# choices, where the row has them) | list_of_path (absolute paths) | list_of_int (each member in the range) |
# map | list (a structured list with its own rules) | secret (its own rules: single line, vault) | pattern:<NAME>
VARIABLES = {
    # roles/sglang: the workers' shared settings
    "sglang_model_path": _v(S, "path", what="the model directory on the serving hosts, e.g. /models/DeepSeek-V4-Flash"),
    "sglang_served_model_name": _v(S, "str"),
    "sglang_profile": _v(S, "str"),
    "sglang_venvs_dir": _v(S, "path", what="the directory of the versioned venvs (engine-DIGEST, router-DIGEST)"),
    "sglang_engine_compatible_versions": _v(S, "list", what="groups of engine versions that hand KV to each other"),
    "sglang_server_module": _v(S, "pattern:MODULE", what="Python module name"),
    "sglang_numactl_path": _v(S, "path"),
    "sglang_unit_dir": _v(S, "path"),
    "sglang_unit_prefix": _v(S, "pattern:UNIT_PREFIX", what="letters, digits, _ . : or - only (begins each unit name)"),
    "sglang_advertise_address": _v(S, "host"),
    "sglang_bind_host": _v(S, "host"),
    "sglang_worker_api_key": _v(S, "secret"),
    "sglang_router_impl": _v(S, "choice", choices=["sglang_router", "smg"], what="the router program in front"),
    "sglang_rolling_batch": _v(S, "int", (0, 64), "instances restarted at once; 0: all at once, no rolling"),
    "sglang_rolling_router_timeout": _v(S, "int", (1, 3600), "seconds"),
    "sglang_rolling_drain_timeout": _v(
        S, "int", (1, 86400), "seconds; sglang_stop_timeout > it (rounded up to 5) + 20"
    ),
    "sglang_restart_sec": _v(S, "int", (1, 3600), "seconds"),
    "sglang_start_limit_burst": _v(S, "int", (1, 1000), "starts"),
    "sglang_start_limit_interval": _v(S, "int", (1, 86400), "seconds"),
    "sglang_stop_timeout": _v(S, "int", (1, 86400), "seconds"),
    "sglang_health_timeout": _v(S, "int", (1, 86400), "seconds, at least sglang_health_poll"),
    "sglang_health_poll": _v(S, "int", (1, 3600), "seconds"),
    "sglang_stall_timeout": _v(S, "int", (5, 3600), "seconds a listening worker's /health may stay unanswered"),
    "sglang_journal_lines": _v(S, "int", (1, 10000), "lines"),
    "sglang_conflicting_units": _v(S, "list_of_str"),
    "sglang_cli_cache_dir": _v(S, "path"),
    "sglang_user": _v(S, "str"),
    "sglang_group": _v(S, "str"),
    "sglang_gpu_groups": _v(S, "list_of_str"),
    "sglang_state_dir": _v(S, "path"),
    "sglang_read_write_paths": _v(S, "list_of_path"),
    "sglang_gpu_device_policy": _v(S, "choice", choices=["closed", "auto", "strict"]),
    "sglang_gpu_device_allow": _v(S, "list_of_str"),
    "sglang_env_dir": _v(S, "path"),
    "sglang_record_dir": _v(S, "path"),
    "sglang_retire_roles": _v(S, "list_of_str", choices=["prefill", "decode"]),
    "sglang_hf_token": _v(S, "secret"),
    "sglang_prefill_instances": _v(S, "list"),
    "sglang_decode_instances": _v(S, "list"),
    "sglang_prefill_extra_flags": _v(S, "map"),
    "sglang_prefill_extra_env": _v(S, "map"),
    "sglang_decode_extra_flags": _v(S, "map"),
    "sglang_decode_extra_env": _v(S, "map"),
    "sglang_topology_strict": _v(S, "bool"),
    "sglang_kv_p2p_policy": _v(S, "choice", choices=["fail", "warn", "off"]),
    "sglang_kv_probe": _v(S, "bool"),
    "sglang_kv_probe_mib": _v(S, "int", (1, 65536), "MiB moved by the probe"),
    "sglang_kv_min_gbps": _v(S, "float", (0, 10000), "GB/s, 0 for no floor"),
    # roles/sglang_deps; the venvs' lists, their Python and the wheelhouse are shared defaults (roles/sglang): the
    # preflight checks them and names the venvs before the deps role runs
    "sglang_deps_python": _v(S, "str"),
    "sglang_deps_os_packages": _v(D, "list_of_str"),
    "sglang_deps_packages": _v(S, "list"),
    "sglang_deps_packages_nodeps": _v(S, "list"),
    "sglang_deps_router_impl_packages": _v(S, "map", what="the router's packages for each sglang_router_impl"),
    "sglang_deps_router_packages": _v(S, "list"),
    "sglang_deps_wheelhouse": _v(S, "path_or_empty"),
    "sglang_deps_nixl_backend": _v(D, "str"),
    # roles/sglang_topology
    "sglang_topology_sysfs_root": _v(S, "path"),
    "sglang_topology_nvidia_smi_path": _v(S, "path_or_empty"),
    # roles/sglang_worker
    "sglang_worker_roles": _v(W, "list_of_str", choices=["prefill", "decode"]),
    # roles/sglang_router
    "sglang_router_host": _v(R, "host"),
    "sglang_router_port": _v(R, "port"),
    "sglang_router_prometheus_host": _v(R, "host"),
    "sglang_router_prometheus_port": _v(R, "port"),
    "sglang_router_prefill_policy": _v(
        R, "choice", choices=["random", "round_robin", "cache_aware", "power_of_two", "manual", "bucket"]
    ),
    "sglang_router_decode_policy": _v(
        R, "choice", choices=["random", "round_robin", "cache_aware", "power_of_two", "manual"]
    ),
    "sglang_router_circuit_breaker_timeout": _v(R, "int", (1, 3600), "seconds"),
    "sglang_router_health_check_interval": _v(R, "int", (1, 3600), "seconds"),
    "sglang_router_health_failure_threshold": _v(R, "int", (1, 100), "failed checks"),
    "sglang_router_retry_max_retries": _v(R, "int", (0, 100), "attempts"),
    "sglang_router_circuit_breaker_failure_threshold": _v(R, "int", (1, 10000), "failures"),
    "sglang_router_smg_overload_protection": _v(R, "bool"),
    "sglang_router_smg_overload_waiting_requests": _v(R, "int", (1, 100000), "waiting requests (SMG only)"),
    "sglang_router_smg_overload_token_usage": _v(R, "fraction", (0.01, 1.0), "KV usage (SMG only)"),
    "sglang_router_smg_worker_stall_secs": _v(R, "int", (1, 3600), "seconds (SMG only)"),
    "sglang_router_smg_worker_wedge_secs": _v(R, "int", (1, 3600), "seconds (SMG only)"),
    "sglang_router_smg_pd_admission_wait_secs": _v(R, "int", (0, 3600), "seconds (SMG only); 0 refuses at once"),
    "sglang_router_smg_upstream_pool_idle_timeout": _v(R, "int", (0, 3600), "seconds (SMG only); 0: never closed"),
    "sglang_router_smg_shutdown_grace_period": _v(R, "int", (1, 86400), "seconds (SMG only), < sglang_stop_timeout"),
    "sglang_router_tokenizer_path": _v(R, "path"),
    "sglang_router_extra_flags": _v(R, "map"),
    "sglang_router_extra_env": _v(R, "map"),
    "sglang_router_api_key": _v(R, "secret"),
    "sglang_router_smoke_test": _v(R, "bool"),
    "sglang_router_smoke_prompt": _v(R, "str"),
    "sglang_router_smoke_max_new_tokens": _v(R, "int", (1, 4096), "tokens"),
    "sglang_router_smoke_timeout": _v(R, "int", (1, 3600), "seconds"),
    "sglang_router_smoke_parallel_sampling": _v(R, "bool"),
    # roles/sglang_bench
    "sglang_bench_client": _v(B, "choice", choices=["auto", "bench_serving", "aiperf"]),
    "sglang_bench_client_host": _v(B, "str"),
    "sglang_bench_router_host": _v(B, "host"),
    "sglang_bench_router_port": _v(B, "port"),
    "sglang_bench_api_key": _v(B, "secret"),
    "sglang_bench_model": _v(B, "str"),
    "sglang_bench_tokenizer": _v(B, "path"),
    "sglang_bench_endpoint": _v(B, "choice", choices=["completions", "chat"]),
    "sglang_bench_concurrencies": _v(B, "list_of_int", (1, 4096), "requests at once, one step each"),
    "sglang_bench_requests": _v(B, "map"),
    "sglang_bench_requests_factor": _v(B, "int", (1, 1000), "requests per unit of concurrency"),
    "sglang_bench_requests_min": _v(B, "int", (1, 1000000), "requests"),
    "sglang_bench_warmup": _v(B, "int", (0, 10000), "requests"),
    "sglang_bench_dataset": _v(B, "choice", choices=["random"]),
    "sglang_bench_input_len": _v(B, "int", (1, 1048576), "tokens"),
    "sglang_bench_output_len": _v(B, "int", (2, 1048576), "tokens (TPOT needs two)"),
    "sglang_bench_seed": _v(B, "int", (0, 2**31 - 1)),
    "sglang_bench_request_rate": _v(B, "float", (0.001, 1000000), also=["inf"], what="requests/s, or inf"),
    "sglang_bench_slo_ttft_ms": _v(B, "float", (0.001, 3600000), "ms"),
    "sglang_bench_slo_tpot_ms": _v(B, "float", (0.001, 3600000), "ms"),
    "sglang_bench_step_timeout": _v(B, "int", (1, 86400), "seconds"),
    "sglang_bench_request_timeout": _v(B, "int", (1, 86400), "seconds"),
    "sglang_bench_metrics_interval": _v(B, "float", (0.1, 3600), "seconds"),
    "sglang_bench_regression_thresholds": _v(B, "map"),
    "sglang_bench_compare_with": _v(B, "path", also=["auto", "none"], what="auto, none or a report directory"),
    "sglang_bench_reports_dir": _v(B, "path"),
    "sglang_bench_inventory_name": _v(B, "str"),
    "sglang_bench_aiperf_version": _v(B, "str"),
    "sglang_bench_aiperf_venv": _v(B, "path"),
    "sglang_bench_aiperf_wheelhouse": _v(B, "path_or_empty"),
    "sglang_bench_python": _v(B, "path"),
    "sglang_bench_accuracy_after_deploy": _v(B, "bool"),
    "sglang_bench_accuracy_questions": _v(B, "int", (1, 1319), "questions (GSM8K's test set has 1319)"),
    "sglang_bench_accuracy_shots": _v(B, "int", (0, 20), "few-shot examples"),
    "sglang_bench_accuracy_max_tokens": _v(B, "int", (1, 32768), "tokens per answer"),
    "sglang_bench_accuracy_temperature": _v(B, "float", (0, 2), "0 (greedy) is what a baseline assumes"),
    "sglang_bench_accuracy_endpoint": _v(B, "choice", choices=["completions", "chat"]),
    "sglang_bench_accuracy_concurrency": _v(B, "int", (1, 4096), "requests at once"),
    "sglang_bench_accuracy_step_questions": _v(B, "int", (1, 1319), "questions per progress line"),
    "sglang_bench_accuracy_request_timeout": _v(B, "int", (1, 86400), "seconds"),
    "sglang_bench_accuracy_step_timeout": _v(B, "int", (1, 86400), "seconds"),
    "sglang_bench_accuracy_metric": _v(B, "choice", choices=["flexible", "strict"]),
    "sglang_bench_accuracy_floor": _v(B, "fraction", (0, 1), "an accuracy (0.9 is 90 %)"),
    "sglang_bench_accuracy_max_drop": _v(B, "fraction", (0, 1), "a relative drop (0.05 is 5 %)"),
    "sglang_bench_accuracy_max_failed_share": _v(B, "fraction", (0, 1), "a share of the questions (0.02 is 2 %)"),
    "sglang_bench_accuracy_baseline": _v(B, "path", also=["auto", "none"], what="auto, none or a report directory"),
    "sglang_bench_accuracy_dataset_version": _v(B, "str"),
    "sglang_bench_accuracy_venv": _v(B, "path"),
    "sglang_bench_accuracy_wheelhouse": _v(B, "path_or_empty"),
    # roles/sglang_monitoring
    "sglang_monitoring_host": _v(M, "str"),
    "sglang_monitoring_file_sd_path": _v(M, "path_or_empty"),
    "sglang_monitoring_rules_path": _v(M, "path_or_empty"),
    "sglang_monitoring_dashboard_path": _v(M, "path_or_empty"),
    "sglang_monitoring_promtool": _v(M, "path_or_empty"),
    "sglang_monitoring_file_owner": _v(M, "text"),
    "sglang_monitoring_file_group": _v(M, "text"),
    "sglang_monitoring_file_mode": _v(M, "mode"),
    "sglang_monitoring_cluster": _v(M, "str"),
    "sglang_monitoring_worker_groups": _v(M, "list_of_str"),
    "sglang_monitoring_router_group": _v(M, "str"),
    "sglang_monitoring_ttft_slo_seconds": _v(M, "float", (0.001, 3600), "seconds (2.0, not 2000 ms)"),
    "sglang_monitoring_tpot_slo_seconds": _v(M, "float", (0.0001, 60), "seconds (0.1, not 100 ms)"),
    "sglang_monitoring_slo_quantile": _v(M, "fraction", (0.5, 0.999), "a quantile (0.95, not 95)"),
    "sglang_monitoring_slo_for": _v(M, "duration"),
    "sglang_monitoring_down_for": _v(M, "duration"),
    "sglang_monitoring_router_health_window": _v(M, "duration"),
    "sglang_monitoring_queue_threshold": _v(M, "int", (1, 1000000), "queued requests"),
    "sglang_monitoring_queue_for": _v(M, "duration"),
    "sglang_monitoring_kv_cache_usage_threshold": _v(M, "fraction", (0.01, 1), "a share of KV cache (0.95, not 95)"),
    "sglang_monitoring_kv_cache_for": _v(M, "duration"),
    "sglang_monitoring_kv_failure_window": _v(M, "duration"),
    "sglang_monitoring_kv_stranded_for": _v(M, "duration"),
}  # fmt: skip
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
        "Written from the table in `plugins/module_utils/plan/variables.py` by `python3 tests/unit/test_variables.py "
        "--write`; a unit test fails when this page is stale. Each role's preflight refuses a value outside its range.",
        "",
    ]
    for role in ROLES:
        lines += [f"## {role}", "", "| variable | kind and range |", "|---|---|"]
        lines += [f"| `{name}` | {range_text(name)} |" for name in names(role)]
        lines.append("")
    return "\n".join(lines)
