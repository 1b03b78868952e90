#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/rolling_plan.py does the work.

DOCUMENTATION = r"""
---
module: rolling_plan
short_description: Plan the batches of a rolling restart from the units every host deferred to it
version_added: "0.1.0"
extends_documentation_fragment:
  - disagg.sglang.module
  - disagg.sglang.module.controller  # an action plugin's documentation: it runs on the controller
description:
  - The rolling step's plan in one task (roles/sglang_worker/tasks/rolling.yml, run once for the deployment), on the
    controller (C(plugins/module_utils/units/rolling.py) C(rolling_plan)). In check mode it plans as a real run
    does; the rolling step itself does not run in check mode.
  - Batches of at most O(batch) units of one role, prefill first, then decode; within a role, by host and unit. A
    batch never takes every instance of a role out of the router - it holds at most the role's total less one.
  - Changes nothing, in any mode.
options:
  deferred:
    description:
      - The units every host deferred to the rolling step (roles/sglang/tasks/units.yml), each a unit spec with
        its C(host) and its backup set (C(backup)); returned as given, in their batches.
    type: list
    elements: dict
    default: []
  batch:
    description: C(sglang_rolling_batch) - the most units of one role a batch takes (0 or less counts as 1).
    type: int
    default: 1
  totals:
    description: "The deployment's instances per role (C(sglang_role_totals)), e.g. C({prefill: 2, decode: 4})."
    type: dict
    default: {}
seealso:
  - module: disagg.sglang.batch_restart
  - module: disagg.sglang.unit_files
"""

EXAMPLES = r"""
- name: Plan the batches of the rolling restart
  disagg.sglang.rolling_plan:
    deferred: "{{ ansible_play_hosts | map('extract', hostvars, '_sglang_deferred') | map('default', []) | flatten }}"
    batch: 1
    totals: {prefill: 2, decode: 2}
  register: __plan
  run_once: true
"""

RETURN = r"""
batches:
  description: The batches, in the order they restart; each a list of the deferred units it takes.
  type: list
  elements: list
  returned: always
"""
