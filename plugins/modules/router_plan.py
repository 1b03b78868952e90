#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/router_plan.py does the work.

DOCUMENTATION = r"""
---
module: router_plan
short_description: Plan the router units of one host from the deployment's worker specs, failing with every problem
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.controller]
description:
  - The router's plan in one task (roles/sglang_router/tasks/plan.yml), after every worker host planned its units
    (M(disagg.sglang.host_plan)). Its inputs are the task's variables, derived on the controller by
    C(plugins/module_utils/plan/plan_inputs.py) as host_plan derives a worker host's (the service settings, the
    secrets, the account's variables), the flags of the router program C(sglang_router_impl) names, and the worker
    specs of the deployment (O(workers)); the router dials each worker at its spec's url (its advertise address).
  - First the variables of O(variables)'s role against the collection's variable table; then a router unit per
    router instance (C(sglang_router_instances), C(plugins/module_utils/plan/router_plan.py) C(router_plans) and
    C(router_rules.py)) and its rules, and the rule that the workers' API key is the
    router's (C(cluster_rules.deployment_api_key_problems), each worker host's key as that host's variables give it,
    and the router host's own).
  - Fails naming every problem of the first step that found any (joined by C(. )); no unit is planned then.
  - Runs on the controller only; what it knows of the host is what the preflight's look read (O(look)).
  - Changes nothing, in any mode.
options:
  workers:
    description:
      - The planned worker unit specs of the whole deployment, in inventory order (prefill hosts, then decode hosts),
        so that the router's command line does not depend on the order of a set.
    type: list
    elements: dict
    required: true
  look:
    description:
      - What M(disagg.sglang.host_plan) returned on this host (its C(paths) and C(listeners) are read), for the rules
        on the host's paths and the ports in use. Left out, none are known.
    type: dict
  variables:
    description:
      - A role of the collection's variable table (C(module_utils/plan/variables.yml)) whose variables are checked
        from the task's variables (type, range, choices) before the plan; the task fails naming every problem.
        Left out, none are.
    type: str
seealso:
  - module: disagg.sglang.host_plan
"""

EXAMPLES = r"""
- name: Plan the router unit from the workers' specs
  disagg.sglang.router_plan:
    workers: >-
      {{ groups['prefill'] | union(groups['decode']) | map('extract', hostvars, 'sglang_worker_units') | flatten }}
    look: "{{ __sglang_look }}"
    variables: sglang_router
  register: __router_plan
"""

RETURN = r"""
units:
  description:
    - The router unit specs of the host, one per router instance (C(sglang_router_instances); the one instance
      C(router) of C(sglang_router_port) where the list is empty), each C(plugins/module_utils/units/units.py)
      C(router_unit), every one with the same workers.
  returned: success
  type: list
  elements: dict
unit:
  description: The first of RV(units) (the single router of an inventory without C(sglang_router_instances)).
  returned: success
  type: dict
running_impls:
  description: The router program each deployed router unit runs, by unit (as RV(running_impl)).
  returned: success
  type: dict
endpoints:
  description:
    - Where the worker API calls of a run reach each router unit of RV(units) (M(disagg.sglang.router_workers)'s
      O(disagg.sglang.router_workers#module:routers)), each C({unit, host, url, health_url, implementation}), where
      it answers now. C(url) and C(health_url) are its deployed record's until the run restarts it (a run that moves
      a router reaches it at its old address meanwhile), the planned ones where none is deployed; C(implementation)
      is the program that answers there now (as RV(running_impl)).
  returned: success
  type: list
  elements: dict
running_impl:
  description:
    - The router program the deployed router unit of RV(unit) runs (its record's C(impl)), or the planned one where
      none is deployed; a run that switches routers talks to the running one until it restarts it.
  returned: success
  type: str
  sample: sglang_router
lb_routers:
  description:
    - "The router units of RV(units) as HAProxy's backend servers, empty without C(sglang_router_instances): each
      C({server, inventory_host, unit, name, host, port, health_port, impl}), C(server) the name unique over the
      deployment (C(<inventory_hostname>-<instance name>)), C(host) the address HAProxy dials
      (C(sglang_router_instance_host)). Every router host's are HAProxy's servers on every router host
      (C(plugins/module_utils/router/lb.py) C(plan))."
  returned: success
  type: list
  elements: dict
cli_check:
  description:
    - Whether the router's command line still needs the check by the installed router's parser; false where the
      router's record says this parser accepted this command line (C(units.argv_key)).
  returned: success
  type: bool
"""
