# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""A role's variables against the collection's variable table in one task (documentation:
plugins/modules/check_variables.py).

On the controller, from the task's variables: each variable the role's entry points list
(module_utils/plan/variables.py documented) that is defined is templated and checked (type, range, choices, the
members of lists); the task fails naming every problem. No module runs on the host."""

from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.module_utils.plan import variables


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec={"role": {"type": "str", "required": True}})
        try:
            names = variables.documented(args["role"])
        except KeyError as exc:
            return {**result, "failed": True, "changed": False, "msg": f"role: {exc.args[0]}"}
        task_vars = task_vars or {}
        # only the role's own variables are templated: another role's default may need what this play lacks
        values = {name: self._templar.template(task_vars[name]) for name in names if name in task_vars}
        problems = variables.role_problems(args["role"], values)
        result.update(changed=False, problems=problems)
        if problems:
            result.update(failed=True, msg=". ".join(problems) + ".")
        return result
