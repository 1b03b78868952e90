"""roles/sglang_bench/files: normalization of both clients' real outputs, /metrics deltas, the regression gate,
the step runner's command lines, and a report built from fixtures (JSON fields, PNG plots, exit codes)."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.module_utils.units import units

REPO = Path(__file__).resolve().parents[3]
FILES = REPO / "roles/sglang_bench/files"
FIXTURES = REPO / "tests/fixtures/bench"
sys.path.insert(0, str(FILES))

import bench_deployment as bd  # noqa: E402
import bench_report as br  # noqa: E402
import bench_step  # noqa: E402
import bench_tool  # noqa: E402

CASES = yaml.safe_load((FIXTURES / "cases.yml").read_text())


def fixture(name):
    return json.loads((FIXTURES / name).read_text())


def unflatten(flat_step):
    """{concurrency, 'tpot_ms.p50': v, ...} -> a normalized step."""
    step = br.empty_step(flat_step["concurrency"], flat_step.get("requests", 10))
    for key, value in flat_step.items():
        name, _unused, pct = key.partition(".")
        if pct:
            step[name][pct] = value
        else:
            step[name] = value
    return step


@pytest.mark.parametrize("case", CASES["normalize"], ids=lambda c: c["id"])
def test_normalize(case):
    step = br.normalize(case["client"], fixture(case["fixture"]), case["concurrency"], case["requests"])
    assert set(step) == set(br.STEP_KEYS)
    for key, pcts in br.PCT_KEYS.items():
        assert set(step[key]) == set(pcts)
    for metric, want in case["expect"].items():
        assert br.flat(step, metric) == pytest.approx(want, rel=1e-6), metric


@pytest.mark.parametrize(
    ("client", "name"),
    [
        ("bench_serving", "aiperf-0.13.0-sandbox-router-c4.json"),
        ("aiperf", "bench_serving-0.5.23-router-pdsim-c8.jsonl"),
    ],
)
def test_normalize_refuses_the_other_clients_output(client, name):
    with pytest.raises(br.BenchError, match="was the client"):
        br.normalize(client, fixture(name), 4, 40)


@pytest.mark.parametrize("case", CASES["compare"], ids=lambda c: c["id"])
def test_compare(case):
    result = br.compare(
        [unflatten(s) for s in case["current"]], [unflatten(s) for s in case["previous"]], case["thresholds"]
    )
    got = [[r["concurrency"], r["metric"]] for r in result["regressions"]]
    assert got == case["regressed"]
    assert result["passed"] is (not case["regressed"])
    for row in result["regressions"]:
        assert "worse" in br.regression_message(row) or "failed requests" in br.regression_message(row)


def test_regression_message_names_metric_numbers_and_threshold():
    result = br.compare(
        [unflatten({"concurrency": 64, "tpot_ms.p50": 35.2})],
        [unflatten({"concurrency": 64, "tpot_ms.p50": 32.0})],
        {"tpot_ms.p50": 5},
    )
    assert br.regression_message(result["regressions"][0]) == (
        "concurrency 64: tpot_ms.p50 32.00 -> 35.20 (+10.0% worse, threshold 5%)"
    )


@pytest.mark.parametrize("case", CASES["thresholds"], ids=lambda c: json.dumps(c["thresholds"]))
def test_check_thresholds(case):
    problems = br.check_thresholds(case["thresholds"])
    assert len(problems) == len(case["problems"])
    for got, want in zip(problems, case["problems"], strict=True):
        assert want in got and "sglang_bench_regression_thresholds" in got


def test_pick_previous_skips_later_and_failed_reports():
    reports = [
        {"id": "20260101T000000Z", "gate": {"passed": True}},
        {"id": "20260102T000000Z", "gate": {"passed": False}},
        {"id": "20260103T000000Z"},
        {"id": "20260105T000000Z", "gate": {"passed": True}},
    ]
    assert br.pick_previous(reports, "20260104T000000Z")["id"] == "20260103T000000Z"
    assert br.pick_previous(reports, "20260101T000000Z") is None


@pytest.mark.parametrize("case", CASES["quantile"], ids=lambda c: f"{c['buckets']}@{c['q']}")
def test_histogram_quantile(case):
    got = br.histogram_quantile(case["buckets"], case["q"])
    assert got == (None if case["expect"] is None else pytest.approx(case["expect"]))


def test_server_delta_sums_ranks_and_diffs_scrapes():
    case = CASES["server_delta"]
    got = br.server_delta(case["before"], case["after"], case["gauge_max"])
    want = case["expect"]
    assert got["counters"] == want["counters"]
    assert got["gauges_max"] == want["gauges_max"]
    for name, h in want["histograms"].items():
        assert got["histograms"][name] == pytest.approx(h)


def test_server_delta_of_a_real_simulator_scrape():
    before = (FIXTURES / "pdsim-decode-metrics-before.prom").read_text()
    after = (FIXTURES / "pdsim-decode-metrics-after.prom").read_text()
    got = br.server_delta(before, after)
    assert got["counters"]["sglang:num_requests_total"] == 42.0  # 40 requests + 2 warm-up
    assert got["histograms"]["sglang:e2e_request_latency_seconds"]["count"] == 42.0
    assert got["histograms"]["sglang:e2e_request_latency_seconds"]["p99"] is None  # the simulator has no buckets


def test_the_report_reads_metrics_with_the_collections_parser_and_leaves_out_values_that_are_not_finite():
    assert Path(br.prom_text.__file__).resolve() == REPO / "plugins/module_utils/monitoring/prom_text.py"
    page = 'sglang:num_queue_reqs{tp_rank="0"} NaN\nsglang:num_queue_reqs{tp_rank="1"} 2.0\nsglang:token_usage +Inf\n'
    assert br.gauge_totals(page) == {"sglang:num_queue_reqs": 2.0}
    after = page + "sglang:num_requests_total 5\nsglang:e2e_request_latency_seconds_count NaN\n"
    assert br.server_delta("", after) == {
        "histograms": {},
        "counters": {"sglang:num_requests_total": 5.0},
        "gauges_max": {"sglang:num_queue_reqs": 2.0},
    }


def test_parse_unit_of_a_rendered_decode_unit():
    unit = bd.parse_unit((FIXTURES / "sglang-decode0.service").read_text())
    assert unit["module"] == "sglang_pd_sim"
    assert unit["flags"]["--disaggregation-mode"] == ["decode"]
    assert unit["flags"]["--tp-size"] == ["4"]
    assert bd.placement_of(unit) == {
        "cuda_visible_devices": "4,5,6,7",
        "numactl": "--cpunodebind=1 --membind=1",
        "tp_size": "4",
        "base_gpu_id": None,
    }


STEP_CFG = {
    "python": "/venv/bin/python", "url": "http://127.0.0.1:8000", "endpoint": "completions", "model": "m",
    "tokenizer": "/models/m", "concurrency": 8, "requests": 80, "warmup": 2, "input_len": 1024, "output_len": 256,
    "request_rate": "inf", "slo_ttft_ms": 2000.0, "slo_tpot_ms": 100.0, "seed": 42, "request_timeout": 600,
}  # fmt: skip


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def test_aiperf_command_has_count_concurrency_lengths_and_slo():
    cmd = bench_step.build_command({**STEP_CFG, "client": "aiperf"}, "/out", api_key="k")
    assert cmd[:4] == ["/venv/bin/python", "-m", "aiperf", "profile"]
    assert flag(cmd, "--request-count") == "80" and flag(cmd, "--concurrency") == "8"
    assert flag(cmd, "--isl") == "1024" and flag(cmd, "--osl") == "256" and flag(cmd, "--osl-stddev") == "0"
    assert flag(cmd, "--warmup-request-count") == "2"
    assert flag(cmd, "--goodput") == "time_to_first_token:2000.0 inter_token_latency:100.0"
    assert flag(cmd, "--api-key") == "k" and "--request-rate" not in cmd
    assert (
        flag(bench_step.build_command({**STEP_CFG, "client": "aiperf", "request_rate": "4"}, "/o"), "--request-rate")
        == "4"
    )


def test_bench_serving_command_uses_random_ids_and_keeps_the_key_off_argv():
    cmd = bench_step.build_command({**STEP_CFG, "client": "bench_serving", "endpoint": "chat"}, "/out", api_key="k")
    assert cmd[:3] == ["/venv/bin/python", "-m", "sglang.bench_serving"]
    assert flag(cmd, "--backend") == "sglang-oai-chat"
    assert flag(cmd, "--dataset-name") == "random-ids"  # no dataset download
    assert flag(cmd, "--num-prompts") == "80" and flag(cmd, "--max-concurrency") == "8"
    assert flag(cmd, "--random-range-ratio") == "1.0"
    assert cmd[cmd.index("--goodput") + 1 : cmd.index("--goodput") + 3] == ["ttft:2000.0", "tpot:100.0"]
    assert "k" not in cmd


def test_client_env_is_direct_and_only_bench_serving_is_offline_with_the_key_in_env():
    environ = {"PATH": "/bin", "https_proxy": "http://proxy:3128", "SGLANG_BENCH_API_KEY": "k"}
    env = bench_step.client_env(environ, "bench_serving", api_key="k")
    assert env == {"PATH": "/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OPENAI_API_KEY": "k"}
    assert bench_step.client_env({"HF_HUB_OFFLINE": "0"}, "bench_serving")["HF_HUB_OFFLINE"] == "0"  # the host's
    # AIPerf: the key is a flag, and online, since offline it fails to load a tokenizer from a directory
    assert bench_step.client_env(environ, "aiperf", api_key="k") == {"PATH": "/bin"}


def write_run(run_dir, meta, steps):
    run_dir.mkdir(parents=True)
    (run_dir / "meta.json").write_text(json.dumps(meta))
    for step in steps:
        (run_dir / f"step-c{step['concurrency']}.json").write_text(json.dumps({**step, "server": {}}))


def test_build_writes_report_plots_and_fails_on_regression(tmp_path, capsys):
    unit = (FIXTURES / "sglang-decode0.service").read_text()
    meta = {
        "inventory": "cluster",
        "client": "aiperf",
        "client_version": "0.13.0",
        "profile": "deepseek_v4_flash_sm120",
        "collection_root": str(REPO),
        "settings": {"concurrencies": [4], "url": "http://127.0.0.1:8000"},
        "hosts": {"h1": {"units": {"sglang-decode0.service": unit}, "versions": {"sglang-router": "0.3.2"},
                         "server_info": {"decode0": {"simulator": {"name": "sglang-pd-sim"}}}}},
    }  # fmt: skip
    base = br.normalize("aiperf", fixture("aiperf-0.13.0-loopback-tokenlatency10ms-c4.json"), 4, 20)
    write_run(tmp_path / "cluster/20260101T000000Z", meta, [base])
    assert bench_tool.main(["build", str(tmp_path / "cluster/20260101T000000Z"), "--meta",
                            str(tmp_path / "cluster/20260101T000000Z/meta.json")]) == 0  # fmt: skip
    first = json.loads((tmp_path / "cluster/20260101T000000Z/report.json").read_text())
    assert br.missing_fields(first) == [] and first["simulated"] is True
    assert first["deployment"]["collection"]["name"] == "disagg.sglang"
    for png in ("ttft.png", "tpot.png", "throughput.png"):
        assert (tmp_path / "cluster/20260101T000000Z" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    slower = json.loads(json.dumps(base))
    slower["tpot_ms"]["p50"] *= 1.5
    run2 = tmp_path / "cluster/20260102T000000Z"
    write_run(run2, meta, [slower])
    capsys.readouterr()
    rc = bench_tool.main(["build", str(run2), "--meta", str(run2 / "meta.json"), "--thresholds", '{"tpot_ms.p50": 10}'])
    out = capsys.readouterr().out
    assert rc == bench_tool.EXIT_REGRESSION
    assert "concurrency 4: tpot_ms.p50 10.34 -> 15.51 (+50.0% worse, threshold 10%)" in out
    second = json.loads((run2 / "report.json").read_text())
    assert second["gate"]["previous"] == "20260101T000000Z" and second["gate"]["passed"] is False
    assert "REGRESSED" in (run2 / "report.md").read_text()

    # the regressed run is kept but never becomes the baseline
    run3 = tmp_path / "cluster/20260103T000000Z"
    write_run(run3, meta, [base])
    assert (
        bench_tool.main(["build", str(run3), "--meta", str(run3 / "meta.json"), "--thresholds", '{"tpot_ms.p50": 10}'])
        == 0
    )
    assert json.loads((run3 / "report.json").read_text())["gate"]["previous"] == "20260101T000000Z"
    shutil.rmtree(tmp_path / "cluster")


def test_step_of_a_real_bench_serving_run(tmp_path, capsys):
    """bench_step.py's printed object from the capture on the lent GPU machine (fixtures README)."""
    name = "bench_step-bench_serving-c8.json"
    argv = ["step", str(tmp_path), str(FIXTURES / name), "--client", "bench_serving", "--concurrency", "8",
            "--requests", "40", "--index", "2", "--total", "3"]  # fmt: skip
    assert bench_tool.main(argv) == 0
    line = capsys.readouterr().out
    assert line.startswith("step 2/3 concurrency 8: 40/40 ok, 0 failed; TTFT p50 70.8 ms, TPOT p50 13.4 ms")
    step = json.loads((tmp_path / "step-c8.json").read_text())
    assert step["ttft_ms"]["p99"] == pytest.approx(215.5935754) and step["seconds"] == pytest.approx(26.547)
    kv = step["server"]["prefill"]["histograms"]["sglang:kv_transfer_speed_gb_s"]
    assert kv["count"] == 42  # 40 requests and 2 warm-up, each one KV transfer on the prefill side
    assert step["server"]["decode"]["gauges_max"]["sglang:num_running_reqs"] == 8  # the concurrency


def test_step_fails_without_a_result(tmp_path, capsys):
    out = tmp_path / "out.json"
    out.write_text(json.dumps({"rc": -15, "timed_out": True, "raw": None, "output_tail": "killed"}))
    assert (
        bench_tool.main(
            ["step", str(tmp_path), str(out), "--client", "aiperf", "--concurrency", "4", "--requests", "20"]
        )
        == 1
    )
    assert "ran past its deadline" in capsys.readouterr().out


def test_the_report_names_the_router_program_and_its_settings_also_behind_the_key_launcher():
    """bench_deployment.routers: which router program the measured deployment ran (also when its key launcher runs
    it: python -c ... run_module), and every setting but its worker list (SMG's written-out routing defaults)."""
    spec = units.router_unit([{"url": "http://10.0.0.2:30000", "bootstrap_port": 8998}], [{"url": "http://10.0.0.3:30001"}],
                             {"venv": "/v", "impl": "smg", "api_key_set": True,
                              "flags": {"host": "127.0.0.1", "port": 8000, "worker-wedge-secs": 30,
                                        "disable-worker-overload-protection": True}})  # fmt: skip
    exec_start = " ".join(sf.systemd_quote(t) for t in [*spec["exec"], *sf.argv(spec["lines"])])
    unit = bd.parse_unit(f"[Service]\nExecStart={exec_start}\n")
    routers = bd.routers({"sglang-router.service": {"module": unit["module"], "flags": unit["flags"]}})
    assert routers == {"sglang-router.service": {
        "impl": "smg", "module": "smg.launch_router",
        "settings": {"--host": ["127.0.0.1"], "--port": ["8000"], "--worker-wedge-secs": ["30"],
                     "--disable-worker-overload-protection": []},
    }}  # fmt: skip


# Issue 40: the report names the model revision it measured, from the deployed records of the plan's worker specs
# (model_revision: the commit of sglang_model_source), or the directory managed outside.
REVISION = "0123456789abcdef0123456789abcdef01234567"


def worker_records(revision=None, model_path=None, key=True):
    records = {}
    for unit, role in (("sglang-prefill0", "prefill"), ("sglang-decode0", "decode")):
        record = {"unit": unit, "role": role, "python": "/v/bin/python"}
        if key:  # a record written before the plan named model_revision has neither key
            record.update(model_revision=revision, model_path=model_path)
        records[unit] = record
    records["sglang-router"] = {"unit": "sglang-router", "role": "router", "python": "/r/bin/python"}
    return records


@pytest.mark.parametrize(
    ("hosts", "revision"),
    [
        ({"h1": {"records": worker_records(REVISION, f"/opt/models/DeepSeek-V4-Flash-{REVISION}")}}, REVISION),
        ({"h1": {"records": worker_records(None, "/srv/weights/V4")}}, "managed outside: /srv/weights/V4"),
        # no key in the records: the directory is the unit's own --model-path
        ({"h1": {"records": worker_records(key=False)}}, "managed outside: /opt/models/DeepSeek-V4-Flash"),
        ({"h1": {"records": worker_records(REVISION, "/m")}, "h2": {"records": worker_records(None, "/srv/V4")}},
         f"mixed: {REVISION}, managed outside: /srv/V4"),
        ({"h1": {"records": {}}}, None),
    ],
)  # fmt: skip
def test_the_deployment_names_the_model_revision_of_its_workers(hosts, revision):
    decode = bd.parse_unit((FIXTURES / "sglang-decode0.service").read_text())
    units_seen = {f"{unit}.service": {"flags": decode["flags"]} for unit in ("sglang-prefill0", "sglang-decode0")}
    model = bd.model({"hosts": hosts}, units_seen)
    assert model["revision"] == revision
    assert all(unit.endswith(("@h1", "@h2")) and "router" not in unit for unit in model["workers"])


def test_the_bench_and_accuracy_reports_name_the_model_revision_they_measured(tmp_path, capsys):
    unit = (FIXTURES / "sglang-decode0.service").read_text()
    meta = {
        "inventory": "cluster", "client": "aiperf", "client_version": "0.13.0", "profile": "deepseek_v4_flash_sm120",
        "collection_root": str(REPO), "settings": {"concurrencies": [4], "url": "http://127.0.0.1:8000"},
        "hosts": {"h1": {"units": {"sglang-decode0.service": unit}, "versions": {},
                         "records": worker_records(REVISION, f"/opt/models/V4-{REVISION}")}},
    }  # fmt: skip
    run = tmp_path / "cluster/20260101T000000Z"
    write_run(run, meta, [br.normalize("aiperf", fixture("aiperf-0.13.0-loopback-tokenlatency10ms-c4.json"), 4, 20)])
    assert bench_tool.main(["build", str(run), "--meta", str(run / "meta.json")]) == 0
    report = json.loads((run / "report.json").read_text())
    assert report["deployment"]["model"] == {
        "revision": REVISION, "workers": {"sglang-prefill0@h1": REVISION, "sglang-decode0@h1": REVISION}}  # fmt: skip
    assert f"- model revision: {REVISION}\n" in (run / "report.md").read_text()
