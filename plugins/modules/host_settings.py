#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Write the run-time host settings a run applies (the logic and the table: module_utils/host/host_settings)."""

DOCUMENTATION = r"""
---
module: host_settings
short_description: Set the run-time kernel settings of a GPU host that sglang_host_apply lists, now
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - For each file item of O(apply), reads its live files under O(root) and writes the item's value into each that
    differs, as C(sysctl -w) and C(cpupower frequency-set) do - V(numa_balancing) C(kernel.numa_balancing = 0),
    V(governor) the performance governor on every CPU.
  - Returns C(boot_files), the files that set the same values at boot (C(/etc/sysctl.d), C(/etc/tmpfiles.d)), and
    C(units), the units of the unit items (V(persistence) - C(nvidia-persistenced.service)), for the role to write
    with M(ansible.builtin.copy) and enable with M(ansible.builtin.systemd_service). Nothing that needs a reboot is set.
  - An item whose live files the host does not have (no cpufreq in a VM), or whose unit systemd does not know, fails
    naming it, before anything is written.
options:
  apply:
    description: The items to set (C(sglang_host_apply) without the unit items); others are not touched.
    type: list
    elements: str
    choices: [governor, numa_balancing, persistence]
    default: []
  root:
    description: The host root the live files are under (the sandbox points it at a rendered fake tree).
    type: path
    default: /
attributes:
  check_mode:
    support: full
    details: Reads the live files and reports what it would write; writes nothing.
  diff_mode:
    support: full
    details: A line per live file, its value before and after.
"""

EXAMPLES = r"""
- name: Set kernel.numa_balancing = 0 and the performance governor now
  disagg.sglang.host_settings:
    apply: [numa_balancing, governor]
  register: __settings
"""

RETURN = r"""
writes:
  description: The live files written (in check mode, that would be), with their value before and after.
  type: list
  elements: dict
  returned: always
  sample: [{"item": "numa_balancing", "path": "/proc/sys/kernel/numa_balancing", "before": "1", "after": "0"}]
boot_files:
  description: The files that set the same values at boot, C({item, path, content}), for the role to write.
  type: list
  elements: dict
  returned: always
units:
  description: The units of the unit items, C({item, unit}), for the role to enable and start.
  type: list
  elements: dict
  returned: always
  sample: [{"item": "persistence", "unit": "nvidia-persistenced.service"}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.host import host_settings as hs


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "apply": {"type": "list", "elements": "str", "choices": hs.ITEMS, "default": []},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    apply = module.params["apply"]
    writes, problems = hs.plan_writes(module.params["root"], apply, read)
    boot, units = hs.boot_files(apply), hs.units(apply)
    if units:
        systemctl = module.get_bin_path("systemctl", required=True)
        names = [u["unit"] for u in units]
        rc, out, err = module.run_command([systemctl, "show", "--property=Id,LoadState", *names])
        if rc != 0:
            module.fail_json(msg=f"systemctl show {' '.join(names)} failed: {(err or out).strip()}")
        problems += hs.missing_unit_problems(dict(zip(names, hs.load_states(out), strict=False)))
    if problems:
        module.fail_json(msg="; ".join(problems), writes=[], boot_files=boot, units=units)  # nothing was written
    # returned always; Ansible shows it with --diff
    result = {"changed": bool(writes), "writes": writes, "boot_files": boot, "units": units, "diff": hs.diff(writes)}
    if not module.check_mode:
        for write in writes:
            try:
                with open(write["path"], "w", encoding="utf-8") as handle:
                    handle.write(write["after"] + "\n")
            except OSError as exc:
                module.fail_json(msg=f"{write['path']} could not be written ({write['item']}): {exc}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
