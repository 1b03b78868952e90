"""The error budget of kill -9 under load: for each fault (a prefill, a decode or the router killed), with and without
redundancy, the requests sent and failed, when the last failed request started after the kill, and how long until
the deployment served every worker again; beside the published peer figures. A benchmark, not a test: it runs the
kill tests of tests/integration/test_faults.py (one host, 1P1D: no redundancy) and test_multihost.py (2P2D over
three worker hosts: one of two killed) with DISAGG_FAULT_REPORT set, and prints what they recorded. Each fault is
also checked against tests/integration/faults.py BUDGET by those tests. Run it on a quiet machine:

    .venv/bin/python tests/bench/error_budget.py [--only faults|multihost]

It takes about 25 minutes (two sandboxes, one after the other, each brought up and taken down by its test module).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import faults  # noqa: E402

MODULES = {
    "faults": ["tests/integration/test_faults.py", "-k", "kill_9"],
    "multihost": ["tests/integration/test_multihost.py", "-k", "kill_9 or rerun"],
}
COLUMNS = ("fault", "redundancy", "sent", "failed", "last_failure_s", "recovery_s", "source")


def cell(value):
    return "-" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODULES), help="run one of the two scenarios")
    args = parser.parse_args()
    report = Path(tempfile.mkdtemp(prefix="error-budget-")) / "faults.jsonl"
    env = {**os.environ, "DISAGG_FAULT_REPORT": str(report), "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    failed = []
    for name, target in MODULES.items():
        if args.only and name != args.only:
            continue
        print(f"== {name}: pytest {' '.join(target)}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *target], cwd=REPO, env=env, check=False)
        if proc.returncode:
            failed.append(name)
    rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    for row in rows:
        row["source"] = "this collection, sandbox (simulated engine, real router and systemd)"
    rows += faults.PEERS
    print("\n| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
    for row in rows:
        print("| " + " | ".join(cell(row.get(c)) for c in COLUMNS) + " |")
    print(f"\nseconds are after the kill; recovery: until the router routes to every worker again. Budgets "
          f"(share failed, latest failure in s; without redundancy after recovery): {faults.BUDGET}")  # fmt: skip
    if failed:
        print(f"FAILED: the fault tests of {', '.join(failed)} failed (a budget was exceeded or a check failed)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
