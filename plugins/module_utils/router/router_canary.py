# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""The router's canary in one call (issue 24: it was five remote module runs): every worker's /metrics read, one
request through the router, the /metrics read again, and the KV transfers the workers counted in between
(prom_text.kv_transfer_report). One loop whose HTTP calls, sleep and clock are injected, so every outcome is tested
without a router (tests/unit/test_router_canary.py).

The request is sglang's native POST /generate ({"text", "sampling_params"}), answered {"text": ..., "meta_info"}.
sglang-router 0.3.2 and SMG 1.13 answer 503 while their circuit breaker is open after a worker restart (the breaker
of the healthy prefill opens too), so a try that is not a 200 is tried again every RETRY_DELAY seconds until the
timeout passes.
"""

import json
import time

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring.prom_text import in_flight, kv_transfer_report
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health

METRICS_TIMEOUT = 10  # seconds for one worker's /metrics
REQUEST_TIMEOUT = 60  # seconds for one try of the request (a cold first generation)
RETRY_DELAY = 2  # seconds between two tries
ANSWER_LIMIT = service_health.BODY_LIMIT  # characters of an answer that is not JSON, or of the last failed one


def fetch_metrics(url):
    """(status, text, error) of one worker's /metrics page."""
    return service_health.fetch(url, METRICS_TIMEOUT, limit=service_health.METRICS_LIMIT)


def post(url, body, headers):
    """(status, text, error) of one POST of BODY (a dict, sent as JSON) to url."""
    return service_health.fetch(url, REQUEST_TIMEOUT, data=json.dumps(body), headers=headers)


def request_body(prompt, max_new_tokens):
    """sglang's /generate body: the prompt, greedy (temperature 0), at most max_new_tokens."""
    return {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}


def request_headers(api_key):
    """JSON, and the router's key as a bearer token when it has one (the router refuses a request without it)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def answer_of(text):
    """What the request answered: the JSON's `text` (sglang's generated text), else the JSON, else the raw body."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:ANSWER_LIMIT]
    return data["text"] if isinstance(data, dict) and "text" in data else data


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
    """The canary: workers' /metrics, one request through the router at url, the /metrics again.

    workers: [{unit, metrics_url, ...}] (a unit spec of the plan serves as it is). options: prompt, max_new_tokens,
    api_key, timeout (seconds the request may keep failing), simulated (the workers run a simulator: said in the
    report's line). Returns {passed, status, reason, answer, tries, seconds, report, unanswered, in_flight_before}:
    in_flight_before the requests the workers held when it began; passed when the
    router answered 200; report is kv_transfer_report's over the two readings; unanswered the units whose /metrics
    did not answer 200 in either reading. The metrics are read again after a request that never passed too, so a
    failure shows what the workers counted meanwhile.
    """
    workers = [{"unit": w["unit"], "metrics_url": w["metrics_url"]} for w in workers or []]
    before, missed_before = read_metrics(workers, fetch=fetch)
    status, text, reason, tries, seconds = send(
        url.rstrip("/") + "/generate",
        request_body(options["prompt"], options["max_new_tokens"]),
        request_headers(options.get("api_key")),
        options["timeout"],
        post=post,
        sleep=sleep,
        clock=clock,
    )
    after, missed_after = read_metrics(workers, fetch=fetch)
    passed = status == 200
    # Requests the workers held when the canary began (their scheduler gauges, prom_text.in_flight): a failure they
    # count during the window may be theirs (a decode still waiting for a bootstrap that will never come gives up
    # later and counts it), so it cannot be laid on this request.
    others = sum(in_flight(text) or 0 for text in before.values())
    return {
        "in_flight_before": others,
        "passed": passed,
        "status": status,
        "reason": reason,
        "answer": answer_of(text) if passed else (text or "").strip()[:ANSWER_LIMIT],
        "tries": tries,
        "seconds": seconds,
        "report": kv_transfer_report(before, after, simulated=bool(options.get("simulated"))),
        "unanswered": sorted(set(missed_before) | set(missed_after)),
    }
