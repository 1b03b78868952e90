# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Prometheus text exposition read back: samples of a /metrics page, and what sglang's KV transfer series say.

The series are sglang 0.5.23's (sglang/srt/observability/metrics_collector.py; their list is kept in
tests/fixtures/metrics/sglang-0.5.23-metrics.txt): on prefill the histograms sglang:kv_transfer_speed_gb_s and
sglang:kv_transfer_latency_ms, on both roles the counters sglang:num_transfer_failed_reqs_total and
sglang:num_bootstrap_failed_reqs_total.
"""

import json
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


def in_flight(page):
    """Requests a worker still holds, from its /metrics page (the sum of IN_FLIGHT_SERIES) or from its /v1/loads
    answer (a dict, or its JSON text: loads_in_flight); None when it has none of them (metrics off, not an sglang
    page, an error answer), so a caller can tell "drained" from "cannot tell".

    Both are snapshots that sglang 0.5.23's scheduler publishes, not live counts
    (sglang/srt/managers/scheduler_components/metrics_reporter.py, scheduler.py publish_load_snapshot): the gauges
    are written at each prefill batch, every 40 decode passes (--decode-log-interval) and when the scheduler is fully
    idle, so a decode's gauges read 0 while requests it took since its last report decode, and a prefill's while its
    requests wait in the bootstrap queue; the load snapshot is written at each prefill batch, every 15 decode passes
    (--load-snapshot-publish-interval), every 50 ms while work waits with no batch to run, and at once when idle. A
    drain reads both and believes 0 only when both say 0 (in_flight_of)."""
    if isinstance(page, dict) or (isinstance(page, str) and page.lstrip().startswith("{")):
        return loads_in_flight(page)
    found = [value for name, _labels, value in samples(page) if name in IN_FLIGHT_SERIES]
    return round(sum(found)) if found else None


def loads_in_flight(answer):
    """Requests a worker still holds, from its /v1/loads answer (sglang/srt/entrypoints/v1_loads.py, fields of
    sglang/srt/managers/scheduler_components/load_inquirer.py get_loads): per DP rank num_running_reqs +
    num_waiting_reqs (the waiting queue and the PD bootstrap, prealloc, transfer and retracted queues) + a prefill's
    disaggregation.prefill_inflight_queue_reqs (requests whose KV is still being sent); None when ANSWER is not such an
    answer (an error, an older sglang without the route)."""
    if isinstance(answer, str):
        try:
            answer = json.loads(answer)
        except ValueError:
            return None
    loads = answer.get("loads") if isinstance(answer, dict) else None
    if not isinstance(loads, list) or not loads:
        return None
    total = 0
    for load in loads:
        if not isinstance(load, dict) or not isinstance(load.get("num_running_reqs"), (int, float)):
            return None
        disagg = load.get("disaggregation") if isinstance(load.get("disaggregation"), dict) else {}
        total += load["num_running_reqs"] + (load.get("num_waiting_reqs") or 0)
        total += disagg.get("prefill_inflight_queue_reqs") or 0
    return round(total)


def in_flight_of(*readings):
    """One drain reading from several (in_flight of /metrics, of /v1/loads): the most any of them counts, None when
    none can tell. A snapshot that is stale at 0 is outvoted by one that still counts the request: the gauges read 0
    while a decode's request runs its first 40 passes, and a PD prefill's load snapshot is written as its batch's
    result comes in, before the batch joins the in-flight queue, which its gauges count (scheduler.py
    process_batch_result, disaggregation/prefill.py report_prefill_stats) until the scheduler's next idle look. A
    stale non-zero does not hold a drain either: on a PD worker every report counts a running request (the PD
    prefill's its forward batch, the decode's its decode batch), and the fully idle scheduler rewrites a running gauge
    that is stale at once (metrics_reporter.py _maybe_log_idle_metrics), publishing its load snapshot too."""
    known = [left for left in readings if left is not None]
    return max(known) if known else None


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
