"""A table of bad inventories against a converged sandbox deployment: each fails in preflight, says why, changes
nothing.

One sandbox host (prefill, decode and router on it) is booted for the module and converged once with the sandbox
inventory, serving through the router. Each case of CASES then runs site.yml with one bad input (extra vars as JSON
through -e, or a changed inventory) and must:

  * fail (non-zero exit status) in the preflight (its plays), before the Dependencies play starts, with changed=0;
  * print the expected message fragments (the variable or flag, and the fix), matched on whitespace-collapsed output;
  * leave the host as it was: the sha256 of every /etc/systemd/system/sglang-*.service (and the listing of
    sglang-* files there, so a backup left behind shows), each unit's ExecMainStartTimestampMonotonic, NRestarts,
    MainPID and state, and the venv (sha256 of `pip freeze --all` and of the site-packages listing with mtimes).

Cases run two at a time (they only read the host); the host's fingerprint is taken before and after each pair. When
it changed, the deployment is converged back with the good inventory and each case of the pair is run again alone,
so the change is pinned on the case that made it and the cases after it start from a serving deployment.

After the table, a bounded batch of requests through the router (inside the guest, http://127.0.0.1:8000/generate)
must have zero failures, and the host's fingerprint must equal the one taken after the first converge.

A case marked xfail(strict=True) is a known gap of the collection (caught late, not caught, or a message that does
not name the variable and the fix); it is listed, not hidden, and its reason says what is missing.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from sandbox_hosts import GROUPS, VENV_BIN, down, run, ssh_config, up, write_inventory

from tests.sandbox import fakegpu

# The sandbox's name (DISAGG_BADINV_SANDBOX, to run beside another checkout's run); the rows name the host
# pytest-badinv-1, which stands for the host of this run in their messages.
SANDBOX = os.environ.get("DISAGG_BADINV_SANDBOX", "pytest-badinv")
HOST = f"{SANDBOX}-1"
ROW_HOST = "pytest-badinv-1"
PREFLIGHT_PLAY = "PLAY [Preflight, before anything on the hosts changes]"
CONCURRENCY = 2
SERVE_REQUESTS = 48
SERVE_THREADS = 6

CASES_FILE = Path(__file__).resolve().parents[1] / "cases" / "bad_inventories.yml"


@dataclass(frozen=True)
class Case:
    id: str
    expect: tuple[str, ...]
    extra: dict | None = None  # extra vars, passed as JSON through -e
    groups: tuple[str, ...] = GROUPS  # inventory change: the groups the host is in
    host_vars: dict = field(default_factory=dict)  # inventory change: variables on the host in hosts.yml
    # A known gap of the collection: the case runs as xfail(strict=True), so closing the gap turns it into a
    # failure (XPASS) until the mark is dropped. None open today.
    xfail: str | None = None


# The rows of tests/cases/bad_inventories.yml marked sandbox: true (every row also runs as a unit test of the
# rules in tests/unit/plan/test_rules.py).
CASES = [
    Case(
        id=row["id"],
        expect=tuple(fragment.replace(ROW_HOST, HOST) for fragment in row["expect"]),
        extra=row.get("extra"),
        groups=tuple(row.get("groups") or GROUPS),
        host_vars=row.get("host_vars") or {},
        xfail=row.get("xfail"),
    )
    for row in yaml.safe_load(CASES_FILE.read_text())
    if row.get("sandbox")
]


# --------------------------------------------------------------------------------------------------
# running things
# --------------------------------------------------------------------------------------------------


def collapse(text: str) -> str:
    return " ".join(text.split())


FINGERPRINT = r"""
set -eu
cd /etc/systemd/system
echo "== files"; ls -l --time-style=+%s | awk '$NF ~ /^sglang-/ {print $1, $5, $6, $NF}'
echo "== sha256"; sha256sum sglang-*.service
echo "== units"
for f in sglang-*.service; do
  systemctl show -p Id -p ActiveState -p SubState -p UnitFileState -p MainPID \
    -p ExecMainStartTimestampMonotonic -p NRestarts "$f" | sort | tr '\n' ' '; echo
done
echo "== venvs"; ls /opt/sglang/venvs
for v in /opt/sglang/venvs/*/; do
  "$v/bin/python" -m pip freeze --all --disable-pip-version-check | sha256sum
  ls -l --time-style=+%s "$v"lib/python3*/site-packages | sha256sum
done
"""


class Host:
    def __init__(self, ssh_config: Path):
        self.ssh_config = ssh_config

    def sh(self, script: str, timeout=120) -> str:
        return run(["ssh", "-F", str(self.ssh_config), HOST, script], timeout=timeout).stdout

    def fingerprint(self) -> str:
        return self.sh(FINGERPRINT)


def assert_serving_units(fingerprint: str):
    states = re.findall(r"ActiveState=(\S+)", fingerprint)
    assert len(states) >= 3 and set(states) == {"active"}, f"a unit is not running:\n{fingerprint}"


def diff(before: str, after: str) -> str:
    old, new = before.splitlines(), after.splitlines()
    return "\n".join(
        [f"- {line}" for line in old if line not in new] + [f"+ {line}" for line in new if line not in old]
    )


@dataclass
class Outcome:
    case: Case
    rc: int
    output: str
    seconds: float
    before: str
    after: str
    restored: bool = False  # the host changed and was converged back


class Table:
    """Runs the cases, two at a time, bracketed by the host's fingerprint."""

    def __init__(self, host: Host, inventory: Path, workdir: Path):
        self.host, self.inventory, self.workdir = host, inventory, workdir
        self.outcomes: dict[str, Outcome] = {}
        self.restores = 0
        self.unattributed: list[list[str]] = []  # pairs that changed the host while neither case alone did

    def converge(self) -> subprocess.CompletedProcess:
        proc = run([str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), "site.yml"])
        assert re.search(r"The capital of France is -> +\S", proc.stdout), "no answer through the router was printed"
        return proc

    def play(self, case: Case) -> tuple[int, str, float]:
        inventory = self.inventory
        if case.groups != GROUPS or case.host_vars:
            inventory = self.workdir / f"inventory-{case.id}"
            if not inventory.exists():
                write_inventory(inventory, SANDBOX, HOST, case.groups, case.host_vars)
        cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "site.yml"]
        if case.extra is not None:
            cmd += ["-e", json.dumps(case.extra)]
        proc = run(cmd, check=False, timeout=600)
        return proc.returncode, proc.stdout + proc.stderr, proc.seconds

    def run_batch(self, cases: list[Case]) -> bool:
        """Run `cases` concurrently between two fingerprints; False (and the host restored) when it changed."""
        before = self.host.fingerprint()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases)) as pool:
            results = list(pool.map(self.play, cases))
        after = self.host.fingerprint()
        for case, (rc, output, seconds) in zip(cases, results, strict=True):
            self.outcomes[case.id] = Outcome(case, rc, output, seconds, before, after)
        if after == before:
            return True
        self.restores += 1
        self.converge()
        return False

    def run_all(self, cases: list[Case]):
        for start in range(0, len(cases), CONCURRENCY):
            batch = cases[start : start + CONCURRENCY]
            if self.run_batch(batch):
                continue
            if len(batch) == 1:
                self.outcomes[batch[0].id].restored = True
                continue
            changed = [case.id for case in batch if not self.run_batch([case])]  # pin it on the case that did it
            for case_id in changed:
                self.outcomes[case_id].restored = True
            if not changed:
                self.unattributed.append([case.id for case in batch])


SERVE = r"""
import concurrent.futures, json, sys, time, urllib.request
N, THREADS = int(sys.argv[1]), int(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def one(i):
    body = json.dumps({"text": f"Request {i}: the capital of France is",
                       "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode()
    req = urllib.request.Request("http://127.0.0.1:8000/generate", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with opener.open(req, timeout=30) as resp:
            data = json.loads(resp.read())
            return None if resp.status == 200 and isinstance(data.get("text"), str) else f"{i}: {resp.status} {data}"
    except Exception as exc:
        return f"{i}: {type(exc).__name__}: {exc}"
started = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
    errors = [e for e in pool.map(one, range(N)) if e]
seconds = round(time.monotonic() - started, 2)
print(json.dumps({"sent": N, "failed": len(errors), "errors": errors[:5], "seconds": seconds}))
"""


def serve_batch(host: Host) -> dict:
    out = host.sh(f"timeout 300 python3 -c {shlex.quote(SERVE)} {SERVE_REQUESTS} {SERVE_THREADS}", timeout=330)
    return json.loads(out.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------
# fixtures and tests
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The sandbox host, converged once with the good inventory, and its fingerprint after that converge."""
    started = time.monotonic()
    up(SANDBOX)
    workdir = tmp_path_factory.mktemp("badinv")
    host = Host(ssh_config(SANDBOX))
    table = Table(host, write_inventory(workdir / "inventory", SANDBOX, HOST), workdir)
    first = table.converge()
    print(f"first converge: {first.seconds:.1f} s")
    baseline = host.fingerprint()
    assert_serving_units(baseline)
    yield {"host": host, "table": table, "baseline": baseline, "started": started, "first": first.stdout}
    down(SANDBOX)


@pytest.fixture(scope="module")
def table(deployment):
    """Every case of CASES run once against the deployment."""
    started = time.monotonic()
    deployment["table"].run_all(CASES)
    print(f"table: {len(CASES)} cases in {time.monotonic() - started:.1f} s")
    return deployment["table"]


def judge(outcome: Outcome) -> list[str]:
    """What is wrong with one case's run (empty: the case passes)."""
    problems = []
    flat = collapse(outcome.output)
    if outcome.rc == 0:
        problems.append("the run succeeded")
    if PREFLIGHT_PLAY not in outcome.output:
        problems.append("the preflight play did not run")
    # playbooks/preflight.yml's plays are named "Preflight..." (the workers', the router's, the deployment's)
    plays = re.findall(r"^PLAY \[(.*?)\]", outcome.output, re.MULTILINE)
    after = [play for play in plays if not play.startswith("Preflight")]
    if after:
        problems.append(f"not stopped in the preflight: it went on to {after}")
    recap = re.search(rf"^{re.escape(HOST)}\s+:.*\bchanged=(\d+)", outcome.output, re.MULTILINE)
    if recap and int(recap.group(1)) != 0:
        problems.append(f"changed={recap.group(1)} in the recap")
    missing = [fragment for fragment in outcome.case.expect if collapse(fragment) not in flat]
    if missing:
        problems.append(f"message lacks {missing}")
    if "Traceback (most recent call last)" in outcome.output or "MODULE FAILURE" in outcome.output:
        problems.append("a Python traceback in the output")
    if re.search(r"Wait until|is healthy|health", "\n".join(re.findall(r"^TASK \[(.*?)\]", outcome.output, re.M))):
        problems.append("a health wait ran")
    if re.search(r"\bTemplateSyntaxError\b|\bUndefinedError\b|has no attribute|is undefined", outcome.output):
        problems.append("a Jinja error instead of a message")
    if outcome.before != outcome.after or outcome.restored:
        problems.append(f"the host changed (converged back):\n{diff(outcome.before, outcome.after)}")
    return problems


def first_error(output: str) -> str:
    found = re.search(r"^\[ERROR\]: (.*?)^Origin:", output, re.MULTILINE | re.DOTALL)
    return collapse(found.group(1))[:400] if found else "(no [ERROR] line)"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case.id, marks=[pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else [])
        for case in CASES
    ],
)
def test_bad_inventory_fails_in_preflight_and_changes_nothing(table, case, capsys):
    outcome = table.outcomes[case.id]
    problems = judge(outcome)
    verdict = "PASS" if not problems else ("XFAIL (known gap)" if case.xfail else "FAIL")
    with capsys.disabled():
        print(
            f"\n[bad-inventory] {case.id}: {verdict} - rc {outcome.rc}, {outcome.seconds:.1f} s"
            + (f"; {'; '.join(p.splitlines()[0] for p in problems)}" if problems else "")
            + f" | {first_error(outcome.output)}"
        )
    assert not problems, "\n".join(problems) + f"\n--- output tail:\n{outcome.output[-5000:]}"


def test_table_has_enough_distinct_cases():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(CASES) - sum(bool(case.xfail) for case in CASES) >= 20, "at least 20 cases must pass"
    inputs = [json.dumps([c.extra, c.groups, c.host_vars], sort_keys=True) for c in CASES]
    assert len(inputs) == len(set(inputs)), "two cases have the same bad input"


def test_deployment_still_serves_after_the_table(deployment, table, capsys):
    result = serve_batch(deployment["host"])
    after = deployment["host"].fingerprint()
    assert_serving_units(after)
    with capsys.disabled():
        print(
            f"\n[bad-inventory] after {len(CASES)} cases: {result['sent']} requests through the router, "
            f"{result['failed']} failed, {result['seconds']} s; restores: {table.restores}; "
            f"module time so far {time.monotonic() - deployment['started']:.1f} s"
        )
    assert result["failed"] == 0, result
    assert not table.unattributed, f"these pairs changed the host, neither case alone did: {table.unattributed}"
    if table.restores == 0:
        assert after == deployment["baseline"], (
            f"the host differs from the first converge:\n{diff(deployment['baseline'], after)}"
        )


# --------------------------------------------------------------------------------------------------
# host readiness: a clean host passes; the opt-in apply changes only what it lists, once (issue 41)
# --------------------------------------------------------------------------------------------------

SETTINGS = r"""
root=/opt/fakegpu/sysroot
echo "numa_balancing=$(cat $root/proc/sys/kernel/numa_balancing)"
echo "governors=$(cat $root/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor | sort | uniq -c | xargs)"
echo "thp=$(cat $root/sys/kernel/mm/transparent_hugepage/enabled)"
unit=nvidia-persistenced.service
echo "persistenced=$(systemctl is-enabled $unit || true)/$(systemctl is-active $unit || true)"
echo "persistence_mode=$(nvidia-smi -q | awk -F': ' '/Persistence Mode/ {print $2}' | sort | uniq -c | xargs)"
for f in /etc/sysctl.d/90-disagg-sglang-numa-balancing.conf /etc/tmpfiles.d/disagg-sglang-governor.conf; do
  echo "$f=$(test -f $f && sha256sum < $f | cut -c1-12 || echo absent)"
done
"""
APPLY = {"sglang_host_apply": ["numa_balancing", "governor", "persistence"]}


def recap_changed(output: str) -> int:
    found = re.search(rf"^{re.escape(HOST)}\s+:.*\bchanged=(\d+)", output, re.MULTILINE)
    assert found, output[-3000:]
    return int(found.group(1))


def changed_tasks(output: str) -> list[str]:
    """The names of the tasks that reported changed on the host (TASK [...] followed by a changed: line)."""
    names, current = [], None
    for line in output.splitlines():
        task = re.match(r"^TASK \[(.*?)\]", line)
        if task:
            current = task.group(1)
        elif current and re.match(rf"^changed: \[{re.escape(HOST)}", line) and current not in names:
            names.append(current)
    return names


def test_a_clean_host_passes_the_readiness_rules(deployment):
    """The first converge read the sandbox's clean readiness (tests/sandbox/fakegpu.py READINESS) and found nothing."""
    first = collapse(deployment["first"])
    assert "host readiness not read" not in first
    for row in ("the IOMMU translates DMA", "PCIe ACS redirects", "persistence mode off", "automatic NUMA balancing"):
        assert row not in first, row


def test_host_apply_changes_only_what_it_lists_once_and_check_mode_changes_nothing(deployment, table, capsys):
    host, inventory = deployment["host"], table.inventory
    fakegpu.set_readiness(SANDBOX, HOST, numa_balancing=1, governor="powersave", persistence="Disabled")
    try:
        dirty = host.sh(SETTINGS)
        units = host.fingerprint()
        base = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "site.yml", "-e", json.dumps(APPLY)]

        check = run([*base, "--check", "--diff"], timeout=600)
        flat = collapse(check.stdout)
        assert f"-{fakegpu.SYSFS_ROOT}/proc/sys/kernel/numa_balancing: 1" in check.stdout
        assert f"+{fakegpu.SYSFS_ROOT}/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: performance" in (
            check.stdout
        )
        assert "+kernel.numa_balancing = 0" in check.stdout  # the boot-time file's diff
        assert "automatic NUMA balancing on: kernel.numa_balancing = 1: this run sets it (sglang_host_apply: " in flat
        assert host.sh(SETTINGS) == dirty, "check mode changed a host setting"

        applied = run(base, timeout=600)
        after = host.sh(SETTINGS)
        done = changed_tasks(applied.stdout)
        role = "disagg.sglang.sglang_worker : "
        assert done == [
            role + "Set the kernel settings sglang_host_apply lists, now (kernel.numa_balancing, the CPU governor)",
            role + "Write the files that set them again at boot (/etc/sysctl.d, /etc/tmpfiles.d)",
            role + "Enable and start the units sglang_host_apply lists (the NVIDIA persistence daemon)",
        ], done
        assert "numa_balancing=0" in after and "governors=64 performance" in after
        assert "persistenced=enabled/active" in after and "persistence_mode=8 Enabled" in after
        assert "absent" not in after
        thp = [line for line in after.splitlines() if line.startswith("thp=")]
        assert thp == [line for line in dirty.splitlines() if line.startswith("thp=")]  # not listed: untouched
        assert host.fingerprint() == units, "a worker or router unit changed"

        rerun = run(base, timeout=600)
        assert (recap_changed(rerun.stdout), host.sh(SETTINGS)) == (0, after)
        assert "this run sets it" not in collapse(rerun.stdout)  # the preflight reads it applied
        with capsys.disabled():
            print(f"\n[host-apply] before: {' | '.join(dirty.split())}\n[host-apply] after: "
                  f"{' | '.join(after.split())}\n[host-apply] changed tasks: {len(done)}; rerun changed="
                  f"{recap_changed(rerun.stdout)}")  # fmt: skip
    finally:
        host.sh(
            "systemctl disable --now nvidia-persistenced.service; rm -f "
            "/etc/sysctl.d/90-disagg-sglang-numa-balancing.conf /etc/tmpfiles.d/disagg-sglang-governor.conf"
        )
        fakegpu.set_readiness(SANDBOX, HOST)
