"""kill -9 under load: what the fault tests (test_faults.py, test_multihost.py) and tests/bench/error_budget.py share.

A fault is judged on what the load itself recorded (tests/sandbox/load.py: one [start, end, status] per request
sent, seconds since its t0) against a failure budget that depends on whether the killed role has a second instance
serving meanwhile (redundancy):
  - with redundancy the router must route around the dead instance: few requests fail (a share of those sent), and
    none that starts later than the router's detection can (seconds after the kill);
  - without redundancy every request fails until the instance is back; none may fail once the deployment is ready
    again (readiness with every worker healthy and a good probe), nor start failing later than that.

Realistic restart times: the simulator would come back in a second (RestartSec=1, no weights to load), which hides
the router's detection. SLOW_START_DROPIN makes the killed unit's next start load "weights" for STARTUP_DELAY
seconds, longer than the router needs to see it gone (health checks every sglang_router_health_check_interval,
10 s, sglang_router_health_failure_threshold of them). It is a drop-in the test writes and removes, not a change of
the unit the collection renders: the running process keeps its environment until systemd restarts it.
"""

import json
import os
import re
import time
from pathlib import Path

import yaml

STARTUP_DELAY = 35  # seconds of simulated weight loading after the kill (sglang: minutes)
DROPIN_DIR = "/run/systemd/system/{unit}.service.d"  # runtime drop-ins: gone with a reboot, never in /etc
DROPIN = "90-slow-start.conf"

# (role, redundancy) -> (share of the requests sent that may fail, latest start of a failed request in s after the
# kill). With redundancy None means the router's detection (detection_s()) + DETECTION_MARGIN: until its health checks
# have failed sglang_router_health_failure_threshold times it keeps sending to the dead instance, and such a request
# fails (on a dead decode the prefill half waits for a decode that never connects: the client's timeout). Without
# redundancy the second number is added to the recovery time (the kill until ready again).
BUDGET = {
    ("decode", True): (0.10, None),
    ("prefill", True): (0.10, None),
    ("decode", False): (1.0, 1.0),
    ("prefill", False): (1.0, 1.0),
    ("router", False): (1.0, 1.0),
}
DETECTION_MARGIN = 2.0
ROUTER_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "sglang_router" / "defaults" / "main.yml"
WORKER_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "sglang" / "defaults" / "main.yml"
# sglang-router 0.3.2's --health-check-timeout-secs default (shared/reference: its --help); the collection leaves it.
ROUTER_HEALTH_CHECK_TIMEOUT = 5.0


def detection_s():
    """Seconds the router may take to stop sending to a dead worker, from the role's defaults (the tests' inventories
    keep them), at the worst: the failure threshold's checks one interval apart, the first a full interval after the
    kill, and the last one taking up to the check's timeout before it counts. (Measured on this 2-core machine with
    two test lanes: the router let a killed instance go 20-29 s after the kill; interval x threshold is 30 s.)"""
    defaults = yaml.safe_load(ROUTER_DEFAULTS.read_text())
    checks = float(defaults["sglang_router_health_check_interval"]) * int(
        defaults["sglang_router_health_failure_threshold"]
    )
    return checks + ROUTER_HEALTH_CHECK_TIMEOUT


# Published peer figures, beside ours in tests/bench/error_budget.py: Dynamo's fault-tolerance suite
# (ai-dynamo/dynamo tests/fault_tolerance/README.md, "Disaggregated Workers, No Redundancy": vLLM
# disagg-p-tp-2-dp-1-d-tp-4-dp-1, 8 clients x 100 requests, one process killed each run; and "Redundant Workers
# (Over Provisioned)": agg-tp-2-dp-4, four decode workers). Their recovery time is the README's "Recovery Time"
# column (the kill until the killed process serves again); they publish no time of the last failure nor a count of
# requests in flight (8 clients: at most 8). Read 2026-12 at commit 01d7aed29e9eeb4d054fce058cc5e87bae652dd6.
DYNAMO_FT = "ai-dynamo/dynamo tests/fault_tolerance/README.md (01d7aed2)"
PEERS = [
    {"fault": "Dynamo: decode worker killed", "redundancy": "1P1D (none)", "sent": 800, "failed": 600,
     "in_flight": None, "last_failure_s": None, "recovery_s": None,
     "source": f"{DYNAMO_FT}, disaggregated, no redundancy: no recovery"},
    {"fault": "Dynamo: prefill worker killed", "redundancy": "1P1D (none)", "sent": 800, "failed": 2,
     "in_flight": None, "last_failure_s": None, "recovery_s": 42.31,
     "source": f"{DYNAMO_FT}, disaggregated, no redundancy"},
    {"fault": "Dynamo: frontend (router) killed", "redundancy": "1P1D (none)", "sent": 800, "failed": 136,
     "in_flight": None, "last_failure_s": None, "recovery_s": 17.24,
     "source": f"{DYNAMO_FT}, disaggregated, no redundancy"},
    {"fault": "Dynamo: decode worker killed", "redundancy": "aggregated, one of four", "sent": 800, "failed": 4,
     "in_flight": None, "last_failure_s": None, "recovery_s": 44.88,
     "source": f"{DYNAMO_FT}, redundant workers (over provisioned)"},
    # The routers (issue 39). llm-d's router (EPP) stopped with SIGTERM while an Envoy-priority standby takes over,
    # 100 QPS (also 0 of 9,000 at 50 QPS, 1 of 27,000 at 150 QPS). This collection's own figure before several
    # routers: a decode policy change on a 2P2D deployment with one SMG router and 16 requests in flight restarted
    # the router; the 2005 failures (connections refused, then SMG's 503 no_available_workers until it had its
    # workers back) came within 2.8 s.
    {"fault": "llm-d: router (EPP) stopped, standby takes over", "redundancy": "active-passive (Envoy priority)",
     "sent": 18000, "failed": 0, "in_flight": None, "last_failure_s": None, "recovery_s": None,
     "source": "llm-d/llm-d-router PR #2228, 100 QPS"},
    {"fault": "router planned change: decode policy (smg)", "redundancy": "one router", "sent": 2888,
     "failed": 2005, "in_flight": 16, "last_failure_s": None, "recovery_s": None,
     "source": "issue 39: disagg.sglang before several routers, 2P2D, failures within 2.8 s"},
]  # fmt: skip


def record(fault, redundancy, cost):
    """Appends one fault's cost as a JSON line to $DISAGG_FAULT_REPORT when set (tests/bench/error_budget.py runs
    the fault tests with it and prints the table)."""
    path = os.environ.get("DISAGG_FAULT_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"fault": fault, "redundancy": redundancy, **cost}) + "\n")


def slow_start(unit, seconds=STARTUP_DELAY):
    """Shell: a runtime drop-in that makes UNIT's next start load for SECONDS, then daemon-reload."""
    directory = DROPIN_DIR.format(unit=unit)
    return (
        f"mkdir -p {directory} && printf '[Service]\\nEnvironment=SGLANG_SIM_STARTUP_DELAY={seconds}\\n' "
        f"> {directory}/{DROPIN} && systemctl daemon-reload"
    )


def normal_start(unit):
    """Shell: remove slow_start's drop-in (the running process is not restarted)."""
    return f"rm -f {DROPIN_DIR.format(unit=unit)}/{DROPIN} && systemctl daemon-reload"


def in_flight_at(result, t):
    """Requests of a load.py result in flight (sent, not yet ended) at epoch T."""
    return sum(1 for start, end, _status in result["timeline"] if start <= t - result["t0"] < end)


def summary(result, kill_at, ready_at=None):
    """What one fault cost, from load.py's result: requests sent and failed, those in flight at the kill, when the
    last failed request started (seconds after the kill), the recovery (kill until ready again) when known."""
    failed = [start for start, _end, status in result["timeline"] if status != "200"]
    since = [result["t0"] + start - kill_at for start in failed]
    return {
        "sent": result["total"],
        "failed": len(failed),
        "errors": result["errors"],
        "in_flight": in_flight_at(result, kill_at),
        "first_failure_s": round(min(since), 2) if since else None,
        "last_failure_s": round(max(since), 2) if since else None,
        "recovery_s": round(ready_at - kill_at, 2) if ready_at is not None else None,
    }


def over_budget(cost, role, redundancy):
    """The ways COST (summary()) exceeds the budget of ROLE with or without redundancy: [] when within."""
    share, late = BUDGET[(role, redundancy)]
    late = detection_s() + DETECTION_MARGIN if late is None else late
    problems = []
    if cost["failed"] > share * cost["sent"]:
        problems.append(f"{cost['failed']} of {cost['sent']} requests failed (budget {share:.0%})")
    limit = late + ((cost["recovery_s"] or 0.0) if not redundancy else 0.0)
    if cost["last_failure_s"] is not None and cost["last_failure_s"] > limit:
        problems.append(
            f"a request that started {cost['last_failure_s']} s after the kill failed (budget {limit:.1f} s)"
        )
    return problems


# --- what the services recorded after a fault -------------------------------------------------------------------
# Fail fast: a request a fault touches ends, served by another instance or with an error, within this many seconds of
# being sent (the bound the collection promises: README "what fails, and how fast"); none waits out its client's
# timeout (the loads below give it longer, FAULT_CLIENT_TIMEOUT). Every request of a load is judged, none exempted.
# What makes it so when a worker goes silent (frozen, or its scheduler stalled): the worker guard
# (plugins/module_utils/guard/verdict.py) kills it within its bound and one look, which both routers see as a
# transport error on the half they sent it, and the decode's heartbeat (sglang_disagg_heartbeat_interval x
# _max_failure) ends the rooms of a prefill that died. Where a router still waits for the other half (sglang-router
# 0.3.2 joins both with tokio::join!, sgl-project/sglang#9726), the prefill's own bound on a decode that never
# connects, SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, must be under this bound too (the tests set it).
FAIL_FAST_S = 20.0
FAULT_CLIENT_TIMEOUT = 30.0


# What the decode itself recorded when its prefill froze: sglang 0.5.23's decode ties a room to its prefill when the
# request arrives (common/conn.py CommonKVReceiver.__init__: addr_to_rooms_tracker) and fails every room of a prefill
# its heartbeat drops (_handle_node_failure). The heartbeat waits SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL (the
# collection's sglang_disagg_heartbeat_interval), then probes /health with requests' timeout=(2, 3); a frozen prefill
# takes the connection and never answers, so each of the SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE misses costs the
# interval + 3 s (a dead prefill refuses the probe: the interval alone). DECODE_POLL_SLACK: the double's decode sees
# the verdict at its next look (a second and a half at most, tests/sandbox/pdsim/sglang_pd_sim/handoff.py).
_WORKER = yaml.safe_load(WORKER_DEFAULTS.read_text())
HEARTBEAT_FAIL_S = _WORKER["sglang_disagg_heartbeat_max_failure"] * (_WORKER["sglang_disagg_heartbeat_interval"] + 3.0)
DECODE_POLL_SLACK = 1.5
# Only the rooms that reached the decode while it still knew the prefill: the first miss comes one interval plus the
# read timeout after the freeze at the earliest. A request reaching it after the drop is looked up anew (decode.py
# _ensure_prefill_info: 15 lookups, each waiting 5 s on a frozen prefill) and waits for the prefill to come back.
KNOWN_FOR_S = 5.0


def held_at_freeze(requests, stop_at):
    """The requests of a decode's own records (GET /sim/lifecycle "requests": start, end, completed, status, epoch s)
    that it held at a freeze of its prefill at STOP_AT or took in while it still knew the prefill."""
    return [r for r in requests if r["start"] < stop_at + KNOWN_FOR_S and (r["end"] is None or r["end"] > stop_at)]


def decode_held(requests, stop_at):
    """One line: how many requests the decode held at the freeze, how they ended, the longest in seconds."""
    held = held_at_freeze(requests, stop_at)
    ended = {}
    for r in held:
        key = "open" if r["end"] is None else "completed" if r["completed"] else str(r["status"])
        ended[key] = ended.get(key, 0) + 1
    longest = max((r["end"] - r["start"] for r in held if r["end"] is not None), default=0.0)
    return f"{len(held)} requests at the freeze {ended}, the longest {longest:.2f} s"


def decode_hold_problems(requests, stop_at, bound=HEARTBEAT_FAIL_S + DECODE_POLL_SLACK):
    """The requests held_at_freeze() that neither completed nor failed within BOUND s of their start, as messages."""
    held = held_at_freeze(requests, stop_at)
    late = [(round(r["start"] - stop_at, 2), None if r["end"] is None else round(r["end"] - r["start"], 2), r["status"])
            for r in held if not r["completed"] and (r["end"] is None or r["end"] - r["start"] > bound)]  # fmt: skip
    if late:
        return [f"{len(late)} of the {len(held)} requests the decode held at the freeze did not end within {bound} s "
                f"(start after the freeze, seconds taken, status): {late[:10]}"]  # fmt: skip
    return []


# What the worker guard did, from its journal (`journalctl -o short-unix -u sglang-guard --since @T`): one line per
# kill, "killing UNIT.service (pid N, PHASE): REASON; ..." (roles/sglang_worker/files/sglang_guard.py).
_GUARD_KILL = re.compile(r"^(\d+\.\d+) \S+ \S+?(?:\[\d+\])?: killing (\S+)\.service \(pid \S+, (\w+)\): (.*)$")


def guard_kills(journal, unit):
    """[(epoch s, phase, reason)] of the guard's kills of UNIT in `journalctl -o short-unix` text, oldest first."""
    found = []
    for line in journal.splitlines():
        m = _GUARD_KILL.match(line)
        if m and m[2] == unit:
            found.append((float(m[1]), m[3], m[4]))
    return found


def guard_recognition_bound(bound, interval, probe_timeout):
    """The latest a guard with these settings kills a worker that went silent at t=0: the bound, then at most one look
    later (its interval, plus the look's own two probes: /health and /v1/loads)."""
    return bound + interval + 2 * probe_timeout


# Recovery: the kill until the router routes to every worker again (its /readiness counts every worker healthy and a
# probe through it succeeds). systemd starts a killed unit again after sglang_restart_sec (the role's default, 10 s),
# then a worker loads for STARTUP_DELAY s, then the router needs its health checks to pass
# (at worst the detection window again) plus a margin for a 2-core machine running two test lanes; the router itself
# is back in seconds (systemd's RestartSec and its own start, with workers it dials again).
RESTART_SEC = float(yaml.safe_load(WORKER_DEFAULTS.read_text())["sglang_restart_sec"])  # the tests keep it
RECOVERY_BOUND = {
    "decode": RESTART_SEC + STARTUP_DELAY + 35.0,
    "prefill": RESTART_SEC + STARTUP_DELAY + 35.0,
    "router": RESTART_SEC + 30.0,
}
# A prefill's KV back at idle: num_used_tokens 0 (and token_usage 0) within this many seconds after the load ended,
# read from its /v1/loads: sglang 0.5.23 publishes that snapshot at once when the scheduler finds itself idle and every
# 50 ms while work waits with no batch (scheduler.py on_idle, publish_load_snapshot). Its /metrics gauges of the same
# names are not for this: they are rewritten per prefill batch, every 40 decode passes, and at idle only at once when
# the running gauge is stale, else every 30 s (scheduler_components/metrics_reporter.py), and never while a request
# waits in the bootstrap queue, so they can hold a freed KV for as long as such a request waits.
KV_IDLE_TIMEOUT = 60.0
PREFILL_KV = re.compile(r"^sglang:(num_used_tokens|token_usage)(?:\{[^}]*\})? (\S+)$", re.M)
KV_FIELDS = ("num_used_tokens", "token_usage")


def prefill_kv(page):
    """{"num_used_tokens": x, "token_usage": y} summed over the DP ranks of a prefill's /v1/loads answer (its JSON
    text: sglang/srt/entrypoints/v1_loads.py, load_inquirer.py get_loads), or over the series of a /metrics text;
    {} for an answer that is neither (an error)."""
    found = {}
    if page.lstrip().startswith("{"):
        try:
            loads = json.loads(page).get("loads")
        except (ValueError, AttributeError):
            return {}
        for load in loads if isinstance(loads, list) else []:
            for name in KV_FIELDS:
                if isinstance(load, dict) and isinstance(load.get(name), (int, float)):
                    found[name] = found.get(name, 0.0) + float(load[name])
        return found
    for name, value in PREFILL_KV.findall(page):
        found[name] = found.get(name, 0.0) + float(value)
    return found


def kv_idle(reading):
    """Is a prefill_kv() reading a prefill at idle: both present and 0?"""
    return set(reading) == set(KV_FIELDS) and not any(reading.values())


def wait_kv_idle(read_loads, timeout=KV_IDLE_TIMEOUT, interval=1.0, clock=time.monotonic, sleep=time.sleep):
    """Polls READ_LOADS() (a prefill's /v1/loads answer, or None when it did not answer) until kv_idle(), for at most
    TIMEOUT s by the clock; returns (idle, seconds waited, the last reading)."""
    started, reading = clock(), {}
    while True:
        text = read_loads()
        reading = prefill_kv(text) if text is not None else {}
        waited = round(clock() - started, 1)
        if kv_idle(reading) or waited >= timeout:
            return kv_idle(reading), waited, reading
        sleep(interval)


def late_requests(result, bound=FAIL_FAST_S):
    """The requests of a load.py result that ended later than BOUND seconds after they were sent:
    [(start, seconds taken, status)]."""
    return [(start, round(end - start, 2), status) for start, end, status in result["timeline"] if end - start > bound]


def latest_end_s(result):
    """The longest a request of the load took from its send to its end, in seconds."""
    return round(max((end - start for start, end, _status in result["timeline"]), default=0.0), 2)


def recovery_problems(cost, role):
    """[] when COST's recovery (summary()) is within RECOVERY_BOUND[role], else what was over."""
    bound = RECOVERY_BOUND[role]
    if cost["recovery_s"] is None or cost["recovery_s"] > bound:
        return [f"the router routed to every worker again {cost['recovery_s']} s after the fault (bound {bound:.0f} s)"]
    return []


# --- a planned restart, judged on the restarted worker's own record ------------------------------------------------
# The simulator records every generation request it served (start, end, completed) and what it held at SIGTERM
# (tests/sandbox/pdsim/sglang_pd_sim/lifecycle.py): GET /sim/lifecycle of the running process, and one
# `sim_lifecycle={...}` line in the journal when a process exits. SLACK: a request the router sent just before the
# watcher saw the worker leave (or just after it came back) may start this much apart from what the watcher saw: it
# polls GET /workers every 0.1 s, but on a 2-core machine running two test lanes its polls lag. The control test
# (a restart without the removal step) sends about a hundred requests to the out-of-router worker, far past it.
SLACK = 1.0


def lifecycle_lines(journal):
    """The sim_lifecycle records of the processes that exited, oldest first, from `journalctl -o cat` text."""
    return [json.loads(line.split("sim_lifecycle=", 1)[1]) for line in journal.splitlines() if "sim_lifecycle=" in line]


def out_window(routing, t0, url):
    """(left, back) epoch seconds: when the router's healthy workers (load.py --workers) first lost URL, and when it
    had URL again after that; None for one that did not happen."""
    left = back = None
    for t, state in routing:
        present = url in state.split(",")
        if left is None and not present:
            left = t0 + t
        elif left is not None and present:
            back = t0 + t
            break
    return left, back


def drain_problems(old, new, left, back):
    """What a planned restart did wrong, from the stopped process's record OLD, the restarted one's NEW and the
    window (LEFT, BACK) the worker was out of the router: requests that reached it while out, requests it held at
    removal that did not complete, requests it still held at SIGTERM. Returns (problems, held at removal)."""
    problems = []
    held = [r for r in old["requests"] if r["start"] <= left and (r["end"] is None or r["end"] > left)]
    reached = [r for r in old["requests"] if r["start"] > left + SLACK]
    reached += [r for r in new["requests"] if back is None or r["start"] < back - SLACK]
    if reached:
        problems.append(f"{len(reached)} request(s) reached it while it was out of the router")
    unfinished = [r for r in held if not r["completed"]]
    if unfinished:
        problems.append(f"{len(unfinished)} of the {len(held)} request(s) it held at removal did not complete")
    if old.get("sigterm") and old["sigterm"]["in_flight"]:
        problems.append(f"{old['sigterm']['in_flight']} request(s) still in flight at SIGTERM (no drain before it)")
    return problems, held


# --- a planned change (rolling, upgrade, scale-in/out, rename), for tests/bench/error_budget.py ------------------
def _routed(state):
    """The set of worker URLs of one load.py --workers entry; None when the router did not answer with a list."""
    return set(state.split(",")) - {""} if state.startswith("http") or state == "" else None


def change_cost(result, started, planned, moved):
    """What one change run cost, from load.py's result (run with --workers) of the load under it: requests sent and
    failed; the fewest in flight through the router at the first moment it stopped (or, for a worker the run added,
    started) routing to each worker of MOVED (URLs), None when none moved while the load ran; when the first and the
    last failed request started, seconds after STARTED (the run's start, epoch); recovery: STARTED until the router
    routed to exactly the PLANNED URLs and kept doing so to the end of the load, None when it did not end so."""
    t0, routing = result["t0"], [(t, _routed(state)) for t, state in result.get("workers") or []]
    moments = []
    for url in moved:
        present = [(t, routed is not None and url in routed) for t, routed in routing]
        moments += [t0 + t for t, here in present[1:] if here != present[0][1]][:1]
    failed = [t0 + start - started for start, _end, status in result["timeline"] if status != "200"]
    recovery = None
    if routing and routing[-1][1] == set(planned):
        settled = len(routing) - 1
        while settled > 0 and routing[settled - 1][1] == set(planned):
            settled -= 1
        recovery = round(t0 + routing[settled][0] - started, 2)
    return {
        "sent": result["total"],
        "failed": len(failed),
        "errors": result["errors"],
        "in_flight": min((in_flight_at(result, t) for t in moments), default=None),
        "first_failure_s": round(min(failed), 2) if failed else None,
        "last_failure_s": round(max(failed), 2) if failed else None,
        "recovery_s": recovery,
    }


# --- a stalled worker: how soon the run recognised it (issue 37) --------------------------------------------------
# From the stalled instance's own journal (`journalctl -o short-unix -u UNIT --since @T`): its server came up (the
# double's, as sglang's http_server.py, "The server is fired up and ready to roll!"; with SGLANG_SIM_STALL_AFTER=0
# its scheduler stalls there) until systemd stopped it for the rollback ("Stopping ..."), which the run does once
# its health wait judged the instance stalled. STALL_RECOGNISED_WITHIN: the bound the issue sets, in both paths
# (one instance: roles/sglang/tasks/wait.yml; rolling: roles/sglang_worker/tasks/rolling_batch.yml).
STALL_RECOGNISED_WITHIN = 60.0
_SHORT_UNIX = re.compile(r"^(\d+\.\d+) \S+ (\S+?)(?:\[\d+\])?: (.*)$")


def stall_recognition_s(journal, unit):
    """Seconds from the last time UNIT's server came up before systemd stopped it to that stop, from `journalctl -o
    short-unix` text; None when the journal holds no such pair (it never came up, or it was never stopped)."""
    up = None
    for line in journal.splitlines():
        m = _SHORT_UNIX.match(line)
        if not m:
            continue
        t, ident, text = float(m[1]), m[2], m[3]
        if "The server is fired up and ready to roll!" in text:
            up = t
        elif ident == "systemd" and text.startswith(f"Stopping {unit}.service") and up is not None:
            return round(t - up, 2)
    return None
