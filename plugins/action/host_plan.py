# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The plan of one host in one task (documentation: plugins/modules/host_plan.py).

On the host: one run of the module disagg.sglang.host_look, lean where Ansible would pipeline it
(plugins/plugin_utils/lean_module.py: without AnsiballZ's ansible.module_utils.basic). On the controller:
plan.host_plan on what it read, and the host's rules (rules.no_gpu_problems where the look read the topology).
The preflight runs this once per host; three tasks (look, plan, assert) would each cost the host a forked worker,
which 256 hosts pay 256 times."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.module_utils import plan, rules, variables
from ansible_collections.disagg.sglang.plugins.plugin_utils import lean_module

# what host_look returns, returned as it returns it (the preflight registers it: the router's plan and the
# deployment's venv check read it)
LOOK_KEYS = ("paths", "records", "listeners", "bind", "exists")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        # checked here, not with validate_argument_spec: it copies the arguments (the whole plan input, Ansible's
        # tagged values) once per host, which 256 hosts pay 256 times
        args = {"problems": [], **self._task.args}
        kinds = (("look", dict), ("plan", dict), ("problems", list), ("variables", str))
        wrong = [f"{key} must be a {kind.__name__}" for key, kind in kinds
                 if not isinstance(args.get(key, kind()), kind)]  # fmt: skip
        unknown = sorted(set(args) - {"look", "plan", "problems", "variables"})
        if wrong or unknown:
            raise AnsibleActionFail("; ".join(wrong + [f"unknown option {key}" for key in unknown]))
        if not args["plan"].get("host"):
            raise AnsibleActionFail("plan.host is required (the inventory hostname)")
        if args.get("variables"):
            # the role's variables against the collection's table first, as the assert before this task did: on
            # the controller, from the task's variables, instead of a task of its own on every host
            role = args["variables"]
            values = {name: self._templar.template(task_vars[name]) for name in variables.names(role)
                      if name in task_vars}  # fmt: skip
            problems = variables.variable_problems(role, values)
            if problems:
                return {**result, "failed": True, "changed": False, "msg": ". ".join(problems) + "."}
        look = lean_module.execute(self, "disagg.sglang.host_look", dict(args["look"]), task_vars)
        if look.get("failed"):
            return {**result, **look}
        read_topology = args["look"].get("topology") is not None
        facts = look.get("ansible_facts") or {}
        inputs = dict(args["plan"])
        inputs.update(host_paths=look.get("paths") or {}, listeners=look.get("listeners") or {},
                      deployed=look.get("records") or {})  # fmt: skip
        if read_topology:
            inputs["topology"] = facts.get("gpu_topology")
        planned = plan.host_plan(inputs)
        no_gpu = rules.no_gpu_problems(inputs["topology"], inputs["host"]) if read_topology else []
        problems = no_gpu + list(args["problems"]) + list(planned["problems"])
        result.update({key: look.get(key) for key in LOOK_KEYS})
        result["changed"] = False
        result["plan"] = planned
        # the topology role's warnings where this run read the topology here, the plan's, and the placement
        result["lines"] = (
            ((facts.get("gpu_topology") or {}).get("warnings") or [] if read_topology else [])
            + list(planned["warnings"])
            + plan.placement_lines(planned["units"])
        )
        if facts:
            result["ansible_facts"] = facts
        if problems:
            result.update(failed=True, msg=". ".join(problems) + ".")
        return result
