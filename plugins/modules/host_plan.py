#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/host_plan.py does the work.

DOCUMENTATION = r"""
---
module: host_plan
short_description: Check one host's variables, look at the host and plan its worker units, failing with every problem
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - The preflight's plan of one host in one task (roles/sglang/tasks/plan.yml). Its inputs are the task's variables,
    derived on the controller by C(plugins/module_utils/plan/plan_inputs.py) (the collection's roles' defaults, the
    inventory, extra vars), not options.
  - Where C(sglang_deps_venv_paths) is not defined yet (site.yml's preflight), first the dependency checks (the deps
    role's variables against the variable table, the package lists, the variables no longer read); this run's venvs
    are named then and returned as RV(venv_paths).
  - Then the variables of O(variables)'s roles against the variable table; then one run of
    M(disagg.sglang.host_look) on the host; then, on the controller, the plan of the host's worker units
    (C(plugins/module_utils/plan/plan.py) C(host_plan); placement is that of P(disagg.sglang.pd_placement#filter)) on
    the inputs and what the look read (the paths, the TCP listeners, the unit records and, with O(topology), the
    topology), then the host's rules.
  - Fails naming every problem of the first step that found any (joined by C(. )); no unit is planned then. The
    plan's step names the topology's problem first where the look read it and shows no GPU, then the flag profile's,
    then the plan's.
  - Changes nothing, in any mode.
options:
  topology:
    description:
      - Also read the GPU and NUMA topology of a worker host (a host in the group C(prefill) or C(decode)) in the look,
        as M(disagg.sglang.gpu_topology) reads it, and plan on it. Without it, the plan reads the fact
        C(gpu_topology) a topology step set before, where there is one.
    type: bool
    default: false
  variables:
    description:
      - Roles of the collection's variable table (C(module_utils/plan/variables.yml)), one or a list, whose variables
        are checked from the task's variables (type, range, choices, the members of lists) before the look; the task
        fails naming every problem. Left out, none are. site.yml's preflight names the roles of every play of the
        run (C(sglang), C(sglang_monitoring), C(sglang_bench)), so a bad value of the last play fails before any host
        changes.
    type: raw
attributes:
  action:
    support: full
    description: The plan runs on the controller, the look on the host.
  check_mode:
    support: full
    details: Reads only, so check mode plans what a real run plans.
  diff_mode:
    support: none
    details: Nothing to diff.
  facts:
    support: none
    description: >-
      The topology read with O(topology) is planned on, not returned as the fact C(gpu_topology) (the role
      disagg.sglang.sglang_topology sets it).
seealso:
  - module: disagg.sglang.host_look
"""

EXAMPLES = r"""
- name: Plan the worker units of this host, reading its topology
  disagg.sglang.host_plan:
    topology: true
    variables: sglang
  register: __plan
"""

RETURN = r"""
extends_documentation_fragment: [disagg.sglang.module.look]
plan:
  description:
    - The plan of the host's worker units (C(plan.host_plan)). C(units), the worker unit specs (empty when C(problems)
      is not); C(placement), the slot of each instance (C({name, gpus, numa_node, cpus, warnings})); C(problems) and
      C(warnings), lists of messages; C(retired), the units of this host the inventory no longer has.
  returned: when the look succeeded
  type: dict
lines:
  description: >-
    What to show of the plan: the topology's warnings (where the look read it), the plan's warnings and one line
    per unit's placement.
  returned: when the look succeeded
  type: list
  elements: str
venv_paths:
  description: >-
    This run's venvs (C(sglang_deps_venv_paths)) - named here where they were not defined yet, else as they were.
  returned: when the checks before the look passed
  type: dict
rolling_batch:
  description: >-
    The host's own C(sglang_rolling_batch), which its restart rule reads: M(disagg.sglang.deployment_plan) judges a
    change of the KV contract by it.
  returned: on a worker host, when the look succeeded
  type: raw
"""
