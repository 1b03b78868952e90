# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What the batch_restart module does for the instances of one rolling batch on one host, in one call (one module
run instead of a drain poll, a restart and a health wait per instance). For each instance at once (one thread
each):

  1. drain (module_utils/units/drain.py): read until it holds no request for QUIET seconds, at most drain_timeout;
  2. restart: its unit restarted, and enabled where it is not (unit_actions.apply). systemd sends SIGTERM and waits
     up to TimeoutStopSec: sglang drains what it still holds and exits (python/sglang/srt/entrypoints/http_server.py
     answers /health 503 from the signal on; the simulator mirrors it);
  3. wait: service_health.wait_healthy, polled every `poll` seconds, at most `wait` seconds; the unit failing or
     restarting, or a stall (silent for stall_timeout seconds), ends it. The whole wait's deadline is health_timeout
     seconds from the restart; a longer wait goes on in the caller's until loop from the restart count and the
     deadline returned here;
  4. healthy: its backup set, which the rollback would have read, is removed (unit_files.remove).

Returns one result per instance: service_health's keys (healthy, unit_failed, stalled, timed_out, done, unit_state,
reason, body, journal) plus unit, url and deadline (so a longer wait can pass the result to service_health as its
service), item (the plan's entry), drain ({left, seconds, said}), restarts (NRestarts after the restart),
restart_error and dropped (the previous files removed).

The retirement of instances the inventory no longer has (retire_all, roles/sglang_worker/tasks/retire_instances.yml)
takes the same drain (drain.py), then stops and disables each unit and removes its unit file, environment file and
record: one drain for both paths that take an instance out of the router.

The fetch, runner, sleep and clock are injected: tests/unit/units/test_batch_restart.py.
"""

import time

from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health, unit_actions
from ansible_collections.disagg.sglang.plugins.module_utils.units.drain import POLL, drain_instance


def restart_one(run, entry, wait, drain_timeout, *, fetch, journal, sleep, clock, poll=POLL, remove=None,
                health_timeout=None, stall_timeout=None, api_key=""):  # fmt: skip
    """Drain, restart, wait and (healthy) drop the backup set of one instance. entry: the rolling plan's
    {unit, host, health_url, backup: {unit_file, env_file, record}, ...} (module_utils/units/rolling.py; the backup
    set of module_utils/units/unit_files.py). API_KEY: the workers' key, which sglang asks of /v1/loads (not of
    /metrics or /health)."""
    drained = drain_instance(entry, drain_timeout, fetch=fetch, sleep=sleep, clock=clock, poll=poll, api_key=api_key)
    name = unit_actions.service(entry["unit"])
    acted = unit_actions.apply(run, [name], [name], reload=False, check=False)
    restarts = acted["restarts"].get(name, 0)
    deadline = clock() + float(health_timeout) if health_timeout is not None else None
    result = service_health.wait_healthy(run, name, entry["health_url"], {}, int(wait), restarts_at_start=restarts,
                                         sleep=sleep, clock=clock, fetch=fetch, poll=poll, deadline=deadline,
                                         stall_timeout=stall_timeout)  # fmt: skip
    backup = entry.get("backup") or {}
    previous = [backup.get(kind) for kind in ("unit_file", "env_file", "record") if backup.get(kind)]
    dropped = remove(previous) if result["healthy"] and previous and remove is not None else []
    result.update(
        unit=name,
        url=entry["health_url"],
        deadline=deadline,
        drain=drained,
        restarts=restarts,
        restart_error=acted["errors"].get(name, ""),
        dropped=dropped,
        journal="" if result["healthy"] else journal(name),
        item=entry,
    )
    return result


def restart_all(run, entries, wait, drain_timeout, *, journal, remove=None, fetch=service_health.fetch,
                sleep=time.sleep, clock=time.time, poll=POLL, health_timeout=None, stall_timeout=None,
                api_key=""):  # fmt: skip
    """restart_one for every instance of the batch on this host at once; one result each, in order. clock: the
    epoch (time.time) in the module, so the deadline returned holds in the caller's later service_health calls."""

    def one(entry):
        return restart_one(run, entry, wait, drain_timeout, fetch=fetch, journal=journal, sleep=sleep, clock=clock,
                           poll=poll, remove=remove, health_timeout=health_timeout,
                           stall_timeout=stall_timeout, api_key=api_key)  # fmt: skip

    return service_health.at_once(one, entries)


def retire_one(run, entry, record_dir, drain_timeout, *, do_drain, check, fetch, sleep, clock, poll=POLL,
               remove=None, api_key=""):  # fmt: skip
    """Drain (where DO_DRAIN: the router served it), stop and disable one retired instance, and remove its files.
    entry: its record ({unit, host, health_url, unit_file, environment_file, ...}, module_utils/units/units.py
    record). A unit systemd does not know (its file removed by hand) has nothing left to stop. In check mode nothing
    is drained, stopped or removed: the answer says what would be."""
    drained = (
        drain_instance(entry, drain_timeout, fetch=fetch, sleep=sleep, clock=clock, poll=poll, api_key=api_key)
        if do_drain and not check
        else None
    )
    name = unit_actions.service(entry["unit"])
    state = unit_actions.read(run, [name]).get(name, {})
    todo = []
    if state.get("LoadState", "not-found") != "not-found":
        if state.get("ActiveState") != "inactive":
            todo.append("stop")
        if state.get("UnitFileState") in ("enabled", "enabled-runtime"):
            todo.append("disable")
    error = ""
    for action in [] if check else todo:
        rc, _out, err = run(["systemctl", action, name])
        if rc != 0:
            error = f"systemctl {action}: {err.strip() or 'rc ' + str(rc)}"
            break
    paths = [entry.get("unit_file"), entry.get("environment_file"), f"{record_dir}/{entry['unit']}.json"]
    removed = remove([p for p in paths if p], check) if remove is not None and not error else []
    return {"unit": name, "item": entry, "drain": drained, "stopped": todo, "error": error, "removed": removed,
            "changed": bool(todo or removed)}  # fmt: skip


def retire_all(run, entries, record_dir, drain_timeout, *, do_drain, check, remove=None, fetch=service_health.fetch,
               sleep=time.sleep, clock=time.monotonic, poll=POLL, api_key=""):  # fmt: skip
    """retire_one for every retired instance on this host at once, then one daemon-reload (not in check mode):
    {services: [result, in order], changed, refused: [unit whose stop systemd refused]}."""

    def one(entry):
        return retire_one(run, entry, record_dir, drain_timeout, do_drain=do_drain, check=check, fetch=fetch,
                          sleep=sleep, clock=clock, poll=poll, remove=remove, api_key=api_key)  # fmt: skip

    results = service_health.at_once(one, entries)
    if entries and not check:
        run(["systemctl", "daemon-reload"])
    return {"services": results, "changed": any(r["changed"] for r in results),
            "refused": [r["unit"] for r in results if r["error"]]}  # fmt: skip
