"""Faults under load on a sandbox host: kill -9 of decode, prefill and router, and a config push that breaks decode.

One sandbox host (`pytest-faults-1`) is converged with site.yml, the sandbox group_vars and extra vars that give
the simulator's token latency 5 ms (TIMING); the engines load and warm up as on every sandbox host
(tests/sandbox/engine_timing.py), RestartSec and the router keep the roles' defaults.
Load comes from tests/sandbox/load.py, copied into the guest and run there over ssh (the router listens on
the guest's loopback): bounded in requests, concurrency, per-request timeout and total time.

For each unit in turn: a load of 300 requests at concurrency 16 (20 starts/s) runs, the unit is killed with
SIGKILL mid-load, systemd must restart it, and the deployment counts as ready again once the router's
/readiness counts every worker healthy AND a probe request through it succeeds. /readiness alone is not
enough: after a decode dies, the router keeps answering ready while its circuit breaker turns every request
away with 503 for about 60 s (measured here; the breaker's default --cb-timeout-duration-secs). Errors are
split by when the request started: before the kill, during recovery, after ready. Once ready, no request
may fail, neither in the rest of the load nor in a following batch of 100.

The last test pushes a decode configuration that fails at start-up (with no traffic during the push): the run
must fail with decode's journal, and the previous unit must be back, active with the previous configuration,
and a batch of 100 requests sent as soon as the run has returned must all succeed.

Each fault is also judged by what the services recorded (tests/integration/faults.py): the prefill's own /metrics
KV gauges back at idle after the fault, the time to recovery within faults.RECOVERY_BOUND, and fail fast: with a 30 s
client timeout no request ends later than faults.FAIL_FAST_S (15 s) after it was sent, except those a router sent
within its detection window at a fault of faults.KNOWN_HANGS (measured, with the router source that keeps them).
A prefill frozen with SIGSTOP for 40 s under load through SMG is judged the same way, and by the decode's own record
(every request it held at the freeze ended within sglang's heartbeat bound); a decode's kill -9 again through SMG.

The counts and times of each fault are printed (also under `make test`, bypassing output capture).
"""

import json
import re
import shlex
import subprocess
import time

import faults
import pytest
import yaml
from sandbox_hosts import REPO, VENV_BIN, down, run, ssh_config, up, write_inventory

SANDBOX = "pytest-faults"
HOST = f"{SANDBOX}-1"
LOAD = REPO / "tests" / "sandbox" / "load.py"
GUEST_LOAD = "/root/load.py"
TOKEN_LATENCY = "0.005"
# The engines start as sglang's do, only shorter (every sandbox host's default, tests/sandbox/engine_timing.py: a
# 10 s weight load with the port closed, a 2 s warm-up); sglang_restart_sec stays at the role's default (10 s), the
# scheduler's exit after a drain at the double's default (15 s, sglang's bound). A killed unit loads for
# faults.STARTUP_DELAY s instead (its slow_start drop-in), longer than the router's detection.
TIMING = {
    "sglang_prefill_extra_env": {"SGLANG_SIM_TOKEN_LATENCY": TOKEN_LATENCY},
    "sglang_decode_extra_env": {"SGLANG_SIM_TOKEN_LATENCY": TOKEN_LATENCY},
}
# The fault load: 16 at a time, at most 20 starts/s, until the test stops it AFTER_READY_S after the deployment is
# ready again (its stop file), so the load goes on past the recovery however long that takes on a busy machine: the
# kill lands 2 s in, the killed unit loads for faults.STARTUP_DELAY s before it serves again. The count and the
# deadline only bound a load whose stop never comes (3000 requests at 20/s take 150 s; a fixed 80 s load of 1400 ended
# before a recovery of 69 s through SMG when the requests failed fast).
FAULT_REQUESTS, FAULT_DEADLINE = 3000, 150
FAULT_STOP = "/root/fault.stop"
AFTER_READY_S = 8.0
# The client's timeout (faults.FAULT_CLIENT_TIMEOUT, 30 s) is longer than the fail-fast bound (faults.FAIL_FAST_S,
# 15 s): a request the fault touched must end before it, served or with an error; none waits the client's timeout out.
FAULT_CONCURRENCY = 16
FAULT_LOAD = ["run", "--requests", str(FAULT_REQUESTS), "--concurrency", str(FAULT_CONCURRENCY), "--rate", "20",
              "--timeout", str(faults.FAULT_CLIENT_TIMEOUT), "--deadline", str(FAULT_DEADLINE),
              "--readiness", "--stop-file", FAULT_STOP]  # fmt: skip
AFTER_LOAD = ["run", "--requests", "100", "--concurrency", "16", "--timeout", "10", "--deadline", "30"]
KILL_AFTER = 2.0  # seconds into the load
READY_TIMEOUT = 120  # the router's circuit breaker alone holds requests off for about 60 s
PREFILL_PORT = yaml.safe_load((REPO / "inventories/sandbox/group_vars/prefill.yml").read_text())[
    "sglang_prefill_instances"
][0]["port"]
DECODE_PORT = yaml.safe_load((REPO / "inventories/sandbox/group_vars/decode.yml").read_text())[
    "sglang_decode_instances"
][0]["port"]

pytestmark = pytest.mark.usefixtures("sandbox_root")  # not root: fails, never skips (conftest.py)


def report(capsys, line):
    """A result line that shows in pytest's output even when it captures (make test)."""
    with capsys.disabled():
        print(f"\n[faults] {line}", flush=True)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The converged sandbox host: ssh command prefix, inventory and the extra-vars file of the converge."""
    up(SANDBOX)
    try:
        inv = write_inventory(tmp_path_factory.mktemp("faults-inventory"), SANDBOX, HOST)
        config = ssh_config(SANDBOX)
        timing = tmp_path_factory.mktemp("faults-vars") / "timing.json"  # not in the inventory dir: it would be read
        timing.write_text(json.dumps(TIMING))
        h = {"ssh": ["ssh", "-F", str(config), "-o", "BatchMode=yes", HOST], "inventory": str(inv),
             "timing": str(timing), "ssh_config": str(config)}  # fmt: skip
        started = time.monotonic()
        run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml", "-e", f"@{timing}"])
        print(f"converged in {time.monotonic() - started:.1f} s")
        run(["scp", "-q", "-F", str(config), str(LOAD), f"{HOST}:{GUEST_LOAD}"])
        yield h
    finally:
        down(SANDBOX)


def on_host(host, command, *, check=True, timeout=120):
    return run([*host["ssh"], command], check=check, timeout=timeout, quiet=True)


def load(host, *args, timeout=180):
    """Runs load.py in the guest and returns its JSON."""
    proc = on_host(host, shlex.join(["python3", GUEST_LOAD, *args]), check=False, timeout=timeout)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"load.py {' '.join(args)} gave no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def wait_ready(host, timeout=READY_TIMEOUT):
    """Waits until /readiness counts every worker healthy and a probe request succeeds; returns load.py's JSON."""
    result = load(host, "wait-ready", "--timeout", str(timeout), "--probes", "1", timeout=timeout + 30)
    assert result["ready"], f"not ready within {timeout} s: {result}"
    return result


def unit_state(host, unit):
    out = on_host(host, f"systemctl show -p NRestarts -p ActiveState -p SubState -p MainPID {unit}.service").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def guest_now(host):
    return float(on_host(host, "date +%s.%N").stdout)


def prefill_loads(host):
    """The prefill's own /v1/loads answer (its published load snapshot, faults.KV_IDLE_TIMEOUT says why not /metrics),
    or None when it did not answer."""
    url = f"http://127.0.0.1:{PREFILL_PORT}/v1/loads?include=core"
    proc = on_host(host, f"curl -sf --noproxy '*' -m 5 '{url}'", check=False)
    return proc.stdout if proc.returncode == 0 else None


def assert_kv_idle(host):
    """The prefill's KV back at idle by what it records itself (faults.wait_kv_idle); returns the seconds waited."""
    idle, waited, reading = faults.wait_kv_idle(lambda: prefill_loads(host))
    assert idle, f"the prefill's KV is not back at idle {waited} s after the load: {reading}"
    return waited


def split_errors(result, kill_at, ready_at):
    """Requests of a load and their errors by phase: "before" (ended before the kill), "during" (in flight at
    the kill or started before the deployment was ready again), "after" (started once it was ready)."""
    t0 = result["t0"]
    split = {phase: {"requests": 0, "errors": {}} for phase in ("before", "during", "after")}
    for start, end, status in result["timeline"]:
        phase = split["before" if t0 + end < kill_at else "during" if t0 + start < ready_at else "after"]
        phase["requests"] += 1
        if status != "200":
            phase["errors"][status] = phase["errors"].get(status, 0) + 1
    return split


def ok_text(result):
    return f"{result['ok']}/{result['total']} ok" + (f" {result['errors']}" if result["errors"] else "")


def phase_text(phase):
    errors = phase["errors"]
    return f"{sum(errors.values())}/{phase['requests']} failed" + (f" {errors}" if errors else "")


@pytest.mark.parametrize(
    "unit", ["sglang-decode0", "sglang-prefill0", "sglang-router"], ids=lambda u: u.removeprefix("sglang-")
)
def test_kill_9_under_load_recovers_and_then_nothing_fails(host, unit, capsys):
    kill_9_under_load(host, unit, capsys, "sglang_router")


def kill_9_under_load(host, unit, capsys, router):
    """kill -9 of UNIT mid-load through ROUTER (the sglang_router_impl deployed now), judged as the docstring says."""
    wait_ready(host)  # a clean start: the previous fault is over
    restarts = int(unit_state(host, unit)["NRestarts"])
    if unit != "sglang-router":  # the real router starts as fast as it does; a worker loads its weights first
        on_host(host, faults.slow_start(unit))
    loader = subprocess.Popen(
        [*host["ssh"], shlex.join(["python3", GUEST_LOAD, *FAULT_LOAD])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(KILL_AFTER)
        kill_at = float(on_host(host, f"date +%s.%N; systemctl kill --signal=SIGKILL {unit}.service").stdout)

        # systemd brings it back (RestartSec: the role's default, 10 s): bounded poll of the restart count and state
        deadline, state = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            state = unit_state(host, unit)
            if int(state["NRestarts"]) > restarts and state["ActiveState"] == "active":
                break
            time.sleep(0.2)
        active_at = guest_now(host)
        assert int(state["NRestarts"]) > restarts, f"systemd did not restart {unit}: {state}"
        assert state["ActiveState"] == "active", f"{unit} is not active again: {state}"

        ready = wait_ready(host)  # while the load runs
        time.sleep(AFTER_READY_S)  # requests after the recovery, then the load stops
        on_host(host, f"touch {FAULT_STOP}")
        out, err = loader.communicate(timeout=120)
    finally:
        on_host(host, faults.normal_start(unit), check=False)
        if loader.poll() is None:
            loader.kill()
            loader.communicate()
    assert loader.returncode == 0, f"load failed ({loader.returncode}): {out}\n{err}"
    result = json.loads(out)
    split = split_errors(result, kill_at, ready["at"])
    cost = faults.summary(result, kill_at, ready["at"])
    kv_idle_s = assert_kv_idle(host)  # before any other load: the KV the fault's requests held is gone
    late = faults.late_requests(result)
    after = load(host, *AFTER_LOAD)

    readiness = " ".join(f"{t:+.1f}s:{seen}" for t, seen in result["readiness"])
    report(
        capsys,
        f"kill -9 {unit}: systemd restarted it (NRestarts {restarts}->{state['NRestarts']}), active again "
        f"{active_at - kill_at:.1f} s after the kill; ready again (readiness + a good probe) after "
        f"{ready['at'] - kill_at:.1f} s (probe failures {ready['probe_failures'] or 0}). Load: {result['total']} "
        f"requests in {result['elapsed']:.1f} s, {result['ok']} ok; before the kill {phase_text(split['before'])}; "
        f"during recovery {phase_text(split['during'])}; after ready {phase_text(split['after'])}. "
        f"Next batch: {ok_text(after)}. "
        f"/readiness during the load (s from its start): {readiness}",
    )
    report(capsys, f"kill -9 {unit} through {router} (no redundancy): {cost['failed']}/{cost['sent']} failed, "
                   f"the last one started "
                   f"{cost['last_failure_s']} s after the kill; the longest request took "
                   f"{faults.latest_end_s(result)} s "
                   f"({len(late)} over {faults.FAIL_FAST_S:.0f} s); ready again after {cost['recovery_s']} s; "
                   f"the prefill's KV at idle {kv_idle_s} s after the load")  # fmt: skip
    if unit == "sglang-router":  # the error budget's row of a router without redundancy (issue 39)
        faults.record(f"router kill -9 ({router})", "one router", cost)
    else:
        faults.record(f"kill -9 {unit.removeprefix('sglang-')} ({router})", "1P1D (none)", cost)
    # it ran until the test stopped it, AFTER_READY_S after the recovery: not cut short by its count or deadline
    assert result["stopped_by"] == "stop-file", f"the load stopped early: {result['stopped_by']} ({result['total']})"
    assert split["after"]["requests"] > 0, "the load ended before the deployment was ready again: nothing tested after"
    role = unit.removeprefix("sglang-").rstrip("0123456789")
    assert faults.over_budget(cost, role, False) == [], faults.over_budget(cost, role, False)
    assert faults.recovery_problems(cost, role) == [], faults.recovery_problems(cost, role)
    if (router, role) in faults.KNOWN_HANGS:
        assert faults.hang_problems(result, kill_at) == [], faults.hang_problems(result, kill_at)
    else:
        assert late == [], f"requests ended later than {faults.FAIL_FAST_S} s after they were sent: {late[:20]}"
    if unit != "sglang-router":
        assert cost["recovery_s"] > faults.STARTUP_DELAY, f"{unit} served again before its weights loaded: {cost}"
    assert not split["before"]["errors"], f"requests failed before the kill: {split['before']}"
    assert not split["after"]["errors"], f"requests failed after the deployment was ready again: {split['after']}"
    assert after["total"] == 100 and after["ok"] == 100, f"the batch after recovery had failures: {after['errors']}"


def unit_sha256(host, unit):
    return on_host(host, f"sha256sum /etc/systemd/system/{unit}.service").stdout.split()[0]


# Two ways a pushed decode configuration fails: it exits while loading (systemd sees it fail), or it comes up and its
# scheduler stalls (sglang's unhealthy state, 0.5.23 http_server.py health_generate: the port takes /health and
# nothing answers for SGLANG_HEALTH_CHECK_TIMEOUT, generations hang too; the double's SGLANG_SIM_STALL_AFTER). The
# stall is recognised after sglang_stall_timeout, not after sglang_health_timeout (sized for a load: 600 s here, so a
# run that waited it out would far exceed the bound asserted). Both are rolled back.
# Each row: the double's environment of the broken decode, and a line of its journal the run's failure must carry.
BROKEN_DECODE = {
    "exits-at-start-up": ({"SGLANG_SIM_FAIL": "startup:exit"}, "SGLANG_SIM_FAIL startup:exit: simulated failure"),
    # sglang's own check gives up after 10 s (its 503 logs "Health check failed"), the probes' 5 s see nothing
    "stalls-once-up": ({"SGLANG_SIM_STALL_AFTER": "0", "SGLANG_HEALTH_CHECK_TIMEOUT": "10"}, "Health check failed"),
}
HEALTH_TIMEOUT = 600  # sglang_health_timeout of the push: a load's budget, never what ends these waits
STALL_TIMEOUT = 20  # sglang_stall_timeout of the push
PUSH_BOUND = 240  # seconds: the run (plan, deps check, restart, stall bound, rollback, router) far below HEALTH_TIMEOUT


@pytest.mark.parametrize("failure", list(BROKEN_DECODE))
def test_a_decode_push_that_fails_rolls_back_and_keeps_serving(host, capsys, failure):
    """A config push that breaks decode fails the run within its bound with one [ERROR]: decode's, with its journal;
    the previous decode is back."""
    unit = "sglang-decode0"
    env_bad, journal_line = BROKEN_DECODE[failure]
    wait_ready(host)
    before = unit_sha256(host, unit)
    broken = {
        "sglang_decode_extra_env": {"SGLANG_SIM_TOKEN_LATENCY": TOKEN_LATENCY, **env_bad},
        "sglang_health_timeout": HEALTH_TIMEOUT,
        "sglang_stall_timeout": STALL_TIMEOUT,
    }
    started, since = time.monotonic(), int(time.time())
    push = run(
        [str(VENV_BIN / "ansible-playbook"), "-i", host["inventory"], "site.yml",
         "-e", f"@{host['timing']}", "-e", json.dumps(broken)],
        check=False,
    )  # fmt: skip
    push_s = time.monotonic() - started
    try:
        output = push.stdout + push.stderr
        assert push.returncode != 0, f"the push of a broken decode did not fail the run:\n{push.stdout[-4000:]}"
        assert push_s < PUSH_BOUND, f"the run took {push_s:.0f} s: the broken decode was not recognised in its bound"
        errors = [line for line in output.splitlines() if line.startswith("[ERROR]")]
        assert len(errors) == 1 and f"{unit} did not become healthy" in errors[0], errors
        assert f"{unit} did not become healthy" in output, push.stdout[-4000:]
        assert "the old configuration serves again" in output, f"no rollback reported:\n{push.stdout[-4000:]}"
        assert "The router serves it again" in output, f"the run ended before the router took decode again:\n{output}"
        assert journal_line in output, f"decode's journal tail is not in the output:\n{push.stdout[-4000:]}"
        if "SGLANG_SIM_STALL_AFTER" in env_bad:  # from its server's start to the rollback's stop, by its journal
            journal = on_host(host, f"journalctl -o short-unix --no-pager -u {unit}.service --since @{since}").stdout
            recognised = faults.stall_recognition_s(journal, unit)
            report(capsys, f"broken decode push ({failure}): the stall recognised {recognised} s after it came up")
            assert recognised is not None and recognised < faults.STALL_RECOGNISED_WITHIN, journal[-3000:]
        assert "~" not in on_host(host, "ls /etc/systemd/system /etc/sglang 2>/dev/null").stdout, "a backup is left"
        after_sha = unit_sha256(host, unit)
        assert after_sha == before, "the previous decode unit file is not back (no rollback)"
        state = unit_state(host, unit)
        assert state["ActiveState"] == "active", f"decode is not active after the rollback: {state}"
        env = on_host(host, f"tr '\\0' '\\n' < /proc/{state['MainPID']}/environ").stdout
        # the broken push's values are gone (SGLANG_HEALTH_CHECK_TIMEOUT itself stays: the plan renders
        # sglang_health_check_timeout into every worker)
        lines = env.splitlines()
        assert f"SGLANG_SIM_TOKEN_LATENCY={TOKEN_LATENCY}" in lines and not any(
            f"{k}={v}" in lines for k, v in env_bad.items()
        ), f"decode does not run with the previous configuration:\n{env}"
        assert on_host(host, f"systemctl show -p NeedDaemonReload --value {unit}.service").stdout.strip() == "no"
        batch = load(host, *AFTER_LOAD)  # right away: the deployment must serve once the run has returned
        report(
            capsys,
            f"broken decode push ({failure}): run failed after {push_s:.1f} s (rc {push.returncode}) "
            f"with decode's journal; "
            f"unit file restored (sha256 {after_sha[:12]}), decode active ({state['NRestarts']} restarts); "
            f"batch right after the run: {ok_text(batch)}",
        )
        assert batch["total"] == 100 and batch["ok"] == 100, f"requests failed after the rollback: {batch['errors']}"
        kv_idle_s = assert_kv_idle(host)
        report(capsys, f"broken decode push ({failure}): the prefill's KV at idle {kv_idle_s} s after the batch")
    finally:
        if unit_sha256(host, unit) != before:  # no rollback happened: put the deployment back for what follows
            run([str(VENV_BIN / "ansible-playbook"), "-i", host["inventory"], "site.yml", "-e", f"@{host['timing']}"],
                check=False)  # fmt: skip


# Issue 22: SMG 1.13 in front of this 1P1D deployment (the module's last test: it leaves SMG in place). SMG's
# overload protection leaves a worker out of routing by its queue and KV (the simulator's /v1/loads, as sglang
# 0.5.23's) and holds PD requests for a decode slot; with one prefill and one decode, leaving one out must never
# become a 503. The burst: 64 requests at once against one prefill that serves one at a time (0.2 s each), so its
# queue is far past any waiting threshold for seconds, while the decode takes all of them.
BURST = ["--max-new-tokens", "64", "run", "--requests", "64", "--concurrency", "64", "--timeout", "120",
         "--deadline", "150"]  # fmt: skip
SMG_SHED = re.compile(r'^smg_worker_overload_shed_total\{stage="(\w+)"\} (\S+)$', re.M)


def test_smg_in_front_of_1p1d_takes_a_burst_of_64_without_a_503(host, capsys):
    prefill_env = {"SGLANG_SIM_TOKEN_LATENCY": TOKEN_LATENCY, "SGLANG_SIM_PREFILL_LATENCY": "0.2",
                   "SGLANG_SIM_PREFILL_SLOTS": "1"}  # fmt: skip
    queued = {**TIMING, "sglang_router_impl": "smg", "sglang_prefill_extra_env": prefill_env}
    started = time.monotonic()
    run([str(VENV_BIN / "ansible-playbook"), "-i", host["inventory"], "site.yml", "-e", json.dumps(queued)])
    switch_s = time.monotonic() - started
    unit = on_host(host, "cat /etc/systemd/system/sglang-router.service").stdout
    assert "smg.launch_router" in unit and "--worker-overload-waiting-requests 64" in unit, unit
    wait_ready(host)
    burst = load(host, *BURST, timeout=200)
    metrics = on_host(host, "curl -sf --noproxy '*' -m 10 http://127.0.0.1:29000/metrics").stdout
    shed = {stage: float(value) for stage, value in SMG_SHED.findall(metrics)}
    longest = max(end - start for start, end, _status in burst["timeline"])
    report(capsys, f"SMG on 1P1D (converged onto it in {switch_s:.1f} s): burst of 64 at once {ok_text(burst)}, "
                   f"the longest {longest:.1f} s; SMG's overload sheds by stage {shed}")  # fmt: skip
    assert burst["total"] == 64 and burst["ok"] == 64 and burst["errors"] == {}, burst["errors"]
    assert longest > 64 * 0.2 * 0.8, "the prefill never queued: the burst proved nothing"
    assert shed and not any(shed.values()), f"SMG shed requests for overload: {shed}"


# Issue 37: a prefill frozen (SIGSTOP, as a wedged host or a stopped scheduler) for FREEZE_S under load through the
# router. sglang 0.5.23's decode fails the rooms it holds of a prefill that stops answering its heartbeat in 11-16 s
# (sglang/srt/disaggregation/common/conn.py: SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL 5 s, each miss waiting out the
# probe's 3 s, x _MAX_FAILURE 2; faults.HEARTBEAT_FAIL_S), a room tied to its prefill when the request arrives: the
# decode's own record (GET /sim/lifecycle) must show every request it held at the freeze ended within that bound.
# The client's request should end within faults.FAIL_FAST_S too; through SMG 1.13 those SMG sends to the frozen
# prefill before its health checks drop it wait for the prefill's response head (faults.KNOWN_HANGS says why). After
# SIGCONT the router routes to every worker again within FREEZE_RECOVERY_BOUND s and the prefill's KV is back at idle.
FREEZE_S = 40.0
FREEZE_AFTER = 2.0
FREEZE_DEADLINE = FREEZE_AFTER + FREEZE_S + 20  # no request starts later: the load spans the freeze and what follows
FREEZE_LOAD = ["run", "--requests", "1400", "--concurrency", "16", "--rate", "20",
               "--timeout", str(faults.FAULT_CLIENT_TIMEOUT), "--deadline", str(FREEZE_DEADLINE)]  # fmt: skip
FREEZE_RECOVERY_BOUND = 45.0  # SIGCONT -> every worker routed again: the router's health checks pass again


@pytest.mark.parametrize("router", ["smg"])
def test_a_prefill_frozen_for_40_s_under_load_ends_what_its_decode_held_at_the_heartbeat(host, capsys, router):
    run([str(VENV_BIN / "ansible-playbook"), "-i", host["inventory"], "site.yml",
         "-e", json.dumps({**TIMING, "sglang_router_impl": router})])  # fmt: skip
    wait_ready(host)
    unit = "sglang-prefill0"
    loader = subprocess.Popen(
        [*host["ssh"], shlex.join(["python3", GUEST_LOAD, *FREEZE_LOAD])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    cont_at = None
    try:
        time.sleep(FREEZE_AFTER)
        stop_at = float(on_host(host, f"date +%s.%N; systemctl kill --signal=SIGSTOP {unit}.service").stdout)
        time.sleep(FREEZE_S)
        cont_at = float(on_host(host, f"date +%s.%N; systemctl kill --signal=SIGCONT {unit}.service").stdout)
        ready = wait_ready(host)
        out, err = loader.communicate(timeout=FREEZE_DEADLINE + faults.FAULT_CLIENT_TIMEOUT + 60)
    finally:
        if cont_at is None:
            on_host(host, f"systemctl kill --signal=SIGCONT {unit}.service", check=False)
        if loader.poll() is None:
            loader.kill()
            loader.communicate()
    assert loader.returncode == 0, f"load failed ({loader.returncode}): {out}\n{err}"
    result = json.loads(out)
    t0 = result["t0"]
    frozen = [r for r in result["timeline"] if stop_at <= t0 + r[0] < cont_at]
    touched = [r for r in result["timeline"] if t0 + r[0] < cont_at and t0 + r[1] > stop_at]
    late = faults.late_requests({"timeline": touched})
    kv_idle_s = assert_kv_idle(host)
    recovery_s = round(ready["at"] - cont_at, 1)
    failed = [r for r in touched if r[2] != "200"]
    report(capsys, f"SIGSTOP {unit} for {FREEZE_S:.0f} s through {router}: {len(result['timeline'])} sent, "
                   f"{len(touched)} touched by the freeze ({len(frozen)} sent during it), {len(failed)} of them failed "
                   f"{result['errors']}; the longest touched took {faults.latest_end_s({'timeline': touched})} s "
                   f"({len(late)} over {faults.FAIL_FAST_S:.0f} s); every worker routed again {recovery_s} s after "
                   f"SIGCONT ({ready['at'] - stop_at:.1f} s after SIGSTOP); the prefill's KV at idle {kv_idle_s} s "
                   "after the load")  # fmt: skip
    faults.record(
        f"SIGSTOP prefill {FREEZE_S:.0f} s ({router})",
        "1P1D (none)",
        {**faults.summary(result, stop_at, ready["at"]), "latest_end_s": faults.latest_end_s(result)},
    )
    assert frozen, "no request was sent during the freeze: it proved nothing"
    # the decode's own record: every request it held at the freeze ended within the heartbeat's bound (sglang ties
    # the room to its prefill on arrival), served or failed, whatever the router then did with the client's request
    decode_life = json.loads(
        on_host(host, f"curl -sf --noproxy '*' -m 10 http://127.0.0.1:{DECODE_PORT}/sim/lifecycle").stdout
    )
    held = faults.decode_hold_problems(decode_life["requests"], stop_at)
    report(capsys, f"SIGSTOP {unit}: the decode held {faults.decode_held(decode_life['requests'], stop_at)}")
    assert held == [], held
    if (router, "prefill-frozen") in faults.KNOWN_HANGS:  # only those sent before the router's detection
        hung = faults.hang_problems({"t0": t0, "timeline": touched}, stop_at)
        assert hung == [], hung
    else:
        assert late == [], f"requests the freeze touched ended later than {faults.FAIL_FAST_S} s after sent: {late}"
    assert recovery_s <= FREEZE_RECOVERY_BOUND, f"not routed again within {FREEZE_RECOVERY_BOUND} s of SIGCONT"
    after = load(host, *AFTER_LOAD)
    assert after["total"] == 100 and after["ok"] == 100, f"the batch after the freeze had failures: {after['errors']}"


def test_kill_9_of_decode_through_smg_fails_no_request_later_than_15_s(host, capsys):
    """SMG (in place since the freeze test) cancels the prefill half when the decode half fails to connect
    (faults.KNOWN_HANGS): the requests in flight at a decode's kill -9 end within faults.FAIL_FAST_S, unlike through
    sglang-router 0.3.2."""
    assert "smg.launch_router" in on_host(host, "cat /etc/systemd/system/sglang-router.service").stdout
    assert ("smg", "decode") not in faults.KNOWN_HANGS
    kill_9_under_load(host, "sglang-decode0", capsys, "smg")


# Issue 39, the error budget's planned router change without redundancy: with one router (no
# sglang_router_instances, no HAProxy) a change of the router's flags restarts it at once, and the run says so.
# Requests through it fail from its stop until it is ready again, and only then, by the load's own record: its
# requests and its poll of the router's /readiness (load.py --readiness). SMG is in place since the freeze test.
ONE_ROUTER_CHANGE = {**TIMING, "sglang_router_impl": "smg", "sglang_router_retry_max_retries": 4}
CHANGE_STOP = "/root/change.stop"
CHANGE_LOAD = ["run", "--requests", "5000", "--concurrency", "16", "--rate", "20",
               "--timeout", str(faults.FAULT_CLIENT_TIMEOUT), "--deadline", "300", "--readiness",
               "--stop-file", CHANGE_STOP]  # fmt: skip
PAUSE_BOUND = 30.0  # seconds from the router's stop until its /readiness answers 200 again


def unit_time(host, unit, prop):
    """A timestamp property of UNIT (ExecMainStartTimestamp, ActiveExitTimestamp) as epoch seconds, or None."""
    out = on_host(host, f"systemctl show -P {prop} --timestamp=unix {unit}.service").stdout.strip()
    return float(out.lstrip("@")) if out else None


def test_a_router_flag_change_with_one_router_pauses_serving_and_says_so(host, capsys):
    wait_ready(host)
    started_before = unit_time(host, "sglang-router", "ExecMainStartTimestamp")
    loader = subprocess.Popen(
        [*host["ssh"], shlex.join(["python3", GUEST_LOAD, *CHANGE_LOAD])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2.0)  # 16 in flight before the run begins
        proc = run([str(VENV_BIN / "ansible-playbook"), "-i", host["inventory"], "site.yml",
                    "-e", json.dumps(ONE_ROUTER_CHANGE)], check=False)  # fmt: skip
        time.sleep(3.0)
        on_host(host, f"touch {CHANGE_STOP}")
        out, err = loader.communicate(timeout=120)
    finally:
        if loader.poll() is None:
            loader.kill()
            loader.communicate()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert loader.returncode == 0, f"load failed ({loader.returncode}): {out}\n{err}"
    result = json.loads(out)
    stop_at = unit_time(host, "sglang-router", "ActiveExitTimestamp")
    assert unit_time(host, "sglang-router", "ExecMainStartTimestamp") != started_before, "the router did not restart"
    t0 = result["t0"]
    ready = [t0 + t for t, seen in result["readiness"] if t0 + t > stop_at and seen.startswith("200")]
    ready_at = ready[0] if ready else None
    cost = faults.summary(result, stop_at, ready_at)
    faults.record("router planned change: a flag (smg)", "one router", cost)
    failed = [round(t0 + start - stop_at, 2) for start, _end, status in result["timeline"] if status != "200"]
    report(capsys, f"router flag change with one router (smg): run {proc.seconds:.0f} s; {cost['failed']}/"
                   f"{cost['sent']} failed {cost['errors']}, {cost['in_flight']} in flight at its stop; failures "
                   f"started {cost['first_failure_s']}..{cost['last_failure_s']} s after its stop; ready again "
                   f"{cost['recovery_s']} s after it")  # fmt: skip
    said = " ".join(proc.stdout.split())  # the callback folds a long message over lines
    assert "sglang-router (router) restarts now: no redundancy: serving pauses until it is ready again" in said
    assert result["stopped_by"] == "stop-file", f"the load ended on its {result['stopped_by']}, before the change"
    assert ready_at is not None and cost["recovery_s"] <= PAUSE_BOUND, (cost, result["readiness"])
    # the pause is the restart's: nothing failed before the router stopped, nothing sent once it was ready again
    assert all(-1.0 <= f <= cost["recovery_s"] + 1.0 for f in failed), (failed, cost)
    assert any(t0 + start > ready_at and status == "200" for start, _end, status in result["timeline"]), (
        "no request was served after the router was ready again"
    )
    after = load(host, *AFTER_LOAD)
    assert after["total"] == 100 and after["ok"] == 100, f"the batch after the change had failures: {after['errors']}"
