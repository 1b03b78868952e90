# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the plan: inventory + facts + profile -> unit specs and the problems with them.

Documentation: one YAML file per filter beside this file. Logic: plugins/module_utils/plan/plan.py, rules.py, units.py.
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.module_utils.common.lazy import Lazy

# imported at a filter's first call, not when a template naming one is compiled (module_utils/common/lazy.py says why)
plan = Lazy("plan.plan")
rules = Lazy("plan.rules")
venvs = Lazy("deps.venvs")
plan_inputs = Lazy("plan.plan_inputs")
sf = Lazy("units.sglang_flags")


def deps_problems(values, group_names):
    """The dependency checks of a host (see plan_inputs.deps_problems). VALUES: {name: value} of the defined
    variables of plan_input_pattern('deps')."""
    return plan_inputs.deps_problems(dict(values or {}), list(group_names or []))


def venv_paths(values):
    """This run's venvs of a host, named by their package sets (see plan_inputs.venv_paths). VALUES: as for
    deps_problems."""
    return plan_inputs.venv_paths(dict(values or {}))


def plan_input_pattern(kind):
    """A regular expression matching the names of the variables the plan's inputs of KIND read (deps: the deps
    checks and the venvs' names), for query('ansible.builtin.varnames', ...): the defined ones."""
    names = {"deps": plan_inputs.deps_names}
    if kind not in names:
        raise AnsibleFilterError(f"plan_input_pattern: {kind!r} is not one of {', '.join(names)}")
    return "^(" + "|".join(names[kind]()) + ")$"


def venvs_to_remove(stamps, in_use, current):
    """The venvs a host no longer needs (see venvs.to_remove). stamps: ansible.builtin.find's files (each venv's
    stamp file); in_use: the pythons the host's records run; current: this run's venv paths."""
    found = [venvs.found(f.get("path"), f.get("mtime")) for f in stamps or [] if isinstance(f, dict)]
    return venvs.to_remove(found, [venvs.venv_of(p) for p in in_use or []], list(current or []))


def systemd_env(pair):
    """NAME=value quoted for a systemd Environment= line (specifiers escaped, $ left alone)."""
    return sf.systemd_env_quote(pair)


def systemd_line(tokens):
    """One argument line, quoted for a systemd Exec line."""
    if isinstance(tokens, str):
        raise AnsibleFilterError("systemd_line takes a list of tokens, not a string")
    return " ".join(sf.systemd_quote(t) for t in tokens)


class FilterModule:
    def filters(self):
        return {
            "deps_problems": deps_problems,
            "venv_paths": venv_paths,
            "plan_input_pattern": plan_input_pattern,
            "venvs_to_remove": venvs_to_remove,
            "systemd_line": systemd_line,
            "systemd_env": systemd_env,
        }
