# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The module disagg.sglang.router_canary, run lean where Ansible would pipeline it (plugin_utils/lean_action.py)."""

from ansible_collections.disagg.sglang.plugins.plugin_utils.lean_action import LeanAction as ActionModule

__all__ = ["ActionModule"]
