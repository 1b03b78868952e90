"""batch_restart: drain, restart, wait and drop, per instance of a rolling batch on one host.

The loop runs for real with a fake host: systemctl answers from a small state machine (a restart makes the unit
active and, when the case says so, failed or restarted later), HTTP answers by URL in order (the last repeats), a
clock that only sleep moves, and previous files in a temp dir.
"""

import json
import threading

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.units import batch_restart as br
from ansible_collections.disagg.sglang.plugins.module_utils.units import drain, service_health
from ansible_collections.disagg.sglang.plugins.module_utils.units.unit_files import remove

HEALTH = "http://127.0.0.1:30002/health"
METRICS = "http://127.0.0.1:30002/metrics"
LOADS = "http://127.0.0.1:30002/v1/loads?include=core,disagg"
NOT_FOUND = (404, '{"detail": "Not Found"}', None)  # an sglang without /v1/loads: cannot tell from it
OK = (200, "{}", None)
REFUSED = (None, "", "no answer: [Errno 111] Connection refused")
UNHEALTHY = (503, "", None)


def metrics(running, queued=0):
    return (200, f"sglang:num_running_reqs {running}\nsglang:num_queue_reqs {queued}\n", None)


NOT_SGLANG = (200, "python_gc_objects_collected_total 1\n", None)


def loads(running, waiting=0, inflight=0):
    """A /v1/loads answer (sglang 0.5.23 v1_loads.py) of one DP rank."""
    body = {"loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting,
                       "disaggregation": {"prefill_inflight_queue_reqs": inflight}}]}  # fmt: skip
    return (200, json.dumps(body), None)


class FakeHost:
    """systemd and HTTP of one host. after_restart: the unit's ActiveState/SubState/NRestarts as `systemctl show`
    reports it on each read after the restart (the last repeats)."""

    def __init__(self, answers, after_restart=(("active", "running", 0),), *, enabled="enabled", refuse_restart=False,
                 loaded="loaded", refuse_stop=False):  # fmt: skip
        self.answers = {url: list(seq) for url, seq in answers.items()}
        self.loaded, self.refuse_stop, self.stopped = loaded, refuse_stop, False
        self.after_restart = list(after_restart)
        self.enabled, self.refuse_restart = enabled, refuse_restart
        self.restarted = False
        self.now, self.slept = 1000.0, 0.0
        self.commands, self.fetched = [], []
        self.lock = threading.Lock()

    def run(self, argv):
        self.commands.append(argv)
        if argv[:2] == ["systemctl", "restart"]:
            self.restarted = True
            return (1, "", "Job failed") if self.refuse_restart else (0, "", "")
        if argv[:2] == ["systemctl", "enable"]:
            self.enabled = "enabled"
            return 0, "", ""
        if argv[:2] == ["systemctl", "stop"]:
            self.stopped = not self.refuse_stop
            return (1, "", "Access denied") if self.refuse_stop else (0, "", "")
        if argv[:2] == ["systemctl", "disable"]:
            self.enabled = "disabled"
            return 0, "", ""
        if argv[:2] == ["systemctl", "daemon-reload"]:
            return 0, "", ""
        if argv[:2] == ["systemctl", "show"]:
            active, sub, restarts = ("inactive", "dead", 0) if self.stopped else ("active", "running", 0)
            if self.restarted:
                queue = self.after_restart
                active, sub, restarts = queue.pop(0) if len(queue) > 1 else queue[0]
            return (
                0,
                (
                    f"Id={argv[-1]}\nLoadState={self.loaded}\nActiveState={active}\nSubState={sub}\n"
                    f"UnitFileState={self.enabled}\nNRestarts={restarts}\n"
                ),
                "",
            )
        raise AssertionError(argv)

    def fetch(self, url, timeout=None):
        with self.lock:
            self.fetched.append((round(self.now - 1000.0, 2), url, self.restarted))
            queue = self.answers.get(url, [NOT_FOUND])  # a URL the case does not name: not there
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def sleep(self, seconds):
        self.now += seconds
        self.slept += seconds

    def clock(self):
        return self.now


def entry(tmp_path, unit="sglang-decode1"):
    """An instance of the rolling plan with its backup set (module_utils/units/unit_files.py)."""
    backup = {}
    for key in ("unit_file", "env_file", "record"):
        path = tmp_path / f"{unit}.{key}~"
        path.write_text(key)
        backup[key] = str(path)
    return {"unit": unit, "host": "h1", "role": "decode", "health_url": HEALTH, "backup": backup}


def go(host, entries, wait=10, drain_timeout=60):
    return br.restart_all(host.run, entries, wait, drain_timeout, journal=lambda unit: f"journal of {unit}",
                          remove=remove, fetch=host.fetch, sleep=host.sleep,
                          clock=host.clock)  # fmt: skip


Q = drain.QUIET  # a drain ends on 0 once its readings said 0 for this long

# name: (answers by URL, the unit after its restart) -> healthy, unit_failed, drain left, reason, the previous files
# dropped, seconds slept
CASES = {
    "drained at once, healthy at the first poll": (
        {METRICS: [metrics(0)], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, 0, "healthy", True, Q),
    ),
    "two requests drain in 0.5 s, then 1 s of loading": (
        {METRICS: [metrics(2), metrics(1), metrics(0)], HEALTH: [REFUSED, REFUSED, UNHEALTHY, UNHEALTHY, OK]},
        [("active", "running", 0)],
        (True, False, 0, "healthy", True, 0.5 + Q + 1.0),
    ),
    "no sglang metrics: cannot tell, no drain wait": (
        {METRICS: [NOT_SGLANG], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, None, "healthy", True, 0.0),
    ),
    "metrics do not answer: cannot tell": (
        {METRICS: [REFUSED], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, None, "healthy", True, 0.0),
    ),
    # sglang's gauges are snapshots: a decode's read 0 for up to 40 decode passes while requests it took since its
    # last report still decode; its load snapshot (/v1/loads) still counts them, and the drain believes the larger
    "gauges stale at 0, the load snapshot counts two, then one, then none": (
        {METRICS: [metrics(0)], LOADS: [loads(1, 1), loads(1), loads(0)], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, 0, "healthy", True, 0.5 + Q),
    ),
    "the load snapshot at 0 while the gauges still count one: not drained yet": (
        {METRICS: [metrics(1), metrics(0)], LOADS: [loads(0)], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, 0, "healthy", True, 0.25 + Q),
    ),
    "a prefill's request whose KV is being sent counts": (
        {METRICS: [metrics(0)], LOADS: [loads(0, inflight=1), loads(0)], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, 0, "healthy", True, 0.25 + Q),
    ),
    "a request never drains: the drain gives up after its timeout": (
        {METRICS: [metrics(1)], HEALTH: [OK]},
        [("active", "running", 0)],
        (True, False, 1, "healthy", True, 3.0),
    ),
    "alive but unhealthy until the wait ends: previous files kept": (
        {METRICS: [metrics(0)], HEALTH: [UNHEALTHY]},
        [("active", "running", 0)],
        (False, False, 0, "HTTP 503", False, Q + 2.0),
    ),
    "crashes after the restart: failed at once, previous files kept": (
        {METRICS: [metrics(0)], HEALTH: [REFUSED]},
        [("active", "running", 0), ("failed", "failed", 0)],
        (False, True, 0, "no answer: [Errno 111] Connection refused", False, Q),
    ),
    "restarted by systemd while loading": (
        {METRICS: [metrics(0)], HEALTH: [REFUSED]},
        [("active", "running", 0), ("active", "running", 0), ("activating", "auto-restart", 1)],
        (False, True, 0, "no answer: [Errno 111] Connection refused", False, Q + 0.25),
    ),
}


# name: the metrics readings, one per poll (the last repeats) -> the drain's {left, seconds} with a 3 s timeout.
# A 0 ends the drain only once every reading of the last Q seconds said 0: a request the router chose just before
# it let the worker go arrives after a first 0, and the scheduler's snapshots say 0 just before the last answer
# leaves; either is a count again in the next reading.
DRAINS = {
    "0 from the first reading: drained after Q": ([0], {"left": 0, "seconds": Q}),
    "a 0 between two counts is not drained": ([2, 0, 1, 0], {"left": 0, "seconds": 0.75 + Q}),
    "a count after nearly Q of zeros starts the quiet window again": (
        [0, 0, 0, 0, 1, 0],
        {"left": 0, "seconds": 1.25 + Q},
    ),
    "never quiet for Q: the timeout ends it on the last reading": ([1, 0, 0, 1] * 4 + [1], {"left": 1, "seconds": 3.0}),
}


@pytest.mark.parametrize("case", DRAINS, ids=list(DRAINS))
def test_a_drain_ends_only_after_its_readings_said_0_for_the_quiet_window(case):
    readings, want = DRAINS[case]
    host = FakeHost({METRICS: [metrics(n) for n in readings]})
    got = drain.drain(METRICS, 3, fetch=host.fetch, sleep=host.sleep, clock=host.clock, loads=LOADS)
    assert got == want


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_one_instance(case, tmp_path):
    answers, after, want = CASES[case]
    host = FakeHost(answers, after_restart=after)
    one = entry(tmp_path)
    [result] = go(host, [one], wait=2, drain_timeout=3)
    dropped = all(not (tmp_path / f"sglang-decode1.{k}~").exists() for k in ("unit_file", "env_file", "record"))
    kept = all((tmp_path / f"sglang-decode1.{k}~").exists() for k in ("unit_file", "env_file", "record"))
    got = (result["healthy"], result["unit_failed"], result["drain"]["left"], result["reason"], dropped, host.slept)
    assert got == want
    assert kept != dropped
    assert result["dropped"] == (list(one["backup"].values()) if dropped else [])
    assert result["journal"] == ("" if result["healthy"] else "journal of sglang-decode1.service")
    assert result["item"] == one
    assert (result["unit"], result["url"]) == ("sglang-decode1.service", HEALTH)
    # The restart comes after the drain's last reading, and every health poll after the restart.
    restart_at = next(i for i, argv in enumerate(host.commands) if argv[:2] == ["systemctl", "restart"])
    assert restart_at > 0
    assert all(restarted for _t, url, restarted in host.fetched if url == HEALTH)
    assert not any(restarted for _t, url, restarted in host.fetched if url in (METRICS, LOADS))
    # every drain reading takes both snapshots
    assert [url for _t, url, _r in host.fetched if url in (METRICS, LOADS)][:2] == [METRICS, LOADS]


def test_the_workers_key_goes_with_the_load_snapshot_only(tmp_path):
    """sglang asks the API key of /v1/loads (sglang/srt/utils/auth.py: /health, /ready and /metrics stay open)."""
    host = FakeHost({METRICS: [metrics(0)], LOADS: [loads(0)], HEALTH: [OK]})
    headers_seen = {}
    fetch = host.fetch

    def fetch_with_headers(url, *_args, headers=None, **_kwargs):
        headers_seen[url] = headers
        return fetch(url)

    br.restart_all(host.run, [entry(tmp_path)], 10, 60, journal=lambda unit: "", remove=remove,
                   fetch=fetch_with_headers, sleep=host.sleep, clock=host.clock, api_key="sekret")  # fmt: skip
    assert headers_seen[LOADS] == {"Authorization": "Bearer sekret"}
    assert headers_seen[METRICS] is None and headers_seen[HEALTH] is None


def test_the_restart_count_after_the_restart_is_the_baseline(tmp_path):
    """A unit that had crashed before (NRestarts 3) is not failed for that: the count read after the restart is the
    baseline, and it is returned for the longer wait of the caller."""
    host = FakeHost({METRICS: [metrics(0)], HEALTH: [REFUSED, OK]}, after_restart=[("active", "running", 3)])
    [result] = go(host, [entry(tmp_path)])
    assert (result["healthy"], result["restarts"]) == (True, 3)


def test_a_disabled_unit_is_enabled(tmp_path):
    host = FakeHost({METRICS: [metrics(0)], HEALTH: [OK]}, enabled="disabled")
    [result] = go(host, [entry(tmp_path)])
    assert ["systemctl", "enable", "sglang-decode1.service"] in host.commands
    assert result["healthy"] and result["restart_error"] == ""


def test_a_refused_restart_is_said_and_the_unit_seen_failed(tmp_path):
    host = FakeHost({METRICS: [metrics(0)], HEALTH: [REFUSED]}, after_restart=[("failed", "failed", 0)],
                    refuse_restart=True)  # fmt: skip
    [result] = go(host, [entry(tmp_path)])
    assert result["unit_failed"] and "Job failed" in result["restart_error"]
    assert result["journal"] == "journal of sglang-decode1.service"


def test_instances_of_one_host_drain_at_once(tmp_path):
    """Two instances of a batch on one host are drained together: each one's first metrics reading waits for the
    other's (a barrier of two), which only a concurrent drain passes."""
    host = FakeHost({METRICS: [metrics(0)], HEALTH: [OK]})
    barrier = threading.Barrier(2, timeout=5)
    fetch, first = host.fetch, set()

    def meeting_fetch(url, timeout=None):
        me = threading.get_ident()
        if url == METRICS and me not in first:
            first.add(me)
            barrier.wait()
        return fetch(url)

    host.fetch = meeting_fetch
    results = go(host, [entry(tmp_path, "sglang-decode1"), entry(tmp_path, "sglang-decode2")])
    assert [r["healthy"] for r in results] == [True, True]
    assert [r["item"]["unit"] for r in results] == ["sglang-decode1", "sglang-decode2"]


@pytest.mark.parametrize(
    ("health_url", "want"),
    [
        ("http://10.0.0.5:30002/health", "http://10.0.0.5:30002/metrics"),
        ("http://[fd00::5]:30002/health", "http://[fd00::5]:30002/metrics"),
        ("http://10.0.0.5:30002/readiness", ""),
    ],
)
def test_metrics_url(health_url, want):
    assert service_health.metrics_url(health_url) == want


class SilentHost(FakeHost):
    """A host whose restarted instance stalls: every health probe is taken and answered by nothing, so it costs its
    whole HTTP timeout on the clock (what a stalled sglang scheduler does to a probe shorter than its 20 s check)."""

    def fetch(self, url, timeout=None):
        if url == HEALTH:
            with self.lock:
                self.fetched.append((round(self.now - 1000.0, 2), url, self.restarted))
                self.now += timeout
            return None, "", f"{service_health.SILENT} {timeout:g} s"
        return super().fetch(url, timeout)


def test_a_stalled_instance_ends_the_call_as_stalled_within_its_bound_and_returns_the_deadline(tmp_path):
    """The stall bound holds the call past its window (wait 2 s) until 12 s of silence; the deadline returned is
    health_timeout seconds from the restart, on the clock, for the caller's later calls."""
    host = SilentHost({METRICS: [metrics(0)]})
    [result] = br.restart_all(host.run, [entry(tmp_path)], 2, 3, journal=lambda unit: f"journal of {unit}",
                              remove=remove, fetch=host.fetch, sleep=host.sleep, clock=host.clock,
                              health_timeout=300, stall_timeout=12)  # fmt: skip
    assert (result["healthy"], result["unit_failed"], result["stalled"], result["timed_out"], result["done"]) == (
        False, False, True, False, True)  # fmt: skip
    assert result["reason"].startswith("stalled:") and result["journal"] == "journal of sglang-decode1.service"
    assert result["deadline"] == 1000.0 + Q + 300  # the drain's quiet second, then the restart
    assert 12 <= host.now - 1000.0 - Q <= 12 + service_health.HTTP_TIMEOUT + drain.POLL
    assert result["dropped"] == [] and (tmp_path / "sglang-decode1.unit_file~").exists()


def test_a_deadline_cuts_a_probe_of_a_stalled_instance_to_the_time_left(tmp_path):
    """With no stall bound, a health_timeout of 7 s ends the wait at 7 s on the clock although each probe of the
    silent instance would take 5 s: the last probe is given only what is left."""
    host = SilentHost({METRICS: [metrics(0)]})
    [result] = br.restart_all(host.run, [entry(tmp_path)], 60, 3, journal=lambda unit: "", remove=remove,
                              fetch=host.fetch, sleep=host.sleep, clock=host.clock, health_timeout=7)  # fmt: skip
    assert (result["timed_out"], result["stalled"], result["done"]) == (True, False, True)
    assert 7 <= host.now - 1000.0 <= 7 + service_health.MIN_PROBE


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        ([metrics(2), metrics(0)], "drained (no request in flight)"),
        ([NOT_SGLANG], f"cannot tell (no sglang metrics at {METRICS}; sglang drains on SIGTERM itself)"),
        (
            [metrics(1)],
            "still 1 request(s) in flight after 3 s: sglang drains them on SIGTERM, up to the unit stop timeout",
        ),
    ],
    ids=["drained", "cannot tell", "timed out"],
)
def test_the_rolling_batch_says_how_each_instance_drained(answers, said, tmp_path):
    host = FakeHost({METRICS: answers, HEALTH: [OK]})
    [result] = go(host, [entry(tmp_path)], drain_timeout=3)
    assert result["drain"]["said"] == said


def retired_record(tmp_path, unit="sglang-decode2"):
    """A retired instance's record as the preflight hands it over (units.record), with its three files on disk."""
    (tmp_path / "records").mkdir(exist_ok=True)
    for name in (f"{unit}.service", f"{unit}.env", f"records/{unit}.json"):
        (tmp_path / name).write_text(name)
    return {"unit": unit, "host": "h1", "role": "decode", "health_url": HEALTH,
            "unit_file": str(tmp_path / f"{unit}.service"),
            "environment_file": str(tmp_path / f"{unit}.env")}  # fmt: skip


def retire(host, entries, tmp_path, do_drain=True, check=False):
    return br.retire_all(host.run, entries, str(tmp_path / "records"), 3, do_drain=do_drain, check=check,
                         remove=remove, fetch=host.fetch, sleep=host.sleep, clock=host.clock)  # fmt: skip


def test_a_retired_instance_is_drained_by_the_rolling_batchs_drain_then_stopped_disabled_and_removed(tmp_path):
    host = FakeHost({METRICS: [metrics(1), metrics(0)]})
    record = retired_record(tmp_path)
    out = retire(host, [record], tmp_path)
    [result] = out["services"]
    assert result["drain"] == {"left": 0, "seconds": 0.25 + Q, "said": "drained (no request in flight)"}
    assert result["stopped"] == ["stop", "disable"] and out["changed"] and out["refused"] == []
    acted = [argv[1] for argv in host.commands if argv[1] != "show"]
    assert acted == ["stop", "disable", "daemon-reload"]
    # the rolling batch's drain: /metrics and /v1/loads read together until they said 0 for Q seconds (from 0.25 s
    # on), and the stop after the last reading
    readings = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert readings[-1] == 0.25 + Q
    assert host.fetched == [(t, url, False) for t in readings for url in (METRICS, LOADS)]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
    assert result["removed"] == [record["unit_file"], record["environment_file"],
                                 str(tmp_path / "records" / "sglang-decode2.json")]  # fmt: skip


def test_a_retired_instance_the_router_did_not_serve_is_not_drained(tmp_path):
    host = FakeHost({METRICS: [metrics(1)]})
    [result] = retire(host, [retired_record(tmp_path)], tmp_path, do_drain=False)["services"]
    assert result["drain"] is None and host.fetched == []
    assert result["stopped"] == ["stop", "disable"]


def test_a_retired_unit_systemd_does_not_know_has_nothing_to_stop_and_its_files_go(tmp_path):
    host = FakeHost({METRICS: [REFUSED]}, loaded="not-found")
    [result] = retire(host, [retired_record(tmp_path)], tmp_path)["services"]
    assert result["stopped"] == [] and result["error"] == "" and len(result["removed"]) == 3
    assert not any(argv[1] in ("stop", "disable") for argv in host.commands)


def test_a_refused_stop_keeps_the_files_and_is_said(tmp_path):
    host = FakeHost({METRICS: [metrics(0)]}, refuse_stop=True)
    out = retire(host, [retired_record(tmp_path)], tmp_path)
    [result] = out["services"]
    assert out["refused"] == ["sglang-decode2.service"]
    assert result["error"] == "systemctl stop: Access denied" and result["removed"] == []
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 3


def test_retiring_in_check_mode_drains_stops_and_removes_nothing_but_says_what_would_go(tmp_path):
    host = FakeHost({METRICS: [metrics(1)]})
    out = retire(host, [retired_record(tmp_path)], tmp_path, check=True)
    [result] = out["services"]
    assert result["drain"] is None and host.fetched == []
    assert result["stopped"] == ["stop", "disable"] and len(result["removed"]) == 3 and out["changed"]
    assert [argv[1] for argv in host.commands] == ["show"]
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 3
