# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The action of every module that runs lean (plugins/plugin_utils/lean_module.py): plugins/action/<module>.py
names this class its ActionModule, so a task that names the module runs it lean where Ansible would pipeline it,
and as Ansible runs it everywhere else."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash
from ansible_collections.disagg.sglang.plugins.plugin_utils import lean_module


class LeanAction(ActionBase):
    """As Ansible's own action of a module (ansible.builtin.normal), with the module run through
    lean_module.execute."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        # the module the task names: the action plugin has its name
        module = self._task.resolved_action
        if not module.startswith("disagg.sglang."):
            raise AnsibleActionFail(f"{module}: the lean action runs the collection's own modules only")
        wrap_async = self._task.async_val
        result = merge_hash(
            result, lean_module.execute(self, module, dict(self._task.args), task_vars, wrap_async=wrap_async)
        )
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # where the fallback made one
        return result
