"""Time the one-host converge against the multi-host converge, on this machine, in one run (not a test).

    .venv/bin/python scripts/bench_converge.py [--keep] [--name-1 clb1] [--name-m clbm]

Boots two sandboxes (root needed): NAME-1 with one host in all three groups (inventories/sandbox's group_vars),
and NAME-M with the four hosts of the multi-host scenario (tests/integration/multihost.py: a GPU-less router
host, a prefill host with two TP4 instances, two decode hosts of different GPU boxes). Converges each with
site.yml from a fresh host, then again (the no-op rerun), one after the other so they do not share the CPUs,
and prints the four wall times and the ratios multi-host / one-host. Takes both sandboxes down unless --keep.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import multihost  # noqa: E402
import sandbox_hosts  # noqa: E402

PY = str(REPO / ".venv" / "bin" / "python")
PLAYBOOK = str(REPO / ".venv" / "bin" / "ansible-playbook")
ENV = {
    **os.environ,
    "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
}


def converge(inventory, label):
    started = time.monotonic()
    proc = subprocess.run([PLAYBOOK, "-i", str(inventory), "site.yml"], cwd=REPO, env=ENV, capture_output=True,
                          text=True, check=False)  # fmt: skip
    seconds = time.monotonic() - started
    recap = proc.stdout.split("PLAY RECAP", 1)[-1].strip()
    print(f"{label}: {seconds:.1f} s (rc {proc.returncode})\n{recap}\n", flush=True)
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{proc.stdout[-4000:]}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name-1", default="clb1", help="sandbox of the one-host deployment")
    parser.add_argument("--name-m", default="clbm", help="sandbox of the multi-host deployment")
    parser.add_argument("--keep", action="store_true", help="leave both sandboxes up")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-converge-"))
    times = {}
    try:
        subprocess.run([PY, "-m", "tests.sandbox", "up", "--name", args.name_1], cwd=REPO, env=ENV, check=True)
        one = sandbox_hosts.write_inventory(tmp / "one", args.name_1, f"{args.name_1}-1")
        times["one-host first"] = converge(one, "one-host first converge")
        times["one-host rerun"] = converge(one, "one-host rerun")

        subprocess.run([PY, *multihost.sandbox_up_command(args.name_m)], cwd=REPO, env=ENV, check=True)
        multihost.write_inventory(tmp / "multi", args.name_m)
        times["multi-host first"] = converge(tmp / "multi", "multi-host first converge (4 hosts, 4 workers + router)")
        times["multi-host rerun"] = converge(tmp / "multi", "multi-host rerun")
    finally:
        if not args.keep:
            for name in (args.name_1, args.name_m):
                subprocess.run([PY, "-m", "tests.sandbox", "down", "--name", name], cwd=REPO, env=ENV, check=False)
    print("converge times on this machine, one run:")
    for key, value in times.items():
        print(f"  {key:<18} {value:7.1f} s")
    for phase in ("first", "rerun"):
        ratio = times[f"multi-host {phase}"] / times[f"one-host {phase}"]
        print(f"  ratio multi-host / one-host, {phase}: {ratio:.2f}")


if __name__ == "__main__":
    main()
