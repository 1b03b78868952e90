#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Wait a bounded time for a systemd unit to answer its health URL, ending early on a crash or a stall (stall
recognition: module_utils/units/stall.py; the wait: module_utils/units/service_health.py)."""

DOCUMENTATION = r"""
---
module: service_health
short_description: Wait a bounded time for a systemd service to answer its health URL; recognise a crash or a stall
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.journal]
description:
  - Polls an HTTP health URL of a service started by systemd until it answers 200 (and, optionally,
    its JSON body reaches expected values), for at most O(wait) seconds.
  - Stops waiting as soon as the unit has failed or was restarted by systemd, so a crash-looping
    worker is reported at once rather than after the whole timeout.
  - Stops waiting when the service has stalled - its port takes the request and nothing answers (or a non-200 comes
    only after a second, sglang's health check timing out) for O(stall_timeout) seconds - which is not how a service
    that loads (port closed) or warms up (503 at once) answers.
  - Meant to be called with C(until) (on RV(done)) and a fixed O(deadline), so a long wait prints one progress line
    per call and ends on the clock, whatever each call cost.
  - When the service is not healthy, returns the tail of the unit's journal.
options:
  unit:
    description: Name of the systemd unit, e.g. C(sglang-prefill0.service). Required without O(services).
    type: str
  url:
    description: Health URL, e.g. C(http://127.0.0.1:30000/health) or the router's C(/readiness). Required without
      O(services).
    type: str
  services:
    description:
      - Several services of the host, each C({unit, url, expect, restarts, item}), waited for at once (the wait is the
        slowest one's, not their sum). C(expect) is as O(expect_json); C(restarts) is the unit's C(NRestarts) when
        the whole wait began (so a restart between two calls of an C(until) loop still ends the wait; read at the
        start of the call when left out); C(deadline) is the service's own O(deadline); C(item) is returned unchanged
        with its result.
      - Returns RV(services) instead of one service's keys; RV(healthy) is true when all are healthy,
        RV(unit_failed) when none is still waiting but some failed, RV(done) when none is still waiting.
    type: list
    elements: dict
  specs:
    description:
      - As O(services), from the unit specs the units step started (each C({unit, role, health_url,
        expected_workers})), as roles/sglang/tasks/wait.yml hands them over - a router waits until its readiness
        counts its C(expected_workers) healthy; each spec is returned as the C(item) of its result
        (module_utils/units/rolling.py C(health_services)).
    type: list
    elements: dict
  restarts:
    description: "With O(specs), C({unit.service: NRestarts}) when the whole wait began (as the units step left them)."
    type: dict
  expect_json:
    description:
      - "Keys of the JSON response and the smallest value each must reach, e.g. C({healthy_workers: 2})."
    type: dict
  wait:
    description:
      - Seconds to poll before returning (one call's window, for a progress line); a silence being timed against
        O(stall_timeout) holds the call past it.
    type: int
    default: 10
  deadline:
    description:
      - When the whole wait ends, in seconds since the epoch (fixed once, e.g. C(now().timestamp() + timeout), so
        every call of an C(until) loop ends by the same time; the hosts keep the controller's time, as NTP does).
        No probe outlasts it. Left out, each call ends after O(wait).
    type: float
  stall_timeout:
    description:
      - Seconds the service may go silent - its port takes requests, /health answers nothing in its HTTP timeout or
        a non-200 only after a second - before it counts as stalled (RV(stalled)) and the wait ends. Left out, no
        stall is judged.
    type: float
  poll:
    description: Seconds between two polls within one call (the rolling step polls a restarting instance every 0.25 s).
    type: float
    default: 1.0
attributes:
  check_mode:
    support: full
    details: Only reads the unit's state and its health URL, so check mode waits as a real run does.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to show.
"""

EXAMPLES = r"""
- name: Wait up to 30 minutes for the decode worker, one progress line every 10 s
  disagg.sglang.service_health:
    unit: sglang-decode0.service
    url: http://127.0.0.1:30001/health
    wait: 10
    deadline: "{{ now().timestamp() + 1800 }}"
    stall_timeout: 30
  register: health
  until: health.done
  retries: 1000  # a bound never reached: the deadline ends the wait
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
stalled:
  description: Whether the service stalled (silent for O(stall_timeout) seconds while its port takes requests).
  type: bool
  returned: always
timed_out:
  description: Whether O(deadline) passed before the service was healthy, failed or stalled.
  type: bool
  returned: always
done:
  description: Whether the wait is over (healthy, failed, stalled or timed out); the C(until) condition.
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
services:
  description: With O(services), one result per service in order - the keys above and its C(item).
  type: list
  elements: dict
  returned: when O(services) is given
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.units.rolling import health_services
from ansible_collections.disagg.sglang.plugins.module_utils.units.service_health import journal_tail, wait_all

ARGUMENT_SPEC = {
    "unit": {"type": "str"},
    "url": {"type": "str"},
    "services": {"type": "list", "elements": "dict"},
    "specs": {"type": "list", "elements": "dict"},
    "restarts": {"type": "dict"},
    "expect_json": {"type": "dict"},
    "wait": {"type": "int", "default": 10},
    "deadline": {"type": "float"},
    "stall_timeout": {"type": "float"},
    "poll": {"type": "float", "default": 1.0},
    "journal_lines": {"type": "int", "default": 40},
}
MODULE_OPTIONS = {
    "supports_check_mode": True,
    "required_one_of": [["unit", "services", "specs"]],
    "required_together": [["unit", "url"]],
    "mutually_exclusive": [["unit", "services", "specs"]],
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    params = module.params

    def run(cmd):
        return module.run_command(cmd, environ_update={"LC_ALL": "C"})

    def journal(unit):
        return journal_tail(run, unit, params["journal_lines"])

    asked = params["services"] if params["specs"] is None else health_services(params["specs"], params["restarts"])
    if asked is not None:
        services = [{**s, "expect": s.get("expect") or {}} for s in asked]
        results = wait_all(run, services, params["wait"], journal=journal, poll=params["poll"],
                           deadline=params["deadline"], stall_timeout=params["stall_timeout"])  # fmt: skip
        module.exit_json(
            changed=False,
            services=results,
            healthy=all(r["healthy"] for r in results),
            unit_failed=not all(r["healthy"] for r in results)
            and all(r["healthy"] or r["unit_failed"] for r in results),
            stalled=any(r["stalled"] for r in results),
            timed_out=any(r["timed_out"] for r in results),
            done=all(r["done"] for r in results),
        )
    service = {"unit": params["unit"], "url": params["url"], "expect": params["expect_json"] or {}}
    result = wait_all(run, [service], params["wait"], journal=journal, poll=params["poll"],
                      deadline=params["deadline"], stall_timeout=params["stall_timeout"])[0]  # fmt: skip
    result.pop("item")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
