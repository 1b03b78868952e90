"""playbooks/bench.yml on a converged sandbox host: AIPerf through the real router, reports kept with plots,
a second run compared with the first, and a slower simulator failing the regression gate.

One sandbox host (prefill, decode and router), converged with a decode that takes
SGLANG_SIM_TOKEN_LATENCY per token, so TPOT has a value to compare. Small counts: two steps of 20 and 40
requests of 64/16 tokens; every step has a deadline. Reports go to a temporary directory.
"""

import json
import re
import sys

import pytest
from sandbox_hosts import REPO, VENV_BIN, down, run, up, write_inventory

sys.path.insert(0, str(REPO / "roles/sglang_bench/files"))
import bench_report

SANDBOX = "pytest-bench"
HOST = f"{SANDBOX}-1"
PNG = b"\x89PNG\r\n\x1a\n"
SIM_TOKEN_LATENCY = 0.01  # s per decoded token: TPOT p50 about 10 ms
SLOWER = 0.05  # the forced regression: TPOT about 5x
BENCH = {
    "sglang_bench_concurrencies": [1, 4],
    "sglang_bench_input_len": 64,
    "sglang_bench_output_len": 16,
    "sglang_bench_warmup": 2,
    "sglang_bench_step_timeout": 240,
    "sglang_bench_request_timeout": 60,
    "sglang_bench_metrics_interval": 1,
    # loose enough for a loaded 2-core machine, tight enough for a 5x slower decode
    "sglang_bench_regression_thresholds": {"tpot_ms.p50": 100, "failed": 0},
}


def decode_env(latency):
    return json.dumps({"sglang_decode_extra_env": {"SGLANG_SIM_TOKEN_LATENCY": str(latency)}})


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    up(SANDBOX)
    inv = write_inventory(tmp_path_factory.mktemp("inventory") / "bench-sandbox", SANDBOX, HOST)
    run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml", "-e", decode_env(SIM_TOKEN_LATENCY)])
    yield {"inventory": str(inv), "reports": tmp_path_factory.mktemp("reports")}
    down(SANDBOX)


def bench(sandbox, extra=None, check=True):
    settings = {**BENCH, "sglang_bench_reports_dir": str(sandbox["reports"]), **(extra or {})}
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            sandbox["inventory"],
            "playbooks/bench.yml",
            "-e",
            json.dumps(settings),
        ],
        check=check,
        timeout=1200,
    )


def reports(sandbox):
    return sorted(p for p in (sandbox["reports"] / "bench-sandbox").iterdir() if (p / "report.json").exists())


def check_report(directory, concurrencies):
    report = json.loads((directory / "report.json").read_text())
    assert bench_report.missing_fields(report) == []
    assert report["simulated"] is True, "the sandbox's numbers must be labelled simulated"
    assert report["client"] == "aiperf" and report["client_version"] == "0.13.0"
    assert [s["concurrency"] for s in report["steps"]] == concurrencies
    for step in report["steps"]:
        assert step["failed"] == 0 and step["completed"] == step["requests"]
        assert step["ttft_ms"]["p50"] > 0 and step["output_tok_s"] > 0
        assert set(step["server"]) == {f"{HOST}/prefill0", f"{HOST}/decode0"}
        assert step["server"][f"{HOST}/decode0"]["counters"]["sglang:num_requests_total"] >= step["requests"]
    units = report["deployment"]["units"]
    assert {"sglang-prefill0.service", "sglang-decode0.service", "sglang-router.service"} <= set(units)
    assert units["sglang-decode0.service"]["flags"]["--disaggregation-mode"] == ["decode"]
    assert report["deployment"]["versions"][HOST]["sglang-router"] == "0.3.2"
    assert report["deployment"]["collection"]["version"]
    for name in ("ttft.png", "tpot.png", "throughput.png"):
        assert (directory / name).read_bytes()[:8] == PNG, f"{name} is not a PNG"
    page = (directory / "report.md").read_text()
    assert "SIMULATED" in page and "![tpot.png](tpot.png)" in page
    return report


def test_two_runs_compare_and_a_slower_decode_fails_the_gate(sandbox):
    first = bench(sandbox)
    lines = re.findall(r"step \d/2 concurrency \d+: .*", first.stdout)
    assert len(lines) == 2, first.stdout[-3000:]  # one progress line per step
    print("\n".join(lines))
    assert "no earlier report of this inventory" in first.stdout
    [one] = reports(sandbox)
    report = check_report(one, [1, 4])
    tpot = report["steps"][0]["tpot_ms"]["p50"]
    assert 0.5 * SIM_TOKEN_LATENCY * 1000 < tpot < 20 * SIM_TOKEN_LATENCY * 1000, f"TPOT p50 {tpot} ms"

    second = bench(sandbox)
    assert f"compared with {one.name}: no metric regressed" in second.stdout, second.stdout[-3000:]
    two = reports(sandbox)[-1]
    assert check_report(two, [1, 4])["gate"]["previous"] == one.name

    # a 5x slower decode (the simulator's per-token latency, set through the inventory and converged)
    slower = ["--tags", "decode", "-e", decode_env(SLOWER)]
    run([str(VENV_BIN / "ansible-playbook"), "-i", sandbox["inventory"], "site.yml", *slower])
    third = bench(sandbox, {"sglang_bench_concurrencies": [4]}, check=False)
    assert third.returncode != 0, third.stdout[-3000:]
    assert re.search(r"Regression: .*concurrency 4: tpot_ms\.p50 [\d.]+ -> [\d.]+ \(\+[\d.]+% worse, threshold 100%\)",
                     third.stdout), third.stdout[-3000:]  # fmt: skip
    three = reports(sandbox)[-1]
    gate = check_report(three, [4])["gate"]
    assert gate["previous"] == two.name and gate["passed"] is False
