"""router_canary: the workers' /metrics, one request through the router (tried again while it is not answered 200),
the /metrics again, and the KV transfer report over the two readings.

The loop runs for real with fakes for what it touches: the router's answers (one per try, the last repeats), each
worker's /metrics pages (the first reading, then the second) and a clock that advances only when the loop sleeps.
The real fetch and POST are tested against an HTTP server on loopback, and the module once in-process.
"""

import json
import threading

import pytest
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_canary as rc
from ansible_collections.disagg.sglang.plugins.modules import router_canary as module
from samples import QuietHandler, loopback_fixture
from test_prom_text import page

ROUTER = "http://127.0.0.1:8000"
PREFILL = {"unit": "sglang-prefill0.service", "metrics_url": "http://127.0.0.1:30000/metrics", "role": "prefill"}
DECODE = {"unit": "sglang-decode0.service", "metrics_url": "http://127.0.0.1:30001/metrics", "role": "decode"}
OPTIONS = {"prompt": "The capital of France is", "max_new_tokens": 8, "api_key": "", "timeout": 10}

PARIS = (200, json.dumps({"text": " Paris.", "meta_info": {"id": "1"}}), None)
BREAKER_OPEN = (503, "circuit breaker open\n", None)
REFUSED = (None, "", "no answer: [Errno 111] Connection refused")
BEFORE = {PREFILL["unit"]: page(4, 80.0, 10.0), DECODE["unit"]: "sglang:num_transfer_failed_reqs_total 0"}
AFTER = {PREFILL["unit"]: page(5, 100.0, 13.0), DECODE["unit"]: "sglang:num_transfer_failed_reqs_total 0"}
ONE_TRANSFER = {"transfers": 1, "gb_s": 20.0, "latency_ms": 3.0, "failed": 0,
                "line": "KV transfer: 1 transfer(s), 20.00 GB/s, 3.00 ms mean; none failed"}  # fmt: skip


class FakeDeployment:
    """The router's answers to the request in order (the last repeats), each worker's /metrics readings in order
    (None: it does not answer), and a clock that only sleep moves."""

    def __init__(self, answers, readings=(BEFORE, AFTER)):
        self.answers = list(answers)
        self.readings = {unit: [r.get(unit) for r in readings] for unit in readings[0]}
        self.now = 1000.0
        self.slept = []
        self.posts = []
        self.lock = threading.Lock()

    def post(self, url, body, headers):
        self.posts.append((url, body, headers))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def fetch(self, url):
        unit = {w["metrics_url"]: w["unit"] for w in (PREFILL, DECODE)}[url]
        with self.lock:
            text = self.readings[unit].pop(0)
        return (None, "", "no answer: timed out") if text is None else (200, text, None)

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def clock(self):
        return self.now

    def run(self, workers=(PREFILL, DECODE), **options):
        return rc.run(ROUTER, list(workers), {**OPTIONS, **options}, fetch=self.fetch, post=self.post,
                      sleep=self.sleep, clock=self.clock)  # fmt: skip


# name: (router answers, timeout s) -> passed, status, reason, answer, tries, seconds slept
CASES = {
    "answered at the first try": ([PARIS], 10, (True, 200, "200", " Paris.", 1, 0)),
    "503 while the circuit breaker is open, then 200": (
        [BREAKER_OPEN, BREAKER_OPEN, BREAKER_OPEN, PARIS],
        10,
        (True, 200, "200", " Paris.", 4, 6),
    ),
    "the router not listening yet, then 200": ([REFUSED, PARIS], 10, (True, 200, "200", " Paris.", 2, 2)),
    "never 200: tried until the timeout, the last answer kept": (
        [BREAKER_OPEN],
        10,
        (False, 503, "HTTP 503", "circuit breaker open", 6, 10),
    ),
    "never answered": ([REFUSED], 3, (False, None, "no answer: [Errno 111] Connection refused", "", 3, 4)),
    "timeout shorter than a retry still tries once more": (
        [BREAKER_OPEN],
        1,
        (False, 503, "HTTP 503", "circuit breaker open", 2, 2),
    ),
    "an answer without text: the JSON": (
        [(200, json.dumps([{"text": "a"}, {"text": "b"}]), None)],
        10,
        (True, 200, "200", [{"text": "a"}, {"text": "b"}], 1, 0),
    ),
    "an answer that is not JSON: the body, trimmed": (
        [(200, "  Paris\n", None)],
        10,
        (True, 200, "200", "Paris", 1, 0),
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_request_through_the_router(case):
    answers, timeout, want = CASES[case]
    fake = FakeDeployment(answers)
    result = fake.run(timeout=timeout)
    got = (result["passed"], result["status"], result["reason"], result["answer"], result["tries"], sum(fake.slept))
    assert got == want
    assert set(fake.slept) <= {rc.RETRY_DELAY}
    assert result["seconds"] == sum(fake.slept)
    assert len(fake.posts) == result["tries"]


def test_the_request_is_sglangs_generate_greedy_with_the_prompt_and_the_token_limit():
    fake = FakeDeployment([PARIS])
    fake.run(prompt="Hello", max_new_tokens=3)
    url, body, _headers = fake.posts[0]
    assert url == f"{ROUTER}/generate"
    assert body == {"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}


@pytest.mark.parametrize(
    ("api_key", "want"),
    [
        ("", {"Content-Type": "application/json"}),
        (None, {"Content-Type": "application/json"}),
        ("s3cret", {"Content-Type": "application/json", "Authorization": "Bearer s3cret"}),
    ],
)
def test_the_bearer_header_is_sent_only_with_an_api_key(api_key, want):
    fake = FakeDeployment([BREAKER_OPEN, PARIS])
    fake.run(api_key=api_key)
    assert [headers for _url, _body, headers in fake.posts] == [want, want]


NO_TRANSFER = "KV transfer: no transfer recorded in the prefill workers' metrics; none failed"
SIMULATED = (
    "KV transfer (simulated: the workers run a simulator, not sglang): 1 transfer(s), 20.00 GB/s, 3.00 ms mean; "
    "none failed"
)
# name: (metrics readings before, after, simulated) -> report (keys given), unanswered
REPORTS = {
    "one transfer between the readings": ((BEFORE, AFTER), False, (ONE_TRANSFER, [])),
    "a failed bootstrap counted by decode": (
        (BEFORE, {**AFTER, DECODE["unit"]: "sglang:num_bootstrap_failed_reqs_total 1"}),
        False,
        ({"transfers": 1, "failed": 1}, []),
    ),
    "a worker whose metrics never answer counts as an empty page": (
        ({**BEFORE, DECODE["unit"]: None}, {**AFTER, DECODE["unit"]: None}),
        False,
        (ONE_TRANSFER, [DECODE["unit"]]),
    ),
    "a prefill that did not answer before counts from 0": (
        ({**BEFORE, PREFILL["unit"]: None}, AFTER),
        False,
        ({"transfers": 5, "gb_s": 20.0}, [PREFILL["unit"]]),
    ),
    "no transfer recorded": ((BEFORE, BEFORE), False, ({"transfers": 0, "line": NO_TRANSFER}, [])),
    "the line says simulated": ((BEFORE, AFTER), True, ({"line": SIMULATED}, [])),
}


@pytest.mark.parametrize("case", REPORTS, ids=list(REPORTS))
def test_kv_report_over_the_readings_before_and_after(case):
    readings, simulated, (want, unanswered) = REPORTS[case]
    fake = FakeDeployment([PARIS], readings)
    result = fake.run(simulated=simulated)
    assert {key: result["report"][key] for key in want} == want
    assert result["unanswered"] == unanswered
    assert all(not texts for texts in fake.readings.values()), "each worker is read once before and once after"


def test_metrics_are_read_again_after_a_request_that_never_passed():
    fake = FakeDeployment(
        [BREAKER_OPEN], (BEFORE, {**AFTER, DECODE["unit"]: "sglang:num_transfer_failed_reqs_total 2"})
    )
    result = fake.run(timeout=2)
    assert (result["passed"], result["report"]["failed"]) == (False, 2)


def test_no_worker_no_reading():
    result = FakeDeployment([PARIS], ({},)).run(workers=())
    assert (result["passed"], result["report"]["transfers"], result["unanswered"]) == (True, 0, [])


# A router and two workers on loopback, for the real fetch and POST.
class _Handler(QuietHandler):
    def do_GET(self):
        self.answer(*{"/p/metrics": (200, page(1, 20.0, 3.0).encode())}.get(self.path, (404, b"no route")))

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/generate" or self.headers.get("Authorization") != "Bearer canary-key":
            self.answer(401, b"unauthorized")
            return
        text = f"{request['text']} ({request['sampling_params']['max_new_tokens']} tokens)"
        self.answer(200, json.dumps({"text": text}).encode())


server = loopback_fixture(_Handler)


def test_the_real_http_calls(server):
    workers = [{"unit": "p", "metrics_url": f"{server}/p/metrics"}, {"unit": "gone", "metrics_url": f"{server}/x"}]
    result = rc.run(server, workers, {**OPTIONS, "api_key": "canary-key", "max_new_tokens": 2})
    assert (result["passed"], result["answer"], result["tries"]) == (True, "The capital of France is (2 tokens)", 1)
    assert (result["report"]["transfers"], result["unanswered"]) == (0, ["gone"])  # the same page twice
    status, body, _error = rc.post(f"{server}/generate", rc.request_body("x", 1), rc.request_headers(""))
    assert (status, body) == (401, "unauthorized")


def run_module(args, capsys):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_module_fails_naming_the_router_the_last_status_and_the_tries(capsys, server):
    workers = [{"unit": "p", "metrics_url": f"{server}/p/metrics"}]
    rc_, out = run_module({"url": server, "api_key": "wrong-key", "timeout": 0, "workers": workers}, capsys)
    assert (rc_, out["failed"], out["tries"], out["status"]) == (1, True, 1, 401)
    want = f"no request through the router at {server} was answered 200 within 0 s (1 tries, the last: HTTP 401: "
    assert out["msg"].startswith(want + "unauthorized); KV transfer: ")
    assert "wrong-key" not in json.dumps(out)


def test_module_passes_with_the_answer_and_changes_nothing(capsys, server):
    workers = [{"unit": "p", "metrics_url": f"{server}/p/metrics"}]
    rc_, out = run_module({"url": server, "api_key": "canary-key", "workers": workers}, capsys)
    assert (rc_, out["changed"], out["passed"]) == (0, False, True)
    assert out["answer"] == "The capital of France is (8 tokens)"


def test_module_sends_nothing_in_check_mode(capsys, monkeypatch):
    monkeypatch.setattr(rc, "run", lambda *args, **kwargs: pytest.fail("the canary ran in check mode"))
    rc_, out = run_module({"url": ROUTER, "_ansible_check_mode": True}, capsys)
    assert (rc_, out["changed"], out["skipped"]) == (0, False, True)
    assert "check mode" in out["msg"]


def test_module_refuses_a_worker_without_its_metrics_url(capsys):
    rc_, out = run_module({"url": ROUTER, "workers": [{"unit": "p"}]}, capsys)
    assert (rc_, out["msg"]) == (1, "workers [0]: each needs a unit and a metrics_url")


@pytest.mark.parametrize(
    ("decode_before", "others"),
    [
        ("", 0),  # no sglang gauges: nothing known to be held
        ("sglang:num_running_reqs 0\nsglang:num_decode_transfer_queue_reqs 0\n", 0),  # idle: failures are this one's
        ("sglang:num_running_reqs 1\nsglang:num_decode_transfer_queue_reqs 3\n", 4),  # decodes still waiting for KV
    ],
)
def test_the_requests_the_workers_held_when_the_canary_began_are_counted(decode_before, others):
    """A decode still waiting for the KV of a request cut off earlier gives up later and counts a failed bootstrap,
    which can fall in the canary's window: the role says such failures rather than fail on them when the workers
    held requests as the canary began (in_flight_before, from their scheduler gauges)."""
    failed_after = {**AFTER, DECODE["unit"]: "sglang:num_bootstrap_failed_reqs_total 3"}
    fake = FakeDeployment([PARIS], ({**BEFORE, DECODE["unit"]: decode_before}, failed_after))
    result = fake.run()
    assert (result["passed"], result["report"]["failed"], result["in_flight_before"]) == (True, 3, others)
