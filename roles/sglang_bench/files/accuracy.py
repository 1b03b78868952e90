"""The accuracy gate of playbooks/accuracy.yml: GSM8K answers scored, a verdict, a report (controller side).

Pure functions (table-tested in tests/unit/bench/test_accuracy.py) and a command line the tasks run with the
controller's Python:

accuracy.py step  RUN_DIR STEP_OUTPUT.json --index I --total T
    keeps one step's answers and prints its progress line; exit 1 when the runner gave no result.
accuracy.py build RUN_DIR --meta META.json [--baseline auto|none|DIR]
    scores every answer, writes accuracy.json and accuracy.md, prints the verdict; exit 3 when the gate
    fails (it fails closed), 1 on an error.

Answers are extracted as lm-evaluation-harness's gsm8k task does (its "strict-match" and "flexible-extract"
filters): strict takes the number after the first "#### ", flexible the last number of the answer. Both are
compared with the number after "#### " in the data set's reference solution, as numbers.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_deployment
import bench_report

SCHEMA = "disagg.sglang/accuracy-report/1"
EXIT_ERROR, EXIT_GATE = 1, 3
# Where a completion ends: the next few-shot question, or an end-of-text marker (the request's stop list too).
STOPS = ("Question:", "</s>", "<|im_end|>", "<|endoftext|>")
STRICT = re.compile(r"#### (-?[0-9.,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
METRICS = ("strict", "flexible")
# Settings two runs must share to be compared (the questions asked and how).
COMPARABLE_SETTINGS = ("dataset", "questions", "shots", "max_tokens", "endpoint", "temperature")


class AccuracyError(Exception):
    """A report or a setting that cannot be used; the message says which and why."""


# --------------------------------------------------------------------------------------------------
# Extraction and scoring
# --------------------------------------------------------------------------------------------------


def cut(text: str) -> str:
    """The answer up to the first stop sequence (a server that ignored the stop list is cut here)."""
    for stop in STOPS:
        text = text.split(stop, 1)[0]
    return text


def number(raw: str | None) -> Decimal | None:
    """'1,234.50', '$18', '18.' -> Decimal; None when it is no number."""
    if raw is None:
        return None
    cleaned = raw.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        return Decimal(cleaned) if cleaned not in ("", "-") else None
    except InvalidOperation:
        return None


def extract_strict(text: str) -> Decimal | None:
    match = STRICT.search(cut(text))
    return number(match.group(1)) if match else None


def extract_flexible(text: str) -> Decimal | None:
    found = [a or b for a, b in FLEXIBLE.findall(cut(text))]
    for raw in reversed(found):  # the last match that is a number ("$," alone is not)
        value = number(raw)
        if value is not None:
            return value
    return None


def reference(solution: str) -> Decimal:
    value = extract_strict(solution)
    if value is None:
        raise AccuracyError(f"reference solution without '#### N': {solution[-80:]!r}")
    return value


def score_one(result: dict) -> dict:
    """One question: answered, failed (no answer: an error), empty, and each metric's extraction and verdict."""
    ref = reference(result["reference"])
    text = result.get("text")
    failed = bool(result.get("error")) or text is None
    empty = not failed and not cut(text).strip()
    row = {"index": result["index"], "failed": failed, "empty": empty, "reference": str(ref)}
    for metric, extract in (("strict", extract_strict), ("flexible", extract_flexible)):
        got = None if failed or empty else extract(text)
        row[metric] = None if got is None else str(got)
        row[f"{metric}_correct"] = got is not None and got == ref
    return row


def summarize(results: list[dict]) -> tuple[dict, list[dict]]:
    """Counts and accuracies of a run, and each question's row. An accuracy is over every question asked (a
    failed one counts wrong); None when no answer was scored at all."""
    rows = [score_one(r) for r in results]
    total = len(rows)
    failed = sum(r["failed"] for r in rows)
    empty = sum(r["empty"] for r in rows)
    scored = total - failed - empty
    out = {"questions": total, "failed": failed, "empty": empty, "scored": scored}
    for metric in METRICS:
        correct = sum(r[f"{metric}_correct"] for r in rows)
        out[f"{metric}_correct"] = correct
        out[metric] = round(correct / total, 4) if scored else None
    out["invalid"] = sum(1 for r in rows if not r["failed"] and not r["empty"] and r["flexible"] is None)
    out["output_tokens"] = sum(int(r.get("completion_tokens") or 0) for r in results)
    return out, rows


def verdict(summary: dict, gate: dict, baseline: dict | None, kv_transfers: int | None) -> dict:
    """Pass or fail, and every reason. Fails closed: no scored answer, too many failed or empty answers, no
    KV transfer seen (or none readable), under the floor, or dropped too far below the baseline."""
    metric = gate["metric"]
    reasons = []
    total = summary["questions"]
    if total == 0 or summary["scored"] == 0:
        reasons.append(
            f"no answer was scored ({summary['failed']} failed, {summary['empty']} empty of {total} asked): "
            "the gate fails closed"
        )
    bad = summary["failed"] + summary["empty"]
    if total and bad / total > gate["max_failed_share"]:
        reasons.append(
            f"{bad} of {total} answers failed or came back empty ({bad / total:.1%}), more than "
            f"sglang_bench_accuracy_max_failed_share {gate['max_failed_share']:.1%}"
        )
    if kv_transfers is None:
        reasons.append(
            "no worker reported the KV transfer metric (sglang:kv_transfer_total_mb_count, --enable-metrics): "
            "cannot tell that the answers went through the PD handoff"
        )
    elif kv_transfers <= 0:
        reasons.append("no KV transfer happened during the run: the answers did not go through the PD handoff")
    value = summary.get(metric)
    if value is not None and value < gate["floor"]:
        reasons.append(
            f"{metric} accuracy {value:.4f} is below the floor sglang_bench_accuracy_floor {gate['floor']:.4f}"
        )
    drop = None
    if value is not None and baseline and baseline.get(metric):
        drop = round((baseline[metric] - value) / baseline[metric], 4)
        if drop > gate["max_drop"]:
            reasons.append(
                f"{metric} accuracy {value:.4f} is {drop:.1%} below the baseline {baseline['id']} "
                f"({baseline[metric]:.4f}), more than sglang_bench_accuracy_max_drop {gate['max_drop']:.1%}"
            )
    return {
        "passed": not reasons,
        "reasons": reasons,
        "metric": metric,
        "value": value,
        "baseline": baseline,
        "drop": drop,
        "kv_transfers": kv_transfers,
        **{k: gate[k] for k in ("floor", "max_drop", "max_failed_share")},
    }


def check_gate(gate: dict) -> list[str]:
    """Problems of the gate's settings, each naming its variable (the preflight asserts the same)."""
    problems = []
    if gate.get("metric") not in METRICS:
        problems.append(f"sglang_bench_accuracy_metric {gate.get('metric')!r} is not one of {', '.join(METRICS)}")
    for key in ("floor", "max_drop", "max_failed_share"):
        value = gate.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
            problems.append(f"sglang_bench_accuracy_{key} {value!r} must be a fraction in 0-1 (0.05 is 5 %)")
    return problems


# --------------------------------------------------------------------------------------------------
# KV transfers from the workers' /metrics, before and after each step
# --------------------------------------------------------------------------------------------------

KV_COUNT = "sglang:kv_transfer_total_mb_count"


def counter_total(text: str, name: str = KV_COUNT) -> float | None:
    """The sum of a metric's samples on one /metrics page (the collection's parser, prom_text); None when the page
    has none."""
    values = [value for sample, _labels, value in bench_report.prom_text.samples(text) if sample == name]
    return sum(values) if values else None


def kv_transfers(steps: list[dict]) -> int | None:
    """KV transfers the workers counted during the steps; None when no worker ever reported the metric."""
    seen, total = False, 0.0
    for step in steps:
        for pages in (step.get("metrics") or {}).values():
            before, after = counter_total(pages.get("before", "")), counter_total(pages.get("after", ""))
            if after is None:
                continue
            seen = True
            total += max(0.0, after - (before or 0.0))  # a restart in between resets the counter
    return int(total) if seen else None


# --------------------------------------------------------------------------------------------------
# Baseline and report
# --------------------------------------------------------------------------------------------------


def comparable(a: dict, b: dict) -> list[str]:
    """Settings that differ between two runs' settings (empty: they can be compared)."""
    return [k for k in COMPARABLE_SETTINGS if a.get(k) != b.get(k)]


def pick_baseline(reports: list[dict], current: dict) -> dict | None:
    """The newest earlier report of the inventory that passed and asked the same questions the same way."""
    earlier = [
        r for r in reports
        if r.get("id", "") < current["id"] and (r.get("verdict") or {}).get("passed")
        and not comparable(r.get("settings") or {}, current["settings"])
    ]  # fmt: skip
    return max(earlier, key=lambda r: r["id"]) if earlier else None


def baseline_of(report: dict) -> dict:
    return {"id": report["id"], **{m: (report.get("summary") or {}).get(m) for m in METRICS}}


def deployment_digest(units: dict) -> str:
    """One digest of the units' flags and placements: two reports with the same one measured the same units."""
    blob = json.dumps({k: {f: v.get(f) for f in ("host", "flags", "placement")} for k, v in units.items()},
                      sort_keys=True)  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def progress_line(results_so_far: list[dict], step: dict, index: int, total: int) -> str:
    summary, _rows = summarize(results_so_far)
    mine = step.get("results") or []
    failed = sum(1 for r in mine if r.get("error") or r.get("text") is None)
    acc = summary["flexible"]
    return (
        f"accuracy step {index}/{total}: questions {step.get('first', 0) + 1}-{step.get('first', 0) + len(mine)} "
        f"in {step.get('seconds', 0):.1f} s ({failed} failed"
        + (", deadline reached" if step.get("timed_out") else "")
        + f"); so far {summary['flexible_correct']}/{summary['questions']} right (flexible "
        + ("-" if acc is None else f"{acc:.3f}")
        + ")"
    )


def pct(drop: float | None) -> str:
    """A relative drop as a signed percentage; '-' when there is none (nothing scored to compare)."""
    return "-" if drop is None else f"{drop:+.1%}"


def markdown(report: dict) -> str:
    s, v, m = report["settings"], report["verdict"], report["summary"]
    lines = [f"# Accuracy {report['inventory']} {report['id']}" + (" (SIMULATED)" if report["simulated"] else ""), ""]
    if report["simulated"]:
        lines += [
            "> **Simulated answers.** The workers are the PD simulator in its test-only answer mode (answers from",
            "> the data set with a set error rate): this proves the gate's mechanics, not any model's accuracy.",
            "",
        ]
    lines += [
        f"**Gate {'PASSED' if v['passed'] else 'FAILED'}** on {v['metric']} accuracy "
        + ("-" if v["value"] is None else f"{v['value']:.4f}")
        + f" (floor {v['floor']:.4f}, max drop {v['max_drop']:.1%} against "
        + (f"{v['baseline']['id']}: {pct(v['drop'])}" if v.get("baseline") else "no baseline")
        + f", KV transfers during the run: {'-' if v['kv_transfers'] is None else v['kv_transfers']}).",
        "",
    ]
    lines += [f"- {reason}" for reason in v["reasons"]]
    lines += [
        "",
        f"- data: {s['dataset']} ({report['data'].get('package')} {report['data'].get('version')}), "
        f"{s['questions']} questions after {s['shots']} few-shot examples, max {s['max_tokens']} tokens, "
        f"temperature {s['temperature']}, concurrency {s['concurrency']}",
        f"- through: {s['url']} ({s['endpoint']}), model {s['model']}; {report['seconds']:.1f} s",
        f"- model revision: {(report['deployment'].get('model') or {}).get('revision') or '-'}",
        f"- deployment {report['deployment_digest']}: "
        + ", ".join(f"`{u}` on {i.get('host')}" for u, i in sorted(report["deployment"].get("units", {}).items())),
        "",
        "| questions | scored | failed | empty | no number | strict | flexible | output tokens |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {m['questions']} | {m['scored']} | {m['failed']} | {m['empty']} | {m['invalid']} "
        f"| {'-' if m['strict'] is None else format(m['strict'], '.4f')} "
        f"| {'-' if m['flexible'] is None else format(m['flexible'], '.4f')} | {m['output_tokens']} |",
        "",
        f"## Wrong or failed answers ({len(report['failures'])}; every one is in accuracy.json)",
        "",
    ]
    for f in report["failures"][:50]:
        got = "failed: " + f["error"] if f.get("error") else f"strict {f['strict']}, flexible {f['flexible']}"
        lines.append(f"- #{f['index']}: expected {f['reference']}, {got}. Q: {f['question'][:160]}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def load_steps(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "raw").glob("step-*.out.json"))]


def cmd_step(args) -> int:
    step = json.loads(Path(args.step_output).read_text())
    if not isinstance(step.get("results"), list):
        print(f"accuracy step {args.index}/{args.total}: the runner gave no answers: {step.get('error', step)}")
        return EXIT_ERROR
    so_far = [r for s in load_steps(Path(args.run_dir)) for r in s.get("results") or []]
    print(progress_line(so_far, step, args.index, args.total))
    return 0


def build(run_dir: Path, meta: dict, baseline_arg: str) -> dict:
    steps = load_steps(run_dir)
    results = sorted((r for s in steps for r in s.get("results") or []), key=lambda r: r["index"])
    settings = meta["settings"]
    problems = check_gate(meta["gate"])
    if problems:
        raise AccuracyError("; ".join(problems))
    summary, rows = summarize(results)
    dep = bench_deployment.deployment(meta)  # as the benchmark report reads it (units, versions, simulated)
    report = {
        "schema": SCHEMA,
        "id": run_dir.name,
        "inventory": meta["inventory"],
        "simulated": dep.pop("simulated"),
        "settings": settings,
        "data": next((s["data"] for s in steps if s.get("data")), {}),
        "deployment": dep,
        "deployment_digest": deployment_digest(dep["units"]),
        "seconds": round(sum(float(s.get("seconds") or 0) for s in steps), 3),
        "summary": summary,
    }
    baseline = None
    if baseline_arg == "auto":
        kept = bench_deployment.load_reports(run_dir.parent, "accuracy.json")
        earlier = [r for r in kept if r["_dir"] != str(run_dir)]
        found = pick_baseline(earlier, report)
        baseline = baseline_of(found) if found else None
    elif baseline_arg not in ("", "none"):
        path = Path(baseline_arg)
        try:
            named = json.loads((path / "accuracy.json" if path.is_dir() else path).read_text())
        except (OSError, ValueError) as exc:
            raise AccuracyError(
                f"sglang_bench_accuracy_baseline {baseline_arg}: no readable accuracy.json ({exc})"
            ) from exc
        differ = comparable(named.get("settings") or {}, settings)
        if differ:
            raise AccuracyError(
                f"sglang_bench_accuracy_baseline {baseline_arg} asked its questions differently ({', '.join(differ)} "
                "differ): run it again with these settings, or set the same ones"
            )
        baseline = baseline_of(named)
    report["verdict"] = verdict(summary, meta["gate"], baseline, kv_transfers(steps))
    by_index = {r["index"]: r for r in results}
    report["failures"] = [
        {**row, "question": by_index[row["index"]]["question"],
         "text": (by_index[row["index"]].get("text") or "")[:2000], "error": by_index[row["index"]].get("error")}
        for row in rows if not row[f"{meta['gate']['metric']}_correct"]
    ]  # fmt: skip
    (run_dir / "accuracy.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    (run_dir / "accuracy.md").write_text(markdown(report))
    return report


def cmd_build(args) -> int:
    run_dir = Path(args.run_dir)
    report = build(run_dir, json.loads(Path(args.meta).read_text()), args.baseline)
    v, m = report["verdict"], report["summary"]
    print(f"report: {run_dir}/accuracy.md" + (" (SIMULATED answers)" if report["simulated"] else ""))
    print(
        f"{m['questions']} questions: {m['scored']} scored, {m['failed']} failed, {m['empty']} empty; strict "
        f"{'-' if m['strict'] is None else format(m['strict'], '.4f')}, flexible "
        f"{'-' if m['flexible'] is None else format(m['flexible'], '.4f')}; KV transfers {v['kv_transfers']}"
    )
    base = v.get("baseline")
    print(f"baseline: {base['id']} ({v['metric']} {base[v['metric']]:.4f}, drop {pct(v['drop'])})" if base
          else "baseline: none (no earlier passing report of this inventory asked the same questions)")  # fmt: skip
    if v["passed"]:
        print(f"accuracy gate PASSED: {v['metric']} {v['value']:.4f} >= floor {v['floor']:.4f}")
        return 0
    print("accuracy gate FAILED:")
    for reason in v["reasons"]:
        print("  " + reason)
    return EXIT_GATE


def main(argv=None) -> int:
    parser, _step, build = bench_report.tool_parser("accuracy.py")
    build.add_argument("--baseline", default="auto")
    return bench_report.run_tool(parser, argv, {"step": cmd_step, "build": cmd_build}, AccuracyError, EXIT_ERROR)


if __name__ == "__main__":
    sys.exit(main())
