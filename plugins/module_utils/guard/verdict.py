# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""What the worker guard decides, as pure functions: is a worker alive, busy, or silent; is it time to kill it; is
the kill budget spent. The guard's program (roles/sglang_worker/files/sglang_guard.py) only looks and acts: it reads
the unit's state, probes the worker and hands each reading to look(); tests/unit/guard/test_guard_verdict.py drives
these functions through a table (tests/unit/guard/guard_cases.yml). Standard library only: the file is shipped as it
is, beside the program, onto the worker hosts.

What a reading means (sglang 0.5.23):
  - The worker's real serving path is probed: GET /health on its main port (for a prefill never its bootstrap
    server, which keeps answering while the scheduler hangs). /health queues a one-token generation and answers 200
    once the scheduler produced any output (about 1 s when healthy), 503 at once while starting (warm-up) or
    gracefully exiting (SIGTERM, a drain), and 503 only after SGLANG_HEALTH_CHECK_TIMEOUT (20 s) of scheduler
    silence (sglang/srt/entrypoints/http_server.py health_generate). The probe's own timeout is far shorter, so any
    answer at all is life; a closed port (connection refused) is a load or a process that is gone, systemd's
    business, never the guard's.
  - No answer within the probe's timeout is either a scheduler that makes no output (stalled, or frozen with its
    whole process) or one busy on a long prompt: the health request waits behind it. They are told apart by
    GET /v1/loads, which the tokenizer answers from the load snapshot the scheduler publishes in shared memory
    (sglang/srt/managers/tokenizer_control_mixin.py get_loads; the snapshot's `timestamp` is time.time() when it was
    taken, sglang/srt/managers/scheduler_components/load_inquirer.py). The scheduler publishes it after every
    extend batch, so after every chunk of a long prompt (sglang/srt/managers/scheduler.py process_batch_result,
    forced for extend batches), every --load-snapshot-publish-interval decode passes, and every
    LOAD_STALL_REFRESH_S (50 ms) while work waits with no batch (on_idle). A busy scheduler's snapshot is fresh; a
    stalled one's stays at its last publication; a frozen process answers neither request.
So a worker's last sign of life is the latest of: the end of an answered probe, a refused probe, a new process or a
unit not active (systemd owns it then), and the newest snapshot timestamp. Silent for `bound` seconds past that
means killed, unless the kill budget (`budget` kills within `window` seconds) is spent: then the guard holds off
and says so, once, until a kill leaves the window.
"""

# Phases of one reading (what the worker is doing, as far as the guard can tell).
INACTIVE = "inactive"  # the unit is not active: starting, stopping, failed, restarting (systemd owns it)
SERVING = "serving"  # /health answered 200
ANSWERING = "answering"  # /health answered something else at once: warming up, draining, stopping
CLOSED = "closed"  # the port refused the connection: loading weights, or the process is gone
BUSY = "busy"  # /health unanswered, the scheduler published a snapshot since the last sign of life
STALLED = "stalled"  # /health unanswered, /v1/loads answered with no newer snapshot: the scheduler is silent
FROZEN = "frozen"  # neither /health nor /v1/loads answered with the port open: the whole process is silent
SILENT = (STALLED, FROZEN)

# Actions.
NONE = "none"
KILL = "kill"
HOLD = "hold"  # a kill is due but the budget is spent: said once per episode


def new_state(now, pid=None):
    """A worker's state before its first reading: alive now."""
    return {"pid": pid, "life": float(now), "kills": [], "held": False}


def phase_of(reading):
    """The phase of one reading: {active (the unit's ActiveState), health (the HTTP status of /health, or
    "refused" / "timeout" / "error"), loads (the snapshot timestamps /v1/loads gave, [] for none, None when it did
    not answer or was not asked)}."""
    if reading.get("active") != "active":
        return INACTIVE
    health = reading.get("health")
    if isinstance(health, int) and not isinstance(health, bool):
        return SERVING if health == 200 else ANSWERING
    if health == "refused":
        return CLOSED
    if health == "error":  # reset or another transport error: no evidence of silence, wait for a clear reading
        return ANSWERING
    loads = reading.get("loads")
    if loads is None:
        return FROZEN
    return STALLED  # look() turns it into BUSY when a snapshot is newer than the last sign of life


def look(state, reading, now, config):
    """One look at a worker: (new state, event). STATE: new_state() or the last look's; READING: phase_of()'s input
    plus pid (the unit's MainPID) and at (when the probe was sent); NOW: the guard's clock (time.time(), the clock
    sglang's snapshot timestamps use, on the same host); CONFIG: {bound, budget, window} in seconds and kills.
    event: {action (none | kill | hold), phase, silent_s (seconds since the last sign of life), reason}."""
    st = {**state, "kills": [t for t in state.get("kills", []) if now - t < config["window"]]}
    if reading.get("pid") != st.get("pid"):  # a new process (or none): alive from now
        st.update(pid=reading.get("pid"), life=float(now))
    phase = phase_of(reading)
    if phase not in SILENT:
        st["life"] = float(now)
    elif phase == STALLED:
        newest = max((float(t) for t in reading.get("loads") or [] if isinstance(t, (int, float))), default=None)
        if newest is not None and newest > st["life"]:
            st["life"] = min(newest, float(now))
            phase = BUSY
    if len(st["kills"]) < config["budget"]:
        st["held"] = False
    silent_s = round(max(0.0, now - st["life"]), 2)
    event = {"action": NONE, "phase": phase, "silent_s": silent_s, "reason": ""}
    if phase not in SILENT or silent_s < config["bound"]:
        return st, event
    reason = silence_reason(phase, silent_s, config["bound"])
    if len(st["kills"]) >= config["budget"]:
        event.update(reason=f"{reason}; kill budget spent ({len(st['kills'])} kills in {config['window']:g} s)")
        if not st["held"]:
            st["held"] = True
            event["action"] = HOLD
        return st, event
    st["kills"] = [*st["kills"], float(now)]
    st["life"] = float(now)  # the process is going: the next silence is timed from here
    event.update(action=KILL, reason=reason)
    return st, event


def silence_reason(phase, silent_s, bound):
    """The journal's line of why a worker is killed (or would be)."""
    if phase == FROZEN:
        what = "neither /health nor /v1/loads answered (the whole process is silent)"
    else:
        what = "/health unanswered and the scheduler published no load snapshot (it is stalled)"
    return f"silent for {silent_s:g} s (bound {bound:g} s): {what}"


def budget_spent(state, now, config):
    """Whether STATE's kills within the window reached the budget at NOW."""
    return sum(1 for t in state.get("kills", []) if now - t < config["window"]) >= config["budget"]


def default_bound(stall_timeout, health_check_timeout):
    """The silence bound by default: sglang_stall_timeout, never below sglang's own SGLANG_HEALTH_CHECK_TIMEOUT
    (a worker the engine itself would still call healthy is never killed)."""
    return max(int(stall_timeout), int(health_check_timeout))


def effective_bound(bound, stall_timeout, health_check_timeout):
    """sglang_guard_silence_bound as the guard uses it: 0 means default_bound(); a value of the wrong type is left for
    the variable table to report."""
    if bound == 0 and not isinstance(bound, bool):
        try:
            return default_bound(stall_timeout, health_check_timeout)
        except (TypeError, ValueError):
            return bound
    return bound


def bound_problems(bound, health_check_timeout, extra_envs, probe_timeout=None):
    """Preflight messages: the guard's BOUND (sglang_guard_silence_bound) below the engine's health check timeout
    (sglang_health_check_timeout, or an SGLANG_HEALTH_CHECK_TIMEOUT some extra env raises it to: EXTRA_ENVS is
    {variable name: its env mapping}), or a probe timeout not shorter than the bound."""
    problems = []
    if not isinstance(bound, int) or isinstance(bound, bool):
        return problems  # the variable table says what is wrong with its type
    if isinstance(health_check_timeout, int) and health_check_timeout > bound:
        problems.append(
            f"sglang_health_check_timeout is {health_check_timeout} s, above sglang_guard_silence_bound "
            f"({bound} s): the guard would kill a worker sglang itself still calls healthy. Raise "
            "sglang_guard_silence_bound or lower sglang_health_check_timeout"
        )
    for variable, env in sorted((extra_envs or {}).items()):
        value = (env or {}).get("SGLANG_HEALTH_CHECK_TIMEOUT") if isinstance(env, dict) else None
        if value is None:
            continue
        try:
            seconds = int(str(value))
        except ValueError:
            problems.append(f"{variable} sets SGLANG_HEALTH_CHECK_TIMEOUT={value}: sglang reads it as an integer")
            continue
        if seconds > bound:
            problems.append(
                f"{variable} sets SGLANG_HEALTH_CHECK_TIMEOUT={seconds}, above sglang_guard_silence_bound ({bound} s): "
                "the guard would kill a worker sglang itself still calls healthy. Set sglang_health_check_timeout "
                "instead (the collection renders it) and keep it at or below sglang_guard_silence_bound"
            )
    if isinstance(probe_timeout, (int, float)) and probe_timeout >= bound:
        problems.append(
            f"sglang_guard_probe_timeout ({probe_timeout} s) must be shorter than sglang_guard_silence_bound "
            f"({bound} s)"
        )
    return problems


def metrics_text(workers, now, config):
    """Prometheus text of the guard's state: WORKERS is {unit: {state, phase, silent_s, kills_total}}."""
    rows = sorted(workers.items())
    out = [
        "# HELP sglang_guard_kills_total Workers the guard killed for silence.",
        "# TYPE sglang_guard_kills_total counter",
        *(f'sglang_guard_kills_total{{unit="{u}"}} {w.get("kills_total", 0)}' for u, w in rows),
        "# HELP sglang_guard_budget_spent 1 while the guard holds off killing the worker: its kill budget is spent.",
        "# TYPE sglang_guard_budget_spent gauge",
        *(f'sglang_guard_budget_spent{{unit="{u}"}} {int(budget_spent(w["state"], now, config))}' for u, w in rows),
        "# HELP sglang_guard_silent_seconds Seconds since the worker's last sign of life, as the guard saw it.",
        "# TYPE sglang_guard_silent_seconds gauge",
        *(f'sglang_guard_silent_seconds{{unit="{u}"}} {w.get("silent_s", 0.0)}' for u, w in rows),
        "# HELP sglang_guard_silence_bound_seconds Seconds of silence after which the guard kills the worker.",
        "# TYPE sglang_guard_silence_bound_seconds gauge",
        *(f'sglang_guard_silence_bound_seconds{{unit="{u}"}} {config["bound"]}' for u, _w in rows),
        "# HELP sglang_guard_up 1: the guard runs and looked at its workers.",
        "# TYPE sglang_guard_up gauge",
        "sglang_guard_up 1",
    ]
    return "\n".join(out) + "\n"
