"""The error budget: what each fault and each day-2 change costs the requests through the router, beside the published
peer figures. For kill -9 of a prefill, a decode and the router, with and without redundancy, and for the changes a
run makes under load (a rolling flag change, an engine upgrade, a failed upgrade rolled back, a decode change that
stalls, scale-in, scale-out, rename): requests sent and failed, those in flight at the event, seconds to the last
failure, seconds to recovery.

A benchmark, not a test: it runs the tests that make these events (tests/integration/test_faults.py: one host, 1P1D,
no redundancy; test_multihost.py: 2P2D over four sandbox hosts) with DISAGG_FAULT_REPORT set, where each writes one
row (tests/integration/faults.py record(); summary() for a fault, change_cost() for a change), and WRITES the table
with its definitions, the command, the date and the machine to docs/error-budget.md (--output), printing it too.
Each fault is also checked by those tests against faults.BUDGET. Run it on a quiet machine, as root:

    .venv/bin/python tests/bench/error_budget.py [--only faults|multihost] [--select EXPR] [--output PATH]

--select narrows a module's selection with pytest's -k (for example `--select scale_in`): the document then says it
is partial. The whole run takes about an hour (two sandboxes, one after the other, each brought up and taken down by
its test module).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import faults  # noqa: E402

# (test module, the -k selection of the tests that write rows). test_faults: every kill -9, and the SIGSTOP freeze,
# which switches the router to SMG for the decode kill through SMG after it. test_multihost: every kill -9 and day-2
# change; rerun checks the converge they all start from.
MODULES = {
    "faults": ("tests/integration/test_faults.py", "kill_9 or frozen"),
    "multihost": (
        "tests/integration/test_multihost.py",
        "rerun or kill_9 or flag_change or stalled_decode or engine_upgrade or scale_in",
    ),
}
OUTPUT = REPO / "docs" / "error-budget.md"
# (key of a row, column heading)
COLUMNS = (
    ("fault", "event"),
    ("redundancy", "deployment"),
    ("sent", "sent"),
    ("failed", "failed"),
    ("errors", "errors"),
    ("in_flight", "in flight at the event"),
    ("last_failure_s", "last failure (s)"),
    ("recovery_s", "recovery (s)"),
)
DEFINITIONS = """\
- **event**: `kill -9`: the unit killed with SIGKILL (`systemctl kill`) while the load runs; systemd restarts it
  and its next start loads "weights" for `faults.STARTUP_DELAY` s (35) first. A change: one `ansible-playbook
  site.yml` run that makes it while the load runs. In brackets, the router program (sglang-router 0.3.2 or SMG).
- **deployment**: `1P1D (none)`: one host, one instance of each role, nothing to route around the killed one.
  `2P2D (one of two)`: a router host, two prefill instances on one host, two decode instances on two hosts; one of
  two killed. `batches of one`: the rolling step takes one instance out of the router at a time.
- **sent**: requests the load (tests/sandbox/load.py, on the router's host) sent through the router during the
  event: for a fault 16 at a time, at most 20 starts/s, for a fixed time around the kill; for a change 16 at a
  time, 200 tokens each, from when the run reaches the workers' play until 3 s after it ended.
- **failed**: of those, the ones that did not end with 200 and text; **errors**: them by status or exception.
- **in flight at the event**: fault: requests sent and not yet ended at the kill. Change: the fewest requests in
  flight at the first moment the router stopped routing to each worker the run restarted or retired (or started
  routing to one it added), as the router's `GET /workers` showed it (polled every 0.1 s by load.py `--workers`).
- **last failure (s)**: when the last failed request was sent, in seconds after the event's start: the kill, or
  for a change the run's start. `-`: none failed.
- **recovery (s)**: `kill -9`, 2P2D: the kill until the router routes to the killed instance again (its
  `GET /workers` lists it healthy and ready). `kill -9`, 1P1D: the kill until the router's `/readiness` counts every
  worker healthy and a probe request through it succeeds. SIGSTOP: the freeze until the same. A change: the run's
  start until the router routes to exactly the workers it lists after the run (the planned ones, all healthy) and
  keeps doing so to the end of the load. `-`: not recovered while the load ran (or, for peers, not published).
- Peers' **recovery** is their README's "Recovery Time": the kill until the killed process serves again."""
NOT_MEASURED = """\
- A router killed with redundancy: the test beds run one router per deployment (no test deploys a second one in
  front of the same workers), so the router's kill -9 is measured without redundancy only (1P1D). Dynamo's
  published frontend figure is also of a single frontend.
- The events run against the simulated engine (tests/sandbox/pdsim): its load and warm-up times are the test bed's
  (seconds, not sglang's minutes), so recovery times of a real deployment are longer by the difference in load time."""


def cell(value):
    """One table cell: "-" for None, seconds with two decimals, errors as `kind n` pairs."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "-"
    return str(value).replace("|", "\\|")


def table(rows, columns=COLUMNS):
    """Markdown table of ROWS (dicts) under COLUMNS ((key, heading), ...)."""
    lines = ["| " + " | ".join(h for _k, h in columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(row.get(k)) for k, _h in columns) + " |" for row in rows])


def markdown(rows, peers, meta):
    """The document: ROWS recorded by the tests, PEERS (faults.PEERS) and META (date, command, machine, selection,
    outcome of each module: {name: {"rc", "seconds", "target"}}, partial)."""
    outcome = "\n".join(
        f"- `pytest {m['target']}`: {'passed' if m['rc'] == 0 else 'FAILED (pytest exit status ' + str(m['rc']) + ')'}"
        f" in {m['seconds']:.0f} s"
        for m in meta["modules"].values()
    )
    partial = (
        "\n**Partial**: a narrowed selection (`--only` / `--select`), not the published table.\n"
        if meta.get("partial")
        else ""
    )
    missing = "" if rows else "\nNo test recorded a row.\n"
    return f"""# Error budget: faults and day-2 changes under load

Written by `tests/bench/error_budget.py` (do not edit by hand; run it again). What each event cost the requests
through the router, measured in the sandbox: systemd-nspawn hosts running the collection's units, the real routers
(sglang-router 0.3.2, SMG 1.13.0) and the simulated engine (tests/sandbox/pdsim), with realistic load times. Each
fault is also checked against `faults.BUDGET` by its test (tests/integration/faults.py).
{partial}
- Date: {meta["date"]}
- Commit: {meta["commit"]}
- Machine: {meta["machine"]}
- Command: `{meta["command"]}`
{outcome}

## Measured
{missing}
{table(rows)}

## Published peer figures

{table(peers, (*COLUMNS, ("source", "source")))}

## Columns

{DEFINITIONS}

## Not measured

{NOT_MEASURED}
"""


def machine():
    """What the run had: CPUs, memory, and the load average at the start (a quiet machine shows one near 0)."""
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    return f"{os.cpu_count()} CPUs (nproc), {mem_kib / 2**20:.1f} GiB memory, load average {load} at the start"


def commit():
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return proc.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODULES), help="run one of the two modules")
    parser.add_argument("--select", help="narrow each module's selection (pytest -k), e.g. scale_in")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"the document (default {OUTPUT})")
    args = parser.parse_args(argv)
    report = Path(tempfile.mkdtemp(prefix="error-budget-")) / "faults.jsonl"
    env = {**os.environ, "DISAGG_FAULT_REPORT": str(report), "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "machine": machine(),
        "command": shlex.join(["tests/bench/error_budget.py", *(sys.argv[1:] if argv is None else argv)]),
        "partial": bool(args.only or args.select),
        "modules": {},
    }
    for name, (path, selection) in MODULES.items():
        if args.only and name != args.only:
            continue
        target = [path, "-k", f"({selection}) and ({args.select})" if args.select else selection]
        print(f"== {name}: pytest {shlex.join(target)}", flush=True)
        began = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *target], cwd=REPO, env=env, check=False)
        meta["modules"][name] = {"target": shlex.join(target), "rc": proc.returncode,
                                 "seconds": time.monotonic() - began}  # fmt: skip
    rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    document = markdown(rows, faults.PEERS, meta)
    args.output.write_text(document)
    print(f"\n{document}\nwritten to {args.output}")
    failed = [name for name, m in meta["modules"].items() if m["rc"]]
    if failed:
        print(f"FAILED: the tests of {', '.join(failed)} failed (a budget was exceeded or a check failed)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
