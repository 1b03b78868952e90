"""The collection's Prometheus text parser, and what it reads: the KV transfer line after the canary (sglang 0.5.23's
series read back from two /metrics pages), the requests in flight."""

import math

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.monitoring import prom_text
from samples import KV_LABELS as LABELS
from samples import kv_page as page


@pytest.mark.parametrize(
    ("before", "after", "want"),
    [
        ({}, {"p": page(1, 20.0, 3.5)}, {"transfers": 1, "gb_s": 20.0, "latency_ms": 3.5, "failed": 0}),
        (
            {"p": page(4, 80.0, 10.0)},
            {"p": page(6, 120.0, 16.0), "d": "sglang:num_transfer_failed_reqs_total 1"},
            {"transfers": 2, "gb_s": 20.0, "latency_ms": 3.0, "failed": 1},
        ),
        ({"p": page(3, 1.0, 1.0)}, {"p": page(3, 1.0, 1.0)}, {"transfers": 0, "gb_s": None, "latency_ms": None}),
    ],
)
def test_kv_transfer_report_reads_the_delta(before, after, want):
    report = prom_text.kv_transfer_report(before, after)
    assert {k: report[k] for k in want} == want


def test_the_line_says_simulated_and_failed():
    line = prom_text.kv_transfer_report({}, {"p": page(1, 5.0, 2.0, failed=2)}, simulated=True)["line"]
    assert line == (
        "KV transfer (simulated: the workers run a simulator, not sglang): "
        "1 transfer(s), 5.00 GB/s, 2.00 ms mean; 2 failed"
    )


def test_samples_skip_comments_and_keep_labels():
    (name, labels, value), *_rest = prom_text.samples(page(1, 2.0, 3.0).split("\n", 2)[2])
    assert name == "sglang:kv_transfer_speed_gb_s_bucket" and labels["le"] == "+Inf" and value == 1.0


# The one parser of the collection: the KV transfer line, the drain check and the bench report
# (roles/sglang_bench/files/bench_report.py, which leaves out the samples that are not finite) all read it.
@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("sglang:num_requests_total 3", [("sglang:num_requests_total", {}, 3.0)]),
        ('sglang:token_usage{tp_rank="0"} 0.5 1712345678000', [("sglang:token_usage", {"tp_rank": "0"}, 0.5)]),
        ('x{model_name="a \\"b\\", c",le="+Inf"} 1e+06', [("x", {"model_name": 'a \\"b\\", c', "le": "+Inf"}, 1e6)]),
        ("  indented_series 2", [("indented_series", {}, 2.0)]),
        ("# TYPE x counter", []),
        ("x not-a-number", []),
        ("{no_name} 1", []),
        ("", []),
    ],
)
def test_samples_of_one_line(line, want):
    assert prom_text.samples(line) == want


def test_samples_keep_values_that_are_not_finite_for_the_reader_to_judge():
    values = [value for _name, _labels, value in prom_text.samples("a +Inf\nb -Inf\nc NaN")]
    assert values[:2] == [math.inf, -math.inf] and math.isnan(values[2])


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", None),  # metrics off: cannot tell
        ("# HELP x\nsome_other_series 3", None),
        (f"sglang:num_running_reqs{{{LABELS}}} 0\nsglang:num_queue_reqs{{{LABELS}}} 0", 0),
        (f"sglang:num_running_reqs{{{LABELS}}} 2\nsglang:num_queue_reqs{{{LABELS}}} 1", 3),
        # a PD worker holds requests in its bootstrap and transfer queues too: not drained yet
        (f"sglang:num_running_reqs{{{LABELS}}} 0\nsglang:num_decode_transfer_queue_reqs{{{LABELS}}} 4", 4),
        (f"sglang:num_prefill_inflight_queue_reqs{{{LABELS}}} 1\nsglang:num_prefill_bootstrap_queue_reqs 1", 2),
        # a series of several label sets (e.g. data-parallel ranks): their sum
        ('sglang:num_running_reqs{tp_rank="0"} 1\nsglang:num_running_reqs{tp_rank="1"} 1', 2),
    ],
)
def test_in_flight_counts_what_a_worker_still_holds(text, want):
    assert prom_text.in_flight(text) == want


def _loads(*ranks):
    """A /v1/loads answer: one (running, waiting, prefill in flight) per DP rank."""
    return {
        "loads": [
            {"dp_rank": i, "num_running_reqs": r, "num_waiting_reqs": w,
             "disaggregation": {"prefill_inflight_queue_reqs": f}}
            for i, (r, w, f) in enumerate(ranks)
        ]
    }  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        (_loads((0, 0, 0)), 0),
        (_loads((2, 1, 0)), 3),  # waiting holds the PD bootstrap, prealloc and transfer queues
        (_loads((0, 0, 1)), 1),  # a prefill's request whose KV is still being sent
        (_loads((1, 0, 0), (0, 2, 0)), 3),  # data-parallel ranks: their sum
        ('{"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0}]}', 1),  # as JSON text (core)
        ('{"detail": "Not Found"}', None),  # an sglang without /v1/loads
        ('{"error": "Unauthorized"}', None),  # the key was missing
        ({"loads": []}, None),
        ("{not json", None),
    ],
)
def test_in_flight_reads_a_v1_loads_answer(answer, want):
    assert prom_text.in_flight(answer) == want


def test_in_flight_of_believes_the_largest_reading():
    assert prom_text.in_flight_of(0, 2) == 2  # a gauge stale at 0 is outvoted by the load snapshot
    assert prom_text.in_flight_of(None, 0) == 0
    assert prom_text.in_flight_of(None, None) is None


@pytest.mark.parametrize(
    ("left", "where", "want"),
    [
        (0, "", "drained (no request in flight)"),
        (None, "", "cannot tell (no sglang metrics; sglang drains on SIGTERM itself)"),
        (
            None,
            "http://h:1/metrics",
            "cannot tell (no sglang metrics at http://h:1/metrics; sglang drains on SIGTERM itself)",
        ),
        (3, "", "still 3 request(s) in flight after 30 s: sglang drains them on SIGTERM, up to the unit stop timeout"),
    ],
)
def test_drain_said_names_how_an_instance_drained(left, where, want):
    assert prom_text.drain_said(left, 30, where) == want
