#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Read, in one call, what the deps role would otherwise ask pip and the package manager (module_utils/deps)."""

DOCUMENTATION = r"""
---
module: deps_state
short_description: Read whether a host's planned venvs and OS packages are in place, and which venvs it holds
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.read_only]
description:
  - For each planned venv, whether it is whole - its Python runs, its stamp file names this run's package set, and
    every requirement of its lists (with the dependencies of those pip installs with dependencies) is installed at
    an allowed version - and, if not, why. The deps role runs pip, the verification and the stamp only for a venv
    that is not whole, so a run that changes nothing asks pip nothing, and a package removed by hand is found.
  - Which OS packages of a list are missing (dpkg, else rpm; unknown where neither answers).
  - The stamped venvs under a directory (path, kind, age) and the venvs the deployed units run (their records),
    which the prune step reads.
  - Whether the service account and its state directory are as roles/sglang/tasks/user.yml makes them (with
    O(account)), so that file runs only where something differs.
  - Changes nothing.
options:
  venvs:
    description: The planned venvs, each C({kind, path, stamp}); C(stamp) is what its stamp file must hold, its
      package lists (C(packages), installed with dependencies, and C(nodeps)) among it.
    type: list
    elements: dict
    default: []
  os_packages:
    description: OS package names that must be installed.
    type: list
    elements: str
    default: []
  venvs_dir:
    description: The directory of the versioned venvs (C(sglang_venvs_dir)).
    type: path
    required: true
  record_dir:
    description: The directory of the units' records (C(sglang_record_dir)).
    type: path
    required: true
  account:
    description: The service account, C({user, group, home, groups, shell, comment, mode}) (the internal role's
      C(_sglang_account)); not read when omitted.
    type: dict
"""

EXAMPLES = r"""
- name: Read what the host has
  disagg.sglang.deps_state:
    venvs:
      - kind: router
        path: /opt/sglang/venvs/router-0123456789ab
        stamp: {kind: router, name: router-0123456789ab, packages: [sglang-router==0.3.2], nodeps: [],
                python: python3, wheelhouse: ""}
    os_packages: [numactl, python3-venv]
    venvs_dir: /opt/sglang/venvs
    record_dir: /var/lib/disagg-sglang/deployed
  register: deps
"""

RETURN = r"""
venvs:
  description:
    - Per planned venv path, C({python, whole, checked, problems}).
    - C(checked) says whether the distribution check ran in the venv's Python. It does not where the venv's stamp
      is this run's and its site-packages did not change since the stamp was written.
  type: dict
  returned: always
  sample: {"/opt/sglang/venvs/router-0123456789ab": {"python": true, "whole": false, "checked": true,
           "problems": ["sglang-router is not installed"]}}
os_missing:
  description: The OS packages not installed; null when neither dpkg nor rpm could tell.
  type: list
  elements: str
  returned: always
stamps:
  description: The stamp file of each venv under venvs_dir, C({path, mtime}).
  type: list
  elements: dict
  returned: always
to_remove:
  description:
    - The venvs under venvs_dir the host no longer needs, oldest first (C(plugins/module_utils/deps/venvs.py)
      C(to_remove)); kept are those a deployed unit runs (RV(in_use)), the planned ones (O(venvs), this run's) and
      the newest other one of each kind (the previous venv, for a rollback by inventory). A stamped directory whose
      name is not one of the venvs' kinds is never in it.
    - Read before the build; the build only adds this run's venvs, which are kept, so it holds after the build too.
  type: list
  elements: str
  returned: always
  sample: ["/opt/sglang/venvs/engine-00aa11bb22cc"]
in_use:
  description: The pythons the deployed units run, from their records (each names its venv).
  type: list
  elements: str
  returned: always
account_drift:
  description: What differs between the host and O(account) (empty when it is in place); null without O(account).
  type: list
  elements: str
  returned: always
  sample: ["user sglang does not exist"]
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.deps import deps_state, venvs


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


ARGUMENT_SPEC = {
    "venvs": {"type": "list", "elements": "dict", "default": []},
    "os_packages": {"type": "list", "elements": "str", "default": []},
    "venvs_dir": {"type": "path", "required": True},
    "record_dir": {"type": "path", "required": True},
    "account": {"type": "dict"},
}
MODULE_OPTIONS = {"supports_check_mode": True}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    params = module.params

    def run(argv):
        if not os.path.isabs(argv[0]) and module.get_bin_path(argv[0]) is None:
            return 127, "", f"{argv[0]}: not found"
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    states = {v["path"]: deps_state.venv_state(v, run, read, os.path.exists, deps_state.untouched_since_stamp)
              for v in params["venvs"]}  # fmt: skip
    stamps = [{"path": p, "mtime": os.stat(p).st_mtime}
              for p in sorted(glob.glob(os.path.join(params["venvs_dir"], "*", venvs.STAMP)))]  # fmt: skip
    records = {}
    for path in sorted(glob.glob(os.path.join(params["record_dir"], "*.json"))):
        try:
            records[path] = json.loads(read(path) or "null")
        except ValueError:
            continue
    in_use = deps_state.in_use(records)
    found = [venvs.found(stamp["path"], stamp["mtime"]) for stamp in stamps]
    current = [v["path"] for v in params["venvs"]]
    to_remove = venvs.to_remove(found, [venvs.venv_of(python) for python in in_use], current)
    module.exit_json(
        changed=False,
        venvs=states,
        os_missing=deps_state.os_missing(params["os_packages"], run),
        stamps=stamps,
        in_use=in_use,
        to_remove=to_remove,
        account_drift=deps_state.account_drift(params["account"]) if params["account"] else None,
    )


if __name__ == "__main__":
    main()
