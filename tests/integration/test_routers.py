"""Several routers behind HAProxy (issue 39), on sandbox hosts, under load: one deployment and a sequence of changes.

pytest-rtr-1 holds 1P1D (the simulator) and two sglang-router instances behind HAProxy on the public address
(127.0.0.1:8000); pytest-rtr-2, bare at first, joins as a second router host with one router later. Every change runs
site.yml while at least 16 requests are in flight through HAProxy's public port (tests/sandbox/load.py on
pytest-rtr-1), and is judged twice: by the load's own record (every request's status) and by HAProxy's own counters
(its runtime socket's `show stat`, read on the guest by tests/sandbox/haproxy_stat.py, which also watches every
server's state through the change). A rerun after each change must change nothing.

The sequence (module-scoped fixtures, each on the one before), on one router host: converge on sglang-router 0.3.2
-> kill -9 of one router -> kill -9 of HAProxy -> the switch to SMG (smg 1.12.0); then the two-router-host layout ->
SMG's version change (1.12.0 -> 1.13.0) with a router flag change -> kill -9 of the second host's router (SMG) -> the
switch back to sglang-router 0.3.2 with one of its flags changed, each over the three routers of both hosts. The
version changes are SMG's: the one sglang-router release before 0.3.2, 0.3.1, did not start reliably here (its worker
registration deadlocked on a restart; one of its routers never became ready in a fresh-clone CI run's first
converge). A planned change rolls one router at a time (roles/sglang_router/tasks/roll.yml: drained in every router
host's HAProxy, restarted, ready, enabled) and loses no request. A killed router loses no request that is not
streamed: HAProxy sends what it held to another router (layer-7 retries, plugins/module_utils/router/lb.py) and
takes it out within its detection window (lb.py detection_ms); systemd restarts it and HAProxy takes it back once its
readiness answers. Each writes its row of the error budget (faults.record, tests/bench/error_budget.py).
"""

import json
import os
import re
import shlex
import subprocess
import time

import faults
import pytest
import yaml
from sandbox_hosts import REPO, VENV_BIN, debug_messages, down, recap, run, ssh_config, up

from tests.sandbox import haproxy_stat

SANDBOX = "pytest-rtr"
HOST1, HOST2 = f"{SANDBOX}-1", f"{SANDBOX}-2"
pytestmark = pytest.mark.usefixtures("sandbox_root")  # not root: fails, never skips (conftest.py)
LOAD = REPO / "tests" / "sandbox" / "load.py"
STAT = REPO / "tests" / "sandbox" / "haproxy_stat.py"
GUEST_LOAD, GUEST_STAT = "/root/load.py", "/root/haproxy_stat.py"
LOAD_STOP, WATCH_STOP = "/root/load.stop", "/root/watch.stop"
PUBLIC = "http://127.0.0.1:8000"  # sglang_router_host:sglang_router_port, HAProxy's frontend
BACKEND, FRONTEND = "sglang_routers", "sglang_public"  # lb.DEFAULTS
# Two routers on the first host, one on the second (sglang_router_instances, plan/router_rules.py)
ROUTERS = {
    HOST1: [{"name": "router-a", "port": 8100, "prometheus_port": 29100},
            {"name": "router-b", "port": 8101, "prometheus_port": 29101}],
    HOST2: [{"name": "router-a", "port": 8100, "prometheus_port": 29100}],
}  # fmt: skip
# Requests of about a second (a 0.3 s prefill, 150 tokens at 5 ms), 16 at a time through HAProxy: every router holds
# some whenever it is drained or killed.
ENGINE_ENV = {"SGLANG_SIM_TOKEN_LATENCY": "0.005", "SGLANG_SIM_PREFILL_LATENCY": "0.3"}
TEST_VARS = {
    "sglang_prefill_extra_env": ENGINE_ENV,
    "sglang_decode_extra_env": ENGINE_ENV,
}
CONCURRENCY = 16
LOAD_ARGS = ["--url", PUBLIC, "--max-new-tokens", "150", "run", "--requests", "100000", "--concurrency",
             str(CONCURRENCY), "--timeout", "30", "--deadline", "600"]  # fmt: skip
# kill -9: at most 20 starts a second, so a refused public port (HAProxy killed) does not spend the load at once
KILL_LOAD_ARGS = [*LOAD_ARGS, "--rate", "20"]
MIN_IN_FLIGHT = CONCURRENCY - 2  # through HAProxy at every router's restart (the load starts the next at once)
REDUNDANT = "two routers behind HAProxy"
# What a failed request leaves in HAProxy's counters (haproxy_stat.COUNTERS); retries and redispatches are not
# failures (a request a router refused or never answered goes to another router: lb.py "retry-on conn-failure
# empty-response", "option redispatch").
FAILURES = ("hrsp_5xx", "eresp", "srv_abrt", "cli_abrt")
DETECTION_MARGIN_S = 1.0  # the watch samples every 0.2 s and ssh adds its own delay on a 2-core machine


CHAT = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
GENERATE = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
# (route, body, the status HAProxy's public port answers): n > 1 refused at HAProxy (lb.py REFUSE_N_LINE); n: 1 and
# the text "n": 2 inside a prompt go through to the routers
N_CASES = (
    ("/v1/chat/completions", {**CHAT, "n": 2}, "400"),
    ("/generate", {**GENERATE, "sampling_params": {"n": 2, "max_new_tokens": 4}}, "400"),
    ("/generate", {**GENERATE, "sampling_params": {"n": 1, "max_new_tokens": 4}}, "200"),
    ("/generate", {**GENERATE, "text": 'say "n": 2'}, "200"),
)


def failures(output):
    """Each failed task of a playbook's output with the lines after it (the routers' journals it shows are long)."""
    found = [output[max(0, m.start() - 300) : m.start() + 1500] for m in re.finditer(r"fatal: \[|FAILED! =>", output)]
    return "".join(f"--- failed task ---\n{text}\n" for text in found[:4])


def report(capsys, line):
    with capsys.disabled():
        print(f"\n[routers] {line}", flush=True)


def on(host, command, timeout=120):
    proc = run(["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", host, command], timeout=timeout,
               quiet=True)  # fmt: skip
    return proc.stdout


def guest(host, args):
    """An ssh command on HOST running ARGS, as a Popen (the load and the watch run beside the change)."""
    return subprocess.Popen(["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", host, shlex.join(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def stat(host):
    """HAProxy's `show info` and `show stat` on HOST (haproxy_stat.py show)."""
    return json.loads(on(host, f"python3 {GUEST_STAT} show"))


def started_at(host, unit):
    out = on(host, f"systemctl show -P ExecMainStartTimestamp --timestamp=unix {unit}.service").strip()
    return float(out.lstrip("@"))


def restarts(host, unit):
    return int(on(host, f"systemctl show -P NRestarts {unit}.service"))


def address(bed, host):
    return next(h["address"] for h in bed["hosts"] if h["name"] == host)


def write_inventory(bed, router_hosts):
    """The inventory: HOST1 in every group, ROUTER_HOSTS in group router, each with its router instances (host_vars)
    and its own address as sglang_advertise_address. HOST1 alone serves every role: its workers bind loopback (the
    collection's colocated layout, plan_inputs.colocated) until a second router host joins."""
    inv = bed["inventory"]
    children = {
        "prefill": {"hosts": {HOST1: None}},
        "decode": {"hosts": {HOST1: None}},
        "router": {"hosts": {h: None for h in router_hosts}},
    }
    hosts = {h: {"ansible_host": address(bed, h), "sglang_advertise_address": address(bed, h)} for h in router_hosts}
    inventory = {"all": {"vars": {"ansible_connection": "ssh", "ansible_user": "root",
                                  "ansible_ssh_common_args": f"-F {ssh_config(SANDBOX)}"},
                         "hosts": hosts, "children": children}}  # fmt: skip
    (inv / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    for host in router_hosts:
        (inv / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump({"sglang_router_instances": ROUTERS[host]}))
    bed["router_hosts"] = list(router_hosts)


def playbook(bed, extra_vars, *args, check=True):
    path = bed["inventory"].parent / f"vars-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(extra_vars))
    return run([str(VENV_BIN / "ansible-playbook"), "-i", str(bed["inventory"]), "site.yml", "-e", f"@{path}",
                *args], check=check, timeout=1200)  # fmt: skip


def router_units(bed):
    """[(host, unit, HAProxy server name)] of every router instance of the deployment (lb.server_name)."""
    return [(h, f"sglang-{r['name']}", f"{h}-{r['name']}") for h in bed["router_hosts"] for r in ROUTERS[h]]


def deployed_router(host, unit):
    """The router program and version a router unit runs: its record's python asked for its distribution."""
    record = json.loads(on(host, f"cat /var/lib/disagg-sglang/deployed/{unit}.json"))
    dist = "smg" if record.get("impl") == "smg" else "sglang-router"
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return f"{dist} {on(host, shlex.join([record['python'], '-c', code])).strip()}"


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    """Both hosts booted; the first converged (1P1D, two routers on sglang-router 0.3.2, HAProxy) and rerun."""
    up(SANDBOX, hosts=2)
    try:
        hosts = json.loads((REPO / ".cache" / "sandbox" / SANDBOX / "hosts.json").read_text())
        inv = tmp_path_factory.mktemp("routers") / "inventory"
        (inv / "group_vars" / "all").mkdir(parents=True)
        (inv / "host_vars").mkdir()
        (inv / "group_vars" / "all" / "20-sandbox.yml").symlink_to(REPO / "inventories/sandbox/group_vars/all.yml")
        (inv / "group_vars" / "all" / "30-test.yml").write_text(yaml.safe_dump(TEST_VARS))
        for group in ("prefill", "decode"):  # the sandbox's one prefill and one decode instance
            (inv / "group_vars" / f"{group}.yml").symlink_to(REPO / f"inventories/sandbox/group_vars/{group}.yml")
        bed = {"inventory": inv, "hosts": hosts, "vars": {}}
        write_inventory(bed, [HOST1])
        for host in (HOST1, HOST2):
            run(["scp", "-q", "-F", str(ssh_config(SANDBOX)), str(LOAD), str(STAT), f"{host}:/root/"])
        bed["first"] = playbook(bed, {})
        bed["rerun"] = playbook(bed, {})
        print(f"converge {bed['first'].seconds:.1f} s, rerun {bed['rerun'].seconds:.1f} s")
        yield bed
    finally:
        if not os.environ.get("DISAGG_ROUTERS_KEEP"):
            down(SANDBOX)


def under_load(bed, action, load_args=tuple(LOAD_ARGS), settle=3.0):
    """Runs ACTION() (returns what it returns) while the load runs through HAProxy on HOST1 and haproxy_stat.py
    watches every server there; returns (ACTION's result, load result, watch result, stat before, stat after)."""
    before = stat(HOST1)
    watch = guest(HOST1, ["python3", GUEST_STAT, "watch", "--stop-file", WATCH_STOP])
    loader = guest(HOST1, ["python3", GUEST_LOAD, *load_args, "--stop-file", LOAD_STOP])
    time.sleep(2.0)  # 16 in flight before the change begins
    try:
        done = action()
    finally:
        time.sleep(settle)
        on(HOST1, f"touch {LOAD_STOP}")
        out, err = loader.communicate(timeout=120)
        on(HOST1, f"touch {WATCH_STOP}")
        watched, _unused = watch.communicate(timeout=60)
    assert out.strip(), f"the load printed nothing: {err[-2000:]}"
    return done, json.loads(out), json.loads(watched), before, stat(HOST1)


def not_up_spans(watch):
    """{server: [[t_out, t_back or None], ...]} from the watch: when each server left UP and came back (seconds since
    the watch's t0); and the most servers not UP at one moment."""
    spans, state, most = {}, {}, 0
    for t, name, status in watch["changes"]:
        if name == "-":
            continue
        was_up = state.get(name, "UP").startswith("UP")
        state[name] = status
        if was_up and not status.startswith("UP"):
            spans.setdefault(name, []).append([t, None])
        elif not was_up and status.startswith("UP") and spans.get(name):
            spans[name][-1][1] = t
        most = max(most, sum(1 for s in state.values() if not s.startswith("UP")))
    return spans, most


def failed_requests(result, since=None):
    """[(start after SINCE (epoch) or after t0, seconds taken, status)] of the load's failed requests."""
    base = result["t0"] - (since if since is not None else result["t0"])
    return [(round(base + s, 2), round(e - s, 2), st) for s, e, st in result["timeline"] if st != "200"]


def lb_failures(before, after, rows):
    """{row: {counter: n}} of HAProxy's failure counters (FAILURES) that grew over the change, for ROWS
    [(pxname, svname)], with process_changed where HAProxy's process differs (a reload or a restart)."""
    found = {}
    for px, sv in rows:
        delta = haproxy_stat.counter_delta(before, after, px, sv)
        grown = {c: delta[c] for c in FAILURES if delta[c]}
        if grown or delta["process_changed"]:
            found[f"{px}/{sv}"] = {**grown, "process_changed": delta["process_changed"]}
    return found


def planned_change(bed, extra_vars, event):
    """One site.yml run with EXTRA_VARS (kept for the runs after it) under the load, then a rerun. Returns what the
    tests judge: output, load result, watch, stats, router start times before and after, the rerun's recap."""
    bed["vars"] = {**bed["vars"], **extra_vars}
    units = router_units(bed)
    starts = {(h, u): started_at(h, u) for h, u, _s in units}
    since = time.time()
    proc, result, watch, before, after = under_load(bed, lambda: playbook(bed, bed["vars"], check=False))
    after_starts = {(h, u): started_at(h, u) for h, u, _s in units}
    restarted = {k: v for k, v in after_starts.items() if v != starts[k]}
    in_flight = {f"{u}@{h}": faults.in_flight_at(result, t) for (h, u), t in restarted.items()}
    failed = failed_requests(result, since)
    cost = {"sent": result["total"], "failed": len(failed), "errors": result["errors"],
            "in_flight": min(in_flight.values(), default=None),
            "first_failure_s": min((f[0] for f in failed), default=None),
            "last_failure_s": max((f[0] for f in failed), default=None), "recovery_s": None}  # fmt: skip
    faults.record("router planned change", REDUNDANT, {**cost, "event": event})
    rerun = recap(playbook(bed, bed["vars"]).stdout)
    return {"proc": proc, "result": result, "watch": watch, "before": before, "after": after, "units": units,
            "restarted": restarted, "in_flight": in_flight, "rerun": rerun, "cost": cost}  # fmt: skip


def judge_planned(change, capsys, what):
    """The judgement every planned router change shares: the run passed, every router restarted once, one at a time
    (never two servers out of HAProxy at once), with 16 in flight through HAProxy at each restart; no request failed
    by the load's record or by HAProxy's counters; the rerun changed nothing."""
    proc, result, watch = change["proc"], change["result"], change["watch"]
    spans, most = not_up_spans(watch)
    rows = [(BACKEND, "BACKEND"), (FRONTEND, "FRONTEND")] + [(BACKEND, s) for _h, _u, s in change["units"]]
    lb = lb_failures(change["before"], change["after"], rows)
    report(capsys, f"{what}: run {proc.seconds:.0f} s rc {proc.returncode}; load {result['ok']}/{result['total']} ok "
                   f"{result['errors']}; restarted {sorted(change['in_flight'])} with {change['in_flight']} in flight; "
                   f"out of HAProxy {spans} (most at once {most}); HAProxy failure counters {lb or 'none'}; rerun "
                   f"changed {sum(c.get('changed', 0) for c in change['rerun'].values())}")  # fmt: skip
    assert proc.returncode == 0, failures(proc.stdout) + proc.stdout[-3000:]
    assert result["stopped_by"] == "stop-file", f"the load ended on its {result['stopped_by']}, before the change"
    assert result["errors"] == {} and result["ok"] == result["total"] > 0, failed_requests(result)[:20]
    assert {f"{u}@{h}" for h, u, _s in change["units"]} == set(change["in_flight"]), "a router was not restarted"
    assert all(n >= MIN_IN_FLIGHT for n in change["in_flight"].values()), change["in_flight"]
    # the run says how each router rolled (roles/sglang_router/tasks/roll_one.yml), one line each
    said = [m for _h, m in debug_messages(proc.stdout) if ": drained in " in m and ", restarted, back in after " in m]
    assert sorted(m.split(":", 1)[0] for m in said) == sorted(change["in_flight"]), said
    # HAProxy's own view: each router left the backend (drained) and came back, never two at once
    assert most == 1, (spans, watch["changes"])
    assert all(len(s) == 1 and s[0][1] is not None for s in spans.values()) and len(spans) == len(change["units"]), (
        spans
    )
    assert all(not {k: v for k, v in c.items() if k != "process_changed"} for c in lb.values()), lb
    assert all(c["failed"] == 0 and c["changed"] == 0 for c in change["rerun"].values()), change["rerun"]


def test_the_converge_puts_haproxy_in_front_of_two_routers_and_a_rerun_changes_nothing(bed, capsys):
    counts = recap(bed["rerun"].stdout)
    snap = stat(HOST1)
    servers = {r["svname"]: r["status"] for r in snap["stat"] if r["pxname"] == BACKEND and r["svname"] != "BACKEND"}
    versions = {u: deployed_router(HOST1, u) for _h, u, _s in router_units(bed)}
    report(capsys, f"converge {bed['first'].seconds:.0f} s, rerun {bed['rerun'].seconds:.0f} s {counts}; HAProxy "
                   f"{snap['info'].get('Version')} servers {servers}; routers {versions}")  # fmt: skip
    assert set(counts) == {HOST1} and counts[HOST1]["changed"] == 0 and counts[HOST1]["failed"] == 0, counts
    assert servers == {f"{HOST1}-router-a": "UP", f"{HOST1}-router-b": "UP"}, servers
    assert set(versions.values()) == {"sglang-router 0.3.2"}, versions
    # the public port is HAProxy's, its exporter answers, and requests through it spread over both routers
    assert on(HOST1, "ss -Hltnp 'sport = :8000'").count("haproxy") >= 1
    metrics = on(HOST1, "curl -sf --noproxy '*' -m 10 http://127.0.0.1:8405/metrics")
    assert "haproxy_server_status" in metrics or "haproxy_backend_status" in metrics, metrics[:500]
    load = json.loads(on(HOST1, f"python3 {GUEST_LOAD} --url {PUBLIC} run --requests 64 --concurrency 16 "
                                "--deadline 60", timeout=120))  # fmt: skip
    assert load["ok"] == load["total"] == 64, load["errors"]
    after = stat(HOST1)
    served = {sv: haproxy_stat.counter_delta(snap, after, BACKEND, sv)["stot"] for sv in servers}
    assert all(n > 0 for n in served.values()), served
    # n > 1, which sglang's PD path cannot serve, is refused by HAProxy at once with a clear error, before any router
    # (lb.py REFUSE_N_LINE); n: 1 and the text "n": 2 inside a prompt go through
    for path, body, want in N_CASES:
        t0 = time.monotonic()
        sent = shlex.quote(json.dumps(body))
        answer = on(HOST1, f"curl -s --noproxy '*' -m 30 -w ' %{{http_code}}' -H 'Content-Type: application/json' "
                           f"-d {sent} {PUBLIC}{path}")  # fmt: skip
        took = time.monotonic() - t0
        report(capsys, f"{json.dumps(body)[:80]}: {answer[-200:]} after {took:.2f} s")
        assert answer.endswith(want) and took < 5.0, (body, answer, took)
        if want == "400":
            assert "parallel sampling" in answer, answer
    assert haproxy_stat.counter_delta(after, stat(HOST1), BACKEND, "BACKEND")["stot"] == 2  # only the n: 1 requests


def detection_s(host=HOST1):
    """HAProxy's detection of a refused router, from the configuration it runs: fall x inter of its server lines
    (plugins/module_utils/router/lb.py detection_ms, 'refused')."""
    words = on(host, "grep -m1 -E '^ *server .* inter ' /etc/haproxy/haproxy.cfg").split()
    return int(words[words.index("fall") + 1]) * float(words[words.index("inter") + 1].removesuffix("ms")) / 1000.0


def kill_router(bed, host, capsys, instance="router-a"):
    """kill -9 of router INSTANCE on HOST under the load through HOST1's HAProxy; judged by the load and HAProxy's
    counters. The load's requests are not streamed: HAProxy sends every one the killed router held to another router
    (lb.py: retry-on conn-failure empty-response, option redispatch 1, option http-buffer-request), so none fails. A
    stream whose first bytes had reached the client would be cut (HAProxy never replays a begun answer): the only
    loss, and this load has none."""
    unit, server, event = f"sglang-{instance}", f"{host}-{instance}", f"kill -9 of {instance}@{host}"
    before_restarts = restarts(host, unit)
    state = {}

    def action():
        held = stat(HOST1)
        state["kill_at"] = time.time()  # the sandbox hosts share this machine's clock
        on(host, f"systemctl kill -s KILL {unit}.service")
        state["held"] = next(r["scur"] for r in held["stat"] if r["pxname"] == BACKEND and r["svname"] == server)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # HAProxy has it back: UP again after its restart
            row = next(r for r in stat(HOST1)["stat"] if r["pxname"] == BACKEND and r["svname"] == server)
            if row["status"] == "UP" and started_at(host, unit) > state["kill_at"]:
                state["back_at"] = time.time()
                break
            time.sleep(0.5)

    _none, result, watch, before, after = under_load(bed, action, KILL_LOAD_ARGS)
    kill_at, back_at = state["kill_at"], state.get("back_at")
    cost = faults.summary(result, kill_at, back_at)
    spans, _most = not_up_spans(watch)
    out = [(round(watch["t0"] + a - kill_at, 2), None if b is None else round(watch["t0"] + b - kill_at, 2))
           for a, b in spans.get(f"{BACKEND}/{server}", [])]  # fmt: skip
    lb = lb_failures(before, after, [(BACKEND, s) for _h, _u, s in router_units(bed)] + [(FRONTEND, "FRONTEND")])
    retried = {c: haproxy_stat.counter_delta(before, after, BACKEND, "BACKEND")[c] for c in ("wretr", "wredis")}
    to_clients = haproxy_stat.counter_delta(before, after, FRONTEND, "FRONTEND")
    faults.record("router kill -9", REDUNDANT, {**cost, "event": f"{instance}@{host}", **retried})
    window = detection_s() + DETECTION_MARGIN_S
    failed = failed_requests(result, kill_at)
    restarted = restarts(host, unit)
    report(capsys, f"{event}: {cost['failed']}/{cost['sent']} failed {cost['errors']}, it held {state['held']} at "
                   f"the kill; HAProxy retried {retried}; out of HAProxy {out} s after the kill; back after "
                   f"{cost['recovery_s']} s; NRestarts {before_restarts}->{restarted}; HAProxy failure counters {lb}; "
                   f"to the clients 5xx {to_clients['hrsp_5xx']}")  # fmt: skip
    assert back_at is not None, f"HAProxy did not take {server} back within 120 s: {watch['changes'][-10:]}"
    assert restarted == before_restarts + 1, f"systemd did not restart {unit} once"
    # HAProxy let it go within its detection window and took it back after its restart, when it was ready
    assert out and out[0][0] <= window and out[0][1] is not None, (out, window)
    # nothing failed: not by the load's record, not in what HAProxy answered its clients
    assert cost["failed"] == 0, (failed, state["held"], retried, lb)
    assert to_clients["hrsp_5xx"] == 0 and to_clients["cli_abrt"] == 0, to_clients
    mine = (f"{BACKEND}/{server}", f"{FRONTEND}/FRONTEND", f"{BACKEND}/BACKEND")
    others = {k: v for k, v in lb.items() if k not in mine}
    assert not others, f"a router that was not killed failed requests: {others}"
    # what the killed router broke (its server row's errors) HAProxy sent again: each one a retry
    broken = sum(v for k, v in lb.get(f"{BACKEND}/{server}", {}).items() if k != "process_changed")
    assert broken <= retried["wretr"] + retried["wredis"], (lb, retried)
    served = [s for s, _e, st in result["timeline"] if result["t0"] + s >= back_at and st == "200"]
    assert served, "no request was served after HAProxy took the router back"
    return cost


@pytest.fixture(scope="module")
def router_killed(bed):
    return bed


def test_kill_9_of_one_router_loses_at_most_what_it_held(router_killed, capsys):
    kill_router(router_killed, HOST1, capsys)
    rerun = recap(playbook(router_killed, router_killed["vars"]).stdout)
    assert all(c["failed"] == 0 and c["changed"] == 0 for c in rerun.values()), rerun


@pytest.fixture(scope="module")
def haproxy_killed(bed, router_killed):
    return bed


def test_kill_9_of_haproxy_is_restarted_by_systemd_and_serves_again(haproxy_killed, capsys):
    bed = haproxy_killed
    before_restarts = restarts(HOST1, "haproxy")
    router_starts = {(h, u): started_at(h, u) for h, u, _s in router_units(bed)}
    state = {}

    def action():
        state["kill_at"] = time.time()
        on(HOST1, "systemctl kill -s KILL haproxy.service")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            probe = on(HOST1, f"curl -s -o /dev/null -w '%{{http_code}}' --noproxy '*' -m 5 {PUBLIC}/readiness || true")
            if probe.strip() == "200":
                state["back_at"] = time.time()
                break
            time.sleep(0.2)

    _none, result, _watch, _before, after = under_load(bed, action, KILL_LOAD_ARGS)
    kill_at, back_at = state["kill_at"], state.get("back_at")
    cost = faults.summary(result, kill_at, back_at)
    faults.record("haproxy kill -9", "HAProxy on the router host", cost)
    restarted = restarts(HOST1, "haproxy")
    failed = failed_requests(result, kill_at)
    since_start = {f"{px}/{sv}": {c: r.get(c) or 0 for c in FAILURES}
                   for r in after["stat"] for px, sv in [(r["pxname"], r["svname"])]
                   if px in (BACKEND, FRONTEND) and any(r.get(c) for c in FAILURES)}  # fmt: skip
    report(
        capsys,
        f"kill -9 of HAProxy: {cost['failed']}/{cost['sent']} failed {cost['errors']}, "
        f"{cost['in_flight']} in flight at the kill; failures started {cost['first_failure_s']}.."
        f"{cost['last_failure_s']} s after it; serving again after {cost['recovery_s']} s; NRestarts "
        f"{before_restarts}->{restarted}; the new HAProxy's failure counters {since_start or 'none'}",
    )
    assert back_at is not None, "HAProxy did not serve again within 60 s"
    assert restarted == before_restarts + 1, "systemd did not restart HAProxy once"
    assert cost["recovery_s"] <= 5.0, cost  # RestartSec=1s (the role's drop-in) and its start
    assert all(start <= cost["recovery_s"] + 0.5 for start, _took, _st in failed), failed
    assert not since_start, f"the restarted HAProxy counted failures: {since_start}"
    assert {(h, u): started_at(h, u) for h, u, _s in router_units(bed)} == router_starts, "a router restarted"
    rerun = recap(playbook(bed, bed["vars"]).stdout)
    assert all(c["failed"] == 0 and c["changed"] == 0 for c in rerun.values()), rerun


SMG_OLD, SMG_NEW = "smg==1.12.0", "smg==1.13.0"
TO_SMG_OLD = {"sglang_router_impl": "smg", "sglang_deps_router_packages": [SMG_OLD]}
TO_SMG_NEW = {"sglang_deps_router_packages": [SMG_NEW]}
TO_SGLANG_ROUTER = {"sglang_router_impl": "sglang_router", "sglang_deps_router_packages": ["sglang-router==0.3.2"]}


def judge_versions(bed, want):
    versions = {f"{u}@{h}": deployed_router(h, u) for h, u, _s in router_units(bed)}
    assert set(versions.values()) == {want}, versions


def judge_flag(bed, flag):
    """Every router runs with FLAG (the unit file systemd started it from)."""
    for host, unit, _server in router_units(bed):
        assert flag in " ".join(on(host, f"systemctl cat {unit}.service").split()), (host, unit, flag)


# One router host: the switch to SMG (both routers of HOST1).
@pytest.fixture(scope="module")
def smg_switch_one_host(bed, haproxy_killed):
    return planned_change(bed, TO_SMG_OLD, "router switch sglang-router 0.3.2 -> smg 1.12.0")


def test_the_switch_to_smg_on_one_router_host_rolls_without_a_failed_request(bed, smg_switch_one_host, capsys):
    judge_planned(smg_switch_one_host, capsys, "switch sglang-router 0.3.2 -> smg 1.12.0 on one router host")
    judge_versions(bed, "smg 1.12.0")


@pytest.fixture(scope="module")
def two_hosts(bed, smg_switch_one_host):
    """HOST2 joins as a second router host (one router), then a rerun. Not under load: the deployment stops being
    colocated, so its one prefill and one decode move from loopback to their address (sglang_bind_host) and restart,
    and with one of each serving pauses by design (the rolling step's single-instance case); the routers on HOST1 move
    to their advertise address too (sglang_router_instance_host)."""
    write_inventory(bed, [HOST1, HOST2])
    proc = playbook(bed, bed["vars"], check=False)
    rerun = recap(playbook(bed, bed["vars"]).stdout)
    return {"proc": proc, "rerun": rerun}


def test_a_second_router_host_joins_and_both_haproxies_front_every_router(bed, two_hosts, capsys):
    proc = two_hosts["proc"]
    servers = {h: {r["svname"]: r["status"] for r in stat(h)["stat"] if r["pxname"] == BACKEND
                   and r["svname"] != "BACKEND"} for h in (HOST1, HOST2)}  # fmt: skip
    report(capsys, f"a second router host: run {proc.seconds:.0f} s rc {proc.returncode}; HAProxy servers {servers}; "
                   f"rerun {two_hosts['rerun']}")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:]
    want = {f"{HOST1}-router-a": "UP", f"{HOST1}-router-b": "UP", f"{HOST2}-router-a": "UP"}
    assert servers == {HOST1: want, HOST2: want}, servers
    assert set(two_hosts["rerun"]) == {HOST1, HOST2}
    assert all(c["failed"] == 0 and c["changed"] == 0 for c in two_hosts["rerun"].values()), two_hosts["rerun"]
    # each HAProxy sends to the other host's routers too: requests through HOST1's public port reach HOST2's router
    snap = stat(HOST1)
    load = json.loads(on(HOST1, f"python3 {GUEST_LOAD} --url {PUBLIC} run --requests 64 --concurrency 16 "
                                "--deadline 60", timeout=120))  # fmt: skip
    assert load["ok"] == load["total"] == 64, load["errors"]
    assert haproxy_stat.counter_delta(snap, stat(HOST1), BACKEND, f"{HOST2}-router-a")["stot"] > 0


# Two router hosts: SMG's version change and a router flag change in one run (issue 49: the version change had a run
# of its own on one router host before, the flag change one on two hosts), over the three routers of both hosts.
SMG_FLAG = {"sglang_router_circuit_breaker_failure_threshold": 9}


@pytest.fixture(scope="module")
def version_and_flag_change_two_hosts(bed, two_hosts):
    event = "router version change smg 1.12.0 -> 1.13.0 and a flag change, two router hosts"
    return planned_change(bed, {**TO_SMG_NEW, **SMG_FLAG}, event)


def test_a_router_version_and_flag_change_on_two_router_hosts_rolls_without_a_failed_request(
    bed, version_and_flag_change_two_hosts, capsys
):
    what = "version change smg 1.12.0 -> 1.13.0 and a flag change on two router hosts"
    judge_planned(version_and_flag_change_two_hosts, capsys, what)
    judge_versions(bed, "smg 1.13.0")
    judge_flag(bed, "--cb-failure-threshold 9")


@pytest.fixture(scope="module")
def host2_router_killed(bed, version_and_flag_change_two_hosts):
    return bed


def test_kill_9_of_the_second_hosts_router_loses_at_most_what_it_held(host2_router_killed, capsys):
    kill_router(host2_router_killed, HOST2, capsys)
    rerun = recap(playbook(host2_router_killed, host2_router_killed["vars"]).stdout)
    assert all(c["failed"] == 0 and c["changed"] == 0 for c in rerun.values()), rerun


# Two router hosts: back to sglang-router with one of its flags changed in the same run (issue 49: sglang-router's
# router flag change had a run of its own on one router host before), over the three routers of both hosts.
SGLANG_ROUTER_FLAG = {"sglang_router_retry_max_retries": 4}


@pytest.fixture(scope="module")
def back_to_sglang_router(bed, host2_router_killed):
    event = "router switch smg 1.13.0 -> sglang-router 0.3.2 and a flag change, two router hosts"
    return planned_change(bed, {**TO_SGLANG_ROUTER, **SGLANG_ROUTER_FLAG}, event)


def test_the_switch_back_to_sglang_router_rolls_without_a_failed_request(bed, back_to_sglang_router, capsys):
    judge_planned(back_to_sglang_router, capsys, "switch smg 1.13.0 -> sglang-router 0.3.2 and a flag change on two "
                                                 "router hosts")  # fmt: skip
    judge_versions(bed, "sglang-router 0.3.2")
    judge_flag(bed, "--retry-max-retries 4")
