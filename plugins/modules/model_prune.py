#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Remove the staged model revisions of a host that no unit uses, keeping the last two (module_utils/model)."""

DOCUMENTATION = r"""
---
module: model_prune
short_description: Remove the staged model revisions that no unit of the host uses, keeping the last two
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Finds the staged revisions under O(models_dir) (the directories M(disagg.sglang.model_stage) made, each with its
    stamp), the directories the unit records under O(record_dir) name (C(model_path)) and O(current), and removes
    every other one but the newest (the previous revision, for a rollback), oldest first
    (C(module_utils/model/staging.py) C(to_remove)). A directory without a stamp is never touched.
options:
  models_dir:
    description: The directory of the staged revisions (C(sglang_models_dir)).
    type: path
    required: true
  record_dir:
    description: The directory of the unit records (C(sglang_record_dir)); the C(model_path) of each is in use.
    type: path
    required: true
  current:
    description: The directories this run's units load.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
    details: Says what it would remove and removes nothing.
  diff_mode:
    support: none
    details: The result lists the directories removed.
"""

EXAMPLES = r"""
- name: Keep the last two model revisions
  disagg.sglang.model_prune:
    models_dir: /opt/models
    record_dir: /var/lib/disagg-sglang/deployed
    current: ["{{ sglang_worker_units[0].model_path }}"]
"""

RETURN = r"""
removed:
  description: The staged directories removed (in check mode, that would be).
  type: list
  elements: str
  returned: always
kept:
  description: The staged directories kept.
  type: list
  elements: str
  returned: always
"""

import glob
import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.model import source, staging


def staged(models_dir):
    """[{path, mtime}] of the staged revisions: a directory with a stamp, not a temporary one."""
    found = []
    for name in sorted(os.listdir(models_dir)) if os.path.isdir(models_dir) else []:
        path = os.path.join(models_dir, name)
        stamp = os.path.join(path, staging.STAMP)
        if not name.startswith(source.TEMP_PREFIX) and os.path.isdir(path) and os.path.isfile(stamp):
            found.append({"path": path, "mtime": os.stat(stamp).st_mtime})
    return found


def in_use(record_dir):
    paths = set()
    for path in glob.glob(os.path.join(record_dir, "*.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("model_path"):
            paths.add(os.path.normpath(str(record["model_path"])))
    return paths


def main():
    module = AnsibleModule(
        argument_spec={
            "models_dir": {"type": "path", "required": True},
            "record_dir": {"type": "path", "required": True},
            "current": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    found = staged(params["models_dir"])
    current = [os.path.normpath(p) for p in params["current"]]
    removed = [d["path"] for d in staging.to_remove(found, in_use(params["record_dir"]), current)]
    if not module.check_mode:
        for path in removed:
            shutil.rmtree(path)
    kept = [d["path"] for d in found if d["path"] not in removed]
    module.exit_json(changed=bool(removed), removed=removed, kept=kept)


if __name__ == "__main__":
    main()
