# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The deployment's plans joined once per run (documentation: plugins/modules/deployment_plan.py).

On the controller only, run once: every host's plan (what its host_plan returned, O(looks)) joined by plan.deployment,
the KV agreement of prefill and decode across the deployment (plan.pd_problems), the instances of each role
(rolling.role_totals), the retire check (cluster_rules.retire_problems, with sglang_retire_roles) and the worker command
lines grouped by the program that parses them (plan.cli_check_groups), each group checked once on one host by the
next task."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.action.host_plan import TaskVariables
from ansible_collections.disagg.sglang.plugins.module_utils.plan import cluster_rules, plan
from ansible_collections.disagg.sglang.plugins.module_utils.units import rolling


def deployment_plan(looks, compatible, batch, retire_roles=()):
    """The deployment's plans joined (plan.deployment's keys) with pd_problems, role_totals, retire_problems and
    cli_checks, of LOOKS {host: what its host_plan returned ({} where it did not run)}; COMPATIBLE:
    sglang_engine_compatible_versions, BATCH: sglang_rolling_batch, RETIRE_ROLES: sglang_retire_roles (the retire
    check, cluster_rules.retire_problems, which the preflight's last play asserts once the router's plan spoke)."""
    joined = plan.deployment(looks)
    specs = [spec for host_specs in joined["units"].values() for spec in host_specs]
    totals = rolling.role_totals(specs)
    return {
        **joined,
        "pd_problems": plan.pd_problems(
            specs,
            {"compatible": compatible, "batch": batch, "batches": joined["batches"], "deployed": joined["deployed"]},
        ),
        "role_totals": totals,
        "retire_problems": cluster_rules.retire_problems(joined["retired"], totals, list(retire_roles or [])),
        "cli_checks": plan.cli_check_groups(joined["units"], joined["venv_ready"], joined["deployed"]),
    }


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec={"looks": {"type": "dict", "required": True}})
        v = TaskVariables(self._templar, task_vars)
        try:
            found = deployment_plan(args["looks"], v["sglang_engine_compatible_versions"], v["sglang_rolling_batch"],
                                    v.get("sglang_retire_roles") or [])  # fmt: skip
        except KeyError as exc:
            raise AnsibleActionFail(f"the deployment's plan reads {exc.args[0]}, which is not defined") from exc
        result.update(changed=False, **found)
        return result
