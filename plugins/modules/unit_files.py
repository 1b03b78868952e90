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
  - With O(deploy), it writes the three files of each unit - its environment file (secrets), its unit file and its
    record (what was deployed, as data) - and answers, in one call, what the units step needs - the kinds of file
    that changed (RV(kinds_changed)), one backup set per unit (RV(backups) - the previous unit file, environment
    file and record it kept), which changed units restart now and which the rolling step restarts
    (O(restart_rule)), and the units to wait for (RV(started)) and to roll (RV(deferred)), each with its backup set.
  - With O(restore), it puts each unit's backup set back where it came from (the rollback), reloads systemd when a
    unit file went back (RV(daemon_reloaded)), and returns the previous records (RV(records)) and each unit as the
    rollback waits for it (RV(rolled_back)); with O(drop), it removes the backups of the sets. Restore comes before
    drop, both before the write.
  - With O(units), it also reads those units' state in one C(systemctl show) and says whether each already runs and
    is enabled (RV(units_settled)), so the units step skips its M(disagg.sglang.unit_actions) call where no file
    changed and nothing needs doing.
options:
  deploy:
    description:
      - One entry per unit - C({spec, unit_file, env_file}) - the planned spec (its C(unit), C(environment_file),
        and what its record keeps), and the texts of its unit file and environment file rendered on the controller
        (C(sglang.service.j2), C(sglang.env.j2)). The record is made here from the spec
        (module_utils/units/units.py C(record)). The environment file's text is never logged nor put in a diff.
    type: list
    elements: dict
    default: []
    suboptions:
      spec:
        description: The unit's planned spec.
        type: dict
        required: true
      unit_file:
        description: The unit file's text.
        type: str
        required: true
      env_file:
        description: The environment file's text (secrets).
        type: str
        required: true
  unit_dir:
    description: Where the unit files lie (O(deploy), O(restore)).
    type: path
  record_dir:
    description: Where the records lie (O(deploy), O(restore)).
    type: path
  restart_rule:
    description:
      - "With O(deploy), the inputs of the restart rule (module_utils/units/rolling.py C(restart_decision)) -
        C({totals, router_serving, batch, records, router_roll}): the deployment's role totals, whether the router
        serves, C(sglang_rolling_batch), the host's records as the preflight read them, and whether a changed router
        rolls behind HAProxy (two or more router instances behind a serving HAProxy). Left out (as in check mode): no
        unit restarts or rolls here."
    type: dict
  restore:
    description: Units to roll back, each C({unit, environment_file, backup}) with its backup set; each backup kept is
      copied back over its file (root's, the mode of its kind).
    type: list
    elements: dict
    default: []
  drop:
    description: Backup sets (or units carrying one as C(backup)) whose backups to remove.
    type: list
    elements: dict
    default: []
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
seealso:
  - module: disagg.sglang.unit_actions
  - module: disagg.sglang.batch_restart
attributes:
  check_mode:
    support: full
    details: Reports what would change, and the diff, without writing.
  diff_mode:
    support: full
    details: The diff of each changed file but the secret ones.
"""

EXAMPLES = r"""
- name: Write the units' files, say what restarts now and what rolls
  disagg.sglang.unit_files:
    unit_dir: /etc/systemd/system
    record_dir: /var/lib/disagg-sglang/deployed
    deploy:
      - spec: {unit: sglang-decode0, role: decode, environment_file: /etc/disagg-sglang/env/sglang-decode0.env}
        unit_file: "[Unit]\n"
        env_file: ""
    restart_rule: {totals: {decode: 2}, router_serving: true, batch: 1, records: {}}
  register: written

- name: Roll a unit back to its backup set, then drop the backups
  disagg.sglang.unit_files:
    unit_dir: /etc/systemd/system
    record_dir: /var/lib/disagg-sglang/deployed
    restore: "{{ written.started }}"
    drop: "{{ written.started }}"

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
kinds_changed:
  description: The kinds of file that changed (C(unit_file), C(record), C(env_file)).
  type: list
  elements: str
  returned: when O(deploy) is given
  sample: [unit_file, record]
backups:
  description: "C({unit: {unit_file, env_file, record}}) - the backup set of each unit a file of which changed and that
    restarts now (not deferred): the previous file each kept, empty where it kept none."
  type: dict
  returned: when O(deploy) is given
restart:
  description: "C({now, deferred, synced}) - the restart rule's answer (names), empty without O(restart_rule)."
  type: dict
  returned: when O(deploy) is given
  sample: {now: [sglang-router], deferred: [sglang-decode0, sglang-decode1], synced: []}
started:
  description: The specs of O(deploy) to wait for now (not deferred), each with its backup set as C(backup).
  type: list
  elements: dict
  returned: when O(deploy) is given
deferred:
  description: The specs the rolling step restarts, each with its backup set as C(backup).
  type: list
  elements: dict
  returned: when O(deploy) is given
  sample: [{unit: sglang-decode1, role: decode, backup: {unit_file: "", env_file: "", record: ""}}]
records:
  description: "C({unit: previous record}) of O(restore), C({}) where no record was kept."
  type: dict
  returned: when O(restore) is given
  sample: {sglang-decode0: {unit: sglang-decode0, role: decode, health_url: "http://10.0.1.21:30001/health"}}
rolled_back:
  description: The entries of O(restore), each with the C(health_url) (and a router's C(expected_workers)) of its
    previous record, where the rollback waits for it.
  type: list
  elements: dict
  returned: when O(restore) is given
daemon_reloaded:
  description: Whether systemd was reloaded because a unit file went back.
  type: bool
  returned: when O(restore) is given
dropped:
  description: The backups of O(drop) removed.
  type: list
  elements: str
  returned: when O(drop) is given
  sample: [/etc/systemd/system/sglang-decode0.service.4242.2026-12-07@04:50:00~]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.units import unit_actions, unit_files


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
            "deploy": {"type": "list", "elements": "dict", "default": [], "options": {
                "spec": {"type": "dict", "required": True},
                "unit_file": {"type": "str", "required": True},
                "env_file": {"type": "str", "required": True, "no_log": True}}},
            "unit_dir": {"type": "path"},
            "record_dir": {"type": "path"},
            "restart_rule": {"type": "dict"},
            "restore": {"type": "list", "elements": "dict", "default": []},
            "drop": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )  # fmt: skip
    params = module.params
    if (params["deploy"] or params["restore"]) and not (params["unit_dir"] and params["record_dir"]):
        module.fail_json(msg="unit_dir and record_dir are required with deploy or restore")
    fs = {"backup": module.backup_local, "replace": module.atomic_move}

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    rolled, reloaded = {}, False
    if params["restore"] and not module.check_mode:
        rolled = unit_files.restore(params["restore"], params["unit_dir"], params["record_dir"], fs)
        reloaded, error = unit_files.reload_systemd(run, rolled["restored"])
        if error:
            module.fail_json(msg=error, restored=rolled["restored"])
    dropped = unit_files.drop(params["drop"], module.check_mode)
    deploy = params["deploy"]
    files = list(params["files"]) + [{**f, "secret": True} for f in params["env_files"]]
    if deploy:
        files += unit_files.deploy_files(deploy, params["unit_dir"], params["record_dir"])
    result = unit_files.write(files, params["dirs"], module.check_mode, fs, params["absent"])
    result["changed"] = result["changed"] or bool(rolled.get("restored")) or bool(dropped)
    if deploy or params["unit_dir"]:
        # the units step's answers, empty ones too: a host whose instances all left the inventory (a scale-in of
        # its last instance) deploys nothing and still reads kinds_changed, started and deferred
        rule = None if module.check_mode else params["restart_rule"]
        result.update(unit_files.deployed(deploy, result, rule))
    if params["restore"]:
        result["records"] = rolled.get("records", {})
        result["rolled_back"] = unit_files.rolled_back(params["restore"], result["records"])
        result["daemon_reloaded"] = reloaded
    if params["drop"]:
        result["dropped"] = dropped
    if params["units"]:
        result.update(unit_actions.settled(run, params["units"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
