#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Read what the preflight needs to know of one host, in one module run (the logic: module_utils/host_look)."""

DOCUMENTATION = r"""
---
module: host_look
short_description: Read the paths, unit records, TCP listeners and bindable addresses of a host, changing nothing
version_added: "0.1.0"
description:
  - The preflight's one look at a host (roles/sglang/tasks/plan.yml), so a host costs one module run instead of
    one per path, one for the listeners and one for the records.
  - O(paths) are looked at (exists, is a directory); O(record_dir)'s C(<unit>.json) records are read, a record
    that is not JSON returned as its C(unreadable) reason; the TCP listeners are read from C(/proc) with the
    systemd unit (else the command name) of the process holding each; each address of O(bind) is tried as a
    local bind address (port 0, closed at once).
  - Changes nothing, in any mode.
options:
  paths:
    description: "C({variable: absolute path}) to look at."
    type: dict
    default: {}
  record_dir:
    description: The directory of the unit records (C(sglang_record_dir)); not read when left out.
    type: path
  listeners:
    description: Whether to read the TCP listeners.
    type: bool
    default: true
  bind:
    description: Addresses that must be addresses of this host (the workers bind to them).
    type: list
    elements: str
    default: []
  exists:
    description: Paths whose existence to report, no rule attached (the engine venv's python).
    type: list
    elements: path
    default: []
author:
  - disagg.sglang maintainers (!UNKNOWN)
attributes:
  check_mode:
    description: Reads only, so check mode reads what a real run reads.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
"""

EXAMPLES = r"""
- name: Read the paths, records and listeners of this host
  disagg.sglang.host_look:
    paths:
      sglang_model_path: /models/DeepSeek-V4-Flash
    record_dir: /var/lib/sglang/records
    bind: [10.0.1.21]
  register: __look
"""

RETURN = r"""
paths:
  description: "C({variable: {path, exists, isdir}}), isdir null where the path does not exist."
  returned: always
  type: dict
records:
  description: "C({unit: record}) of the records found; C({}) without O(record_dir) or where it does not exist."
  returned: always
  type: dict
listeners:
  description: "C({port: owner}) of the TCP listeners; C({}) when O(listeners) is false."
  returned: always
  type: dict
bind:
  description: "C({address: outcome}): C(ok), or why the address cannot be bound on this host."
  returned: always
  type: dict
exists:
  description: "C({path: bool}) for each path of O(exists)."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils import host_look


def main():
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "dict", "default": {}},
            "record_dir": {"type": "path"},
            "listeners": {"type": "bool", "default": True},
            "bind": {"type": "list", "elements": "str", "default": []},
            "exists": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    paths = {str(k): str(v) for k, v in p["paths"].items()}
    found = host_look.look(paths, p["record_dir"], p["listeners"], p["bind"], p["exists"])
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
