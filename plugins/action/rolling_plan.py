# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The batches of a rolling restart in one task (documentation: plugins/modules/rolling_plan.py).

On the controller only: rolling.rolling_plan on the deferred units of every host of the play (what units.yml handed
to the rolling step), the batch size and the deployment's role totals. Nothing runs on a
host."""

from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.module_utils.units import rolling

OPTIONS = {
    "deferred": {"type": "list", "elements": "dict", "default": []},
    "batch": {"type": "int", "default": 1},
    "totals": {"type": "dict", "default": {}},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=OPTIONS)
        plan = rolling.rolling_plan(list(args["deferred"]), {"batch": args["batch"], "totals": args["totals"]})
        result.update(changed=False, batches=plan)
        return result
