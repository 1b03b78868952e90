"""Controller side of playbooks/bench.yml (run with the controller's Python, ansible_playbook_python).

bench_tool.py step  RUN_DIR STEP_OUTPUT.json --client C --concurrency N --requests R --index I --total T
    keeps the client's raw output, normalizes it, prints the step's progress line; exit 1 when the
    client failed or gave no result.
bench_tool.py build RUN_DIR --meta META.json [--previous auto|DIR] [--thresholds JSON]
    writes report.json, report.md and the PNG plots into RUN_DIR, compares with the previous report
    of the same inventory; exit 3 when a metric regressed past its threshold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy
import bench_deployment as bd
import bench_report as br

EXIT_CLIENT, EXIT_REGRESSION = 1, 3


def cmd_step(args) -> int:
    run_dir = Path(args.run_dir)
    out = json.loads(Path(args.step_output).read_text())
    if out.get("raw") is None or (out.get("rc") and not out.get("raw")):
        why = "ran past its deadline and was stopped" if out.get("timed_out") else f"exited {out.get('rc')}"
        print(f"step {args.index}/{args.total} concurrency {args.concurrency}: the client {why}, no result.")
        print(out.get("output_tail", ""))
        return EXIT_CLIENT
    step = br.normalize(args.client, out["raw"], args.concurrency, args.requests)
    step["seconds"] = out.get("seconds")
    step["timed_out"] = bool(out.get("timed_out"))
    step["server"] = {}
    for worker, m in sorted((out.get("metrics") or {}).items()):
        gmax: dict = {}
        for sample in m.get("samples", []):
            for name, value in br.gauge_totals(sample).items():
                gmax[name] = max(value, gmax.get(name, value))
        step["server"][worker] = br.server_delta(m.get("before", ""), m.get("after", ""), gmax)
    (run_dir / f"step-c{args.concurrency}.json").write_text(json.dumps(step, indent=1))
    print(br.progress_line(step, args.index, args.total, out.get("seconds")))
    return 0


def accuracy_link(inventory_dir: Path, units: dict) -> dict | None:
    """The newest accuracy report of the inventory (playbooks/accuracy.yml), and whether it measured these units."""
    found = bd.load_reports(inventory_dir, "accuracy.json")
    if not found:
        return None
    newest = max(found, key=lambda r: r["id"])
    verdict = newest.get("verdict") or {}
    return {
        "id": newest["id"],
        "page": f"../{newest['id']}/accuracy.md",
        "passed": verdict.get("passed"),
        "metric": verdict.get("metric"),
        "value": verdict.get("value"),
        "same_deployment": newest.get("deployment_digest") == accuracy.deployment_digest(units),
    }


def cmd_build(args) -> int:
    run_dir = Path(args.run_dir)
    meta = json.loads(Path(args.meta).read_text())
    thresholds = json.loads(args.thresholds or "{}")
    problems = br.check_thresholds(thresholds)
    if problems:
        print("\n".join(problems))
        return EXIT_CLIENT
    steps = [json.loads((run_dir / f"step-c{c}.json").read_text()) for c in meta["settings"]["concurrencies"]]
    dep = bd.deployment(meta)
    report = {
        "schema": br.SCHEMA,
        "id": run_dir.name,
        "inventory": meta["inventory"],
        "simulated": dep.pop("simulated"),
        "client": meta["client"],
        "client_version": meta.get("client_version"),
        "settings": meta["settings"],
        "deployment": dep,
        "steps": steps,
    }
    previous = None
    if args.previous and args.previous != "none":
        if args.previous == "auto":
            candidates = [r for r in bd.load_reports(run_dir.parent, "report.json") if r["_dir"] != str(run_dir)]
            previous = br.pick_previous(candidates, report["id"])
        else:
            path = Path(args.previous)
            previous = json.loads((path / "report.json" if path.is_dir() else path).read_text())
    gate = {"previous": None, "rows": [], "regressions": [], "passed": True, "thresholds": thresholds}
    if previous:
        gate.update(br.compare(steps, previous["steps"], thresholds), previous=previous["id"])
    report["gate"] = gate
    report["accuracy"] = accuracy_link(run_dir.parent, dep["units"])
    plots = __import__("bench_plots").plot_report(report, previous, run_dir)
    report["plots"] = plots
    missing = br.missing_fields(report)
    if missing:
        print("report is missing: " + ", ".join(missing))
        return EXIT_CLIENT
    (run_dir / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    page = br.markdown(report, plots)
    (run_dir / "report.md").write_text(page)
    table = [line for line in page.splitlines() if line.startswith("|")]
    first_table = table[: 2 + len(steps)]
    print(f"report: {run_dir}/report.md" + (" (SIMULATED numbers)" if report["simulated"] else ""))
    print("\n".join(first_table))
    if not previous:
        print("no earlier report of this inventory: nothing to compare with")
        return 0
    if gate["passed"]:
        print(f"compared with {previous['id']}: no metric regressed past its threshold")
        return 0
    print(f"REGRESSION against {previous['id']} (sglang_bench_regression_thresholds):")
    for row in gate["regressions"]:
        print("  " + br.regression_message(row))
    return EXIT_REGRESSION


def main(argv=None) -> int:
    parser, step, build = br.tool_parser("bench_tool.py")
    step.add_argument("--client", required=True, choices=sorted(br.NORMALIZERS))
    step.add_argument("--concurrency", type=int, required=True)
    step.add_argument("--requests", type=int, required=True)
    build.add_argument("--previous", default="auto")
    build.add_argument("--thresholds", default="{}")
    return br.run_tool(parser, argv, {"step": cmd_step, "build": cmd_build}, br.BenchError, EXIT_CLIENT)


if __name__ == "__main__":
    sys.exit(main())
