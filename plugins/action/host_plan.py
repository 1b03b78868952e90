# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The plan of one host in one task (documentation: plugins/modules/host_plan.py).

On the controller, from the task's variables (module_utils/plan/plan_inputs.py): the dependency checks and this run's
venvs where no venvs are named yet, the variables against the collection's table, and the inputs of the plan. On the
host: one run of the module disagg.sglang.host_look, as Ansible runs any module. On the controller again:
plan.host_plan on what it read, and the host's rules (rules.no_gpu_problems where the look read the topology).

The preflight runs this once per host. The inputs are Python, not the task's arguments: Ansible compiles each
template anew in the worker forked for each host, and at 256 hosts templated inputs cost more than the look."""

import os

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan, plan_inputs, rules

# what host_look returns, returned as it returns it (the preflight registers it: the router's plan and the
# deployment's venv check read it)
LOOK_KEYS = ("paths", "records", "listeners", "bind", "exists", "model")
OPTIONS = {"topology": {"type": "bool", "default": False}, "variables": {"type": "raw", "default": []}}
# the shipped flag profiles (the collection's profiles/, beside plugins/)
SHIPPED_PROFILES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "profiles"))
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class TaskVariables:
    """The task's variables, each templated when it is first read; a variable that is not defined is not in it."""

    def __init__(self, templar, task_vars):
        self._templar = templar
        self._vars = task_vars
        self._done = {}

    def __contains__(self, name):
        return name in self._vars

    def __getitem__(self, name):
        if name not in self._done:
            self._done[name] = self._templar.template(self._vars[name])
        return self._done[name]

    def get(self, name, default=None):
        return self[name] if name in self._vars else default


def read_profile(found):
    """{path, content} of the profile file FOUND names (plan_inputs.profile_file), read here on the controller as
    the file lookup reads it; a file that is not YAML fails naming it."""
    if found["path"] is None:
        return {"path": None, "content": {}}
    try:
        with open(found["path"], encoding="utf-8") as handle:
            content = yaml.load(handle.read().rstrip(), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleActionFail(f"the flag profile {found['path']} (sglang_profile) could not be read: {exc}") from exc
    return {"path": found["path"], "content": content or {}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _fail(self, result, problems):
        return {**result, "failed": True, "changed": False, "msg": ". ".join(problems) + "."}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=OPTIONS)
        if not isinstance(args["variables"], (str, list)):
            raise AnsibleActionFail("variables must be a role's name or a list of them")
        v = TaskVariables(self._templar, task_vars)
        group_names = list(task_vars.get("group_names") or [])
        # the dependency checks where no venvs are named yet in this play (site.yml's preflight; the deps role run
        # on its own checked and named them), then the variables against the table, then this run's venvs
        named = "sglang_deps_venv_paths" in v
        problems = [] if named else plan_inputs.deps_problems(v, group_names)
        # every role's variables this run reads (site.yml's preflight: the monitoring and accuracy plays' too, so a bad
        # value is named before any host changes, not at the end of the run)
        table_roles = args.get("variables") or []
        for role in [] if problems else [table_roles] if isinstance(table_roles, str) else table_roles:
            try:
                problems = problems + plan_inputs.table_problems(v, role)
            except KeyError as exc:
                raise AnsibleActionFail(f"variables: {exc.args[0]}") from exc
        if problems:
            return self._fail(result, problems)
        venv_paths = dict(v["sglang_deps_venv_paths"] or {}) if named else plan_inputs.venv_paths(v)
        roles = plan_inputs.worker_roles(v, group_names)
        read_topology = bool(args.get("topology")) and bool(roles)
        found = (plan_inputs.profile_file(v.get("sglang_profile"), task_vars.get("inventory_dir") or "",
                                          SHIPPED_PROFILES)
                 if roles else {"path": None, "problems": []})  # fmt: skip
        context = {
            "host": task_vars["inventory_hostname"],
            "group_names": group_names,
            "colocated": plan_inputs.colocated(task_vars.get("groups")),
            "topology": (task_vars.get("ansible_facts") or {}).get("gpu_topology"),
        }
        inputs = plan_inputs.host_plan(v, context, venv_paths, read_profile(found))
        look_args = plan_inputs.host_look(v, roles, venv_paths, read_topology)
        look = self._execute_module(module_name="disagg.sglang.host_look", module_args=look_args, task_vars=task_vars)
        if look.get("failed"):
            return {**result, **look}
        facts = look.get("ansible_facts") or {}
        inputs.update(host_paths=look.get("paths") or {}, listeners=look.get("listeners") or {},
                      deployed=look.get("records") or {}, model=look.get("model"))  # fmt: skip
        if read_topology:
            inputs["topology"] = facts.get("gpu_topology")
            inputs["readiness"] = facts.get("host_readiness")
        planned = plan.host_plan(inputs)
        no_gpu = rules.no_gpu_problems(inputs["topology"], inputs["host"]) if read_topology else []
        problems = no_gpu + list(found["problems"]) + list(planned["problems"])
        result.update({key: look.get(key) for key in LOOK_KEYS})
        result.update(changed=False, plan=planned, venv_paths=venv_paths)
        if roles:  # the worker host's own rolling batch, which its restart rule reads (the deployment's KV check)
            result["rolling_batch"] = v.get("sglang_rolling_batch")
        # the topology's warnings where this run read it here, the plan's, and the placement. The topology itself is
        # not returned as the fact gpu_topology (the topology role sets that): Ansible copies a host's facts for every
        # later task of the host, and the plan keeps what it placed.
        result["lines"] = (
            ((facts.get("gpu_topology") or {}).get("warnings") or [] if read_topology else [])
            + list(planned["warnings"])
            + plan.placement_lines(planned["units"])
            + plan.moved_lines(planned["units"], inputs.get("deployed"), inputs.get("topology"))
        )
        if problems:
            result.update(failed=True, msg=". ".join(problems) + ".")
        return result
