# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the plan: inventory + facts + profile -> unit specs and the problems with them.

Documentation: one YAML file per filter beside this file. Logic: plugins/module_utils/plan.py, rules.py, units.py.
"""

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.module_utils import plan, rules, variables
from ansible_collections.disagg.sglang.plugins.module_utils import sglang_flags as sf


def host_plan(inputs):
    """The worker units of one host and the problems with them (see plan.host_plan)."""
    return plan.host_plan(inputs)


def router_plan(worker_specs, inputs):
    """The router unit of one host, built from the planned worker specs (see plan.router_plan)."""
    return plan.router_plan(list(worker_specs), inputs)


def pd_problems(worker_specs):
    """What prefill and decode disagree on in the KV handoff (see plan.pd_problems)."""
    return plan.pd_problems(list(worker_specs))


def profile_file(name, inventory_dir, shipped_dir):
    """{path, problems}: the first existing file sglang_profile names, or a message naming where it looked."""
    candidates = plan.profile_candidates(name, inventory_dir, shipped_dir)
    for path in candidates:
        if os.path.isfile(path):
            return {"path": path, "problems": []}
    names = os.listdir(shipped_dir) if os.path.isdir(shipped_dir) else []
    shipped = sorted(f[:-4] for f in names if f.endswith(".yml"))
    return {
        "path": None,
        "problems": [
            f"sglang_profile '{name}' is not a shipped profile nor a file of the inventory (looked for "
            f"{', '.join(candidates)}); choose one of {', '.join(shipped)}, put {name}.yml into the inventory's "
            "profiles/ directory, or give the path of a profile file"
        ],
    }


def deps_problems(packages, packages_nodeps, wheelhouse=""):
    """What is wrong with the venv's package lists (see rules.deps_problems)."""
    return rules.deps_problems(packages, packages_nodeps, wheelhouse)


def host_paths(paths):
    """{variable: path or [paths]} -> {variable or variable[i]: path}: the absolute ones, for the preflight's stat."""
    return plan.host_paths(paths)


def stat_found(results):
    """The results of the preflight's stat loop over host_paths -> {variable: {path, exists, isdir}}."""
    return plan.stat_found(results)


def listeners(stdout):
    """The preflight's listener scan (JSON {port: owner}) -> {port: owner}; {} when it could not run."""
    return plan.parse_listeners(stdout)


def systemd_env(pair):
    """NAME=value quoted for a systemd Environment= line (specifiers escaped, $ left alone)."""
    return sf.systemd_env_quote(pair)


def systemd_line(tokens):
    """One argument line, quoted for a systemd Exec line."""
    if isinstance(tokens, str):
        raise AnsibleFilterError("systemd_line takes a list of tokens, not a string")
    return " ".join(sf.systemd_quote(t) for t in tokens)


def router_flag_variables(router):
    """The variables the router's own flags come from (sglang_flags.ROUTER_FLAGS), for its plan to read."""
    if router != "sglang-router":
        raise AnsibleFilterError(f"router_flag_variables: no flag table for router {router!r}")
    return list(sf.ROUTER_FLAGS.values())


def variable_pattern(role):
    """A regular expression matching exactly the names of ROLE's variables in the table (module_utils/variables.py),
    for query('ansible.builtin.varnames', ...): the defined ones."""
    try:
        return "^(" + "|".join(variables.names(role)) + ")$"
    except KeyError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def variable_problems(values, role):
    """ROLE's variables ({name: value}) checked against the table: their types, ranges and choices."""
    try:
        return variables.variable_problems(role, dict(values or {}))
    except KeyError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {
            "host_plan": host_plan,
            "router_plan": router_plan,
            "pd_problems": pd_problems,
            "profile_file": profile_file,
            "deps_problems": deps_problems,
            "systemd_line": systemd_line,
            "systemd_env": systemd_env,
            "host_paths": host_paths,
            "stat_found": stat_found,
            "listeners": listeners,
            "router_flag_variables": router_flag_variables,
            "variable_pattern": variable_pattern,
            "variable_problems": variable_problems,
        }
