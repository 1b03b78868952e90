#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Send one request per API route through the router between two readings of the workers' /metrics, in one call
(the loop, the routes and their checks: module_utils/router/router_canary.py)."""

DOCUMENTATION = r"""
---
module: router_canary
short_description: Send one request per API route through the router and report the KV transfers meanwhile
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.router]
description:
  - Reads every worker's C(/metrics) (all at once), sends one request per API route through the router, reads the
    C(/metrics) again and returns what sglang's KV transfer series counted in between (the
    C(disagg.sglang.kv_transfer_report) filter's report).
  - "The routes, in order: C(POST /generate), C(GET /v1/models) (its first id is the model of the OpenAI requests),
    C(POST /v1/completions), C(POST /v1/chat/completions) plain and streamed (with C(stream_options.include_usage)),
    and with O(parallel_sampling) C(/v1/chat/completions) with C(n=2). Each must answer a generation: 200, the
    text of each choice and at least one completion token per choice (the streamed chat: content deltas, a finish
    reason, a usage chunk and C(data: [DONE]))."
  - The router answers 503 while its circuit breaker is open after a worker restart, so a route is sent again
    every 2 seconds until it is answered 200 or O(timeout) seconds (for all routes together) passed; each route is
    tried at least once and each try may take 60 seconds.
  - A worker whose C(/metrics) does not answer counts as a page without the series, and is named in
    RV(unanswered).
  - Fails, naming the router's URL and each route that did not answer a generation with its tries, its last status
    or problem and what it answered.
options:
  prompt:
    description: The text of the request.
    type: str
    default: The capital of France is
  max_new_tokens:
    description: Tokens the answer may have (greedy sampling, temperature 0).
    type: int
    default: 8
  timeout:
    description: Seconds the routes together may keep failing (no answer, or not 200) before the module fails.
    type: int
    default: 120
  parallel_sampling:
    description:
      - Send C(n=2) on C(/v1/chat/completions) too. Off by default, because sglang 0.5.23's PD path cannot serve
        C(n > 1) (all samples share one bootstrap room, so the decode answers 500 after its 300 s waiting timeout, and
        the routers try it 5 times); turn it on for an engine that can.
    type: bool
    default: false
  worker_api_key:
    description:
      - The workers' API key, which sglang asks of C(/v1/loads) (read beside each worker's C(/metrics) to count the
        requests they held as the canary began).
    type: str
    default: ""
  workers:
    description:
      - The workers whose C(/metrics) and C(/v1/loads) are read, each with C(unit) and C(metrics_url). A unit spec of
        the collection's plan serves as it is.
    type: list
    elements: dict
    default: []
  simulated:
    description: The workers run a simulator, not sglang; said in the report's line.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Sends nothing in check mode and says so (the request would go through the real model).
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to show.
"""

EXAMPLES = r"""
- name: Send one request per route through the router and show the KV transfer it saw
  disagg.sglang.router_canary:
    url: http://127.0.0.1:8000
    prompt: The capital of France is
    workers:
      - {unit: sglang-prefill0.service, metrics_url: "http://127.0.0.1:30000/metrics"}
      - {unit: sglang-decode0.service, metrics_url: "http://127.0.0.1:30001/metrics"}
  register: canary

- name: Show the KV transfer line
  ansible.builtin.debug:
    msg: "{{ canary.answer }} / {{ canary.report.line }}"
"""

RETURN = r"""
passed:
  description: Whether every route answered a generation.
  type: bool
  returned: when not in check mode
routes:
  description: One entry per route sent, in order.
  type: list
  elements: dict
  returned: when not in check mode
  contains:
    route:
      description: The route's name, e.g. C(/v1/chat/completions (stream)).
      type: str
    passed:
      description: Whether it answered a generation.
      type: bool
    status:
      description: HTTP status of its last try; null when nothing answered.
      type: int
    reason:
      description: C(200), the last status, why nothing answered, or what a 200 lacked.
      type: str
    answer:
      description: The generated text (a list for n 2 and for C(/v1/models)), or the body of a failed try.
      type: raw
    tries:
      description: Requests sent for it.
      type: int
    seconds:
      description: Seconds from its first try to its last answer.
      type: float
lines:
  description: "One line per route to print: C(ROUTE: PROMPT -> ANSWER), for C(/v1/models) C(ROUTE -> IDS)."
  type: list
  elements: str
  returned: when not in check mode
  sample: ["/generate: The capital of France is ->  Paris. It is"]
failed_routes:
  description: The routes that did not answer a generation.
  type: list
  elements: str
  returned: when not in check mode
status:
  description: HTTP status of the last try of C(/generate); null when nothing answered.
  type: int
  returned: when not in check mode
  sample: 200
reason:
  description: C(/generate)'s C(200), last status (C(HTTP 503)) or why nothing answered.
  type: str
  returned: when not in check mode
answer:
  description:
    - C(/generate)'s generated text (the C(text) of sglang's JSON answer), else the JSON answer, else the body
      (first 2000 characters). After no 200, the body of the last try.
  type: raw
  returned: when not in check mode
  sample: " Paris. It is the largest city"
tries:
  description: Requests sent to C(/generate).
  type: int
  returned: when not in check mode
seconds:
  description: Seconds from C(/generate)'s first try to its last answer.
  type: float
  returned: when not in check mode
report:
  description:
    - What the workers' KV transfer series counted between the two readings (as the C(disagg.sglang.kv_transfer_report)
      filter returns it). The counters are the workers' totals, so other requests count too.
  type: dict
  returned: when not in check mode
  contains:
    transfers:
      description: KV transfers the prefill workers completed.
      type: int
    gb_s:
      description: Their mean speed in GB/s; null without transfers.
      type: float
    latency_ms:
      description: Their mean latency in ms; null without transfers.
      type: float
    failed:
      description: Failed KV transfers and bootstraps, of both roles.
      type: int
    line:
      description: One line to print.
      type: str
      sample: "KV transfer: 1 transfer(s), 21.40 GB/s, 3.10 ms mean; none failed"
unanswered:
  description: Units whose C(/metrics) did not answer 200 in one of the readings (their series count as 0 there).
  type: list
  elements: str
  returned: when not in check mode
in_flight_before:
  description: The requests the workers held when the canary began (per worker the larger of its scheduler gauges
    and its C(/v1/loads), both snapshots sglang publishes); a failed transfer or bootstrap counted during the request
    may be theirs.
  type: int
  returned: unless in check mode
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_canary

ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "worker_api_key": {"type": "str", "default": "", "no_log": True},
    "prompt": {"type": "str", "default": "The capital of France is"},
    "max_new_tokens": {"type": "int", "default": 8, "no_log": False},  # a length, not a secret
    "timeout": {"type": "int", "default": 120},
    "workers": {"type": "list", "elements": "dict", "default": []},
    "simulated": {"type": "bool", "default": False},
    "parallel_sampling": {"type": "bool", "default": False},
}
MODULE_OPTIONS = {"supports_check_mode": True}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no request sent through the router")
    missing = [i for i, w in enumerate(params["workers"]) if not w.get("unit") or not w.get("metrics_url")]
    if missing:
        module.fail_json(msg=f"workers {missing}: each needs a unit and a metrics_url")
    keys = ("prompt", "max_new_tokens", "api_key", "worker_api_key", "timeout", "simulated", "parallel_sampling")
    options = {key: params[key] for key in keys}
    result = router_canary.run(params["url"], params["workers"], options)
    if not result["passed"]:
        module.fail_json(msg=router_canary.failure_message(params["url"], result, params["timeout"]), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
