#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Bring the systemd units of one host to what the run planned, in one call (module_utils/units/unit_actions)."""

DOCUMENTATION = r"""
---
module: unit_actions
short_description: Restart, start and enable the units of one host as the run planned, after one read of their state
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Reads the state of every unit in one C(systemctl show), then per unit - a unit that is not active has its
    failed state and start limit cleared; a unit whose files changed is restarted; a unit that must run and does not
    is started; a unit not enabled is enabled. A unit that is running and enabled is left alone.
  - A unit systemd refuses to start (a C(User=) that does not exist, a missing C(ExecStart=) path) does not fail the
    task; it is named in C(errors), and the health wait that follows sees it failed and rolls it back.
options:
  units:
    description: The units that must run and be enabled (not one the rolling step restarts later); C(.service) is
      added to a name without a suffix.
    type: list
    elements: str
    required: true
  restart:
    description: The units of C(units) whose unit or environment file changed in this run.
    type: list
    elements: str
    default: []
  daemon_reload:
    description: Reload systemd first (a unit file changed).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reads the state and reports what it would do; does nothing.
  diff_mode:
    support: none
    details: The unit files' own tasks show their diff.
"""

EXAMPLES = r"""
- name: Restart the changed decode, keep the prefill running
  disagg.sglang.unit_actions:
    units: [sglang-prefill0, sglang-decode0]
    restart: [sglang-decode0]
    daemon_reload: true
"""

RETURN = r"""
actions:
  description: What was done (in check mode, what would be) per unit that needed anything.
  type: dict
  returned: always
  sample: {"sglang-decode0.service": ["restart"]}
errors:
  description: Per unit, what systemd refused.
  type: dict
  returned: always
restarts:
  description: Per unit, its restart count (C(NRestarts)) after the actions; the health wait counts a crash from it.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.units.unit_actions import apply

ARGUMENT_SPEC = {
    "units": {"type": "list", "elements": "str", "required": True},
    "restart": {"type": "list", "elements": "str", "default": []},
    "daemon_reload": {"type": "bool", "default": False},
}
MODULE_OPTIONS = {"supports_check_mode": True}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    module.exit_json(
        **apply(
            run, module.params["units"], module.params["restart"], module.params["daemon_reload"], module.check_mode
        )
    )


if __name__ == "__main__":
    main()
