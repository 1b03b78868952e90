"""router_api: what a worker-list change adds and takes out, when the listing shows it, and the wait against a
router that applies each change in the background (as sglang-router 0.3.2 does).

The decisions are table tests. The wait runs for real against a fake router object whose listing changes only
after a number of readings, with a clock that advances only when the loop sleeps; SglangRouter's HTTP calls run
against a real HTTP server on loopback that answers as the router does (202, then the change a moment later).
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_api as ra
from ansible_collections.disagg.sglang.plugins.modules import router_workers as module
from samples import Clock

P0 = {"url": "http://10.0.0.2:30000", "worker_type": "prefill", "bootstrap_port": 8998}
P1 = {"url": "http://10.0.0.2:30010", "worker_type": "prefill", "bootstrap_port": 9008}
D0 = {"url": "http://10.0.0.3:30001", "worker_type": "decode"}
D1 = {"url": "http://10.0.0.4:30011", "worker_type": "decode"}
RK = "router-key-7f3a"  # long enough that no_log masking of it does not touch the messages


def listing(*workers, unhealthy=()):
    return [{"id": f"id-{w['url'][-5:]}", "url": w["url"], "worker_type": w["worker_type"],
             "healthy": w["url"] not in {u["url"] for u in unhealthy}} for w in workers]  # fmt: skip


def urls(workers):
    return sorted(w["url"] for w in workers)


# name: (listed, desired, state) -> (urls to add, urls to take out)
CHANGES = {
    "present: the missing one is added": ([P0, D0], [D1], "present", [D1["url"]], []),
    "present: a listed one is not added again": ([P0, D0, D1], [D1], "present", [], []),
    "present: others are left alone": ([P0, P1, D0, D1], [D0], "present", [], []),
    "absent: the listed one goes": ([P0, D0, D1], [D1], "absent", [], [D1["url"]]),
    "absent: one not listed is nothing to do": ([P0, D0], [D1], "absent", [], []),
    "exact: an extra one goes, a missing one comes": ([P0, P1, D0], [P0, D0, D1], "exact", [D1["url"]], [P1["url"]]),
    "exact: the same set is nothing to do": ([P0, D0], [D0, P0], "exact", [], []),
    "exact: an empty listing gets everything": ([], [P0, D0], "exact", [P0["url"], D0["url"]], []),
}


@pytest.mark.parametrize("case", CHANGES, ids=list(CHANGES))
def test_changes(case):
    current, desired, state, add, remove = CHANGES[case]
    to_add, to_remove = ra.changes(listing(*current), desired, state)
    assert (urls(to_add), urls(to_remove)) == (sorted(add), sorted(remove))
    assert all("id" in w for w in to_remove)  # what is taken out is taken out by the router's own id


def test_an_unknown_state_is_refused():
    with pytest.raises(ra.RouterApiError, match="state 'replace'"):
        ra.changes([], [], "replace")


# name: (listed, unhealthy, desired, state) -> settled
SETTLED = {
    "present: listed and healthy": ([P0, D0, D1], [], [D1], "present", True),
    "present: listed, not health-checked yet": ([P0, D0, D1], [D1], [D1], "present", False),
    "present: not listed": ([P0, D0], [], [D1], "present", False),
    "present: another one unhealthy does not matter": ([P0, D0, D1], [D0], [D1], "present", True),
    "absent: gone": ([P0, D0], [], [D1], "absent", True),
    "absent: still listed (unhealthy)": ([P0, D0, D1], [D1], [D1], "absent", False),
    "exact: the same set, all healthy": ([P0, D0], [], [P0, D0], "exact", True),
    "exact: an extra one still listed": ([P0, P1, D0], [], [P0, D0], "exact", False),
    "exact: one unhealthy": ([P0, D0], [P0], [P0, D0], "exact", False),
}


@pytest.mark.parametrize("case", SETTLED, ids=list(SETTLED))
def test_settled(case):
    current, unhealthy, desired, state, want = SETTLED[case]
    assert ra.settled(listing(*current, unhealthy=unhealthy), desired, state) is want


# name: desired workers -> the problem named (None: valid)
PROBLEMS = {
    "prefill and decode": ([P0, D0], None),
    "no url": ([{"worker_type": "decode"}], "a url (http://host:port) is needed"),
    "a url without a scheme": ([{"url": "10.0.0.3:30001", "worker_type": "decode"}], "a url (http://host:port)"),
    "an unknown type": ([{"url": D0["url"], "worker_type": "regular"}], "worker_type must be prefill or decode"),
    "a prefill without its bootstrap port": ([{"url": P0["url"], "worker_type": "prefill"}], "needs its bootstrap"),
    "not a mapping": (["http://10.0.0.3:30001"], "a url (http://host:port) is needed"),
}


@pytest.mark.parametrize("case", PROBLEMS, ids=list(PROBLEMS))
def test_worker_problems(case):
    workers, want = PROBLEMS[case]
    problems = ra.worker_problems(workers)
    assert (problems == []) if want is None else (len(problems) == 1 and want in problems[0]), problems


def test_listed_refuses_an_answer_without_a_worker_list():
    assert ra.listed({"workers": [{"id": 7, "url": D0["url"], "worker_type": "decode", "is_healthy": True}]}) == [
        {"id": "7", "url": D0["url"], "worker_type": "decode", "healthy": True}
    ]
    with pytest.raises(ra.RouterApiError, match="without a worker list"):
        ra.listed({"error": "not found"})


def test_add_body_carries_the_bootstrap_port_and_the_workers_key():
    assert ra.add_body(P0, "") == {"url": P0["url"], "worker_type": "prefill", "bootstrap_port": 8998}
    assert ra.add_body(D0, "k") == {"url": D0["url"], "worker_type": "decode", "api_key": "k"}


class FakeRouter:
    """A router whose listing shows each change LAG readings after the call, and a new worker healthy HEALTHY_LAG
    readings after it is listed. Records every call."""

    def __init__(self, workers, lag=2, healthy_lag=1):
        self.workers_now = {w["url"]: dict(w, healthy=True) for w in listing(*workers)}
        self.pending = []  # [readings left, action, worker]
        self.lag, self.healthy_lag = lag, healthy_lag
        self.calls = []

    def workers(self):
        self.calls.append("GET")
        for entry in self.pending:
            entry[0] -= 1
        for left, action, worker in [e for e in self.pending if e[0] <= 0]:
            if action == "add":
                self.workers_now[worker["url"]] = {"id": "new-" + worker["url"][-5:], "url": worker["url"],
                                                   "worker_type": worker["worker_type"], "healthy": False}  # fmt: skip
                self.pending.append([self.healthy_lag, "healthy", worker])
            elif action == "healthy":
                self.workers_now[worker["url"]]["healthy"] = True
            else:
                self.workers_now.pop(worker["url"], None)
            assert left <= 0
        self.pending = [e for e in self.pending if e[0] > 0]
        return [dict(w) for w in self.workers_now.values()]

    def add(self, worker, worker_api_key):
        self.calls.append(f"POST {worker['url']} key={worker_api_key}")
        self.pending.append([self.lag, "add", worker])

    def remove(self, worker):
        self.calls.append(f"DELETE {worker['id']}")
        self.pending.append([self.lag, "remove", worker])


def converge(router, desired, state, timeout=60, check_mode=False):
    clock = Clock()
    options = {"worker_api_key": "wk", "timeout": timeout, "poll": 1, "check_mode": check_mode}
    return ra.converge(router, desired, state, options, sleep=clock.sleep, clock=clock), clock


def test_absent_waits_until_the_router_no_longer_lists_it():
    router = FakeRouter([P0, D0, D1], lag=3)
    result, clock = converge(router, [D1], "absent")
    assert result["settled"] and result["removed"] == [D1["url"]] and result["added"] == []
    assert urls(result["workers"]) == urls([P0, D0])
    assert router.calls[:2] == ["GET", "DELETE id-30011"] and clock.now == 2.0  # read at 0 (after), 1, 2: gone


def test_present_waits_until_the_new_worker_is_listed_healthy():
    router = FakeRouter([P0, D0], lag=2, healthy_lag=2)
    result, clock = converge(router, [D1], "present")
    assert result["settled"] and result["added"] == [D1["url"]]
    assert [w["healthy"] for w in result["workers"] if w["url"] == D1["url"]] == [True]
    assert f"POST {D1['url']} key=wk" in router.calls and clock.now == 3.0


def test_exact_adds_and_takes_out_in_one_call():
    router = FakeRouter([P0, P1, D0], lag=1)
    result, _clock = converge(router, [P0, D0, D1], "exact")
    assert result["settled"] and result["added"] == [D1["url"]] and result["removed"] == [P1["url"]]
    assert urls(result["workers"]) == urls([P0, D0, D1])
    # taken out before the new one is added: a rename never has both listed on the same GPUs
    assert router.calls.index("DELETE id-30010") < router.calls.index(f"POST {D1['url']} key=wk")


def test_nothing_to_do_reads_once_and_changes_nothing():
    router = FakeRouter([P0, D0])
    result, clock = converge(router, [P0, D0], "exact")
    assert result == {"changed": False, "added": [], "removed": [], "settled": True, "waited": 0.0,
                      "workers": listing(P0, D0)}  # fmt: skip
    assert router.calls == ["GET"] and clock.now == 0.0


def test_a_listing_that_never_settles_returns_unsettled_at_the_timeout():
    router = FakeRouter([P0, D0], lag=1000)
    result, clock = converge(router, [D1], "present", timeout=5)
    assert not result["settled"] and result["added"] == [D1["url"]] and clock.now == 5.0
    assert "decode http://10.0.0.3:30001 (healthy)" in ra.describe(result["workers"])


def test_check_mode_reports_the_change_and_calls_nothing():
    router = FakeRouter([P0, P1, D0])
    result, _clock = converge(router, [P0, D0, D1], "exact", check_mode=True)
    assert result["changed"] and result["added"] == [D1["url"]] and result["removed"] == [P1["url"]]
    assert router.calls == ["GET"]


class RouterHandler(BaseHTTPRequestHandler):
    """A loopback stand-in for sglang-router 0.3.2's worker API: 202 at once, the change applied 0.3 s later."""

    state: ClassVar[dict] = {}

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.headers.get("Authorization") != f"Bearer {RK}":
            return self.answer(401, {"error": "unauthorized"})
        with self.state["lock"]:
            workers = list(self.state["workers"].values())
        return self.answer(200, {"workers": workers, "total": len(workers)})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.state["posted"].append(body)

        def later():
            time.sleep(0.3)
            with self.state["lock"]:
                entry = {"id": "w9", "url": body["url"], "worker_type": body["worker_type"], "is_healthy": True}
                self.state["workers"][body["url"]] = entry

        threading.Thread(target=later, daemon=True).start()
        return self.answer(202, {"status": "accepted"})

    def do_DELETE(self):
        wid = self.path.rsplit("/", 1)[1]

        def later():
            time.sleep(0.3)
            with self.state["lock"]:
                self.state["workers"] = {u: w for u, w in self.state["workers"].items() if w["id"] != wid}

        threading.Thread(target=later, daemon=True).start()
        return self.answer(202, {"status": "accepted"})


@pytest.fixture
def http_router():
    RouterHandler.state = {"lock": threading.Lock(), "posted": [], "workers": {
        P0["url"]: {"id": "w1", "url": P0["url"], "worker_type": "prefill", "is_healthy": True},
        D0["url"]: {"id": "w2", "url": D0["url"], "worker_type": "decode", "is_healthy": True},
    }}  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), RouterHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", RouterHandler.state
    server.shutdown()


def test_sglang_router_over_http_swaps_a_decode_and_waits_for_it(http_router):
    url, state = http_router
    api = ra.SglangRouter(url, RK)
    result = ra.converge(api, [P0, D1], "exact", {"worker_api_key": "wk", "timeout": 10, "poll": 0.1})
    assert result["settled"] and result["added"] == [D1["url"]] and result["removed"] == [D0["url"]]
    assert 0.2 < result["waited"] < 5
    assert state["posted"] == [{"url": D1["url"], "worker_type": "decode", "api_key": "wk"}]
    assert urls(api.workers()) == urls([P0, D1])


def test_sglang_router_over_http_names_a_refused_call(http_router):
    url, _state = http_router
    with pytest.raises(ra.RouterApiError, match=r"GET .*/workers answered 401"):
        ra.SglangRouter(url, "wrong").workers()
    with pytest.raises(ra.RouterApiError, match="no answer"):
        ra.SglangRouter("http://127.0.0.1:9", RK).workers()


def run_module(args, capsys):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_the_module_takes_unit_specs_and_fails_naming_what_the_router_lists(http_router, capsys):
    url, state = http_router
    spec = {"unit": "sglang-decode1", "role": "decode", "url": D1["url"], "bootstrap_port": None, "flags": {}}
    rc, out = run_module({"url": url, "api_key": RK, "workers": [spec], "state": "present", "timeout": 10,
                          "poll": 0.1, "worker_api_key": "wk"}, capsys)  # fmt: skip
    assert rc == 0 and out["changed"] and out["added"] == [D1["url"]], out
    assert state["posted"][-1]["worker_type"] == "decode"
    rc, out = run_module({"url": url, "api_key": "wrong", "workers": [spec], "state": "absent"}, capsys)
    assert rc == 1 and "answered 401" in out["msg"], out
    rc, out = run_module({"url": url, "api_key": RK, "workers": [{"url": D1["url"], "worker_type": "regular"}]},
                         capsys)  # fmt: skip
    assert rc == 1 and "worker_type must be prefill or decode" in out["msg"], out


def test_the_module_in_check_mode_says_what_it_would_change_and_changes_nothing(http_router, capsys):
    url, state = http_router
    rc, out = run_module({"url": url, "api_key": RK, "workers": [P0, D1], "state": "exact",
                          "_ansible_check_mode": True}, capsys)  # fmt: skip
    assert rc == 0 and out["changed"] and out["added"] == [D1["url"]] and out["removed"] == [D0["url"]], out
    assert state["posted"] == [] and sorted(state["workers"]) == sorted([P0["url"], D0["url"]])


class LateRouter(FakeRouter):
    """A router that answers only from its third reading on (it was started a moment ago)."""

    def __init__(self, workers, silent=2):
        super().__init__(workers)
        self.silent = silent

    def workers(self):
        if self.silent:
            self.silent -= 1
            self.calls.append("GET (no answer)")
            raise ra.RouterNotAnswering("GET http://127.0.0.1:8000/workers: no answer (Connection refused)")
        return super().workers()


def test_a_router_that_does_not_answer_yet_is_waited_for_within_the_timeout():
    result, clock = converge(LateRouter([P0, D0]), [P0, D0], "exact")
    assert result["settled"] and not result["changed"] and clock.now == 2.0
    with pytest.raises(ra.RouterApiError, match="no answer"):
        converge(LateRouter([P0, D0], silent=100), [P0, D0], "exact", timeout=5)
    refusing = FakeRouter([P0, D0])

    def refuse():
        raise ra.RouterApiError("GET /workers answered 401")

    refusing.workers = refuse
    with pytest.raises(ra.RouterApiError, match="401"):  # an answer that refuses is not waited on
        converge(refusing, [P0, D0], "exact")


class ScriptedSmg(ra.SmgRouter):
    """SMG 1.13's worker API as its binary answered in the sandbox: POST 202 (409 for a URL it has or is adding), the
    worker listed pending, then ready; DELETE 202, the worker listed draining (still is_healthy) for two readings,
    then gone. Each GET /workers is one step of that clock."""

    def __init__(self, workers):
        super().__init__("http://smg.invalid")
        self.listing = {w["url"]: {"id": f"uuid-{w['url'][-5:]}", "url": w["url"], "worker_type": w["worker_type"],
                                   "is_healthy": True, "status": "ready", "age": 9} for w in workers}  # fmt: skip
        self.calls = []

    def call(self, method, path, body=None):
        self.calls.append(method)
        if method == "GET":
            for url, w in list(self.listing.items()):
                w["age"] += 1
                if w["status"] == "pending" and w["age"] >= 2:
                    w.update(status="ready", is_healthy=True)
                if w["status"] == "draining" and w["age"] >= 3:
                    del self.listing[url]
            shown = [{k: v for k, v in w.items() if k != "age"} for w in self.listing.values()]
            return 200, {"workers": shown, "total": len(shown), "stats": {}}
        if method == "POST":
            if body["url"] in self.listing:
                return 409, {"error": f"Worker creation already in progress for URL {body['url']}"}
            self.listing[body["url"]] = {"id": "uuid-new", "url": body["url"], "worker_type": body["worker_type"],
                                         "is_healthy": False, "status": "pending", "age": 0}  # fmt: skip
            return 202, {"status": "accepted", "worker_id": "uuid-new"}
        worker = next((w for w in self.listing.values() if path.endswith(w["id"])), None)
        if worker is None:
            return 404, {"error": "not found"}
        worker.update(status="draining", age=0)
        return 202, {"status": "accepted"}


def test_smg_counts_a_draining_or_pending_worker_as_not_healthy():
    answer = {"workers": [
        {"id": "a", "url": D0["url"], "worker_type": "decode", "is_healthy": True, "status": "draining"},
        {"id": "b", "url": D1["url"], "worker_type": "decode", "is_healthy": False, "status": "pending"},
        {"id": "c", "url": P0["url"], "worker_type": "prefill", "is_healthy": True, "status": "ready"},
    ]}  # fmt: skip
    assert [w["healthy"] for w in ra.listed(answer, ready_statuses=("ready",))] == [False, False, True]
    assert [w["healthy"] for w in ra.listed(answer)] == [True, False, True]  # sglang-router lists no status


def test_smg_swap_waits_out_the_drain_settle_and_the_registration():
    api = ScriptedSmg([P0, D0])
    result = ra.converge(api, [P0, D1], "exact", {"timeout": 60, "poll": 1}, sleep=lambda s: None, clock=iter(
        range(1000)).__next__)  # fmt: skip
    assert result["settled"] and result["added"] == [D1["url"]] and result["removed"] == [D0["url"]]
    assert api.calls[:3] == ["GET", "DELETE", "POST"] and api.calls.count("GET") >= 3, api.calls
    assert urls(api.workers()) == urls([P0, D1])


def test_smg_absent_is_settled_only_once_the_draining_worker_is_gone():
    api = ScriptedSmg([P0, D0, D1])
    readings = []
    real_workers = api.workers

    def workers():
        readings.append(real_workers())
        return readings[-1]

    api.workers = workers
    result = ra.converge(api, [D1], "absent", {"timeout": 60, "poll": 1}, sleep=lambda s: None,
                         clock=iter(range(1000)).__next__)  # fmt: skip
    assert result["settled"]
    drained = [r for r in readings[1:] if D1["url"] in urls(r)]  # after the DELETE: listed, draining
    assert (
        urls(readings[-1]) == urls([P0, D0])
        and len(drained) >= 2
        and not any(w["healthy"] for r in drained for w in r if w["url"] == D1["url"])
    )


def test_smg_takes_409_for_a_url_it_already_registers_and_names_any_other_refusal():
    api = ScriptedSmg([P0, D0])
    api.listing[D1["url"]] = {"id": "uuid-x", "url": D1["url"], "worker_type": "decode", "is_healthy": False,
                              "status": "pending", "age": 0}  # fmt: skip
    api.add(D1, "")  # 409: no error; the listing decides
    assert api.calls == ["POST"]
    api.call = lambda method, path, body=None: (400, {"error": "invalid worker spec"})
    with pytest.raises(ra.RouterApiError, match=r"POST .*/workers \(http://.*\) answered 400: .*invalid worker spec"):
        api.add(D1, "")


def test_exact_takes_out_only_the_removable_workers_where_given():
    """The router play's hand-over takes out what the collection handed the router (its record's worker_urls); a
    worker someone else added is left for the end check to name."""
    to_add, to_remove = ra.changes(listing(P0, P1, D0, D1), [P0, D0], "exact", removable={P1["url"]})
    assert (to_add, urls(to_remove)) == ([], [P1["url"]])
    _to_add, to_remove = ra.changes(listing(P0, P1, D0, D1), [P0, D0], "exact", removable=set())
    assert to_remove == []


def test_an_exact_hand_over_does_not_wait_for_a_worker_it_may_not_take_out():
    """A worker added by hand (not removable) stays listed: the hand-over settles at once, and the end check names
    it (found in the sandbox: the hand-over waited out its 60 s for a listing it would never make)."""
    router = FakeRouter([P0, D0, D1])
    clock = Clock()
    options = {"timeout": 60, "poll": 1, "removable": [P0["url"], D0["url"]]}
    result = ra.converge(router, [P0, D0], "exact", options, sleep=clock.sleep, clock=clock)
    assert result["settled"] and not result["changed"] and router.calls == ["GET"] and clock.now == 0.0
    assert not ra.settled(listing(P0, P1, D0), [P0, D0], "exact", removable={P1["url"]})  # still to go: waited for
    assert ra.settled(listing(P0, D0, D1), [P0, D0], "exact", removable=set())


def converge_all(routers, desired, state, *, timeout=60, check_mode=False, removable=None):
    clock = Clock()
    options = {"worker_api_key": "wk", "timeout": timeout, "poll": 1, "check_mode": check_mode,
               "removable": removable}  # fmt: skip
    return ra.converge_all(routers, desired, state, options, sleep=clock.sleep, clock=clock), clock


def test_every_router_of_a_host_takes_the_change_and_one_wait_covers_them_all():
    a, b = FakeRouter([P0, D0, D1], lag=3), FakeRouter([P0, D0, D1], lag=3)
    result, clock = converge_all({"sglang-router-a": a, "sglang-router-b": b}, [D1], "absent")
    assert result["settled"] and result["changed"] and result["removed"] == [D1["url"]]
    assert [(r["name"], r["removed"], r["settled"]) for r in result["routers"]] == [
        ("sglang-router-a", [D1["url"]], True), ("sglang-router-b", [D1["url"]], True)]  # fmt: skip
    assert "DELETE id-30011" in a.calls and "DELETE id-30011" in b.calls
    # both changed before the first wait: the listings show it after 2 s, not 2 s per router
    assert clock.now == 2.0


def test_a_router_that_does_not_settle_is_named_and_the_others_are_not():
    a, b = FakeRouter([P0, D0], lag=1), FakeRouter([P0, D0], lag=1000)
    result, clock = converge_all({"a": a, "b": b}, [D1], "present", timeout=5)
    assert not result["settled"] and clock.now == 5.0
    assert [(r["name"], r["settled"]) for r in result["routers"]] == [("a", True), ("b", False)]


def test_routers_already_in_state_are_read_once_each():
    a, b = FakeRouter([P0, D0]), FakeRouter([P0, D0])
    result, clock = converge_all({"a": a, "b": b}, [P0, D0], "exact")
    assert not result["changed"] and result["settled"] and a.calls == b.calls == ["GET"] and clock.now == 0.0


def test_check_mode_over_several_routers_changes_nothing():
    a, b = FakeRouter([P0, D0]), FakeRouter([P0, P1, D0])
    result, _clock = converge_all({"a": a, "b": b}, [P0, D0], "exact", check_mode=True)
    assert result["changed"] and [r["removed"] for r in result["routers"]] == [[], [P1["url"]]]
    assert a.calls == b.calls == ["GET"]


# The end check's logic on one router's listing: name -> (listed, unhealthy, planned, foreign?, pending)
CONSISTENCY = {
    "exactly the plan, healthy": ([P0, D0], [], [P0, D0], 0, []),
    "a worker the plan does not have": ([P0, D0, D1], [], [P0, D0], 1, []),
    "a planned worker missing": ([P0], [], [P0, D0], 0, ["router r1@h1 does not list decode http://10.0.0.3:30001"]),
    "a planned worker unhealthy": ([P0, D0], [D0], [P0, D0], 0,
                                   ["router r1@h1 lists decode http://10.0.0.3:30001 not healthy"]),
    "an extra one and a missing one": ([P0, D1], [], [P0, D0], 1,
                                       ["router r1@h1 does not list decode http://10.0.0.3:30001"]),
    "no worker at all": ([], [], [P0, D0], 0, ["router r1@h1 does not list prefill http://10.0.0.2:30000",
                                               "router r1@h1 does not list decode http://10.0.0.3:30001"]),
}  # fmt: skip


@pytest.mark.parametrize("case", CONSISTENCY, ids=list(CONSISTENCY))
def test_consistency_problems(case):
    current, unhealthy, desired, n_foreign, pending = CONSISTENCY[case]
    found = ra.consistency_problems("r1@h1", listing(*current, unhealthy=unhealthy), desired)
    assert found["pending"] == pending
    assert len(found["foreign"]) == n_foreign
    if n_foreign:
        assert found["foreign"][0] == (
            "router r1@h1 lists decode http://10.0.0.4:30011 (id id-30011), which the plan does not have: take it out "
            "of that router (DELETE /workers/{id}) or declare its instance in the inventory"
        )


def check_all(routers, desired, timeout=30):
    clock = Clock()
    return ra.check_all(routers, desired, {"timeout": timeout, "poll": 1}, sleep=clock.sleep, clock=clock), clock


def test_the_end_check_fails_at_once_naming_the_router_that_lists_a_worker_the_plan_does_not_have():
    """Added by hand to one router of two: the check ends on the first reading, naming that router and worker,
    and takes nothing out."""
    a, b = FakeRouter([P0, D0]), FakeRouter([P0, D0, D1])
    result, clock = check_all({"sglang-router-a@h1": a, "sglang-router-b@h1": b}, [P0, D0])
    assert clock.now == 0.0 and a.calls == b.calls == ["GET"]
    assert result["problems"] == [
        "router sglang-router-b@h1 lists decode http://10.0.0.4:30011 (id id-30011), which the plan does not have: "
        "take it out of that router (DELETE /workers/{id}) or declare its instance in the inventory"
    ]


def test_the_end_check_waits_within_its_bound_for_a_planned_worker_to_become_healthy():
    a = FakeRouter([P0, D0])
    b = FakeRouter([P0])
    b.add(D0, "wk")  # registered in the background: listed at the 2nd reading (1 s), healthy at the 3rd (2 s)
    result, clock = check_all({"a": a, "b": b}, [P0, D0])
    assert result["problems"] == [] and clock.now == 2.0
    assert a.calls == ["GET"]  # a router that was consistent is not read again


def test_the_end_check_names_what_is_still_missing_at_its_bound():
    a = FakeRouter([P0])
    result, clock = check_all({"a": a}, [P0, D0], timeout=4)
    assert clock.now == 4.0 and result["problems"] == ["router a does not list decode http://10.0.0.3:30001"]


def test_the_module_reaches_every_router_given_as_unit_specs(http_router, capsys):
    """Two router unit specs of the plan on one loopback router (the stand-in serves both URLs' worker API): each
    takes the change, the result names each."""
    url, state = http_router
    routers = [{"unit": "sglang-router-a", "url": url, "impl": "sglang_router", "host": "h1"},
               {"unit": "sglang-router-b", "url": url + "/", "impl": "sglang_router", "host": "h1"}]  # fmt: skip
    rc, out = run_module({"routers": routers, "api_key": RK, "workers": [D1], "state": "present", "timeout": 10,
                          "poll": 0.1, "worker_api_key": "wk"}, capsys)  # fmt: skip
    assert rc == 0 and out["changed"] and out["added"] == [D1["url"]], out
    assert [r["name"] for r in out["routers"]] == ["sglang-router-a@h1", "sglang-router-b@h1"]
    # the first router posted it; the second found it listed by then or posted it too (the stand-in is one router)
    assert 1 <= len(state["posted"]) <= 2


def test_the_module_end_check_fails_naming_the_router_and_the_worker_added_by_hand(http_router, capsys):
    url, state = http_router
    routers = [{"unit": "sglang-router", "url": url, "impl": "sglang_router", "host": "h1"}]
    rc, out = run_module({"routers": routers, "api_key": RK, "workers": [P0, D0], "state": "consistent",
                          "timeout": 5, "poll": 0.1}, capsys)  # fmt: skip
    assert rc == 0 and not out["changed"] and out["problems"] == [], out
    with state["lock"]:  # a worker added by hand, outside the plan
        state["workers"][D1["url"]] = {"id": "w7", "url": D1["url"], "worker_type": "decode", "is_healthy": True}
    rc, out = run_module({"routers": routers, "api_key": RK, "workers": [P0, D0], "state": "consistent",
                          "timeout": 5, "poll": 0.1}, capsys)  # fmt: skip
    assert rc == 1 and out["waited"] < 1, out
    assert out["msg"] == (
        "the routers do not list exactly the planned workers, each healthy (checked for up to 5 s): router "
        "sglang-router@h1 lists decode http://10.0.0.4:30011 (id w7), which the plan does not have: take it out of "
        "that router (DELETE /workers/{id}) or declare its instance in the inventory"
    )
    assert D1["url"] in state["workers"]  # the check takes nothing out


def test_the_module_refuses_both_url_and_routers(capsys):
    rc, out = run_module({"url": "http://127.0.0.1:8000", "routers": [{"url": "http://127.0.0.1:8001"}],
                          "workers": [P0]}, capsys)  # fmt: skip
    assert rc == 1 and "mutually exclusive" in out["msg"], out
