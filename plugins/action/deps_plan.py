# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The dependency checks of one host and this run's venvs, in one task on the controller (documentation:
plugins/modules/deps_plan.py): plan_inputs.deps_problems and plan_inputs.venv_paths on the task's variables, as the
preflight's host_plan does them where no venvs are named yet (the deps role run on its own runs this instead)."""

from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.action.host_plan import TaskVariables
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan_inputs


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self.validate_argument_spec(argument_spec={})  # no options
        v = TaskVariables(self._templar, task_vars)
        problems = plan_inputs.deps_problems(v, list(task_vars.get("group_names") or []))
        if problems:
            return {**result, "failed": True, "changed": False, "msg": ". ".join(problems) + "."}
        result.update(changed=False, venv_paths=plan_inputs.venv_paths(v))
        return result
