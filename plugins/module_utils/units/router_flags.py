# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The router's flags and its command line: the flag tables of both router programs and how they are rendered.

Here: sglang-router's flag table (ROUTER_FLAGS) and SMG's (SMG_FLAGS), each {flag: variable}, one variable of the
router role per flag; the off spelling of SMG's switch (SWITCH_OFF); the other spellings of those flags
(ROUTER_FLAG_ALIASES); and the router programs (ROUTER_IMPLS, one row per sglang_router_impl: the module the unit
runs, its distribution, its flag table). router_flags turns the variables' values into the router's flags and
router_lines into its PD command line, one flag per line, with the rendering of units/sglang_flags.py that the
worker lines use. router_verify_args gives the router venv's check its arguments from the same rows; running_impl
and running_urls read a deployed router's record: which program answers, and where.

The rules on these tables (what sglang_router_extra_flags may not set, SMG's shutdown grace) live in
plan/router_flag_rules.py.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.units.sglang_flags import (
    FlagError,
    merge_flags,
    render_lines,
)

# The router flags the collection sets, each from one variable: {flag: variable}. The router's plan
# (roles/sglang_router/tasks/plan.yml) reads exactly these variables and router_flags() turns them into flags;
# sglang_router_extra_flags may not set one of them (router_flag_rules.router_flag_problems), nor an alias below.
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
