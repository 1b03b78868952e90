#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/deployment_plan.py does the work.

DOCUMENTATION = r"""
---
module: deployment_plan
short_description: Join the plans of the deployment's hosts once, with the KV agreement and the groups of the flag check
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.controller]
description:
  - The preflight's deployment-wide step (roles/sglang/tasks/plan.yml, run once), after every host planned its units
    (M(disagg.sglang.host_plan)). From what each host's plan returned (O(looks)) it joins the deployment's plans once
    (C(plugins/module_utils/plan/plan.py) C(deployment)), and on them finds what prefill and decode of the whole
    deployment disagree on in the KV handoff, now and during the change (C(plan.pd_problems)), counts the instances
    of each role (C(plugins/module_utils/units/rolling.py) C(role_totals)) and groups the worker command lines by the
    program that parses them, each group to be checked once on one host that has its venv (C(plan.cli_check_groups)).
  - Reads C(sglang_engine_compatible_versions) from the task's variables, and each worker host's
    C(sglang_rolling_batch) from its plan (C(rolling_batch) of M(disagg.sglang.host_plan)); the task's
    C(sglang_rolling_batch) stands in for a host whose plan does not name it.
  - Runs on the controller only and never fails on the plans; the play shows the warnings first, then asserts
    RV(pd_problems) is empty.
options:
  looks:
    description:
      - What M(disagg.sglang.host_plan) returned on each host of the play, by host (C({}) where it did not run).
    type: dict
    required: true
seealso:
  - module: disagg.sglang.host_plan
  - module: disagg.sglang.cli_check
"""

EXAMPLES = r"""
- name: Collect the plans of the deployment's hosts, once
  disagg.sglang.deployment_plan:
    looks: >-
      {{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, '__sglang_look')
         | map('default', {}))) }}
  register: deployment
  run_once: true
"""

RETURN = r"""
units:
  description: The worker specs, by host.
  returned: success
  type: dict
deployed:
  description: The unit records each host's look read, by host.
  returned: success
  type: dict
venv_ready:
  description: Whether each host has this run's engine python, by host.
  returned: success
  type: dict
bind:
  description: The outcome of each host's bind check, by host.
  returned: success
  type: dict
lines:
  description: What to show of each host's plan, by host (only hosts with some).
  returned: success
  type: dict
retired:
  description: Every host's retired units.
  returned: success
  type: list
  elements: str
batches:
  description: Each worker host's C(sglang_rolling_batch), by host.
  returned: success
  type: dict
pd_problems:
  description: What prefill and decode of the deployment disagree on in the KV handoff, each a message naming the fix.
  returned: success
  type: list
  elements: str
role_totals:
  description: The instances of each role in the deployment.
  returned: success
  type: dict
  sample: {prefill: 2, decode: 2}
retire_problems:
  description: A run that would retire every instance of a role that C(sglang_retire_roles) does not name, each a
    message naming the fix (the preflight's last play asserts it, after the router's plan).
  returned: success
  type: list
  elements: str
cli_checks:
  description:
    - One group per program (python, module), each C({python, module, delegate, hosts, units, argvs, owners}), for
      M(disagg.sglang.cli_check) delegated to C(delegate); a unit whose record says this parser accepted its command
      line is left out.
  returned: success
  type: list
  elements: dict
"""
