#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Read what the preflight needs to know of one host, in one module run (the logic: module_utils/host/host_look)."""

DOCUMENTATION = r"""
---
module: host_look
short_description: Read the paths, unit records, TCP listeners and bindable addresses of a host, changing nothing
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.read_only]
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
  model:
    description:
      - The model directory (C(sglang_model_path)) whose files to check - C(config.json), and every shard its
        C(model.safetensors.index.json) names, else a weight file - as sglang's loader needs them. Only the file
        names, C(config.json) and the index are read. Not checked when left out.
    type: path
  topology:
    description:
      - Also read the GPU and NUMA topology, as M(disagg.sglang.gpu_topology) reads it (the same code), and return
        it as the fact C(gpu_topology), so that the preflight of a worker host costs one module run, not two.
      - Not read when left out.
    type: dict
    suboptions:
      sysfs_root:
        description: As M(disagg.sglang.gpu_topology)'s O(disagg.sglang.gpu_topology#module:sysfs_root).
        type: path
        default: /
      nvidia_smi_path:
        description: As M(disagg.sglang.gpu_topology)'s O(disagg.sglang.gpu_topology#module:nvidia_smi_path).
        type: path
      nvml_venv:
        description: As M(disagg.sglang.gpu_topology)'s O(disagg.sglang.gpu_topology#module:nvml_venv).
        type: path
  readiness:
    description:
      - Also read the host's readiness settings, as M(disagg.sglang.host_readiness) reads them (the same code), and
        return them as the fact C(host_readiness), in the same module run.
      - Not read when left out.
    type: dict
    suboptions:
      root:
        description:
          - The host root the readiness files are read under (a copy of C(/proc) and C(/sys) in tests and the sandbox).
          - As M(disagg.sglang.host_readiness)'s O(disagg.sglang.host_readiness#module:root).
        type: path
        default: /
      nvidia_smi_path:
        description: As M(disagg.sglang.host_readiness)'s O(disagg.sglang.host_readiness#module:nvidia_smi_path).
        type: path
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
extends_documentation_fragment: [disagg.sglang.module.look]
ansible_facts:
  description: >-
    C(gpu_topology): the facts M(disagg.sglang.gpu_topology) returns, when O(topology) is given; C(host_readiness): the
    facts M(disagg.sglang.host_readiness) returns, when O(readiness) is given.
  returned: when O(topology) or O(readiness) is given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology, host_look, readiness_look

ARGUMENT_SPEC = {
    "paths": {"type": "dict", "default": {}},
    "record_dir": {"type": "path"},
    "listeners": {"type": "bool", "default": True},
    "bind": {"type": "list", "elements": "str", "default": []},
    "exists": {"type": "list", "elements": "path", "default": []},
    "model": {"type": "path"},
}
# The facts host_look also reads, as their own modules do (gpu_topology, host_readiness: the same code), each
# (option, fact, reader, the suboptions it takes from that module)
ALSO_READS = (
    ("topology", "gpu_topology", gpu_topology.read_for,
     {"sysfs_root": {"type": "path", "default": "/"}, "nvidia_smi_path": {"type": "path"},
      "nvml_venv": {"type": "path"}}),
    ("readiness", "host_readiness", readiness_look.read_for,
     {"root": {"type": "path", "default": "/"}, "nvidia_smi_path": {"type": "path"}}),
)  # fmt: skip
ARGUMENT_SPEC.update({option: {"type": "dict", "options": options} for option, _fact, _read, options in ALSO_READS})
MODULE_OPTIONS = {"supports_check_mode": True}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    p = module.params
    paths = {str(k): str(v) for k, v in p["paths"].items()}
    found = host_look.look(paths, p["record_dir"], p["listeners"], p["bind"], p["exists"], model_dir=p["model"])
    facts = {}
    for option, fact, read_for, _suboptions in ALSO_READS:
        if p[option] is not None:
            facts[fact], error = read_for(module, p[option])
            if error:
                module.fail_json(msg=error, **found)
    if facts:
        found["ansible_facts"] = facts
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
