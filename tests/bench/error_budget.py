"""The error budget: what each fault and each day-2 change costs the requests through the router, beside the published
peer figures. For kill -9 of a prefill, a decode and the router, with and without redundancy, for the changes a
run makes under load (a rolling flag change, an engine upgrade, a failed upgrade rolled back, a decode change that
stalls, scale-in, scale-out, rename), and for the routers' own changes and faults behind HAProxy (issue 39: a planned
router change, kill -9 of a router, kill -9 of HAProxy): requests sent and failed, those in flight at the event,
seconds to the last failure, seconds to recovery.

A benchmark, not a test: it runs the tests that make these events (tests/integration/test_faults.py: one host, 1P1D,
no redundancy; test_multihost.py: 2P2D over four sandbox hosts; test_routers.py: two routers behind HAProxy on one
host, then on two router hosts) with DISAGG_FAULT_REPORT set, where each writes one row (tests/integration/faults.py
record(); summary() for a fault, change_cost() for a change), and WRITES the table with its definitions, the
command, the date and the machine to docs/error-budget.md (--output), printing it too. An event of EXPECTED that no
test recorded is a row "not measured yet". Each fault is also checked by those tests against faults.BUDGET. Run it on
a quiet machine, as root:

    .venv/bin/python tests/bench/error_budget.py [--only faults|multihost|routers ...] [--select EXPR] [--output PATH]

--select narrows a module's selection with pytest's -k (for example `--select scale_in`): the document then says it
is partial. The whole run takes more than an hour (three sandboxes, one after the other, each brought up and taken
down by its test module).
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
# test_routers: the whole module, no -k: one deployment and a sequence of changes (module-scoped fixtures), each
# test starting from the state the one before it left.
MODULES = {
    "faults": ("tests/integration/test_faults.py", "kill_9 or frozen or one_router"),
    "multihost": (
        "tests/integration/test_multihost.py",
        "rerun or kill_9 or flag_change or stalled_decode or engine_upgrade or scale_in",
    ),
    "routers": ("tests/integration/test_routers.py", None),
}
# Events the table always lists, (fault, redundancy) as tests/integration/test_routers.py records them
# (faults.record; issue 39): a recorded row whose fault starts with the name and whose
# redundancy is the same fills one; an event no row fills is listed "not measured yet", never left out.
EXPECTED = (
    ("router planned change", "two routers behind HAProxy"),
    ("router planned change", "one router"),
    ("router kill -9", "two routers behind HAProxy"),
    ("router kill -9", "one router"),
    ("haproxy kill -9", "HAProxy on the router host"),
)
NOT_YET = "not measured yet"
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
- **event** of the routers (1P1D workers; two routers: tests/integration/test_routers.py, one router:
  test_faults.py): `router planned change`: a run that changes the routers' flags, version or program
  (sglang-router <-> SMG); with two routers it drains, restarts and enables one router at a time in HAProxy, with
  one it restarts the router (serving pauses). `router kill -9`: one router unit killed with SIGKILL; systemd
  restarts it and HAProxy, where there is one, takes it back once its `/readiness` answers 200.
  `haproxy kill -9`: the HAProxy of the router host killed with SIGKILL; its unit's drop-in restarts it after 1 s.
- **deployment**: `1P1D (none)`: one host, one instance of each role, nothing to route around the killed one.
  `2P2D (one of two)`: a router host, two prefill instances on one host, two decode instances on two hosts; one of
  two killed. `batches of one`: the rolling step takes one instance out of the router at a time. `two routers
  behind HAProxy`: `sglang_router_instances` with two routers, HAProxy on the public port checking each router's
  readiness every 500 ms (out after 3 failed checks). `one router`: the single router on the public port, no
  HAProxy. `HAProxy on the router host`: the one HAProxy in front of the routers of that host.
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
- Peers' **recovery** is their README's "Recovery Time": the kill until the killed process serves again.
- **in flight at the event**, one router's planned change: requests in flight when its unit stopped (systemd's
  ActiveExitTimestamp); its **recovery**: that stop until the load's poll of `/readiness` saw 200 again.
- **not measured yet**: a router event that no run of this script has recorded (`--only routers` for two
  routers, `--only faults` for one): its numbers come with the next run that includes that module, none are
  estimated here."""
NOT_MEASURED = """\
- The router rows marked "not measured yet" (a planned change and a kill -9, with and without redundancy, and a
  kill -9 of HAProxy) until a run of this script includes tests/integration/test_routers.py (two routers) and
  test_faults.py (one router). Dynamo's published
  frontend figure is of a single frontend; llm-d's failover is active-passive, not two routers serving at once.
- The loss of a whole router host: the collection does not deploy a floating address (keepalived) across router
  hosts, so a client of the lost host's address fails until it uses another router host's address.
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


def with_expected(rows, expected=EXPECTED):
    """ROWS, then a "not measured yet" row for each event of EXPECTED that none of them fills (its fault's name
    starts the row's fault, its redundancy is the row's)."""
    missing = [
        {"fault": fault, "redundancy": redundancy, **{key: NOT_YET for key, _h in COLUMNS[2:]}}
        for fault, redundancy in expected
        if not any(str(r.get("fault", "")).startswith(fault) and r.get("redundancy") == redundancy for r in rows)
    ]
    return [*rows, *missing]


def labelled(row):
    """ROW with its event in the first column: the fault, then the row's "event" where the test names it (the
    routers' module names each planned change: a flag change, a switch, a version change, and the layout)."""
    event = row.get("event")
    return {**row, "fault": f"{row['fault']}: {str(event).removeprefix('router ')}"} if event else row


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
    rows = [labelled(row) for row in with_expected(rows)]
    return f"""# Error budget: faults and day-2 changes under load

Written by `tests/bench/error_budget.py` (do not edit by hand; run it again). What each event cost the requests
through the router, measured in the sandbox: systemd-nspawn hosts running the collection's units, the real routers
(sglang-router 0.3.2, SMG 1.12.0 and 1.13.0) and the simulated engine (tests/sandbox/pdsim), with realistic load
times. Each fault is also checked against `faults.BUDGET` by its test (tests/integration/faults.py).
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
    parser.add_argument("--only", choices=sorted(MODULES), action="append",
                        help="run this module only (given more than once: these modules)")  # fmt: skip
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
        if args.only and name not in args.only:
            continue
        expression = " and ".join(f"({e})" for e in (selection, args.select) if e)
        target = [path, "-k", expression] if expression else [path]
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
