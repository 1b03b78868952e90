# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The action of every module that runs lean (plugins/plugin_utils/lean_module.py): meta/runtime.yml routes each
such module's action here, so a task that names the module runs it lean where Ansible would pipeline it, and as
Ansible runs it everywhere else."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.plugin_utils import lean_module


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        # the module the task names (its action is routed here): resolved_action names this plugin
        module = self._task.action if "." in self._task.action else f"disagg.sglang.{self._task.action}"
        if not module.startswith("disagg.sglang.") or module == "disagg.sglang.lean":
            raise AnsibleActionFail(f"{module}: the action disagg.sglang.lean runs the collection's modules only")
        result.update(lean_module.execute(self, module, dict(self._task.args), task_vars))
        return result
