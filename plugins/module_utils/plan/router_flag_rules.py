# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The rules on the router's flags, sglang-router's and SMG's: what sglang_router_extra_flags may not set, and SMG's
shutdown grace against the unit's stop timeout.

The flag tables themselves ({flag: variable} for each router: ROUTER_FLAGS for sglang-router, SMG_FLAGS for SMG,
ROUTER_FLAG_ALIASES for their other spellings, and ROUTER_IMPLS, which picks a table per sglang_router_impl) live in
units/router_flags.py, which renders them into the router's command line. These rules read them;
tests/unit/plan/test_router_rules.py and tests/cases/bad_inventories.yml trip each.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.plan.rules import (
    derived_flag_problems,
    flag_name,
    positive_int,
)
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf

# Router flags the collection sets from a variable, and their other spellings: {flag: use instead}.
DERIVED_ROUTER_FLAGS = {**rf.ROUTER_FLAGS, **rf.SMG_FLAGS, **rf.ROUTER_FLAG_ALIASES}


def smg_shutdown_problems(impl, flag_values, stop_timeout):
    """SMG drains for sglang_router_smg_shutdown_grace_period after SIGTERM: below the unit's stop timeout
    (sglang_stop_timeout), or systemd kills it mid-drain."""
    grace = (flag_values or {}).get("sglang_router_smg_shutdown_grace_period")
    if (
        not isinstance(impl, str)
        or impl != "smg"
        or not positive_int(grace)
        or not positive_int(stop_timeout)
        or int(grace) < int(stop_timeout)
    ):
        return []
    return [f"sglang_router_smg_shutdown_grace_period ({grace}) must be below sglang_stop_timeout ({stop_timeout}): "
            "SMG drains its requests for that long after SIGTERM, and systemd kills the router at the stop timeout, "
            "mid-drain. Lower the grace period or raise sglang_stop_timeout"]  # fmt: skip


def router_flag_problems(extra_flags):
    """Router extra flags that would put a secret on its command line, or set what a variable sets."""
    if not isinstance(extra_flags, dict):
        return []
    given = {flag_name(k) for k in extra_flags}
    names = given & {"api-key", "control-plane-api-keys"}
    problems = []
    if names:
        problems.append(
            f"sglang_router_extra_flags sets {' and '.join(sorted(names))}: those would stand on the router's "
            "command line, which every user of the host sees in ps. Set sglang_router_api_key (ansible-vault) instead"
        )
    problems += derived_flag_problems(extra_flags, "sglang_router_extra_flags", DERIVED_ROUTER_FLAGS)
    return problems
