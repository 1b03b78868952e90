# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Documentation every module of the collection shares, and the options several modules share."""


class ModuleDocFragment:
    # Every module: who maintains it, what its check_mode and diff_mode attributes mean, where it runs. Each module
    # gives its own support of check_mode and diff_mode, and its details: what it does in that mode.
    DOCUMENTATION = r"""
options: {}
author:
  - disagg.sglang maintainers (!UNKNOWN)
attributes:
  check_mode:
    description: Can run with C(--check), changing nothing on the host; the details say what it still reads or reports.
  diff_mode:
    description: Returns what it changed (or would change in check mode) as a diff with C(--diff).
  platform:
    description: The systems the module runs on.
    support: N/A
    platforms: posix
"""

    # A module whose action plugin does all its work on the controller, reading only what the task gives it.
    CONTROLLER = r"""
options: {}
attributes:
  action:
    support: full
    description: Runs on the controller.
  check_mode:
    support: full
    details: Only reads and plans, so check mode returns what a real run returns.
  diff_mode:
    support: none
    details: Nothing to diff.
"""

    # A module that only reads the host (deps_state, model_check, host_look): check mode reads as a real run does.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Only reads, so check mode reads as a real run does.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to show.
"""

    # The router's worker and request API (module_utils/router_api.py, module_utils/router_canary.py).
    ROUTER = r"""
options:
  url:
    description: The router's base URL, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  api_key:
    description: The router's API key (sent as a bearer token); empty when the router has none.
    type: str
    default: ""
"""

    # A unit that is not healthy is reported with the tail of its journal (module_utils/service_health.py).
    JOURNAL = r"""
options:
  journal_lines:
    description: Lines of the unit's journal returned for a service that is not healthy.
    type: int
    default: 40
"""

    # Where the GPU topology is read (module_utils/gpu_topology.py): the topology module and the KV probe, which
    # reads the topology to pick its pairs.
    TOPOLOGY = r"""
options:
  sysfs_root:
    description:
      - Directory that holds the C(sys) tree to read, for hosts or tests that keep a copy elsewhere.
    type: path
    default: /
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). When not set, it is looked up on C(PATH), then in C(/usr/local/nvidia/bin) and other
        usual driver directories.
    type: path
"""

    # What the module host_look returns, which the action host_plan returns as it is (plugins/action/host_plan.py
    # LOOK_KEYS): a RETURN fragment, named in the RETURN of both modules.
    LOOK = r"""
paths:
  description: "C({variable: {path, exists, isdir}}), isdir null where the path does not exist."
  returned: always
  type: dict
records:
  description: >-
    C({unit: record}) of the records found; C({}) without O(disagg.sglang.host_look#module:record_dir) or where it
    does not exist.
  returned: always
  type: dict
listeners:
  description: >-
    C({port: owner}) of the TCP listeners; C({}) when O(disagg.sglang.host_look#module:listeners) is false.
  returned: always
  type: dict
bind:
  description: "C({address: outcome}): C(ok), or why the address cannot be bound on this host."
  returned: always
  type: dict
exists:
  description: "C({path: bool}) for each path of O(disagg.sglang.host_look#module:exists)."
  returned: always
  type: dict
model:
  description: >-
    Why the directory of O(disagg.sglang.host_look#module:model) is not a model sglang can load (C([]) when it is
    one); null without that option or where the directory does not exist.
  returned: always
  type: list
  elements: str
"""
