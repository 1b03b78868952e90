"""The variables a sandbox-shaped inventory gives one host, resolved as Ansible resolves them, for the plan's
pure functions: the roles' defaults and vars, the inventory's group_vars, extra vars, templated by Ansible's own
Templar. Unit tests feed host_plan / router_plan exactly what roles/sglang/tasks/plan.yml and
roles/sglang_router/tasks/plan.yml feed them, without a host.
"""

from pathlib import Path

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan_inputs

REPO = Path(__file__).resolve().parents[2]
ROLE_FILES = [
    "roles/sglang/defaults/main.yml",
    "roles/sglang_deps/defaults/main.yml",
    "roles/sglang_router/defaults/main.yml",
    "roles/sglang_router/vars/main.yml",
    "roles/sglang_deps/vars/main.yml",
]
GROUPS = ("prefill", "decode", "router")


def _load(loader, path):
    return loader.load_from_file(str(path), trusted_as_template=True) or {}


def host_vars(inventory="inventories/sandbox", host="pytest-badinv-1", groups=GROUPS, extra=None, host_extra=None):
    """{variable: value} of one host in all groups of `groups` (every role on that one host), templated."""
    loader = DataLoader()
    inv = REPO / inventory
    variables = {}
    for rel in ROLE_FILES:
        variables.update(_load(loader, REPO / rel))
    variables.update(_load(loader, inv / "group_vars" / "all.yml"))
    for group in groups:
        path = inv / "group_vars" / f"{group}.yml"
        if path.exists():
            variables.update(_load(loader, path))
    variables.update(host_extra or {})
    variables.update(extra or {})
    variables.update(_load(loader, REPO / "roles/sglang/vars/main.yml"))
    groups_map = {g: [host] for g in groups}
    variables.update(
        {
            "inventory_hostname": host,
            "group_names": list(groups),
            "groups": groups_map,
            "inventory_dir": str(inv),
            "ansible_host": host,
        }
    )
    variables.update(extra or {})  # extra vars win over role vars too
    templar = Templar(loader=loader, variables=variables)

    def resolve(name):
        value = variables[name]
        return templar.template(trust_as_template(value) if isinstance(value, str) else value)

    # What the preflight's host_plan sets (plan_inputs.venv_paths) and roles/sglang/vars/main.yml's _sglang_colocated
    # (the unit Templar has no collection filters): the same functions.
    variables["_sglang_colocated"] = plan_inputs.colocated(groups_map)
    if "sglang_deps_venv_paths" not in variables:
        try:
            variables["sglang_deps_venv_paths"] = plan_inputs.venv_paths(Resolved(variables, resolve))
        except (TypeError, ValueError, KeyError):  # a bad value is the variable table's message, not ours
            variables["sglang_deps_venv_paths"] = {}
    return templar, variables, resolve


class Resolved:
    """The variables as plugins/action/host_plan.py gives them to plan_inputs: each templated when read; a variable
    that is not defined is not in it."""

    def __init__(self, variables, resolve):
        self._variables = variables
        self._resolve = resolve

    def __contains__(self, name):
        return name in self._variables

    def __getitem__(self, name):
        if name not in self._variables:
            raise KeyError(name)
        return self._resolve(name)

    def get(self, name, default=None):
        return self[name] if name in self._variables else default
