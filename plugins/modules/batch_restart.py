#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Drain, restart and wait for the instances of one rolling batch on one host, in one call; or drain, stop and remove
retired instances (module_utils/units/batch_restart)."""

DOCUMENTATION = r"""
---
module: batch_restart
short_description: Drain instances out of the router, then restart them (a rolling batch) or retire them
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.journal]
description:
  - One drain for both paths that take instances out of the router - the rolling restart and the retirement of
    instances the inventory no longer has; each instance's drain is said in one phrase (the C(said) of
    RV(services[].drain)).
  - For each instance at once - reads its C(/metrics) and its C(/v1/loads) until both say it holds no request (the
    sglang scheduler's gauges and its load snapshot, both published snapshots, so a 0 counts only when both say so) or
    C(drain_timeout) seconds pass; restarts its unit (systemd's SIGTERM lets sglang drain what is left) and enables
    it where it is not; polls its health URL every O(poll) seconds, at most O(wait) seconds, stopping early when the
    unit fails or restarts, or has stalled (silent for O(stall_timeout) seconds while its port takes requests, see
    M(disagg.sglang.service_health)); once it is healthy, removes its previous files (those the rollback would have
    read).
  - The rolling step (roles/sglang_worker/tasks/rolling_batch.yml) calls it once per host of a batch, after the batch
    left the router; an instance not healthy within O(wait) is waited for further with
    M(disagg.sglang.service_health), from the restart count and the deadline returned here.
  - With O(state=retired) (roles/sglang_worker/tasks/retire_instances.yml), each instance is drained where
    O(drain) says so, stopped (SIGTERM - sglang finishes what it holds, up to the unit stop timeout) and disabled, and
    its unit file, environment file and record are removed; then systemd is reloaded once. A unit systemd does not
    know (removed by hand) has nothing to stop.
options:
  state:
    description: C(restarted) - drain, restart, wait (a rolling batch); C(retired) - drain, stop, disable, remove.
    type: str
    choices: [restarted, retired]
    default: restarted
  drain:
    description: With O(state=retired), whether to drain first (the router served the instances).
    type: bool
    default: true
  record_dir:
    description: The directory of the units' records (C(<unit>.json)); required with O(state=retired).
    type: path
  instances:
    description:
      - The batch's instances on this host, as the rolling plan lists them (module_utils/units/rolling.py) - each
        C({unit, health_url, backup, ...}), C(backup) its backup set C({unit_file, env_file, record})
        (M(disagg.sglang.unit_files)); the metrics URL is the one beside C(health_url), the backups are removed once
        the instance is healthy.
      - With O(state=retired), the records of the retired instances on this host (C({unit, health_url, unit_file,
        environment_file, ...})).
    type: list
    elements: dict
    required: true
  drain_timeout:
    description: Seconds to wait at most for an instance to hold no request before its restart.
    type: int
    default: 60
  wait:
    description: Seconds to wait for health after the restart in this call.
    type: int
    default: 10
  health_timeout:
    description:
      - Seconds from the restart to the end of the whole health wait (this call's and the caller's later ones), returned
        as each instance's C(deadline). Left out, the wait is this call's O(wait).
    type: int
  stall_timeout:
    description: Seconds of silence (port open, /health unanswered) after which an instance counts as stalled.
    type: float
  poll:
    description: Seconds between two readings of the metrics (drain) or of the health URL.
    type: float
    default: 0.25
  api_key:
    description: The workers' API key (C(sglang_worker_api_key)), which sglang asks of C(/v1/loads); empty for none.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Restarts nothing and removes nothing; each instance comes back as not restarted (retired - what
      would be stopped and removed).
  diff_mode:
    support: none
    details: No file content changes; the restart is the change.
"""

EXAMPLES = r"""
- name: Drain, restart and wait for decode1 (a rolling batch of one)
  disagg.sglang.batch_restart:
    instances:
      - unit: sglang-decode1
        health_url: http://127.0.0.1:30002/health
        backup:
          unit_file: /etc/systemd/system/sglang-decode1.service.1234.2026-12-03@10:00:00~
          env_file: ""
          record: ""
    drain_timeout: 60
    wait: 10
  register: batch

- name: Retire decode2 (its record), drained first
  disagg.sglang.batch_restart:
    state: retired
    record_dir: /var/lib/disagg-sglang/deployed
    instances:
      - unit: sglang-decode2
        health_url: http://127.0.0.1:30003/health
        unit_file: /etc/systemd/system/sglang-decode2.service
        environment_file: /etc/disagg-sglang/sglang-decode2.env
"""

RETURN = r"""
services:
  description: One result per instance, in order.
  type: list
  elements: dict
  returned: always
  contains:
    healthy:
      description: Whether the health URL answered healthy within O(wait).
      type: bool
    unit_failed:
      description: Whether the unit failed or was restarted by systemd while waited for.
      type: bool
    stalled:
      description: Whether the instance stalled (silent for O(stall_timeout) seconds).
      type: bool
    timed_out:
      description: Whether the deadline passed before it was healthy, failed or stalled.
      type: bool
    done:
      description: Whether its wait is over (healthy, failed, stalled or timed out).
      type: bool
    deadline:
      description: When its whole health wait ends, in seconds since the epoch (null without O(health_timeout)).
      type: float
    unit:
      description: The unit (C(.service) added).
      type: str
    url:
      description: The health URL.
      type: str
    unit_state:
      description: The unit's state at the end, e.g. C(active/running, 0 restarts).
      type: str
    reason:
      description: The last health answer in words.
      type: str
    drain:
      description: C({left, seconds, said}) - requests still held when the drain ended (0 drained, null cannot tell),
        and the drain in one phrase; null for a retired instance not drained.
      type: dict
    stopped:
      description: With O(state=retired), what systemd was asked (C(stop), C(disable)).
      type: list
    removed:
      description: With O(state=retired), the unit file, environment file and record removed.
      type: list
    error:
      description: With O(state=retired), what systemd refused, empty when nothing.
      type: str
    restarts:
      description: The unit's restart count after the restart (the baseline of a longer wait).
      type: int
    restart_error:
      description: What systemd refused, empty when nothing.
      type: str
    dropped:
      description: The previous files removed (the instance is healthy).
      type: list
    journal:
      description: The unit's journal tail when it is not healthy.
      type: str
    item:
      description: The instance, as passed.
      type: dict
healthy:
  description: Whether every instance is healthy.
  type: bool
  returned: with O(state=restarted)
refused:
  description: With O(state=retired), the units whose stop or disable systemd refused (the task fails naming each).
  type: list
  elements: str
  returned: with O(state=retired)
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.units.batch_restart import restart_all, retire_all
from ansible_collections.disagg.sglang.plugins.module_utils.units.service_health import journal_tail
from ansible_collections.disagg.sglang.plugins.module_utils.units.unit_files import remove

ARGUMENT_SPEC = {
    "instances": {"type": "list", "elements": "dict", "required": True},
    "drain_timeout": {"type": "int", "default": 60},
    "wait": {"type": "int", "default": 10},
    "health_timeout": {"type": "int"},
    "stall_timeout": {"type": "float"},
    "poll": {"type": "float", "default": 0.25},
    "journal_lines": {"type": "int", "default": 40},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "state": {"type": "str", "choices": ["restarted", "retired"], "default": "restarted"},
    "drain": {"type": "bool", "default": True},
    "record_dir": {"type": "path"},
}
MODULE_OPTIONS = {"supports_check_mode": True, "required_if": [("state", "retired", ["record_dir"])]}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, **MODULE_OPTIONS)
    params = module.params

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    if params["state"] == "retired":
        retired = retire_all(run, params["instances"], params["record_dir"], params["drain_timeout"],
                             do_drain=params["drain"], check=module.check_mode, remove=remove,
                             poll=params["poll"], api_key=params["api_key"])  # fmt: skip
        if retired["refused"]:
            errors = "; ".join(f"{r['unit']}: {r['error']}" for r in retired["services"] if r["error"])
            module.fail_json(msg=f"systemd refused to retire {errors}", **retired)
        module.exit_json(**retired)
    if module.check_mode:
        said = {"healthy": False, "unit_failed": False, "stalled": False, "timed_out": False, "done": True,
                "reason": "not restarted (check mode)"}  # fmt: skip
        results = [{**said, "item": entry} for entry in params["instances"]]
        module.exit_json(changed=False, services=results, healthy=False)

    def journal(unit):
        return journal_tail(run, unit, params["journal_lines"])

    results = restart_all(run, params["instances"], params["wait"], params["drain_timeout"], journal=journal,
                          remove=remove, poll=params["poll"], health_timeout=params["health_timeout"],
                          stall_timeout=params["stall_timeout"], api_key=params["api_key"])  # fmt: skip
    module.exit_json(changed=True, services=results, healthy=all(r["healthy"] for r in results))


if __name__ == "__main__":
    main()
