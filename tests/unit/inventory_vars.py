"""The variables a sandbox-shaped inventory gives one host, resolved as Ansible resolves them, for the plan's
pure functions: the roles' defaults and vars, the inventory's group_vars, extra vars, templated by Ansible's own
Templar. Unit tests feed host_plan / router_plan exactly what roles/sglang/tasks/plan.yml and
roles/sglang_router/tasks/plan.yml feed them, without a host.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible.errors import AnsibleError
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


def adhoc_module(tmp_path, module, variables, v, *, host="pytest-badinv-1", groups=GROUPS, args=None, keep=None):
    """Run MODULE of the collection on HOST as `ansible HOST -m MODULE` with the checkout's ansible.cfg, the host in
    GROUPS and every sglang_ variable (those KEEP accepts, all by default) that host_vars resolved (V) given as extra
    vars, as the play gives them. Returns (status such as "HOST | SUCCESS", the result)."""
    values = {}
    for name in variables:
        if name.startswith("sglang_") and (keep is None or keep(name)):
            try:
                values[name] = v(name)
            except AnsibleError:  # a variable of another role that this inventory cannot template
                continue
    (tmp_path / "vars.json").write_text(json.dumps(values))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    children = {role: {"hosts": {host: None}} for role in groups}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {host: local}, "children": children}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    argv = [str(Path(sys.executable).with_name("ansible")), host, "-i", str(tmp_path / "hosts.yml"), "-o",
            "-e", f"@{tmp_path / 'vars.json'}", "-m", f"disagg.sglang.{module}"]  # fmt: skip
    if args is not None:
        argv += ["-a", json.dumps(args)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=REPO, timeout=120)
    head, sep, body = proc.stdout.partition("=> ")
    assert sep, proc.stdout + proc.stderr
    return head.strip(), json.loads(body)
