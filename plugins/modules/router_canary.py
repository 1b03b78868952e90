#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Send one request through the router between two readings of the workers' /metrics, in one call (the loop and
the HTTP calls: module_utils/router/router_canary)."""

DOCUMENTATION = r"""
---
module: router_canary
short_description: Send one request through the router and report the KV transfers the workers counted meanwhile
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.router]
description:
  - Reads every worker's C(/metrics) (all at once), sends one C(POST /generate) through the router, reads the
    C(/metrics) again and returns what sglang's KV transfer series counted in between (the
    C(disagg.sglang.kv_transfer_report) filter's report).
  - The router answers 503 while its circuit breaker is open after a worker restart, so the request is sent again
    every 2 seconds until it is answered 200 or O(timeout) seconds passed; each try may take 60 seconds.
  - A worker whose C(/metrics) does not answer counts as a page without the series, and is named in
    RV(unanswered).
  - Fails, naming the router's URL, the last status and the tries, when no try was answered 200.
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
    description: Seconds the request may keep failing (no answer, or not 200) before the module fails.
    type: int
    default: 120
  workers:
    description:
      - The workers whose C(/metrics) are read, each with C(unit) and C(metrics_url). A unit spec of the
        collection's plan serves as it is.
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
- name: Send one request through the router and show the KV transfer it saw
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
  description: Whether the router answered the request 200.
  type: bool
  returned: when not in check mode
status:
  description: HTTP status of the last try; null when nothing answered.
  type: int
  returned: when not in check mode
  sample: 200
reason:
  description: C(200), the last status (C(HTTP 503)) or why nothing answered.
  type: str
  returned: when not in check mode
answer:
  description:
    - The generated text (the C(text) of sglang's JSON answer), else the JSON answer, else the body (first 2000
      characters). After no 200, the body of the last try.
  type: raw
  returned: when not in check mode
  sample: " Paris. It is the largest city"
tries:
  description: Requests sent.
  type: int
  returned: when not in check mode
seconds:
  description: Seconds from the first try to the last answer.
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
  description: The requests the workers held (their scheduler gauges) when the canary began; a failed transfer or
    bootstrap counted during the request may be theirs.
  type: int
  returned: unless in check mode
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_canary

ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "prompt": {"type": "str", "default": "The capital of France is"},
    "max_new_tokens": {"type": "int", "default": 8, "no_log": False},  # a length, not a secret
    "timeout": {"type": "int", "default": 120},
    "workers": {"type": "list", "elements": "dict", "default": []},
    "simulated": {"type": "bool", "default": False},
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
    options = {key: params[key] for key in ("prompt", "max_new_tokens", "api_key", "timeout", "simulated")}
    result = router_canary.run(params["url"], params["workers"], options)
    if not result["passed"]:
        module.fail_json(
            msg=f"no request through the router at {params['url']} was answered 200 within {params['timeout']} s "
                f"({result['tries']} tries, the last: {result['reason']}{': ' if result['answer'] else ''}"
                f"{str(result['answer'])[:300]}); {result['report']['line']}",
            **result,
        )  # fmt: skip
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
