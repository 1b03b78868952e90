# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the plan: inventory + facts + profile -> unit specs and the problems with them.

Documentation: one YAML file per filter beside this file. Logic: plugins/module_utils/plan/plan.py, rules.py, units.py.
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.module_utils.common.lazy import Lazy

# imported at a filter's first call, not when a template naming one is compiled (module_utils/common/lazy.py says why)
sf = Lazy("units.sglang_flags")


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
            "systemd_line": systemd_line,
            "systemd_env": systemd_env,
        }
