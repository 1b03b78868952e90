"""service_health's wait: healthy, restarted, inactive/failed, deadline, JSON expectation unmet.

The wait loop runs for real with fakes for what it touches: `systemctl show` answers (one per call, the
last repeats), HTTP answers (one per poll, the last repeats) and a clock that advances only when the loop
sleeps (the cases: service_health_cases.yml). fetch itself is tested against a real HTTP server on loopback, and
the module once in-process.
"""

import functools
import json
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health as sh
from ansible_collections.disagg.sglang.plugins.modules import service_health as module
from samples import QuietHandler, loopback_fixture

UNIT = "sglang-decode0.service"
URL = "http://127.0.0.1:30001/health"

# `systemctl show` answers and health URL answers ([status, body, error]) by the names the cases use.
STATES = {
    "running": {"ActiveState": "active", "SubState": "running", "NRestarts": 0},
    "restarted": {"ActiveState": "active", "SubState": "running", "NRestarts": 1},
    "starting": {"ActiveState": "activating", "SubState": "start", "NRestarts": 0},
    "auto-restart": {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": 0},
    "failed": {"ActiveState": "failed", "SubState": "failed", "NRestarts": 0},
    "inactive": {"ActiveState": "inactive", "SubState": "dead", "NRestarts": 0},
    None: None,
}
ANSWERS = {
    "ok": (200, "{}", None),
    "refused": (None, "", "no answer: [Errno 111] Connection refused"),
    "loading": (503, "loading weights", None),
    **{f"readiness {n}": (200, json.dumps({"healthy_workers": n, "total_workers": 2}), None) for n in range(3)},
}
RUNNING = STATES["running"]
OK, REFUSED, LOADING = ANSWERS["ok"], ANSWERS["refused"], ANSWERS["loading"]
# name: what the wait meets and what it returns (data-driven: service_health_cases.yml says how a case reads)
CASES = yaml.safe_load((Path(__file__).parent / "service_health_cases.yml").read_text())


class FakeHost:
    """systemctl show and HTTP answers in order (the last repeats), and a clock that only sleep moves."""

    def __init__(self, states, answers):
        self.states, self.answers = list(states), list(answers)
        self.now = 1000.0
        self.slept = 0.0
        self.polls = 0
        self.commands = []

    @staticmethod
    def _next(queue):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def run(self, argv):
        self.commands.append(argv)
        props = self._next(self.states)
        if props is None:
            return 1, "", "Failed to connect to bus"
        return 0, "".join(f"{key}={value}\n" for key, value in props.items()), ""

    def fetch(self, url, timeout=None):
        assert url == URL
        self.polls += 1
        return self._next(self.answers)

    def sleep(self, seconds):
        self.now += seconds
        self.slept += seconds

    def clock(self):
        return self.now


@pytest.mark.parametrize("name", CASES)
def test_wait_healthy(name):
    case = CASES[name]
    answers = [ANSWERS[a] if isinstance(a, str) else tuple(a) for a in case["answers"]]
    host = FakeHost([STATES[s] for s in case["states"]], answers)
    result = sh.wait_healthy(host.run, UNIT, URL, case.get("expect_json", {}), case["wait"], sleep=host.sleep,
                             clock=host.clock, fetch=host.fetch)  # fmt: skip
    got = {"healthy": result["healthy"], "unit_failed": result["unit_failed"], "polls": host.polls,
           "slept": host.slept}  # fmt: skip
    assert (got, result["reason"], result["unit_state"]) == (case["want"], case["reason"], case["unit_state"])
    assert not (result["healthy"] and result["unit_failed"])
    assert all(cmd[:3] == ["systemctl", "show", UNIT] for cmd in host.commands)


def test_body_is_cut_to_the_limit():
    host = FakeHost([RUNNING], [(503, "x" * 5000, None)])
    result = sh.wait_healthy(host.run, UNIT, URL, {}, 0, sleep=host.sleep, clock=host.clock, fetch=host.fetch)
    assert result["body"] == "x" * sh.BODY_LIMIT


ROUTES = {
    "/health": (200, b""),
    "/readiness": (200, b'{"healthy_workers": 2}'),
    "/loading": (503, b"loading"),
}


class _Handler(QuietHandler):
    def do_GET(self):
        self.answer(*ROUTES.get(self.path, (404, b"no route")))


server = loopback_fixture(_Handler)


@pytest.mark.parametrize(
    ("path", "expect", "want"),
    [
        ("/health", {}, (True, "healthy", "")),
        ("/readiness", {"healthy_workers": 2}, (True, "healthy", '{"healthy_workers": 2}')),
        (
            "/readiness",
            {"healthy_workers": 3},
            (False, "healthy_workers is 2, waiting for 3", '{"healthy_workers": 2}'),
        ),
        ("/loading", {}, (False, "HTTP 503", "loading")),
    ],
)
def test_probe_over_real_http(server, path, expect, want):
    assert sh.probe(server + path, expect) == want


def test_probe_nothing_listening():
    with ThreadingHTTPServer(("127.0.0.1", 0), _Handler) as closed:
        port = closed.server_address[1]  # bound, then closed: nothing listens there any more
    healthy, reason, body = sh.probe(f"http://127.0.0.1:{port}/health", {})
    assert (healthy, body) == (False, "")
    assert reason.startswith("no answer:") and "refused" in reason.lower()


def run_module(args, capsys):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_module_returns_the_journal_when_not_healthy(monkeypatch, capsys):
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(argv)
        if argv[0] == "journalctl":
            return 0, "decode0: CUDA out of memory\n", ""
        return 0, "ActiveState=failed\nSubState=failed\nNRestarts=3\n", ""

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(module, "wait_all", functools.partial(sh.wait_all, fetch=lambda url, timeout=None: REFUSED))
    rc, out = run_module({"unit": UNIT, "url": URL, "wait": 5, "journal_lines": 7, "_ansible_check_mode": True}, capsys)
    assert rc == 0
    assert (out["changed"], out["healthy"], out["unit_failed"]) == (False, False, True)
    assert out["journal"] == "decode0: CUDA out of memory\n"
    assert calls[-1] == ["journalctl", "-u", UNIT, "-n", "7", "--no-pager", "-o", "short-iso"]


def test_module_healthy_reads_no_journal(monkeypatch, capsys, server):
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(argv[0])
        return 0, "ActiveState=active\nSubState=running\nNRestarts=0\n", ""

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    rc, out = run_module({"unit": UNIT, "url": server + "/readiness", "expect_json": {"healthy_workers": 2}}, capsys)
    assert (rc, out["healthy"], out["unit_failed"], out["journal"]) == (0, True, False, "")
    assert "journalctl" not in calls


def test_the_module_waits_for_the_started_unit_specs_as_the_units_step_hands_them(monkeypatch, capsys, server):
    """wait.yml passes the specs it started and the restart counts the units step left (no filter between): a router
    waits for its readiness to count its expected workers, each result carries its spec as item."""

    def run_command(self, argv, **kwargs):
        return 0, "ActiveState=active\nSubState=running\nNRestarts=2\n", ""

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    router = {"unit": "sglang-router", "role": "router", "health_url": server + "/readiness", "expected_workers": 2}
    rc, out = run_module({"specs": [router], "restarts": {"sglang-router.service": 2}}, capsys)
    [result] = out["services"]
    assert (rc, out["healthy"], result["item"]) == (0, True, router)
    rc, out = run_module({"specs": [{**router, "expected_workers": 3}], "wait": 1, "poll": 0.2}, capsys)
    assert (rc, out["healthy"], out["services"][0]["reason"]) == (0, False, "healthy_workers is 2, waiting for 3")


def test_services_of_a_host_are_waited_for_at_once_each_with_its_own_outcome():
    """Three services whose health answers take 0.3 s each: one wait of them takes about one answer, not three; a
    crashed one is named failed with its journal, the others keep their own outcome and their item."""

    def fetch(url, timeout=None):
        time.sleep(0.3)
        return (200, "{}", None) if "ok" in url else REFUSED

    def run(argv):
        crashed = "crashed" in argv[2]
        return 0, f"ActiveState={'failed' if crashed else 'active'}\nSubState=x\nNRestarts=0\n", ""

    services = [{"unit": f"{name}.service", "url": f"http://h/{name}", "item": {"unit": name}}
                for name in ("ok-a", "ok-b", "crashed")]  # fmt: skip
    started = time.monotonic()
    results = sh.wait_all(run, services, 5, journal=lambda unit: f"journal of {unit}", fetch=fetch)
    assert time.monotonic() - started < 0.6
    assert [(r["item"]["unit"], r["healthy"], r["unit_failed"], r["journal"]) for r in results] == [
        ("ok-a", True, False, ""),
        ("ok-b", True, False, ""),
        ("crashed", False, True, "journal of crashed.service"),
    ]


def test_a_restart_since_the_whole_wait_began_counts_in_a_later_call():
    """An until loop calls the module again and again: the restart count of the wait's start is passed in, so a unit
    that crashed and came back between two calls (NRestarts 1 -> 2) ends the wait as failed."""

    def run(argv):
        return 0, "ActiveState=activating\nSubState=start\nNRestarts=2\n", ""

    service = {"unit": "d.service", "url": "http://h/d", "restarts": 1}
    result = sh.wait_all(run, [service], 5, journal=lambda unit: "", fetch=lambda url, timeout=None: REFUSED)[0]
    assert (result["healthy"], result["unit_failed"]) == (False, True)
    result = sh.wait_all(run, [{**service, "restarts": 2}], 0, journal=lambda unit: "",
                         fetch=lambda url, timeout=None: REFUSED, sleep=lambda s: None)[0]  # fmt: skip
    assert (result["healthy"], result["unit_failed"]) == (False, False)


# --- every wait ends on the clock; loading, warming and stalled told apart ---------------------------------------


def until_done(fetch, timeout, wait, stall_timeout=None, calls_at_most=1000):
    """The role's until loop over the module's calls (roles/sglang/tasks/wait.yml): one deadline fixed before the
    first call, each call a window of WAIT seconds, until a call says done. Returns the last result, the calls and
    the seconds on a clock that only the probes and the sleeps move."""
    host = FakeHost([RUNNING], [OK])
    deadline = host.now + timeout
    calls = 0

    def timed_fetch(url, timeout=sh.HTTP_TIMEOUT):
        status, body, error, seconds = fetch(timeout)
        host.now += seconds
        return status, body, error

    for calls in range(1, calls_at_most + 1):  # noqa: B007 (the count is returned)
        [result] = sh.wait_all(host.run, [{"unit": UNIT, "url": URL}], wait, journal=lambda unit: "",
                               sleep=host.sleep, clock=host.clock, fetch=timed_fetch, deadline=deadline,
                               stall_timeout=stall_timeout)  # fmt: skip
        if result["done"]:
            break
    return result, calls, host.now - 1000.0


def test_a_wait_on_a_silent_worker_ends_at_its_deadline_not_after_a_count_of_calls():
    """Issue 37: a 300 s wait took 790 s, counted as timeout / poll calls, each probe of the stalled worker waiting
    out its HTTP timeout. Now the deadline ends it: 300 s on the clock, whatever each call cost."""
    result, calls, seconds = until_done(lambda timeout: (None, "", f"{sh.SILENT} {timeout:g} s", timeout), 300, 10)
    assert (result["timed_out"], result["healthy"], result["stalled"]) == (True, False, False)
    assert 300 <= seconds <= 300 + sh.MIN_PROBE
    assert calls < 300 / 10  # each call ran past its 10 s window by a probe or more


def test_a_silent_worker_is_a_stall_after_the_stall_bound_not_after_the_load_budget():
    """sglang_health_timeout 1800 s is sized for a load; a worker whose port takes /health and answers nothing is
    recognised after the stall bound (30 s here), in one call that its 10 s window does not cut."""
    result, calls, seconds = until_done(lambda timeout: (None, "", f"{sh.SILENT} {timeout:g} s", timeout), 1800, 10,
                                        stall_timeout=30)  # fmt: skip
    assert (result["stalled"], result["done"], calls) == (True, True, 1)
    assert 30 <= seconds <= 30 + sh.POLL_INTERVAL + sh.MIN_PROBE
    assert result["reason"].startswith("stalled: its port takes requests, and /health has not answered for 3")


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        ((None, "", "no answer: [Errno 111] Connection refused", 0.0), "loading: the port is closed"),
        ((503, "", None, 0.01), "warming up: 503 at once"),
    ],
)
def test_loading_and_warming_are_never_a_stall(answer, what):
    """A load or a warm-up that outlasts the stall bound is waited for until the deadline."""
    result, calls, seconds = until_done(lambda timeout: answer, 120, 10, stall_timeout=30)
    assert (result["timed_out"], result["stalled"]) == (True, False), what
    assert 120 <= seconds <= 121 and calls >= 12


def test_a_non_200_after_sglang_s_own_health_check_timeout_is_silence():
    """A stalled sglang whose SGLANG_HEALTH_CHECK_TIMEOUT (2 s here) is shorter than the probe's answers 503 after
    it: slow, so silence too, and a stall after the bound."""
    result, _calls, seconds = until_done(lambda timeout: (503, "", None, 2.0), 1800, 10, stall_timeout=30)
    assert result["stalled"] and 30 <= seconds <= 33


class TestAgainstTheDouble:
    """The engine double (tests/sandbox/pdsim) as sglang 0.5.23 starts and stalls: port closed while the weights load,
    /health 503 at once while warming up, and a stalled scheduler whose /health answers nothing for
    SGLANG_HEALTH_CHECK_TIMEOUT (20 s, sglang's default) - on the real clock, with real HTTP."""

    @staticmethod
    def wait(url, *, deadline_in, stall_timeout, wait=60):
        started = time.monotonic()
        result = sh.wait_healthy(lambda argv: (0, "ActiveState=active\nSubState=running\nNRestarts=0\n", ""), UNIT,
                                 url, {}, wait, deadline=time.monotonic() + deadline_in,
                                 stall_timeout=stall_timeout, poll=0.25)  # fmt: skip
        return result, time.monotonic() - started

    def test_a_stalled_worker_is_recognised_within_the_stall_bound(self, sims, monkeypatch):
        monkeypatch.setattr(sh, "HTTP_TIMEOUT", 1.0)
        sim = sims.start("decode", env={"SGLANG_SIM_STALL_AFTER": "0.2", "SGLANG_HEALTH_CHECK_TIMEOUT": "20"})
        time.sleep(0.4)
        result, seconds = self.wait(sim.url("/health"), deadline_in=30, stall_timeout=3, wait=1)
        assert (result["stalled"], result["healthy"], result["timed_out"]) == (True, False, False), result
        assert 3 <= seconds <= 3 + 1.0 + 1.0, seconds

    def test_a_loading_worker_is_not_a_stall(self, sims):
        sim = sims.start("decode", env={"SGLANG_SIM_STARTUP_DELAY": "30"}, healthy=False)
        result, seconds = self.wait(sim.url("/health"), deadline_in=4, stall_timeout=2)
        assert (result["timed_out"], result["stalled"]) == (True, False), result
        assert "refused" in result["reason"].lower() and 4 <= seconds <= 5

    def test_a_warming_worker_is_not_a_stall(self, sims):
        sim = sims.start("decode", env={"SGLANG_SIM_WARMUP_DELAY": "30"}, healthy=False)
        result, seconds = self.wait(sim.url("/health"), deadline_in=5, stall_timeout=2)
        assert (result["timed_out"], result["stalled"], result["reason"]) == (True, False, "HTTP 503"), result
        assert 5 <= seconds <= 6

    def test_a_healthy_worker_answers_in_about_a_second_and_is_healthy(self, sims):
        sim = sims.start("decode")
        result, seconds = self.wait(sim.url("/health"), deadline_in=10, stall_timeout=2)
        assert (result["healthy"], result["done"]) == (True, True) and seconds < 5
