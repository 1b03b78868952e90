# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The drain: an instance out of the router is read until it holds no request, before SIGTERM. One drain for both
paths that take an instance out of the router: the rolling batch (batch_restart.restart_one) and the retirement
(batch_restart.retire_one).

Its /metrics and its /v1/loads are read together until both say it holds no request, on every reading of the last
QUIET seconds (prom_text.in_flight_of is 0; None - neither answers as sglang - cannot tell and goes on), or
drain_timeout seconds pass. Both are snapshots sglang publishes (prom_text.in_flight): its gauges can read 0 for up
to 40 decode passes while a request runs, its load snapshot is fresher (every 15 decode passes, 50 ms while work
waits without a batch), so a 0 counts only when both say so.

The fetch, sleep and clock are injected: tests/unit/units/test_batch_restart.py,
tests/sandbox/pdsim/tests/test_pdsim_gauges.py.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring import prom_text
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health

POLL = 0.25  # seconds between two readings of a draining instance's metrics or of a starting one's health
# seconds a drain's readings must all say 0 before it ends. A 0 is not yet "drained": the scheduler's snapshots
# say 0 as its last request's result is processed, some milliseconds before the HTTP answer leaves the tokenizer
# manager (and on a loaded host longer); a request the router chose just before the worker left its listing is
# still on its way and in no queue yet. Both show up within this window, as a count or as the HTTP request SIGTERM
# would find in flight (tests/sandbox/pdsim/tests/test_pdsim_gauges.py).
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
