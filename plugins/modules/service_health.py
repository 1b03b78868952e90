#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Wait a bounded time for a systemd unit to answer its health URL."""

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
  - disagg.sglang maintainers
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
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

import json
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def unit_state(run, unit):
    """(active_state, sub_state, n_restarts) from systemctl show."""
    rc, out, _err = run(["systemctl", "show", unit, "--property=ActiveState,SubState,NRestarts"])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}
    restarts = props.get("NRestarts", "0")
    return props.get("ActiveState", "unknown"), props.get("SubState", "unknown"), int(restarts or 0)


def probe(url, expect):
    """(healthy, reason, body) of one request."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read(100000).decode("utf-8", "replace")
            status = resp.status
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}", exc.read(2000).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return False, f"no answer: {getattr(exc, 'reason', exc)}", ""
    if status != 200:
        return False, f"HTTP {status}", body
    if expect:
        try:
            data = json.loads(body)
        except ValueError:
            return False, "answer is not JSON", body
        for key, want in expect.items():
            have = data.get(key)
            if not isinstance(have, (int, float)) or have < want:
                return False, f"{key} is {have}, waiting for {want}", body
    return True, "healthy", body


def wait_healthy(run, unit, url, expect, wait, *, sleep=time.sleep, clock=time.monotonic):
    deadline = clock() + wait
    _active, _sub, restarts_at_start = unit_state(run, unit)
    while True:
        healthy, reason, body = probe(url, expect)
        active, sub, restarts = unit_state(run, unit)
        failed = active == "failed" or sub == "auto-restart" or restarts > restarts_at_start or active == "inactive"
        state = f"{active}/{sub}, {restarts} restarts"
        if healthy or failed or clock() >= deadline:
            return {
                "healthy": healthy,
                "unit_failed": failed and not healthy,
                "unit_state": state,
                "reason": reason,
                "body": body[:2000],
            }
        sleep(1)


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
