# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Prometheus text exposition read back: samples of a /metrics page, and what sglang's KV transfer series say.

The series are sglang 0.5.23's (sglang/srt/observability/metrics_collector.py; their list is kept in
tests/fixtures/metrics/sglang-0.5.23-metrics.txt): on prefill the histograms sglang:kv_transfer_speed_gb_s and
sglang:kv_transfer_latency_ms, on both roles the counters sglang:num_transfer_failed_reqs_total and
sglang:num_bootstrap_failed_reqs_total.
"""

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text):
    """[(name, {label: value}, float)] of a Prometheus text page (comments and bad lines left out)."""
    found = []
    for line in (text or "").splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        found.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return found


def total(text, name):
    """Sum of every sample of one series (all label sets)."""
    return sum(value for sample, _labels, value in samples(text) if sample == name)


KV_SERIES = {
    "speed_sum": "sglang:kv_transfer_speed_gb_s_sum",
    "speed_count": "sglang:kv_transfer_speed_gb_s_count",
    "latency_sum": "sglang:kv_transfer_latency_ms_sum",
    "latency_count": "sglang:kv_transfer_latency_ms_count",
    "transfer_failed": "sglang:num_transfer_failed_reqs_total",
    "bootstrap_failed": "sglang:num_bootstrap_failed_reqs_total",
}


def kv_transfer_report(before, after, simulated=False):
    """What the KV transfers between two readings of the workers' /metrics were.

    before/after: {unit: metrics text} read before and after the requests (a unit missing before counts as 0).
    Returns {transfers, gb_s, latency_ms, failed, line}: mean speed and latency of the transfers in between, the
    failed transfers and bootstraps, and one line to print.
    """
    delta = dict.fromkeys(KV_SERIES, 0.0)
    for unit, text in after.items():
        for key, name in KV_SERIES.items():
            delta[key] += total(text, name) - total(before.get(unit, ""), name)
    transfers = round(delta["speed_count"])
    gb_s = delta["speed_sum"] / delta["speed_count"] if delta["speed_count"] > 0 else None
    latency = delta["latency_sum"] / delta["latency_count"] if delta["latency_count"] > 0 else None
    failed = round(delta["transfer_failed"] + delta["bootstrap_failed"])
    label = " (simulated: the workers run a simulator, not sglang)" if simulated else ""
    if transfers:
        line = f"KV transfer{label}: {transfers} transfer(s), {gb_s:.2f} GB/s, {latency:.2f} ms mean"
    else:
        line = f"KV transfer{label}: no transfer recorded in the prefill workers' metrics"
    line += f"; {failed} failed" if failed else "; none failed"
    return {"transfers": transfers, "gb_s": gb_s, "latency_ms": latency, "failed": failed, "line": line}


# The scheduler gauges of sglang 0.5.23 (sglang/srt/observability/metrics_collector.py SchedulerStats) that count a
# request the worker still holds: running, waiting, and on a PD pair the bootstrap and transfer queues of each role.
IN_FLIGHT_SERIES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)


def in_flight(text):
    """Requests a worker still holds, from its /metrics page: the sum of IN_FLIGHT_SERIES; None when the page has
    none of them (metrics off, or not an sglang page), so a caller can tell "drained" from "cannot tell"."""
    found = [value for name, _labels, value in samples(text) if name in IN_FLIGHT_SERIES]
    return round(sum(found)) if found else None


def drain_said(left, timeout, where=""):
    """How an instance taken out of the router drained, in one phrase: LEFT is in_flight()'s reading after the
    drain wait (0, None or a count), TIMEOUT the wait's seconds, WHERE the metrics page (for "cannot tell")."""
    if left == 0:
        return "drained (no request in flight)"
    if left is None:
        page = f" at {where}" if where else ""
        return f"cannot tell (no sglang metrics{page}; sglang drains on SIGTERM itself)"
    return (
        f"still {left} request(s) in flight after {timeout} s: sglang drains them on SIGTERM, up to the unit stop "
        "timeout"
    )
