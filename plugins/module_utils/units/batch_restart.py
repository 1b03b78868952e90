# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What the batch_restart module does for the instances of one rolling batch on one host, in one call (issue 24:
the batch used to take a drain poll, a restart and a health wait, each a module run per instance). For each
instance at once (one thread each):

  1. drain: its /metrics and its /v1/loads read until both say it holds no request, on every reading of the
     last QUIET seconds (prom_text.in_flight_of is 0; None - neither answers as sglang - cannot tell and goes on),
     or drain_timeout seconds pass. Both are snapshots sglang publishes (prom_text.in_flight): its gauges can read
     0 for up to 40 decode passes while a request runs, its load snapshot is fresher (every 15 decode passes, 50 ms
     while work waits without a batch), so a 0 counts only when both say so;
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
takes the same drain, then stops and disables each unit and removes its unit file, environment file and record: one
drain for both paths that take an instance out of the router.

The fetch, runner, sleep and clock are injected: tests/unit/test_batch_restart.py.
"""

import time

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring import prom_text
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health, unit_actions

POLL = 0.25  # seconds between two readings of a draining instance's metrics or of a starting one's health
# seconds a drain's readings must all say 0 before it ends. A 0 is not yet "drained": the scheduler's snapshots
# say 0 as its last request's result is processed, some milliseconds before the HTTP answer leaves the tokenizer
# manager (and on a loaded host longer); a request the router chose just before the worker left its listing is
# still on its way and in no queue yet. Both show up within this window, as a count or as the HTTP request SIGTERM
# would find in flight (tests/unit/test_pdsim_gauges.py).
QUIET = 1.0


def loads_url(health_url):
    """The /v1/loads URL beside an instance's /health URL, asking for the sections a drain reads; "" otherwise."""
    metrics = service_health.metrics_url(health_url)
    return metrics[: -len("/metrics")] + "/v1/loads?include=core,disagg" if metrics else ""


def drain(url, timeout, *, fetch, sleep, clock, poll=POLL, loads="", quiet=QUIET):
    """{left, seconds}: the requests the instance still held when the drain ended (0 drained: every reading of the
    last QUIET seconds said 0; None: neither its /metrics page URL nor its /v1/loads answer LOADS has sglang's
    counts, or it did not answer, so it cannot tell; > 0: timeout ran out) and how long it took. Each reading takes
    both (prom_text.in_flight_of)."""
    start = clock()
    zero_since = None
    while True:
        _status, body, _error = fetch(url)
        readings = [prom_text.in_flight(body or "")]
        if loads:
            _status, answer, _error = fetch(loads)
            readings.append(prom_text.in_flight(answer or ""))
        left, now = prom_text.in_flight_of(*readings), clock()
        zero_since = (zero_since if zero_since is not None else now) if left == 0 else None
        quiet_enough = zero_since is not None and now - zero_since >= quiet
        if left is None or quiet_enough or now - start >= timeout:
            return {"left": left, "seconds": round(now - start, 2)}
        sleep(poll)


def drain_instance(entry, timeout, *, fetch, sleep, clock, poll=POLL, api_key=""):
    """The one drain of an instance out of the router, for the rolling batch and the retirement: {left, seconds,
    said}. Its /metrics and its /v1/loads read together (drain); said in one phrase (prom_text.drain_said) naming
    the metrics page beside its health URL. API_KEY: the workers' key, which sglang asks of /v1/loads (not of
    /metrics or /health)."""
    drain_url = service_health.metrics_url(entry.get("health_url") or "")
    if api_key:
        headers = {"Authorization": f"Bearer {api_key}"}

        def fetch_drain(url):
            return fetch(url, headers=headers) if url.endswith("include=core,disagg") else fetch(url)
    else:
        fetch_drain = fetch
    drained = {"left": None, "seconds": 0}
    if drain_url:
        drained = drain(drain_url, float(timeout), fetch=fetch_drain, sleep=sleep, clock=clock, poll=poll,
                        loads=loads_url(entry["health_url"]))  # fmt: skip
    return {**drained, "said": prom_text.drain_said(drained["left"], timeout, drain_url)}


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
