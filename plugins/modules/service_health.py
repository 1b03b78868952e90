#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Wait a bounded time for a systemd unit to answer its health URL (the decisions: module_utils/service_health)."""

DOCUMENTATION = r"""
---
module: service_health
short_description: Wait a bounded time for a systemd service to answer its health URL
version_added: "0.1.0"
description:
  - Polls an HTTP health URL of a service started by systemd until it answers 200 (and, optionally,
    its JSON body reaches expected values), for at most O(wait) seconds.
  - Stops waiting as soon as the unit has failed or was restarted by systemd, so a crash-looping
    worker is reported at once rather than after the whole timeout.
  - Meant to be called with C(until)/C(retries), so a long wait prints one progress line per call.
  - When the service is not healthy, returns the tail of the unit's journal.
options:
  unit:
    description: Name of the systemd unit, e.g. C(sglang-prefill0.service).
    type: str
    required: true
  url:
    description: Health URL, e.g. C(http://127.0.0.1:30000/health) or the router's C(/readiness).
    type: str
    required: true
  expect_json:
    description:
      - "Keys of the JSON response and the smallest value each must reach, e.g. C({healthy_workers: 2})."
    type: dict
  wait:
    description: Seconds to poll before returning.
    type: int
    default: 10
  journal_lines:
    description: Journal lines to return when the service is not healthy.
    type: int
    default: 40
author:
  - disagg.sglang maintainers (!UNKNOWN)
attributes:
  check_mode:
    support: full
    description: Only reads the unit's state and its health URL, so check mode waits as a real run does.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to show.
"""

EXAMPLES = r"""
- name: Wait up to 30 minutes for the decode worker, one progress line every 10 s
  disagg.sglang.service_health:
    unit: sglang-decode0.service
    url: http://127.0.0.1:30001/health
    wait: 10
  register: health
  until: health.healthy or health.unit_failed
  retries: 180
  delay: 0

- name: Wait until the router counts both workers healthy
  disagg.sglang.service_health:
    unit: sglang-router.service
    url: http://127.0.0.1:8000/readiness
    expect_json:
      healthy_workers: 2
"""

RETURN = r"""
healthy:
  description: Whether the URL answered 200 with the expected JSON values.
  type: bool
  returned: always
unit_failed:
  description: Whether the unit failed or was restarted by systemd while waiting.
  type: bool
  returned: always
unit_state:
  description: ActiveState/SubState of the unit, with its restart count.
  type: str
  returned: always
  sample: active/running, 0 restarts
reason:
  description: Why the service is not healthy (last HTTP status or error).
  type: str
  returned: always
body:
  description: Last response body (first 2000 characters).
  type: str
  returned: always
journal:
  description: Tail of the unit's journal when not healthy, else empty.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.service_health import wait_healthy


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "expect_json": {"type": "dict"},
            "wait": {"type": "int", "default": 10},
            "journal_lines": {"type": "int", "default": 40},
        },
        supports_check_mode=True,
    )
    params = module.params

    def run(cmd):
        return module.run_command(cmd, environ_update={"LC_ALL": "C"})

    result = wait_healthy(run, params["unit"], params["url"], params["expect_json"] or {}, params["wait"])
    result["journal"] = ""
    if not result["healthy"]:
        _rc, out, err = run(
            ["journalctl", "-u", params["unit"], "-n", str(params["journal_lines"]), "--no-pager", "-o", "short-iso"]
        )
        result["journal"] = out or err
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
