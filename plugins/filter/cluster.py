# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of a deployment over several hosts. Logic: plugins/module_utils/plan/cluster_rules.py, rolling.py."""

from ansible_collections.disagg.sglang.plugins.module_utils.common.lazy import Lazy

# imported at a filter's first call, not when a template naming one is compiled (module_utils/common/lazy.py says why)
cluster_rules = Lazy("plan.cluster_rules")
rolling = Lazy("units.rolling")
rules = Lazy("plan.rules")




def rolling_plan(changed, inputs):
    """The restart batches of the changed worker units (see rolling.rolling_plan)."""
    return rolling.rolling_plan(list(changed), inputs)


def role_totals(worker_specs):
    """{role: instances in the deployment}."""
    return rolling.role_totals(list(worker_specs))


def retire_problems(retired, totals, retire_roles):
    """Messages when the run would retire every instance of a role (see rules.retire_problems)."""
    return rules.retire_problems(list(retired), totals, retire_roles)


def env_file_value(text):
    """The value of one NAME="VALUE" line of an environment file as sglang.env.j2 writes it (quotes, \\ escapes)."""
    return rolling.env_file_value(text)


class FilterModule:
    def filters(self):
        return {
            "rolling_plan": rolling_plan,
            "role_totals": role_totals,
            "env_file_value": env_file_value,
            "retire_problems": retire_problems,
        }
