"""The simulator's /metrics: sglang 0.5.23's names, types and labels, values driven by the simulated requests.

Pure pieces (exposition format, the series table against the fixture list) run in-process; the PD pair
runs as two simulator subprocesses on 127.0.0.1 (bounded waits, stopped at teardown).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PDSIM = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PDSIM))

from sglang_pd_sim.collector import ALL_ROLES, SimMetrics, series_table  # noqa: E402
from sglang_pd_sim.promtext import Registry, go_float, parse_exposition  # noqa: E402

from tests.http_client import http  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "metrics" / "sglang-0.5.23-metrics.txt"
TOK = {"model_name", "engine_type"}
SCHED = TOK | {"tp_rank", "pp_rank", "moe_ep_rank"}
# what dashboards and alerts are built on: must be there, with these types and label names
REQUIRED = {
    "sglang:prompt_tokens_total": ("counter", TOK | {"is_streaming"}),
    "sglang:generation_tokens_total": ("counter", TOK | {"is_streaming"}),
    "sglang:num_running_reqs": ("gauge", SCHED),
    "sglang:num_queue_reqs": ("gauge", SCHED),
    "sglang:token_usage": ("gauge", SCHED),
    "sglang:time_to_first_token_seconds": ("histogram", TOK | {"is_streaming"}),
    "sglang:inter_token_latency_seconds": ("histogram", TOK),
    "sglang:request_time_per_output_token_seconds": ("histogram", TOK | {"is_streaming"}),
    "sglang:e2e_request_latency_seconds": ("histogram", TOK | {"is_streaming"}),
    "sglang:kv_transfer_speed_gb_s": ("histogram", SCHED),
    "sglang:kv_transfer_latency_ms": ("histogram", SCHED),
    "sglang:num_transfer_failed_reqs_total": ("counter", SCHED),
    "sglang:num_bootstrap_failed_reqs_total": ("counter", SCHED),
}


def fixture_rows() -> dict:
    rows = {}
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, kind, labels, roles, _help = line.split("\t")
        rows[name] = {"type": kind, "labels": set(labels.split(",")), "roles": set(roles.split(","))}
    return rows


# --- pure -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [(1, "1.0"), (0.1, "0.1"), (400, "400.0"), (float("inf"), "+Inf"), (0.002, "0.002"), (1e6, "1e+06"),
     (2.5e-05, "2.5e-05"), (1100000, "1.1e+06")],
)  # fmt: skip
def test_numbers_as_prometheus_client_writes_them(value, text):
    assert go_float(value) == text


def test_exposition_counter_and_histogram_shape():
    reg = Registry()
    c = reg.counter("sglang:x_total", "Doc.", ["b", "a"])
    h = reg.histogram("sglang:h_seconds", "H.", ["a"], [0.1, 1])
    reg.gauge("sglang:unset", "never set", ["a"])
    c.inc({"a": "1", "b": "2"}, 3)
    h.observe({"a": "q"}, 0.5)
    h.observe({"a": "q"}, 0.05, count=2)
    text = reg.exposition()
    assert text.splitlines() == [
        "# HELP sglang:x_total Doc.",
        "# TYPE sglang:x_total counter",
        'sglang:x_total{a="1",b="2"} 3.0',
        "# HELP sglang:h_seconds H.",
        "# TYPE sglang:h_seconds histogram",
        'sglang:h_seconds_bucket{a="q",le="0.1"} 2.0',
        'sglang:h_seconds_bucket{a="q",le="1.0"} 3.0',
        'sglang:h_seconds_bucket{a="q",le="+Inf"} 3.0',
        'sglang:h_seconds_sum{a="q"} 0.6',
        'sglang:h_seconds_count{a="q"} 3.0',
    ]  # a metric without a series is left out, as prometheus_client's multiprocess collector does
    with pytest.raises(ValueError, match="labels"):
        c.inc({"a": "1"})


def test_fixture_list_is_current_and_covers_what_dashboards_need():
    gen = subprocess.run([sys.executable, str(PDSIM / "tools" / "gen_metrics_list.py"), "--check"],
                         capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    header = FIXTURE.read_text(encoding="utf-8").splitlines()[:4]
    assert any("How obtained" in line for line in header) and any("2026-12-01" in line for line in header)
    rows = fixture_rows()
    assert {r["name"] for r in series_table()} == set(rows)
    for name, (kind, labels) in REQUIRED.items():
        assert name in rows, f"{name} missing from {FIXTURE.name}"
        assert rows[name]["type"] == kind and rows[name]["labels"] == labels, (name, rows[name])


def test_dp_rank_label_only_with_data_parallel():
    one = SimMetrics(model_name="m", role="decode", dp_size=1).sched_labels
    two = SimMetrics(model_name="m", role="decode", dp_size=2).sched_labels
    assert "dp_rank" not in one and two["dp_rank"] == "0"


# --- a PD pair on loopback ----------------------------------------------------------------------------------


def pd_request(prefill, decode, room: int, text: str, *, max_new_tokens: int = 4, stream: bool = False):
    """What the router does: the same body with bootstrap_* to prefill and decode at once; decode's answer."""
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens}, "stream": stream,
            "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap, "bootstrap_room": room}  # fmt: skip
    answers = {}
    t = threading.Thread(target=lambda: answers.update(prefill=http("POST", prefill.url("/generate"), body)))
    t.start()
    answers["decode"] = http("POST", decode.url("/generate"), body)
    t.join(15)
    return answers


def series(parsed: dict, name: str) -> list:
    return parsed.get(name, {}).get("samples", [])


def test_pd_pair_exports_sglang_series_driven_by_requests(sims):
    env = {"SGLANG_SIM_KV_TRANSFER_GBPS": "5", "SGLANG_SIM_KV_BYTES_PER_TOKEN": "1048576"}  # 1 MiB/token, 5 GB/s
    prefill = sims.start("prefill", "--enable-metrics", env=env)
    decode = sims.start("decode", "--enable-metrics", env=env)
    null = sims.start("null")  # no --enable-metrics: no /metrics, as sglang
    assert http("GET", null.url("/metrics"))[0] == 404

    words = " ".join(["word"] * 50)  # 50 prompt tokens -> 50 MiB of simulated KV
    answers = pd_request(prefill, decode, 4242, words, max_new_tokens=4)
    assert answers["decode"][0] == 200 and answers["prefill"][0] == 200, answers
    assert pd_request(prefill, decode, 4243, "short prompt", stream=True)["decode"][0] == 200

    rows = fixture_rows()
    for sim, engine_type in ((prefill, "prefill"), (decode, "decode")):
        # the gauges are the scheduler's last report (a prefill's counts its batch as running): idle again, it
        # rewrites them at its next look (sglang: metrics_reporter.py _maybe_log_idle_metrics), not at the answer
        deadline = time.monotonic() + 3
        while series(parse_exposition(sim.metrics_text()), "sglang:num_running_reqs")[0][2] != 0.0:
            assert time.monotonic() < deadline, f"{engine_type}: the running gauge never went back to 0"
            time.sleep(0.05)
        parsed = parse_exposition(sim.metrics_text())
        for name, meta in parsed.items():
            assert name in rows, f"{engine_type} exports {name}, not in {FIXTURE.name}"
            assert meta["type"] == rows[name]["type"], name
            assert engine_type in rows[name]["roles"], f"{name} on {engine_type}"
            for sample_name, labels, _value in meta["samples"]:
                assert set(labels) - {"le"} == rows[name]["labels"], (sample_name, labels)
                assert labels["engine_type"] == engine_type and labels["model_name"] == "sim"
        prompt = {lab["is_streaming"]: v for _sample, lab, v in series(parsed, "sglang:prompt_tokens_total")}
        assert prompt == {"false": 50.0, "true": 2.0}, prompt
        for gauge in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
            assert [v for _sample, _labels, v in series(parsed, gauge)] == [0.0], gauge  # idle again, KV released

        if engine_type == "prefill":
            # sglang: a PD prefill never observes TTFT / ITL / TPOT; it observes each KV transfer
            assert not series(parsed, "sglang:time_to_first_token_seconds")
            speed = {
                s: v for s, _labels, v in series(parsed, "sglang:kv_transfer_speed_gb_s") if not s.endswith("bucket")
            }
            latency = {
                s: v for s, _labels, v in series(parsed, "sglang:kv_transfer_latency_ms") if not s.endswith("bucket")
            }
            assert speed["sglang:kv_transfer_speed_gb_s_count"] == 2.0
            # 50 + 2 MiB at 5e9 B/s: 10.49 + 0.42 ms; speed as sglang computes it (MiB / 1024 / s): 4.66 each
            assert 10.8 < latency["sglang:kv_transfer_latency_ms_sum"] < 11.0, latency
            assert 9.30 < speed["sglang:kv_transfer_speed_gb_s_sum"] < 9.33, speed
            total_mb = [v for s, _labels, v in series(parsed, "sglang:kv_transfer_total_mb") if s.endswith("_sum")]
            assert total_mb == [52.0], total_mb  # 50 MiB + 2 MiB
        else:
            ttft = [v for s, _labels, v in series(parsed, "sglang:time_to_first_token_seconds") if s.endswith("_count")]
            assert sorted(ttft) == [1.0, 1.0]  # one non-streaming, one streaming request
            itl = [v for s, _labels, v in series(parsed, "sglang:inter_token_latency_seconds") if s.endswith("_count")]
            assert itl == [6.0]  # (4 - 1) + (4 - 1) gaps between tokens
            gen = sum(v for _sample, _labels, v in series(parsed, "sglang:generation_tokens_total"))
            assert gen == 8.0


def test_handoff_failures_counted_as_sglang_counts_them(sims):
    env = {"SGLANG_SIM_HANDOFF_TIMEOUT": "0.3"}
    prefill = sims.start("prefill", "--enable-metrics", env={**env, "SGLANG_SIM_FAIL": "handoff:drop"})
    decode = sims.start("decode", "--enable-metrics", env=env)
    # the prefill saw the room but its KV never arrived: a transfer failure on both sides
    assert pd_request(prefill, decode, 7, "hello")["decode"][0] == 500
    # a room the prefill never saw: decode never got past bootstrapping
    body = {"text": "x", "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap, "bootstrap_room": 8}
    assert http("POST", decode.url("/generate"), body)[0] == 500

    def count(sim, name):
        return sum(v for _sample, _labels, v in series(parse_exposition(sim.metrics_text()), name))

    assert count(decode, "sglang:num_transfer_failed_reqs_total") == 1.0
    assert count(decode, "sglang:num_bootstrap_failed_reqs_total") == 1.0
    assert count(prefill, "sglang:num_transfer_failed_reqs_total") == 1.0
    assert not series(parse_exposition(prefill.metrics_text()), "sglang:kv_transfer_speed_gb_s")


def test_roles_listed_for_every_series():
    for row in series_table():
        assert set(row["roles"]) <= set(ALL_ROLES) and row["roles"], row
