# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""The router's canary in one call (it was five remote module runs): every worker's /metrics read, one
request per API route the router serves, the /metrics read again, and the KV transfers the workers counted in
between (prom_text.kv_transfer_report). One loop whose HTTP calls, sleep and clock are injected, so every outcome is
tested without a router (tests/unit/router/test_router_canary.py).

The routes (ROUTES, in order; a deploy that serves only /generate is not serving): sglang's native
POST /generate ({"text", "sampling_params"}, answered {"text", "meta_info"}), GET /v1/models (its first model's id
names the model of the OpenAI requests: SMG 1.13 routes them by it and answers 503 for a name no worker serves),
POST /v1/completions, POST /v1/chat/completions plain and streamed (SSE, stream_options.include_usage), and with
`parallel_sampling` /v1/chat/completions with n: 2. Each must answer a generation: 200 and at least one completion
token (n: 2: two choices), as sglang's OpenAI layer writes them (sglang/srt/entrypoints/openai/serving_completions.py,
serving_chat.py, protocol.py; /v1/models: entrypoints/http_server.py available_models).

n: 2 is off by default: sglang 0.5.23's PD path cannot serve n > 1. Its tokenizer sends the prefix warmup and every
sample as copies of the first sub-request, all with bootstrap_room[0] (sglang/srt/managers/io_struct.py
_normalize_bootstrap_params, tokenizer_manager.py _handle_batch_request; upstream fixes sgl-project/sglang PRs 24223,
26486, 30723, 40297 are not in 0.5.23), so the samples wait for KV that never comes until the 300 s waiting timeout
and the decode answers 500. Both routers try a 500 again (5 attempts), so one such request holds a client 25 min
and two open the prefill's circuit breaker: the check must not send it to a deployment that cannot serve it.

sglang-router 0.3.2 and SMG 1.13 answer 503 while their circuit breaker is open after a worker restart (the breaker
of the healthy prefill opens too), so a try that is not a 200 is tried again every RETRY_DELAY seconds until the
timeout (one deadline for all routes) passes; each route is tried at least once.
"""

import json
import time

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring.prom_text import (
    in_flight,
    in_flight_of,
    kv_transfer_report,
)
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health

METRICS_TIMEOUT = 10  # seconds for one worker's /metrics
REQUEST_TIMEOUT = 60  # seconds for one try of the request (a cold first generation)
RETRY_DELAY = 2  # seconds between two tries
ANSWER_LIMIT = service_health.BODY_LIMIT  # characters of an answer that is not JSON, or of the last failed one


def fetch_metrics(url, headers=None):
    """(status, text, error) of one worker's /metrics page, or of its /v1/loads answer (HEADERS: the workers' key)."""
    return service_health.fetch(url, METRICS_TIMEOUT, limit=service_health.METRICS_LIMIT, headers=headers)


def loads_url(metrics_url):
    """The /v1/loads URL beside a worker's /metrics URL, asking for the sections prom_text.in_flight reads."""
    return metrics_url[: -len("/metrics")] + "/v1/loads?include=core,disagg" if metrics_url.endswith("/metrics") else ""


def held(workers, before, worker_api_key, *, fetch=fetch_metrics):
    """The requests the workers held as the canary began: per worker the larger of its /metrics gauges (BEFORE, the
    reading of read_metrics) and its /v1/loads (read here, with WORKER_API_KEY: sglang asks the key of /v1/loads, not
    of /metrics), as the drain reads them (prom_text.in_flight_of). Both are published snapshots, and the gauges
    read 0 while a decode's request runs its first 40 decode passes (metrics_reporter.py report_decode_stats); the
    load snapshot counts it from its arrival (scheduler.py on_idle, publish_load_snapshot)."""
    headers = {"Authorization": f"Bearer {worker_api_key}"} if worker_api_key else None

    def one(worker):
        url = loads_url(worker["metrics_url"])
        status, text, _error = fetch(url, headers=headers) if url else (None, "", "")
        loads = in_flight(text or "") if status == 200 else None
        return in_flight_of(in_flight(before.get(worker["unit"]) or ""), loads) or 0

    return sum(service_health.at_once(one, workers))


def post(url, body, headers):
    """(status, text, error) of one POST of BODY (a dict, sent as JSON) to url; a GET when BODY is None."""
    return service_health.fetch(url, REQUEST_TIMEOUT, data=None if body is None else json.dumps(body), headers=headers)


def request_body(prompt, max_new_tokens):
    """sglang's /generate body: the prompt, greedy (temperature 0), at most max_new_tokens."""
    return {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}


def request_headers(api_key):
    """JSON, and the router's key as a bearer token when it has one (the router refuses a request without it)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


# --- the routes: a body for each, and what its 200 must hold ---


def openai_body(options, model, **extra):
    """An OpenAI request of the prompt: greedy, at most max_new_tokens; `model` only when the router named one."""
    body = {"max_tokens": options["max_new_tokens"], "temperature": 0, **extra}
    return {"model": model, **body} if model else body


def chat_body(options, model, **extra):
    return openai_body(options, model, messages=[{"role": "user", "content": options["prompt"]}], **extra)


def tokens_of(data):
    """usage.completion_tokens of an OpenAI answer (0 when it has none)."""
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else 0


def choices_of(data, key):
    """[text of each choice] (KEY: "text", or "message" for a chat's content), or None when the answer has none."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        return None
    texts = []
    for choice in sorted((c for c in choices if isinstance(c, dict)), key=lambda c: c.get("index", 0)):
        value = choice.get(key)
        if key == "message":
            value = value.get("content") if isinstance(value, dict) else None
        if not isinstance(value, str):
            return None
        texts.append(value)
    return texts


def judge_generate(data):
    """(answer, problem): sglang's /generate item, with its text and at least one completion token."""
    meta = data.get("meta_info") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return data, "no generated text"
    if not isinstance(meta, dict) or not meta.get("completion_tokens"):
        return data["text"], "meta_info.completion_tokens is not at least 1"
    return data["text"], None


def judge_models(data):
    """(answer, problem): the model ids of an OpenAI model list, at least one."""
    cards = data.get("data") if isinstance(data, dict) else None
    ids = [c.get("id") for c in cards if isinstance(c, dict)] if isinstance(cards, list) else []
    if not ids or not all(isinstance(i, str) and i for i in ids):
        return data, "no model in the list"
    return ids, None


def judge_choices(key, count):
    """A judge of an OpenAI answer: COUNT choices, each with its text (KEY), and at least COUNT completion tokens."""

    def judge(data):
        texts = choices_of(data, key)
        if texts is None or len(texts) != count:
            return data, f"not {count} choice(s) with a {'message content' if key == 'message' else 'text'}"
        if tokens_of(data) < count:
            return (texts if count > 1 else texts[0]), f"usage.completion_tokens is {tokens_of(data)}, not >= {count}"
        return (texts if count > 1 else texts[0]), None

    return judge


def sse_events(text):
    """The `data:` payloads of an SSE body: JSON objects, and "[DONE]"; None when a payload is not JSON."""
    events = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            events.append(payload)
            continue
        try:
            events.append(json.loads(payload))
        except ValueError:
            return None
    return events


def judge_chat_stream(events):
    """(answer, problem): a streamed chat that sent content deltas, a finish reason, a usage chunk with at least one
    completion token (stream_options.include_usage: serving_chat.py's last chunk, choices []) and data: [DONE]."""
    if not events or events[-1] != "[DONE]":
        return events, "the stream did not end with data: [DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    content = "".join(
        (c["choices"][0].get("delta") or {}).get("content") or ""
        for c in chunks
        if isinstance(c.get("choices"), list) and c["choices"] and isinstance(c["choices"][0], dict)
    )
    finished = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
    if not any(finished):
        return content, "no chunk with a finish_reason"
    if not any(tokens_of(c) >= 1 for c in chunks):
        return content, "no usage chunk with completion_tokens >= 1 (stream_options.include_usage)"
    return content, None


def generate_body(options, _model):
    return request_body(options["prompt"], options["max_new_tokens"])


def completion_body(options, model):
    return openai_body(options, model, prompt=options["prompt"])


def chat_stream_body(options, model):
    return chat_body(options, model, stream=True, stream_options={"include_usage": True})


def chat_n2_body(options, model):
    return chat_body(options, model, n=2)


GENERATE, MODELS, COMPLETIONS = "/generate", "/v1/models", "/v1/completions"
CHAT, CHAT_STREAM, CHAT_N2 = "/v1/chat/completions", "/v1/chat/completions (stream)", "/v1/chat/completions (n: 2)"
# name: (path, body of (options, model) or None for a GET, judge of the decoded answer, the answer is SSE)
ROUTES = {
    GENERATE: ("/generate", generate_body, judge_generate, False),
    MODELS: ("/v1/models", None, judge_models, False),
    COMPLETIONS: ("/v1/completions", completion_body, judge_choices("text", 1), False),
    CHAT: ("/v1/chat/completions", chat_body, judge_choices("message", 1), False),
    CHAT_STREAM: ("/v1/chat/completions", chat_stream_body, judge_chat_stream, True),
    CHAT_N2: ("/v1/chat/completions", chat_n2_body, judge_choices("message", 2), False),
}


def routes_of(options):
    """The route names the canary sends, in order: n: 2 only with options["parallel_sampling"]."""
    return [name for name in ROUTES if name != CHAT_N2 or options.get("parallel_sampling")]


def judged(route, status, text, reason):
    """(passed, reason, answer) of a route's last try."""
    if status != 200:
        return False, reason, (text or "").strip()[:ANSWER_LIMIT]
    _path, _body, judge, is_sse = ROUTES[route]
    if is_sse:
        data = sse_events(text)
        if data is None:
            return False, "a data: line of the stream is not JSON", text.strip()[:ANSWER_LIMIT]
    else:
        try:
            data = json.loads(text)
        except ValueError:
            return False, "the answer is not JSON", text.strip()[:ANSWER_LIMIT]
    answer, problem = judge(data)
    if problem:
        return False, f"200 without a generation: {problem}", answer
    return True, "200", answer


def read_metrics(workers, *, fetch=fetch_metrics):
    """({unit: /metrics text}, [units that did not answer 200]) of every worker at once (one thread each). A worker
    that does not answer gives "" (its series count as 0), as the uri loop with failed_when: false did."""

    def one(worker):
        status, text, _error = fetch(worker["metrics_url"])
        return worker["unit"], status, text if status is not None else ""

    readings = service_health.at_once(one, workers)
    return {unit: text for unit, _status, text in readings}, [unit for unit, status, _text in readings if status != 200]


def send(url, body, headers, timeout, *, post=post, sleep=time.sleep, clock=time.monotonic):
    """POSTs body to url until it answers 200 or `timeout` seconds passed (at least one try, RETRY_DELAY between
    two). Returns (status, text, reason, tries, seconds) of the last try; status None when nothing answered."""
    started = clock()
    deadline = started + timeout
    tries = 0
    while True:
        tries += 1
        status, text, error = post(url, body, headers)
        if status == 200 or clock() >= deadline:
            reason = "200" if status == 200 else error if status is None else f"HTTP {status}"
            return status, text, reason, tries, round(clock() - started, 3)
        sleep(RETRY_DELAY)


def run(url, workers, options, *, fetch=fetch_metrics, post=post, sleep=time.sleep, clock=time.monotonic):
    """The canary: workers' /metrics, one request per route through the router at url, the /metrics again.

    workers: [{unit, metrics_url, ...}] (a unit spec of the plan serves as it is). options: prompt, max_new_tokens,
    api_key, timeout (seconds the routes together may keep failing), parallel_sampling (send n: 2 too), simulated
    (the workers run a simulator: said in the report's line). Returns {passed, routes, failed_routes, status,
    reason, answer, tries, seconds, lines, report, unanswered, in_flight_before}: routes one {route, passed, status,
    reason, answer, tries, seconds} per route sent; failed_routes the names of those without a generation; status,
    reason, answer, tries and seconds those of /generate; lines one to print per route (said_lines); passed when
    every route answered a generation; report is kv_transfer_report's over the two readings; unanswered the units
    whose /metrics did not answer 200 in either reading; in_flight_before the requests the workers held when it
    began. The metrics are read again after a failure too, so it shows what the workers counted meanwhile.
    """
    workers = [{"unit": w["unit"], "metrics_url": w["metrics_url"]} for w in workers or []]
    base = url.rstrip("/")
    headers = request_headers(options.get("api_key"))
    before, missed_before = read_metrics(workers, fetch=fetch)
    others = held(workers, before, options.get("worker_api_key"), fetch=fetch)
    deadline = clock() + options["timeout"]
    model = None
    routes = []
    for route in routes_of(options):
        path, body, _judge, _sse = ROUTES[route]
        status, text, reason, tries, seconds = send(
            base + path,
            None if body is None else body(options, model),
            headers,
            max(0, deadline - clock()),
            post=post,
            sleep=sleep,
            clock=clock,
        )
        passed, reason, answer = judged(route, status, text, reason)
        if route == MODELS and passed:
            model = answer[0]  # the served model name: what SMG routes the OpenAI requests by
        routes.append({"route": route, "passed": passed, "status": status, "reason": reason, "answer": answer,
                       "tries": tries, "seconds": seconds})  # fmt: skip
    after, missed_after = read_metrics(workers, fetch=fetch)
    # Requests the workers held when the canary began (held: their gauges and load snapshots): a failure they count
    # during the window may be theirs (a decode still waiting for a bootstrap that will never come gives up later and
    # counts it), so it cannot be laid on this request.
    first = routes[0]
    return {
        "in_flight_before": others,
        "passed": all(r["passed"] for r in routes),
        "routes": routes,
        "failed_routes": [r["route"] for r in routes if not r["passed"]],
        "lines": said_lines(options["prompt"], routes),
        **{key: first[key] for key in ("status", "reason", "answer", "tries", "seconds")},
        "report": kv_transfer_report(before, after, simulated=bool(options.get("simulated"))),
        "unanswered": sorted(set(missed_before) | set(missed_after)),
    }


def said_lines(prompt, routes):
    """One line per route: `ROUTE: PROMPT -> ANSWER` (/v1/models: `ROUTE -> IDS`)."""
    lines = []
    for r in routes:
        answer = r["answer"] if isinstance(r["answer"], str) else json.dumps(r["answer"])
        asked = "" if r["route"] == MODELS else f": {prompt}"
        lines.append(f"{r['route']}{asked} -> {answer[:300]}")
    return lines


def failure_message(url, result, timeout):
    """One line naming every route that did not answer a generation, with what it answered, and the KV line."""
    parts = []
    for r in result["routes"]:
        if r["passed"]:
            continue
        answer = r["answer"] if isinstance(r["answer"], str) else json.dumps(r["answer"])
        parts.append(
            f"{r['route']} ({r['tries']} tries, the last: {r['reason']}{': ' if answer else ''}{answer[:300]})"
        )
    return (
        f"the router at {url} did not answer a generation within {timeout} s on {len(parts)} of "
        f"{len(result['routes'])} routes: {'; '.join(parts)}; {result['report']['line']}"
    )
