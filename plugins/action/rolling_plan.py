# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The batches of a rolling restart in one task (documentation: plugins/modules/rolling_plan.py).

On the controller only: rolling.rolling_plan on the deferred units of every host of the play (what units.yml and
the stranded-KV step handed to the rolling step), the batch size and the deployment's role totals. Nothing runs on a
host."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.module_utils.units import rolling

OPTIONS = {"deferred": list, "batch": int, "totals": dict}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        unknown = sorted(set(args) - set(OPTIONS))
        if unknown:
            raise AnsibleActionFail("; ".join(f"unknown option {key}" for key in unknown))
        try:
            batch = int(args.get("batch", 1))
        except (TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"batch must be an int: {exc}") from exc
        deferred, totals = args.get("deferred") or [], args.get("totals") or {}
        wrong = [f"{key} must be a {kind.__name__}" for key, kind, value in
                 (("deferred", list, deferred), ("totals", dict, totals)) if not isinstance(value, kind)]  # fmt: skip
        if wrong or not all(isinstance(u, dict) for u in deferred):
            raise AnsibleActionFail("; ".join(wrong) or "deferred must be a list of unit specs")
        result.update(changed=False, batches=rolling.rolling_plan(list(deferred), {"batch": batch, "totals": totals}))
        return result
