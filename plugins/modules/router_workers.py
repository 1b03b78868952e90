#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Add workers to a running router, take them out, or make its list the planned one, and wait until it shows it
(the decisions and the HTTP calls: module_utils/router/router_api)."""

DOCUMENTATION = r"""
---
module: router_workers
short_description: Change the worker list of a running router through its worker API, and wait for it
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.router]
description:
  - Reads the router's C(GET /workers), adds the missing workers (C(POST /workers)) and takes out those to go
    (C(DELETE /workers/{id})), then waits until the listing shows the change, for at most O(timeout) seconds.
  - The router does not restart, so requests in flight on the workers that stay go on.
  - Fails, naming what the router lists, when the listing does not settle in time.
options:
  implementation:
    description: Which router answers at O(url).
    type: str
    default: sglang_router
    choices: [sglang_router, smg]
  workers:
    description:
      - The workers to add or take out, each with C(url), C(worker_type) (C(prefill) or C(decode)) and, for a
        prefill, C(bootstrap_port). A unit spec of the collection's plan serves as it is (its C(role) is the
        worker type).
    type: list
    elements: dict
    required: true
  worker_api_key:
    description: The workers' API key, given to the router with each worker it adds.
    type: str
    default: ""
  state:
    description:
      - V(present) adds the workers it does not list and waits until each is listed healthy.
      - V(absent) takes the workers out and waits until none of them is listed.
      - V(exact) makes the listing exactly O(workers) (adds, and takes out every other worker) and waits until
        each is listed healthy.
    type: str
    default: present
    choices: [present, absent, exact]
  timeout:
    description: Seconds to wait for the listing to show the change.
    type: int
    default: 60
  poll:
    description: Seconds between two readings of the listing (a local HTTP GET; a short poll makes the wait return
      close to the moment the router shows the change).
    type: float
    default: 0.25
attributes:
  check_mode:
    support: full
    details: Reads the listing and reports what it would add and take out; changes nothing.
  diff_mode:
    support: none
    details: The change is reported in RV(added) and RV(removed).
"""

EXAMPLES = r"""
- name: Take a decode worker out of the router (no new requests; those in flight go on)
  disagg.sglang.router_workers:
    url: http://127.0.0.1:8000
    workers:
      - url: http://10.0.0.3:30001
        worker_type: decode
    state: absent

- name: Make the router's list the planned one, without restarting it
  disagg.sglang.router_workers:
    url: http://127.0.0.1:8000
    workers:
      - {url: "http://10.0.0.2:30000", worker_type: prefill, bootstrap_port: 8998}
      - {url: "http://10.0.0.3:30001", worker_type: decode}
    state: exact
    timeout: 120
"""

RETURN = r"""
added:
  description: URLs of the workers added (or, in check mode, that would be).
  type: list
  elements: str
  returned: always
removed:
  description: URLs of the workers taken out (or, in check mode, that would be).
  type: list
  elements: str
  returned: always
workers:
  description: The router's last listing, each with id, url, worker_type and healthy.
  type: list
  elements: dict
  returned: always
waited:
  description: Seconds from the first reading to the listing that showed the change.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_api

ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "implementation": {"type": "str", "default": "sglang_router", "choices": list(router_api.IMPLEMENTATIONS)},
    "workers": {"type": "list", "elements": "dict", "required": True},
    "worker_api_key": {"type": "str", "default": "", "no_log": True},
    "state": {"type": "str", "default": "present", "choices": list(router_api.STATES)},
    "timeout": {"type": "int", "default": 60},
    "poll": {"type": "float", "default": 0.25},
}
MODULE_OPTIONS = {"supports_check_mode": True}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    params = module.params
    workers = router_api.desired_workers(params["workers"])
    problems = router_api.worker_problems(workers)
    if problems:
        module.fail_json(msg="; ".join(problems))
    api = router_api.IMPLEMENTATIONS[params["implementation"]](params["url"], params["api_key"])
    options = {key: params[key] for key in ("worker_api_key", "timeout", "poll")}
    try:
        result = router_api.converge(api, workers, params["state"], {**options, "check_mode": module.check_mode})
    except router_api.RouterApiError as exc:
        module.fail_json(msg=str(exc), added=[], removed=[], workers=[], waited=0.0)
    settled = result.pop("settled")
    if not settled and not module.check_mode:
        module.fail_json(
            msg=f"the router at {params['url']} did not reach state {params['state']} for "
                f"{', '.join(w['url'] for w in workers) or 'no worker'} within {params['timeout']} s; it "
                f"lists {router_api.describe(result['workers'])}",
            **result,
        )  # fmt: skip
    module.exit_json(**result)


if __name__ == "__main__":
    main()
