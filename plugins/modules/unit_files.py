#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Write the files of a host's units in one call (module_utils/units/unit_files)."""

DOCUMENTATION = r"""
---
module: unit_files
short_description: Write (and remove) the environment files, unit files and records of a host's units in one call
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Creates the directories, then writes each file whose content, mode or owner differ, keeping a backup of a
    changed file that existed (for the rollback). Files are written whole and renamed over the old ones.
  - The content of O(env_files) is never logged nor shown in a diff.
  - With O(units), it also reads those units' state in one C(systemctl show) and says whether each already runs and
    is enabled (RV(units_settled)), so the units step skips its M(disagg.sglang.unit_actions) call where no file
    changed and nothing needs doing.
options:
  dirs:
    description: Directories to create, each C({path, mode, owner, group}).
    type: list
    elements: dict
    default: []
  files:
    description: Files to write; their diff shows.
    type: list
    elements: dict
    default: []
    suboptions: &unit_files_file
      path:
        description: The file.
        type: str
        required: true
      content:
        description: What it must hold.
        type: str
        required: true
      mode:
        description: Its mode, e.g. C("0644").
        type: str
      owner:
        description: Its owner.
        type: str
      group:
        description: Its group.
        type: str
      backup:
        description: Keep the previous file when it changes (its path is returned as C(backup_file)).
        type: bool
        default: false
      kind:
        description: What the file is (returned as is), e.g. C(unit_file), C(env_file), C(record).
        type: str
      unit:
        description: The unit it belongs to (returned as C(item.unit)).
        type: str
  absent:
    description: Paths to remove where they exist (the previous files of a unit once the run no longer needs them).
    type: list
    elements: path
    default: []
  env_files:
    description: As O(files), for the units' environment files, which hold secrets - their content is never logged
      nor put in a diff.
    type: list
    elements: dict
    default: []
    suboptions: *unit_files_file
  units:
    description: Units whose state to read after the write (C(.service) added to a name without a suffix).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Reports what would change, and the diff, without writing.
  diff_mode:
    support: full
    details: The diff of each changed file but the secret ones.
"""

EXAMPLES = r"""
- name: Write a unit file and its record
  disagg.sglang.unit_files:
    dirs:
      - {path: /var/lib/disagg-sglang/deployed, mode: "0755", owner: root, group: root}
    files:
      - {path: /etc/systemd/system/sglang-decode0.service, content: "[Unit]\n", mode: "0644", owner: root,
         group: root, backup: true, kind: unit_file, unit: sglang-decode0}
"""

RETURN = r"""
removed:
  description: The paths of O(absent) that existed and were removed (in check mode, would be).
  type: list
  elements: str
  returned: always
files:
  description: "Per file C({path, kind, item: {unit}, changed, backup_file}); C(backup_file) where a backup was kept."
  type: list
  elements: dict
  returned: always
units_settled:
  description: Whether every unit of O(units) runs and is enabled, with nothing for unit_actions to do but restart a
    changed one (false where a unit is failed, stopped, disabled or unknown).
  type: bool
  returned: when O(units) is given
restarts:
  description: Per unit of O(units), its restart count (C(NRestarts)); the health wait counts a crash from it.
  type: dict
  returned: when O(units) is given
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.units import unit_actions
from ansible_collections.disagg.sglang.plugins.module_utils.units.unit_files import write


def file_options(secret):
    """The keys of a file; a secret file's content is masked in every log and result (its path, unit and mode are
    not, so the output still names them)."""
    return {
        "path": {"type": "str", "required": True},
        "content": {"type": "str", "required": True, "no_log": secret},
        "mode": {"type": "str"},
        "owner": {"type": "str"},
        "group": {"type": "str"},
        "backup": {"type": "bool", "default": False},
        "kind": {"type": "str"},
        "unit": {"type": "str"},
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "dirs": {"type": "list", "elements": "dict", "default": []},
            "absent": {"type": "list", "elements": "path", "default": []},
            "files": {"type": "list", "elements": "dict", "default": [], "options": file_options(secret=False)},
            "env_files": {"type": "list", "elements": "dict", "default": [], "options": file_options(secret=True)},
            "units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    files = list(params["files"]) + [{**f, "secret": True} for f in params["env_files"]]
    fs = {"backup": module.backup_local, "replace": module.atomic_move}
    result = write(files, params["dirs"], module.check_mode, fs, params["absent"])
    if params["units"]:

        def run(argv):
            return module.run_command(argv, environ_update={"LC_ALL": "C"})

        result.update(unit_actions.settled(run, params["units"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
