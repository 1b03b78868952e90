"""The test suite's time budget: reads the JUnit XML files of every pytest run of `scripts/test.sh` and the lanes'
elapsed seconds, prints the per-module and slowest-test tables, and fails when the suite ran past its budget.

    python scripts/test_budget.py --budget 2700 --elapsed 2400 --lane A=2390 --lane B=2350 RESULTS_DIR [--markdown F]

RESULTS_DIR holds `<lane>-<step>.xml` (pytest --junitxml); a test's time is its setup, call and teardown together
(pytest's default junit_duration_report), so a module-scoped deployment is counted on the module's first test. Exit
status 1 when --elapsed passed --budget (the slowest tests printed first, so the failure says where the time went),
else 0. The markdown table (--markdown) is what docs/test-durations.md holds.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

SLOWEST = 25


def read_results(results_dir: Path) -> list[dict]:
    """One row per test case of every `<lane>-<step>.xml`: lane, step, module, test, seconds, outcome."""
    rows = []
    for path in sorted(results_dir.glob("*.xml")):
        lane, _, step = path.stem.partition("-")
        for case in ET.parse(path).getroot().iter("testcase"):
            outcome = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = child.tag
            module = case.get("classname", "").split(".")
            rows.append(
                {
                    "lane": lane,
                    "step": step,
                    "module": "/".join(module[:-1] if module[-1][:1].isupper() else module) + ".py",
                    "test": case.get("name", ""),
                    "seconds": float(case.get("time") or 0.0),
                    "outcome": outcome,
                }
            )
    return rows


def read_steps(results_dir: Path) -> list[tuple[str, float, str]]:
    """(step, seconds, exit status) of every step scripts/test.sh timed (steps.tsv), in the order they ended."""
    path = results_dir / "steps.tsv"
    if not path.exists():
        return []
    return [(name, float(secs), rc) for name, secs, rc in (line.split("\t") for line in path.read_text().splitlines())]


def by_module(rows: list[dict]) -> list[tuple[str, str, int, float]]:
    """(lane-step, module, tests, seconds), slowest first."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        sums[(f"{row['lane']}-{row['step']}", row["module"])].append(row["seconds"])
    table = [(where, module, len(times), sum(times)) for (where, module), times in sums.items()]
    return sorted(table, key=lambda item: -item[3])


def render(rows: list[dict], steps: list, lanes: dict[str, float], elapsed: float, budget: float) -> str:
    lines = [
        f"suite {elapsed:.0f} s of a {budget:.0f} s budget; lanes: "
        + ", ".join(f"{name} {secs:.0f} s" for name, secs in sorted(lanes.items()))
    ]
    lines += ["", "| step | seconds | exit |", "|---|---:|---:|"]
    lines += [f"| {name} | {secs:.0f} | {rc} |" for name, secs, rc in steps]
    lines += ["", "| lane-step | module | tests | seconds |", "|---|---|---:|---:|"]
    lines += [f"| {where} | {module} | {count} | {secs:.0f} |" for where, module, count, secs in by_module(rows)]
    slowest = sorted(rows, key=lambda row: -row["seconds"])[:SLOWEST]
    lines += [
        "",
        f"The {len(slowest)} slowest tests:",
        "",
        "| lane-step | test | seconds | outcome |",
        "|---|---|---:|---|",
    ]
    lines += [
        f"| {r['lane']}-{r['step']} | {r['module']}::{r['test']} | {r['seconds']:.0f} | {r['outcome']} |"
        for r in slowest
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--budget", type=float, required=True, help="seconds the whole suite may take")
    parser.add_argument("--elapsed", type=float, required=True, help="seconds the whole suite took")
    parser.add_argument("--lane", action="append", default=[], help="NAME=SECONDS, one per lane")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    lanes = {name: float(secs) for name, _, secs in (item.partition("=") for item in args.lane)}
    text = render(read_results(args.results_dir), read_steps(args.results_dir), lanes, args.elapsed, args.budget)
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text)
    if args.elapsed > args.budget:
        print(
            f"test budget: the suite took {args.elapsed:.0f} s, past its budget of {args.budget:.0f} s "
            "(DISAGG_TEST_BUDGET_S); the slowest tests are listed above",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
