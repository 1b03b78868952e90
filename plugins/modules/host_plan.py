#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/host_plan.py does the work.

DOCUMENTATION = r"""
---
module: host_plan
short_description: Look at one host and plan its worker units, failing with every problem found
version_added: "0.1.0"
author:
  - disagg.sglang maintainers (!UNKNOWN)
description:
  - The preflight's plan of one host in one task (roles/sglang/tasks/plan.yml). On the host, one run of
    M(disagg.sglang.host_look) with O(look). On the controller, the filter P(disagg.sglang.host_plan#filter) on
    O(plan) and what the look read (the paths, the TCP listeners, the unit records and, where the look read it,
    the topology), then the host's rules.
  - Fails naming every problem (the topology's when the look read it and shows no GPU, then O(problems), then the
    plan's), joined by C(. ); no unit is planned then.
  - Changes nothing, in any mode.
options:
  look:
    description: The options of M(disagg.sglang.host_look), passed as they are.
    type: dict
    required: true
  plan:
    description:
      - The input of P(disagg.sglang.host_plan#filter) without what the look reads (C(host_paths), C(listeners),
        C(deployed), and C(topology) where O(look) has C(topology)).
      - C(host) is required.
    type: dict
    required: true
  problems:
    description: Problems found before the plan (the flag profile's), reported with the plan's.
    type: list
    elements: str
    default: []
  variables:
    description:
      - A role of the collection's variable table (C(plugins/module_utils/variables.py)) whose variables are checked
        first, from the task's variables (type, range, choices); the task fails naming every problem, before the
        look. Left out, none are.
    type: str
attributes:
  action:
    support: full
    description: The plan runs on the controller, the look on the host.
  check_mode:
    support: full
    description: Reads only, so check mode plans what a real run plans.
  diff_mode:
    support: none
    description: Nothing to diff.
  facts:
    support: full
    description: Returns the look's C(gpu_topology) fact where O(look) has C(topology).
seealso:
  - module: disagg.sglang.host_look
"""

EXAMPLES = r"""
- name: Plan the worker units of this host
  disagg.sglang.host_plan:
    look:
      paths:
        sglang_model_path: /models/DeepSeek-V4-Flash
      record_dir: /var/lib/sglang/records
    plan:
      host: "{{ inventory_hostname }}"
      roles:
        prefill: {instances: [{gpus: [0, 1, 2, 3]}], extra_flags: {}, extra_env: {}}
      settings: "{{ my_settings }}"
      topology: "{{ ansible_facts.gpu_topology }}"
  register: __plan
"""

RETURN = r"""
paths:
  description: As M(disagg.sglang.host_look) returns it.
  returned: always
  type: dict
records:
  description: As M(disagg.sglang.host_look) returns it.
  returned: always
  type: dict
listeners:
  description: As M(disagg.sglang.host_look) returns it.
  returned: always
  type: dict
bind:
  description: As M(disagg.sglang.host_look) returns it.
  returned: always
  type: dict
exists:
  description: As M(disagg.sglang.host_look) returns it.
  returned: always
  type: dict
plan:
  description: What P(disagg.sglang.host_plan#filter) returns (units, placement, problems, warnings, retired).
  returned: when the look succeeded
  type: dict
lines:
  description: >-
    What to show of the plan: the topology's warnings (where the look read it), the plan's warnings and one line
    per unit's placement.
  returned: when the look succeeded
  type: list
  elements: str
ansible_facts:
  description: C(gpu_topology), as M(disagg.sglang.gpu_topology) returns it.
  returned: when O(look) has C(topology)
  type: dict
"""
