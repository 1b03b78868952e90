"""router_canary: the workers' /metrics, one request per API route through the router (each tried again while it
is not answered 200), the /metrics again, and the KV transfer report over the two readings.

The retry loop runs for real with fakes for what it touches: the router's answers (one per try, the last repeats),
each worker's /metrics pages (the first reading, then the second) and a clock that advances only when the loop
sleeps. What each route must answer is a table run against a router on loopback (real HTTP: chunked SSE, GET and
POST, the bearer header), and the module once in-process.
"""

import json
import threading
from typing import ClassVar

import pytest
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_canary as rc
from ansible_collections.disagg.sglang.plugins.modules import router_canary as module
from samples import QuietHandler, loopback_server
from samples import kv_page as page

from tests.http_client import free_port

ROUTER = "http://127.0.0.1:8000"
PREFILL = {"unit": "sglang-prefill0.service", "metrics_url": "http://127.0.0.1:30000/metrics", "role": "prefill"}
DECODE = {"unit": "sglang-decode0.service", "metrics_url": "http://127.0.0.1:30001/metrics", "role": "decode"}
OPTIONS = {"prompt": "The capital of France is", "max_new_tokens": 8, "api_key": "", "timeout": 10}

PARIS = (200, json.dumps({"text": " Paris.", "meta_info": {"id": "1", "completion_tokens": 2}}), None)
BREAKER_OPEN = (503, "circuit breaker open\n", None)
REFUSED = (None, "", "no answer: [Errno 111] Connection refused")
BEFORE = {PREFILL["unit"]: page(4, 80.0, 10.0), DECODE["unit"]: "sglang:num_transfer_failed_reqs_total 0"}
AFTER = {PREFILL["unit"]: page(5, 100.0, 13.0), DECODE["unit"]: "sglang:num_transfer_failed_reqs_total 0"}
ONE_TRANSFER = {"transfers": 1, "gb_s": 20.0, "latency_ms": 3.0, "failed": 0,
                "line": "KV transfer: 1 transfer(s), 20.00 GB/s, 3.00 ms mean; none failed"}  # fmt: skip


def sse(*events):
    """An SSE body of EVENTS (dicts, or "[DONE]") as sglang's OpenAI layer streams it."""
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)


def chunk(content=None, finish=None, usage=None, role=None):
    choices = [] if usage else [{"index": 0, "delta": {"role": role, "content": content}, "finish_reason": finish}]
    return {"object": "chat.completion.chunk", "choices": choices, "usage": usage}


def chat_answer(*contents, tokens=2):
    choices = [{"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "length"}
               for i, c in enumerate(contents)]  # fmt: skip
    return json.dumps({"object": "chat.completion", "choices": choices, "usage": {"completion_tokens": tokens}})


USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
STREAM = sse(
    chunk("", role="assistant"), chunk(" Pa"), chunk("ris"), chunk(None, "length"), chunk(usage=USAGE), "[DONE]"
)
# What a router that serves every route answers (status, body, error), by route name (rc.ROUTES)
GOOD = {
    rc.GENERATE: PARIS,
    rc.MODELS: (200, json.dumps({"object": "list", "data": [{"id": "dsv4", "object": "model"}]}), None),
    rc.COMPLETIONS: (200, json.dumps({"choices": [{"index": 0, "text": " Paris"}], "usage": USAGE}), None),
    rc.CHAT: (200, chat_answer(" Paris"), None),
    rc.CHAT_STREAM: (200, STREAM, None),
    rc.CHAT_N2: (200, chat_answer(" Paris", " Lyon", tokens=4), None),
}


def route_of(url, body):
    """The route name of a request: its path, and for a chat whether it streams or asks n: 2."""
    path = "/" + url.split("/", 3)[3]
    if path == "/v1/chat/completions":
        return rc.CHAT_STREAM if body.get("stream") else rc.CHAT_N2 if body.get("n") == 2 else rc.CHAT
    return path


class FakeDeployment:
    """The router's answers to the request in order (the last repeats), each worker's /metrics readings in order
    (None: it does not answer), and a clock that only sleep moves."""

    def __init__(self, answers, readings=(BEFORE, AFTER), loads=None):
        self.answers = list(answers)
        self.readings = {unit: [r.get(unit) for r in readings] for unit in readings[0]}
        self.loads = loads or {}  # unit: its /v1/loads answer (JSON text); a worker not named answers 404
        self.loads_headers = []
        self.now = 1000.0
        self.slept = []
        self.posts = []
        self.lock = threading.Lock()

    def post(self, url, body, headers):
        """/generate gets the answers in order; every other route a good answer at once."""
        self.posts.append((url, body, headers))
        if not url.endswith("/generate"):
            return GOOD[route_of(url, body)]
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def fetch(self, url, headers=None):
        by_loads = {rc.loads_url(w["metrics_url"]): w["unit"] for w in (PREFILL, DECODE)}
        if url in by_loads:
            with self.lock:
                self.loads_headers.append(headers)
            text = self.loads.get(by_loads[url])
            return (404, '{"detail": "Not Found"}', None) if text is None else (200, text, None)
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
    "200 without a generation is not retried, and fails": (
        [(200, json.dumps({"text": "", "meta_info": {"completion_tokens": 0}}), None)],
        10,
        (False, 200, "200 without a generation: meta_info.completion_tokens is not at least 1", "", 1, 0),
    ),
    "an answer that is not JSON: the body, trimmed": (
        [(200, "  Paris\n", None)],
        10,
        (False, 200, "the answer is not JSON", "Paris", 1, 0),
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
    assert len([url for url, _body, _headers in fake.posts if url.endswith("/generate")]) == result["tries"]
    assert result["failed_routes"] == ([] if want[0] else ["/generate"])


def test_the_request_is_sglangs_generate_greedy_with_the_prompt_and_the_token_limit():
    fake = FakeDeployment([PARIS])
    fake.run(prompt="Hello", max_new_tokens=3)
    url, body, _headers = fake.posts[0]
    assert url == f"{ROUTER}/generate"
    assert body == {"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
    assert [url for url, _body, _headers in fake.posts] == [f"{ROUTER}{path}" for path in (
        "/generate", "/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/chat/completions")]  # fmt: skip


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
    assert [headers for _url, _body, headers in fake.posts] == [want] * 6  # two tries of /generate, then 4 routes


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


# A router on loopback that serves each route as the class's ANSWERS say (SSE chunked, as the routers pass a decode's
# stream through), and a worker's /metrics, for the real HTTP calls.
class _Router(QuietHandler):
    protocol_version = "HTTP/1.1"
    answers: ClassVar[dict] = dict(GOOD)
    key = "canary-key"
    seen: ClassVar[list] = []

    def _answer(self, status, body, sse_=False):
        self.send_response(status)
        if sse_:
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in body.encode().splitlines(keepends=True):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def _route(self, body):
        if self.headers.get("Authorization") != f"Bearer {self.key}":
            self._answer(401, "unauthorized")
            return
        route = route_of(f"http://x{self.path}", body or {})
        self.seen.append((route, body))
        if route not in self.answers:
            self._answer(404, f"no route {self.path}")
            return
        status, text, _error = self.answers[route]
        self._answer(status, text, sse_=route == rc.CHAT_STREAM and status == 200)

    def do_GET(self):
        if self.path == "/p/metrics":
            self._answer(200, page(1, 20.0, 3.0))
        else:
            self._route(None)

    def do_POST(self):
        self._route(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(_Router, "answers", dict(GOOD))
    monkeypatch.setattr(_Router, "seen", [])
    with loopback_server(_Router) as url:
        yield url


def answer(status, body):
    return (status, body if isinstance(body, str) else json.dumps(body), None)


KV_ERROR = {"object": "error", "message": "KVTransferError(bootstrap_room=1): timed out"}
ONE_CHOICE = json.loads(chat_answer(" Paris"))
NO_CHOICES = {"choices": [], "usage": USAGE}
NO_USAGE = sse(chunk("", role="assistant"), chunk(" Paris"), chunk(None, "stop"), "[DONE]")
# name: (what the router answers instead of GOOD, parallel_sampling) -> {failed route: (reason, answer)}
ROUTE_CASES = {
    "every route answers a generation": ({}, False, {}),
    "n: 2 too, when asked for": ({}, True, {}),
    "a router without /v1/completions (404)": (
        {rc.COMPLETIONS: None}, False, {rc.COMPLETIONS: ("HTTP 404", "no route /v1/completions")}),
    "n: 2 as sglang 0.5.23's PD path answers it (500 after its waiting timeout)": (
        {rc.CHAT_N2: answer(500, KV_ERROR)}, True, {rc.CHAT_N2: ("HTTP 500", json.dumps(KV_ERROR))}),
    "n: 2 answered with one choice": (
        {rc.CHAT_N2: answer(200, chat_answer(" Paris"))}, True,
        {rc.CHAT_N2: ("200 without a generation: not 2 choice(s) with a message content", ONE_CHOICE)}),
    "a chat with no tokens": (
        {rc.CHAT: answer(200, chat_answer("", tokens=0))}, False,
        {rc.CHAT: ("200 without a generation: usage.completion_tokens is 0, not >= 1", "")}),
    "a chat without choices": (
        {rc.CHAT: answer(200, NO_CHOICES)}, False,
        {rc.CHAT: ("200 without a generation: not 1 choice(s) with a message content", NO_CHOICES)}),
    "a completion with a message instead of text": (
        {rc.COMPLETIONS: answer(200, chat_answer(" Paris"))}, False,
        {rc.COMPLETIONS: ("200 without a generation: not 1 choice(s) with a text", ONE_CHOICE)}),
    "a stream cut before data: [DONE]": (
        {rc.CHAT_STREAM: answer(200, sse(chunk(" Paris")))}, False,
        {rc.CHAT_STREAM: ("200 without a generation: the stream did not end with data: [DONE]",
                          [{"object": "chat.completion.chunk", "usage": None, "choices": [
                              {"index": 0, "delta": {"role": None, "content": " Paris"}, "finish_reason": None}]}])}),
    "a stream without its usage chunk (include_usage)": (
        {rc.CHAT_STREAM: answer(200, NO_USAGE)}, False,
        {rc.CHAT_STREAM: ("200 without a generation: no usage chunk with completion_tokens >= 1 "
                          "(stream_options.include_usage)", " Paris")}),
    "a stream without a finish reason": (
        {rc.CHAT_STREAM: answer(200, sse(chunk(" Paris"), chunk(usage=USAGE), "[DONE]"))}, False,
        {rc.CHAT_STREAM: ("200 without a generation: no chunk with a finish_reason", " Paris")}),
    "a stream line that is not JSON": (
        {rc.CHAT_STREAM: answer(200, "data: {oops\n\n")}, False,
        {rc.CHAT_STREAM: ("a data: line of the stream is not JSON", "data: {oops")}),
    "/generate 200 that is not JSON, and no model list": (
        {rc.GENERATE: answer(200, "Paris\n"), rc.MODELS: answer(200, {"object": "list", "data": []})}, False,
        {rc.GENERATE: ("the answer is not JSON", "Paris"),
         rc.MODELS: ("200 without a generation: no model in the list", {"object": "list", "data": []})}),
}  # fmt: skip


@pytest.mark.parametrize("case", ROUTE_CASES, ids=list(ROUTE_CASES))
def test_each_route_must_answer_a_generation(case, server):
    """Through real HTTP on loopback: every route the router serves is sent once (no retry: timeout 0), and the
    ones that did not answer a generation are named with why and what they answered."""
    instead, parallel, want = ROUTE_CASES[case]
    for route, got in instead.items():
        if got is None:
            del _Router.answers[route]
        else:
            _Router.answers[route] = got
    result = rc.run(server, [], {**OPTIONS, "api_key": "canary-key", "timeout": 0, "parallel_sampling": parallel})
    sent = [r["route"] for r in result["routes"]]
    assert sent == list(rc.ROUTES) if parallel else sent == [r for r in rc.ROUTES if r != rc.CHAT_N2]
    assert [route for route, _body in _Router.seen] == sent and all(r["tries"] == 1 for r in result["routes"])
    failed = {r["route"]: (r["reason"], r["answer"]) for r in result["routes"] if not r["passed"]}
    assert failed == want
    assert (result["passed"], result["failed_routes"]) == (not want, list(want))
    passed = {r["route"]: r["answer"] for r in result["routes"] if r["passed"]}
    expected = {rc.GENERATE: " Paris.", rc.MODELS: ["dsv4"], rc.COMPLETIONS: " Paris", rc.CHAT: " Paris",
                rc.CHAT_STREAM: " Paris", rc.CHAT_N2: [" Paris", " Lyon"]}  # fmt: skip
    assert passed == {route: expected[route] for route in passed}


def test_the_openai_requests_name_the_model_the_router_lists(server):
    """SMG 1.13 routes an OpenAI request by its model and answers 503 for a name no worker serves: the requests
    carry the first id of /v1/models, greedy, the token limit, and the stream asks for its usage chunk."""
    rc.run(server, [], {**OPTIONS, "api_key": "canary-key", "max_new_tokens": 3, "parallel_sampling": True})
    bodies = dict(_Router.seen)
    messages = [{"role": "user", "content": OPTIONS["prompt"]}]
    common = {"model": "dsv4", "max_tokens": 3, "temperature": 0}
    assert bodies[rc.COMPLETIONS] == {**common, "prompt": OPTIONS["prompt"]}
    assert bodies[rc.CHAT] == {**common, "messages": messages}
    assert bodies[rc.CHAT_STREAM] == {**common, "messages": messages, "stream": True,
                                      "stream_options": {"include_usage": True}}  # fmt: skip
    assert bodies[rc.CHAT_N2] == {**common, "messages": messages, "n": 2}
    assert bodies[rc.MODELS] is None  # a GET


def test_without_a_model_list_the_openai_requests_name_no_model(server):
    _Router.answers[rc.MODELS] = answer(404, "no route")
    result = rc.run(server, [], {**OPTIONS, "api_key": "canary-key", "timeout": 0})
    assert result["failed_routes"] == [rc.MODELS]
    assert all("model" not in body for route, body in _Router.seen if route not in (rc.GENERATE, rc.MODELS))


def test_a_router_that_does_not_listen_fails_every_route():
    result = rc.run(f"http://127.0.0.1:{free_port()}", [], {**OPTIONS, "timeout": 0})
    assert result["failed_routes"] == [r for r in rc.ROUTES if r != rc.CHAT_N2]
    assert all(r["status"] is None and r["reason"].startswith("no answer") for r in result["routes"])


def test_the_real_http_calls(server):
    workers = [{"unit": "p", "metrics_url": f"{server}/p/metrics"}, {"unit": "gone", "metrics_url": f"{server}/x"}]
    result = rc.run(server, workers, {**OPTIONS, "api_key": "canary-key", "max_new_tokens": 2})
    assert (result["passed"], result["answer"], result["tries"]) == (True, " Paris.", 1)
    assert (result["report"]["transfers"], result["unanswered"]) == (0, ["gone"])  # the same page twice
    status, body, _error = rc.post(f"{server}/generate", rc.request_body("x", 1), rc.request_headers(""))
    assert (status, body) == (401, "unauthorized")


def run_module(args, capsys):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_module_fails_naming_each_route_that_did_not_answer_and_what_it_answered(capsys, server):
    _Router.answers[rc.CHAT_STREAM] = answer(200, NO_USAGE)
    _Router.answers[rc.COMPLETIONS] = answer(501, "Not implemented in PD mode")
    workers = [{"unit": "p", "metrics_url": f"{server}/p/metrics"}]
    rc_, out = run_module({"url": server, "api_key": "canary-key", "timeout": 0, "workers": workers}, capsys)
    assert (rc_, out["failed"], out["failed_routes"]) == (1, True, [rc.COMPLETIONS, rc.CHAT_STREAM])
    assert out["msg"] == (
        f"the router at {server} did not answer a generation within 0 s on 2 of 5 routes: /v1/completions (1 tries, "
        "the last: HTTP 501: Not implemented in PD mode); /v1/chat/completions (stream) (1 tries, the last: 200 "
        "without a generation: no usage chunk with completion_tokens >= 1 (stream_options.include_usage):  Paris); "
        "KV transfer: no transfer recorded in the prefill workers' metrics; none failed"
    )


def test_module_never_shows_the_api_key(capsys, server):
    rc_, out = run_module({"url": server, "api_key": "wrong-key", "timeout": 0}, capsys)
    assert (rc_, out["status"], out["failed_routes"]) == (1, 401, [r for r in rc.ROUTES if r != rc.CHAT_N2])
    assert "wrong-key" not in json.dumps(out)


def test_module_passes_with_every_answer_and_changes_nothing(capsys, server):
    workers = [{"unit": "p", "metrics_url": f"{server}/p/metrics"}]
    rc_, out = run_module({"url": server, "api_key": "canary-key", "workers": workers, "parallel_sampling": True},
                          capsys)  # fmt: skip
    assert (rc_, out["changed"], out["passed"], out["answer"]) == (0, False, True, " Paris.")
    assert [(r["route"], r["answer"]) for r in out["routes"]][-1] == (rc.CHAT_N2, [" Paris", " Lyon"])
    prompt = "The capital of France is"
    assert out["lines"] == [  # what the role prints; the sandbox tests look for "The capital of France is -> "
        f"/generate: {prompt} ->  Paris.", '/v1/models -> ["dsv4"]', f"/v1/completions: {prompt} ->  Paris",
        f"/v1/chat/completions: {prompt} ->  Paris", f"/v1/chat/completions (stream): {prompt} ->  Paris",
        f'/v1/chat/completions (n: 2): {prompt} -> [" Paris", " Lyon"]',
    ]  # fmt: skip


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


def loads_answer(running, waiting=0):
    """A worker's /v1/loads answer (sglang 0.5.23 v1_loads.py), one DP rank."""
    return json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting,
                                  "disaggregation": {"prefill_inflight_queue_reqs": 0}}]})  # fmt: skip


def test_the_requests_held_count_what_the_load_snapshot_counts_where_the_published_gauges_read_0():
    """sglang's gauges are published every 40 decode passes (metrics_reporter.py): a decode's requests in their first
    passes read 0 there, and its /v1/loads (published at their arrival, then every 15 passes) counts them. The
    workers' key goes with /v1/loads, which sglang guards with it."""
    idle_gauges = "sglang:num_running_reqs 0\nsglang:num_decode_transfer_queue_reqs 0\n"
    failed_after = {**AFTER, DECODE["unit"]: "sglang:num_bootstrap_failed_reqs_total 1"}
    fake = FakeDeployment([PARIS], ({**BEFORE, DECODE["unit"]: idle_gauges}, failed_after),
                          loads={DECODE["unit"]: loads_answer(2, 1)})  # fmt: skip
    result = fake.run(worker_api_key="wk")
    assert (result["passed"], result["report"]["failed"], result["in_flight_before"]) == (True, 1, 3)
    assert fake.loads_headers == [{"Authorization": "Bearer wk"}] * 2  # both workers, before the routes only


def test_the_requests_held_take_the_larger_of_the_gauges_and_the_load_snapshot():
    busy_gauges = "sglang:num_running_reqs 4\n"
    fake = FakeDeployment(
        [PARIS],
        ({**BEFORE, DECODE["unit"]: busy_gauges}, AFTER),
        loads={DECODE["unit"]: loads_answer(1), PREFILL["unit"]: '{"detail": "Unauthorized"}'},
    )
    result = fake.run()
    assert result["in_flight_before"] == 4
    assert fake.loads_headers == [None, None]  # no workers' key: none sent
