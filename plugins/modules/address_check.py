#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Check from this host that addresses can be bound here, and that TCP targets answer (open or refused)."""

DOCUMENTATION = r"""
---
module: address_check
short_description: Check advertise addresses and reachability of worker ports before anything changes
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - With O(bind), checks that each address is one of this host's own, so a listener can bind it. Workers on a
    host other than the router's bind to their advertise address.
  - With O(workers), the worker specs of the deployment - their C(url)s are the targets the router dials (added to
    O(connect)), and each worker host's bind addresses are checked against what that host found
    (O(bind_outcomes)); an address its host did not try is named too (module_utils/plan/cluster_rules.py
    C(connect_targets), C(deployment_bind_problems)).
  - With O(connect), opens a TCP connection to each target. A connection or a refusal means the host answered
    (on a first run nothing listens yet); a timeout, no route or an unresolvable name is a problem.
  - With O(http), sends a GET to each URL from this host and returns its status (the router's plan asks its own
    health URL, so the apply knows whether a router serves without asking again).
  - With O(paths), says whether each path exists on this host (the router's local tokenizer).
  - Changes nothing; the result lists each outcome and C(problems), one message per bad address or target,
    naming the variable to fix.
options:
  bind:
    description: Addresses that must be addresses of this host.
    type: list
    elements: str
    default: []
  connect:
    description: "Targets: C({unit, host, address, port}) (the host and unit only name the target in messages)."
    type: list
    elements: dict
    default: []
  workers:
    description: Worker specs (C({unit, host, url, flags})) whose URLs to connect to and whose bind addresses to check.
    type: list
    elements: dict
    default: []
  bind_outcomes:
    description: "C({host: {address: outcome}}) - what each worker host found when it tried its bind addresses
      (its preflight look, plugins/modules/host_look.py)."
    type: dict
    default: {}
  http:
    description: URLs to GET; their HTTP status comes back in RV(http), 0 where nothing answered.
    type: list
    elements: str
    default: []
  paths:
    description: Paths whose existence comes back in RV(exists).
    type: list
    elements: path
    default: []
  name:
    description: The inventory name of this host, for the messages.
    type: str
    default: this host
  timeout:
    description: Seconds a TCP connect may take before it counts as a timeout.
    type: float
    default: 3
attributes:
  check_mode:
    details: Can run in check mode; it changes nothing in any mode.
    support: full
  diff_mode:
    details: Nothing to diff.
    support: none
"""

EXAMPLES = r"""
- name: Check that the router host reaches every worker port
  disagg.sglang.address_check:
    connect:
      - {unit: sglang-decode0, host: decode-01, address: 10.0.1.21, port: 30001}
  register: reach
  failed_when: reach.problems | length > 0
"""

RETURN = r"""
bind:
  description: "Address -> C(ok) or why it cannot be bound here."
  returned: always
  type: dict
connect:
  description: The targets with their C(outcome) (open, refused, timeout, unreachable, unresolved).
  returned: always
  type: list
  elements: dict
exists:
  description: "Path -> whether it exists."
  returned: always
  type: dict
http:
  description: "URL -> the HTTP status it answered (0: no answer)."
  returned: always
  type: dict
problems:
  description: One message per address or target that is not fine.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.host import address_probes
from ansible_collections.disagg.sglang.plugins.module_utils.plan import cluster_rules
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health

ARGUMENT_SPEC = {
    "bind": {"type": "list", "elements": "str", "default": []},
    "connect": {"type": "list", "elements": "dict", "default": []},
    "workers": {"type": "list", "elements": "dict", "default": []},
    "bind_outcomes": {"type": "dict", "default": {}},
    "http": {"type": "list", "elements": "str", "default": []},
    "paths": {"type": "list", "elements": "path", "default": []},
    "name": {"type": "str", "default": "this host"},
    "timeout": {"type": "float", "default": 3.0},
}
MODULE_OPTIONS = {"supports_check_mode": True}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    p = module.params
    bind = {address: address_probes.bind_outcome(address) for address in p["bind"]}
    targets = list(p["connect"]) + cluster_rules.connect_targets(p["workers"])
    connect = [dict(t, outcome=address_probes.connect_outcome(t["address"], t["port"], p["timeout"])) for t in targets]
    problems = cluster_rules.deployment_bind_problems(p["workers"], p["bind_outcomes"])
    problems += cluster_rules.bind_problems(p["name"], bind)
    problems += cluster_rules.connect_problems(p["name"], connect)
    http = {url: service_health.fetch(url)[0] or 0 for url in p["http"]}
    exists = {path: os.path.exists(path) for path in p["paths"]}
    module.exit_json(changed=False, bind=bind, connect=connect, http=http, exists=exists, problems=problems)


if __name__ == "__main__":
    main()
