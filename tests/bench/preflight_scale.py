"""How the preflight scales with the number of hosts (issue 24, P7): playbooks/preflight.yml alone on the controller
for N worker hosts (each one prefill and one decode instance on a fake 8-GPU box) and one router host, every host a
local-connection inventory host; prints the wall seconds of each size (the median of RUNS runs) and the ratio 256/16.
A benchmark, not a test: run it on a quiet machine. No host changes (the preflight changes nothing).

    .venv/bin/python tests/bench/preflight_scale.py [--sizes 1,16,64,256] [--runs 3] [--keep]

What every host reads, as on a real run: the topology facts from the sandbox's fake GPU box (tests/sandbox/fakegpu.py
renders the 8x RTX PRO 6000 topology into a temp root; gpu_topology reads its sysfs and its fake nvidia-smi), the
model directory, the listeners and the unit records. The command lines are checked by the installed programs' own
parsers where the venvs exist: this run's engine venv (sglang_venvs_dir/engine-DIGEST) is a link to sglang 0.5.23's
parser venv (.cache/sglang-parser-venv, tests/sglang_parser/build_venv.sh) and the router venv a link to the project
venv (sglang-router 0.3.2). Without the parser venv it measures the first-install path ("flags not checked") and
says so. The parsers' verdicts are cached (sglang_cli_cache_dir): the first run fills the cache, as a first real run
does; later runs read it. Each host gets its own loopback advertise address (127.1.X.Y) and ports.

Beside each size it prints a floor: the same inventory, one play of one task per host that runs the cheapest module
there is (ansible.builtin.ping), with the same ansible.cfg (forks, pipelining). Every host here is a local connection,
so every host's module runs on the controller's own cores: what one Ansible module run per host costs on this
machine. --no-floor leaves it out.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / ".collections"))

from tests.sandbox import fakegpu  # noqa: E402

PARSER_VENV = REPO / ".cache" / "sglang-parser-venv"
SANDBOX_VARS = REPO / "inventories" / "sandbox" / "group_vars"


def venv_names(variables):
    """engine-DIGEST and router-DIGEST of the package sets in VARIABLES (as roles/sglang_deps/tasks/venvs.yml names
    them)."""
    from ansible_collections.disagg.sglang.plugins.module_utils.deps import venvs  # noqa: PLC0415

    paths = venvs.venvs(
        {
            "dir": "/",
            "packages": variables["sglang_deps_packages"],
            "nodeps": variables["sglang_deps_packages_nodeps"],
            "router_packages": variables["sglang_deps_router_packages"],
            "python": "python3",  # sglang_deps_python
            "wheelhouse": variables["sglang_deps_wheelhouse"],
            "module": variables["sglang_server_module"],
        }
    )
    return Path(paths["engine"]).name, Path(paths["router"]).name


def write_inventory(root, hosts, box):
    """An inventory of HOSTS worker hosts (prefill and decode) and one router host under ROOT; BOX: the fake GPU
    box's root. Returns (inventory dir, whether the parser venv is there)."""
    inv = root / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    for name in ("prefill.yml", "decode.yml"):
        shutil.copyfile(SANDBOX_VARS / name, inv / "group_vars" / name)
    shutil.copyfile(SANDBOX_VARS / "all.yml", inv / "group_vars" / "all" / "10-sandbox.yml")
    defaults = json.loads(
        subprocess.run(
            [
                str(VENV / "bin" / "python"),
                "-c",
                "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))",
            ],
            input=(REPO / "roles" / "sglang" / "defaults" / "main.yml").read_text(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    bench = {
        # the real engine (its parser checks the workers' lines) instead of the sandbox's simulator
        "sglang_server_module": "sglang.launch_server",
        "sglang_deps_packages": defaults["sglang_deps_packages"],
        "sglang_deps_wheelhouse": "",
        "sglang_model_path": str(box / "opt/models/DeepSeek-V4-Flash"),
        "sglang_topology_sysfs_root": str(box / fakegpu.SYSFS_ROOT.lstrip("/")),
        "sglang_topology_nvidia_smi_path": str(box / fakegpu.NVIDIA_SMI.lstrip("/")),
        "sglang_venvs_dir": str(root / "venvs"),
        "sglang_record_dir": str(root / "records"),
        "sglang_cli_cache_dir": str(root / "cli-cache"),
        "sglang_router_impl": "sglang_router",
    }
    (inv / "group_vars" / "all" / "20-bench.yml").write_text(json.dumps(bench, indent=1) + "\n")
    (root / "records").mkdir()
    (root / "venvs").mkdir()
    engine, router = venv_names(
        {
            **bench,
            "sglang_deps_packages_nodeps": defaults["sglang_deps_packages_nodeps"],
            "sglang_deps_router_packages": defaults["sglang_deps_router_impl_packages"]["sglang_router"],
        }
    )
    checked = (PARSER_VENV / "bin" / "python").exists()
    if checked:
        (root / "venvs" / engine).symlink_to(PARSER_VENV)
    (root / "venvs" / router).symlink_to(VENV)
    workers = {f"w{i:03d}": {"sglang_advertise_address": f"127.1.{i // 250}.{i % 250 + 1}"} for i in range(hosts)}
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": str(VENV / "bin" / "python")},
            "children": {
                "prefill": {"hosts": workers},
                "decode": {"hosts": {name: None for name in workers}},
                "router": {"hosts": {"r000": {"sglang_advertise_address": "127.1.255.1"}}},
            },
        }
    }
    (inv / "hosts.yml").write_text(json.dumps(inventory, indent=1) + "\n")
    return inv, checked


FLOOR_PLAYBOOK = """- name: One module run per host, the cheapest there is
  hosts: prefill:decode:router
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def preflight(inv, box, env_extra, playbook="playbooks/preflight.yml"):
    """Wall seconds of one run of PLAYBOOK (the preflight); exits with its output when it fails."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "FAKEGPU_ROOT": str(box / fakegpu.FAKEGPU),
        **env_extra,
    }
    started = time.monotonic()
    proc = subprocess.run(
        [str(VENV / "bin" / "ansible-playbook"), "-i", str(inv), playbook],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    recap = re.findall(r"changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout)
    if proc.returncode or not recap:
        raise SystemExit(f"preflight failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    if any(int(changed) for changed, _u, _f in recap):
        raise SystemExit(f"the preflight changed something:\n{proc.stdout[-3000:]}")
    return seconds, "flags not checked" in proc.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64,256", help="worker host counts, comma separated")
    parser.add_argument("--runs", type=int, default=3, help="runs per size (the median is printed)")
    parser.add_argument("--keep", action="store_true", help="keep the temp inventories (printed)")
    parser.add_argument("--no-floor", action="store_true", help="leave out the one-ping-per-host floor")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # not under /tmp: the rules refuse paths the hardened units cannot see (ProtectHome, PrivateTmp)
    (REPO / ".cache").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="preflight-scale-", dir=REPO / ".cache"))
    try:
        box = tmp / "box"
        fakegpu.render(box, "bench", fakegpu.DEFAULT_TOPOLOGY)
        floor = tmp / "floor.yml"
        floor.write_text(FLOOR_PLAYBOOK)
        medians = {}
        for size in sizes:
            inv, checked = write_inventory(tmp / f"n{size}", size, box)
            times = []
            for _run in range(args.runs):
                seconds, unchecked = preflight(inv, box, {})
                times.append(seconds)
            medians[size] = statistics.median(times)
            how = (
                "command lines checked by the installed parsers"
                if checked and not unchecked
                else ("first-install path: flags not checked (no parser venv; tests/sglang_parser/build_venv.sh)")
            )
            runs = ", ".join(f"{t:.1f}" for t in times)
            print(f"{size:4d} worker hosts + 1 router: {medians[size]:6.1f} s median of {args.runs} ({runs}); {how}",
                  flush=True)  # fmt: skip
            if not args.no_floor:
                seconds, _unchecked = preflight(inv, box, {}, str(floor))
                print(
                    f"     floor, one ansible.builtin.ping per host (local connections, the controller's cores): "
                    f"{seconds:6.1f} s; the preflight beyond it {medians[size] - seconds:6.1f} s",
                    flush=True,
                )
        if 16 in medians and 256 in medians:
            print(f"ratio 256/16: {medians[256] / medians[16]:.1f}")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
