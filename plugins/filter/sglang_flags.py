# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters that build the workers' and the router's command lines (logic in module_utils)."""

from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.module_utils import sglang_flags as sf


def _wrap(func):
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except sf.FlagError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    call.__name__ = func.__name__
    call.__doc__ = func.__doc__
    return call


def worker_lines(instance, profile, role, settings):
    """Argument lines of one worker instance."""
    return sf.render_lines(sf.worker_flags(profile, role, instance, settings))


def worker_env(instance, profile, role, settings):
    """Environment of one worker instance."""
    return sf.worker_env(profile, role, instance, settings)


def systemd_line(tokens):
    """One argument line, quoted for a systemd Exec line."""
    return " ".join(sf.systemd_quote(t) for t in tokens)


class FilterModule:
    def filters(self):
        return {
            "worker_lines": _wrap(worker_lines),
            "worker_env": _wrap(worker_env),
            "router_lines": _wrap(sf.router_lines),
            "render_lines": _wrap(sf.render_lines),
            "systemd_line": systemd_line,
            "systemd_quote": sf.systemd_quote,
        }
