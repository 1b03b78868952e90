# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters that turn profile, inventory and placement into unit specs (logic in module_utils)."""

from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.module_utils import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.module_utils import units


def _wrap(func):
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except sf.FlagError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    call.__name__ = func.__name__
    call.__doc__ = func.__doc__
    return call


def systemd_line(tokens):
    """One argument line, quoted for a systemd Exec line."""
    return " ".join(sf.systemd_quote(t) for t in tokens)


class FilterModule:
    def filters(self):
        return {
            "worker_units": _wrap(units.worker_units),
            "router_unit": _wrap(units.router_unit),
            "pd_workers": _wrap(units.pd_workers),
            "kv_contract": units.kv_contract,
            "instance_problems": units.instance_problems,
            "kv_mismatches": units.kv_mismatches,
            "systemd_line": systemd_line,
        }
