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
  - With O(routers), every router of the host at once (a deployment of several routers, C(sglang_router_instances)),
    each router's changes first, then one wait until every listing shows them.
  - V(consistent) is the run's end check and changes nothing. Every router must list exactly O(workers), each
    healthy, within O(timeout) seconds; a worker a router lists that O(workers) does not have fails at once, naming
    the router and the worker.
options:
  url:
    description: The router's base URL (one router). One of O(url) and O(routers) is needed.
    type: str
    required: false
  routers:
    description:
      - The routers of the host, each C({name, url, implementation}) (C(implementation) defaults to
        O(implementation)); a router unit spec of the plan serves as it is (its C(unit) names it, its C(impl) is the
        implementation).
    type: list
    elements: dict
  removable:
    description:
      - With V(exact), take out only the listed workers whose URL is in this list (those the collection handed the
        router, its record's C(worker_urls)); a worker someone else added stays for the end check (V(consistent))
        to name. Unset, V(exact) takes out every worker that is not in O(workers).
    type: list
    elements: str
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
      - V(exact) makes the listing exactly O(workers) (adds, and takes out every other worker, or those of
        O(removable)) and waits until each is listed healthy.
      - V(consistent) changes nothing. It waits until every router lists exactly O(workers), each healthy, and
        fails at once on a worker that O(workers) does not have.
    type: str
    default: present
    choices: [present, absent, exact, consistent]
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
routers:
  description: With O(routers) or V(consistent), each router's C(name), C(url) and last listing (C(workers)), and for
    a change its C(added), C(removed) and C(settled).
  type: list
  elements: dict
  returned: with O(routers), or state V(consistent)
problems:
  description: With V(consistent), what the routers list that is not the plan (empty when consistent).
  type: list
  elements: str
  returned: state V(consistent)
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_api

ARGUMENT_SPEC = {
    "url": {"type": "str"},
    "routers": {"type": "list", "elements": "dict"},
    "removable": {"type": "list", "elements": "str"},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "implementation": {"type": "str", "default": "sglang_router", "choices": list(router_api.IMPLEMENTATIONS)},
    "workers": {"type": "list", "elements": "dict", "required": True},
    "worker_api_key": {"type": "str", "default": "", "no_log": True},
    "state": {"type": "str", "default": "present", "choices": [*router_api.STATES, "consistent"]},
    "timeout": {"type": "int", "default": 60},
    "poll": {"type": "float", "default": 0.25},
}
MODULE_OPTIONS = {
    "supports_check_mode": True,
    "required_one_of": [["url", "routers"]],
    "mutually_exclusive": [["url", "routers"]],
}


def router_apis(params):
    """{name: api} of the routers the call reaches: O(routers) (each named by its name or unit, else its URL), or
    the one router at O(url)."""
    if not params["routers"]:
        return {params["url"]: router_api.IMPLEMENTATIONS[params["implementation"]](params["url"], params["api_key"])}
    apis = {}
    for router in params["routers"]:
        impl = router.get("implementation") or router.get("impl") or params["implementation"]
        if impl not in router_api.IMPLEMENTATIONS:
            raise router_api.RouterApiError(f"routers: implementation {impl!r} of {router.get('url')}: one of "
                                            f"{', '.join(router_api.IMPLEMENTATIONS)}")  # fmt: skip
        if not str(router.get("url") or "").startswith(("http://", "https://")):
            raise router_api.RouterApiError(f"routers: a url (http://host:port) is needed, got {router!r}")
        name = str(router.get("unit") or router.get("name") or router["url"])
        if router.get("host"):
            name = f"{name}@{router['host']}"
        apis[name] = router_api.IMPLEMENTATIONS[impl](router["url"], params["api_key"])
    return apis


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    params = module.params
    workers = router_api.desired_workers(params["workers"])
    problems = router_api.worker_problems(workers)
    if problems:
        module.fail_json(msg="; ".join(problems))
    options = {key: params[key] for key in ("worker_api_key", "timeout", "poll", "removable")}
    options["check_mode"] = module.check_mode
    try:
        apis = router_apis(params)
        if params["state"] == "consistent":
            checked = router_api.check_all(apis, workers, options)
        elif params["routers"]:
            result = router_api.converge_all(apis, workers, params["state"], options)
        else:
            result = router_api.converge(apis[params["url"]], workers, params["state"], options)
    except router_api.RouterApiError as exc:
        module.fail_json(msg=str(exc), added=[], removed=[], workers=[], waited=0.0)
    if params["state"] == "consistent":
        if checked["problems"]:
            module.fail_json(
                msg=f"the routers do not list exactly the planned workers, each healthy (checked for up to "
                    f"{params['timeout']} s): {'; '.join(checked['problems'])}",
                changed=False, **checked,
            )  # fmt: skip
        module.exit_json(changed=False, **checked)
    settled = result.pop("settled")
    if not settled and not module.check_mode:
        unsettled = [r for r in result.get("routers") or [] if not r["settled"]]
        where = (
            "; ".join(f"the router {r['name']} at {r['url']} lists {router_api.describe(r['workers'])}"
                      for r in unsettled)
            if unsettled
            else f"the router at {params['url']} lists {router_api.describe(result['workers'])}"
        )  # fmt: skip
        module.fail_json(
            msg=f"{'the routers' if unsettled else 'the router'} did not reach state {params['state']} for "
                f"{', '.join(w['url'] for w in workers) or 'no worker'} within {params['timeout']} s: {where}",
            **result,
        )  # fmt: skip
    module.exit_json(**result)


if __name__ == "__main__":
    main()
