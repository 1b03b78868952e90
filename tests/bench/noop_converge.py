"""How long a no-op converge of the sandbox host takes: site.yml once to converge, then RUNS more runs that must
change nothing; prints each run's wall time and the median. A benchmark, not a test: run it on a quiet machine.

    .venv/bin/python tests/bench/noop_converge.py [--runs 3] [--keep]

It uses its own sandbox (bench-noop), brought up if needed and taken down at the end unless --keep.
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from sandbox_hosts import down, run, up, write_inventory  # noqa: E402

NAME = "bench-noop"


def converge(inventory):
    started = time.monotonic()
    proc = run(["ansible-playbook", "-i", str(inventory), "site.yml"], check=False, timeout=1800, quiet=True)
    seconds = time.monotonic() - started
    recap = re.search(r"changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout)
    if proc.returncode or not recap:
        raise SystemExit(f"converge failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return seconds, int(recap.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up")
    args = parser.parse_args()
    up(NAME)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            inventory = write_inventory(Path(tmp) / "inv", NAME, f"{NAME}-1")
            seconds, changed = converge(inventory)
            print(f"first converge: {seconds:.1f} s, changed={changed}", flush=True)
            times = []
            for index in range(args.runs):
                seconds, changed = converge(inventory)
                if changed:
                    raise SystemExit(f"no-op run {index + 1} changed {changed} things: not a no-op")
                times.append(seconds)
                print(f"no-op run {index + 1}: {seconds:.1f} s, changed=0", flush=True)
            print(f"no-op converge median of {args.runs}: {statistics.median(times):.1f} s")
    finally:
        if not args.keep:
            down(NAME)


if __name__ == "__main__":
    try:
        main()
    except subprocess.TimeoutExpired as exc:
        raise SystemExit(f"timed out: {exc}") from exc
