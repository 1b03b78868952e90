#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/check_variables.py does the work.

DOCUMENTATION = r"""
---
module: check_variables
short_description: Check a role's variables against the collection's variable table, failing with every problem
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.controller]
description:
  - The first task of a public role run on its own (site.yml's preflight checks them all up front, in
    M(disagg.sglang.host_plan)). Each variable the role's entry points list (C(plugins/module_utils/plan/variables.yml),
    the table C(docs/variables.md) shows) that is defined is checked on the controller - its type, its range or
    choices, the members of a list - and the task fails with one message per problem, each naming the variable, its
    value and what to write instead.
  - Changes nothing, in any mode; no module runs on the host.
options:
  role:
    description:
      - The role whose variables are checked, one of C(sglang), C(sglang_deps), C(sglang_topology), C(sglang_worker),
        C(sglang_router), C(sglang_bench), C(sglang_monitoring).
    type: str
    required: true
seealso:
  - module: disagg.sglang.host_plan
"""

EXAMPLES = r"""
- name: Check the monitoring variables against the collection's variable table
  disagg.sglang.check_variables:
    role: sglang_monitoring
  run_once: true
"""

RETURN = r"""
problems:
  description: One message per variable the table refuses; empty when every defined one is in range.
  returned: always
  type: list
  elements: str
  sample:
    - "sglang_monitoring_slo_quantile is 95 (a number): it must be a fraction 0.5-0.999 (a fraction: 0.95 for 95 %)"
"""
