#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Whether a host's model directory is a whole model, and the room its file system has (module_utils/model)."""

DOCUMENTATION = r"""
---
module: model_check
short_description: Check that a model directory is whole and that its file system has room for a revision
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.read_only]
description:
  - Reads O(path) - a model directory managed outside the collection (C(sglang_model_source) none) - and says why
    sglang could not load it - config.json missing or not JSON, a shard that model.safetensors.index.json names
    missing (sglang fails on a missing shard), no weight file.
  - With O(need_bytes), whether the file system of O(models_dir) (or of its nearest existing parent) has that many
    bytes free, for the staging of a revision of that size.
  - Changes nothing.
options:
  path:
    description: The model directory to check; not checked when omitted.
    type: path
  models_dir:
    description: The directory revisions are staged under; its file system's free bytes are read.
    type: path
  need_bytes:
    description: The bytes a revision still needs on that file system (0 when it is staged).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Check the model directory of the workers
  disagg.sglang.model_check:
    path: "{{ sglang_model_path }}"
"""

RETURN = r"""
whole:
  description: Whether O(path) is a whole model (true when no path was given).
  type: bool
  returned: always
problems:
  description: Why it is not, and whether the file system lacks room; empty when all is well.
  type: list
  elements: str
  returned: always
free_bytes:
  description: The free bytes of the file system of O(models_dir); null without it.
  type: int
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.model import staging


def free_bytes(directory):
    probe = directory
    while probe and not os.path.isdir(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path"},
            "models_dir": {"type": "path"},
            "need_bytes": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    params = module.params
    problems = []
    if params["path"]:
        if not os.path.isdir(params["path"]):
            problems.append(f"{params['path']} is not a directory")
        else:
            problems += staging.whole_model_dir(params["path"])
    whole = not problems
    free = free_bytes(params["models_dir"]) if params["models_dir"] else None
    if free is not None and params["need_bytes"] > free:
        problems.append(
            f"{params['models_dir']} has {free} bytes free and the revision needs {params['need_bytes']} more: "
            "free room or point sglang_models_dir at a larger file system"
        )
    module.exit_json(changed=False, whole=whole, problems=problems, free_bytes=free)


if __name__ == "__main__":
    main()
