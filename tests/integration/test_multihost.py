"""Multi-host PD on four sandbox hosts, converged by site.yml through an inventory shaped like
inventories/multihost-example (see multihost.py): a GPU-less router host, a prefill host with two TP4 instances
(one per NUMA node), and two decode hosts with different GPU boxes.

The tests ask the services what happened: the router's worker list, the simulator's request log
(/sim/requests) on every worker, and the prefill bootstrap server's handoff state of each room.

The module is one deployment and a sequence of changes, on sglang-router first, then (after one switch under load) on
SMG. make test runs it in two parts side by side, each on a deployment of its own converged from bare
(scripts/test.sh): its sglang-router tests but the engine upgrade on sandbox clm; the engine upgrade, the switch to SMG
and the SMG tests (`-k "smg or engine_upgrade"`) on sandbox clms (DISAGG_MULTIHOST_SANDBOX), in the module's order.
"""

import hashlib
import json
import os
import re
import shlex
import subprocess
import time

import faults
import pytest
import yaml
from multihost import (
    DECODE_INSTANCES,
    MODEL_REPO,
    MODEL_SHARDS,
    ROUTER_GROUP_DEPS,
    TEST_VARS,
    sandbox_up_command,
    write_inventory,
)
from sandbox_hosts import REPO, VENV_BIN, debug_messages, down, recap, run, ssh_config, wait_until

from tests.sandbox import hubsim

SANDBOX = os.environ.get("DISAGG_MULTIHOST_SANDBOX", "clm")  # hosts clm-1..4
pytestmark = pytest.mark.usefixtures("sandbox_root")  # not root: fails, never skips (conftest.py)
REQUESTS = 24
LOAD = REPO / "tests" / "sandbox" / "load.py"
GUEST_LOAD = "/root/load.py"
LOAD_STOP = "/root/load.stop"
# DISAGG_MULTIHOST_REUSE=1 (development only): take the hosts as they are, converged by an earlier run.
REUSE = bool(os.environ.get("DISAGG_MULTIHOST_REUSE"))


# Issue 40: the model comes from a hub source, the test bed's hub double on this controller, which counts every byte
# it sends per client (its own record, GET /hubsim/stats). Revision 0 is deployed; revision 1 is a revision change;
# revision 2's index names a shard the repository lacks (refused after staging, before any unit changes); revision 3
# stages whole but its last shard's safetensors header is not valid (the engine double, as sglang, dies loading it:
# the first batch is rolled back).
MODEL_REVISIONS = [hubsim.generate(seed, **MODEL_SHARDS) for seed in (0, 1)]
# The hub asks for a token (401 without it), as a private repository does: sglang_hub_token, never in the run's output.
HUB_TOKEN = "hf_sandboxTokenNeverShown0123"


@pytest.fixture(scope="module")
def hub():
    broken = [hubsim.generate(2, broken="missing-shard", **MODEL_SHARDS),
              hubsim.generate(3, broken="header", **MODEL_SHARDS)]  # fmt: skip
    revisions = [*MODEL_REVISIONS, *broken]
    server = hubsim.start(hubsim.Hub({MODEL_REPO: revisions}, token=HUB_TOKEN), host="0.0.0.0", port=0)
    try:
        yield {"server": server, "hub": server.hub, "port": server.server_address[1], "revisions": revisions}
    finally:
        server.shutdown()


def model_bytes(revision):
    return sum(len(d) for d in revision.files.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, hub):
    run([str(VENV_BIN / "python"), *sandbox_up_command(SANDBOX)])
    try:
        inv = tmp_path_factory.mktemp("multihost-inventory")
        layout = write_inventory(inv, SANDBOX, {"sglang_hub_token": HUB_TOKEN},
                                 hub={"port": hub["port"], "revision": hub["revisions"][0].commit})  # fmt: skip
        first = None
        stats = {}
        if not REUSE:
            hub["hub"].reset()
            first = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml"], timeout=1500)
            stats["first"] = hub["hub"].stats()
            print(f"converge {first.seconds:.1f} s")
        router_host = layout["router"][0]["name"]
        run(["scp", "-q", "-F", str(ssh_config(SANDBOX)), str(LOAD), f"{router_host}:{GUEST_LOAD}"])
        yield {"inventory": inv, "layout": layout, "first": first, "vars": {}, "hub": hub, "hub_stats": stats}
    finally:
        if not os.environ.get("DISAGG_MULTIHOST_KEEP"):
            down(SANDBOX)


@pytest.fixture(scope="module")
def rerun(cluster):
    """The run right after the first converge, and what the hub sent for it: asked for by the first converge's tests
    (the first tests of the module), so it runs right after that converge. make test's second part of the module
    (scripts/test.sh) has none of them and goes on to its engine upgrade at once."""
    if REUSE:
        pytest.fail("DISAGG_MULTIHOST_REUSE: no converge in this session (development mode)")
    hub = cluster["hub"]["hub"]
    hub.reset()
    second = run([str(VENV_BIN / "ansible-playbook"), "-i", str(cluster["inventory"]), "site.yml"], timeout=1500)
    cluster["hub_stats"]["second"] = hub.stats()
    print(f"rerun {second.seconds:.1f} s")
    return second


def on(host, command, timeout=120):
    proc = run(["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", host, command], timeout=timeout,
               quiet=True)  # fmt: skip
    return proc.stdout


def get_json(host, url):
    return json.loads(on(host, f"curl -sf --noproxy '*' -m 10 {shlex.quote(url)}"))


def router(cluster):
    return cluster["layout"]["router"][0]["name"]


def test_rerun_changes_nothing(cluster, rerun):
    """The first converge passed and its rerun changes nothing, with the router group's own deps lists (no engine, no
    NIXL: multihost.ROUTER_GROUP_DEPS) in front of workers that pin the tested combination."""
    router_vars = yaml.safe_load((cluster["inventory"] / "group_vars" / "router.yml").read_text())
    assert {k: router_vars[k] for k in ROUTER_GROUP_DEPS} == ROUTER_GROUP_DEPS, router_vars
    assert cluster["first"].returncode == 0
    counts = recap(rerun.stdout)
    assert set(counts) == {h["name"] for hs in cluster["layout"].values() for h in hs}
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    # the rerun downloads nothing: the hub sent no file byte (the preflight's one model-info answer is all it asked)
    assert cluster["hub_stats"]["second"]["file_bytes"] == 0, cluster["hub_stats"]["second"]


def model_line(output):
    return next(m for _host, m in debug_messages(output) if m.startswith("model "))


def staged_dirs(host):
    return sorted(on(host, "ls -1 /opt/models | grep -- '-[0-9a-f]\\{40\\}$' || true").split())


def test_a_bare_cluster_took_one_copy_of_the_model_from_the_hub_and_the_rest_from_a_peer(cluster, rerun, capsys):
    revision = cluster["hub"]["revisions"][0]
    one_copy = model_bytes(revision)
    stats = cluster["hub_stats"]["first"]
    line = model_line(cluster["first"].stdout)
    report(capsys, f"first converge: hub file bytes {stats['file_bytes']} (one copy {one_copy}); {line}")
    # the hub's own count: one copy for the whole cluster of three worker hosts
    assert stats["file_bytes"] == one_copy, stats
    # every request carried the token, and no output of either run shows it
    assert stats["unauthorized"] == 0 and cluster["hub_stats"]["second"]["unauthorized"] == 0
    assert all(HUB_TOKEN not in proc.stdout + proc.stderr for proc in (cluster["first"], rerun))
    workers = cluster["layout"]["prefill"] + cluster["layout"]["decode"]
    assert f"{one_copy} bytes from the hub onto" in line and f"{2 * one_copy} bytes from" in line, line
    staged = f"DeepSeek-V4-Flash-{revision.commit}"
    for host in workers:
        assert staged_dirs(host["name"]) == [staged], host
        records = on(host["name"], "cat /var/lib/disagg-sglang/deployed/sglang-*.json")
        assert f"/opt/models/{staged}" in records and revision.commit in records, host


def worker_hosts(cluster):
    return [h["name"] for h in cluster["layout"]["prefill"] + cluster["layout"]["decode"]]


def model_records(cluster):
    """{unit@host: (model_path, model_revision)} of every worker's record."""
    found = {}
    for host in worker_hosts(cluster):
        for path in on(host, "ls /var/lib/disagg-sglang/deployed/*.json").split():
            record = json.loads(on(host, f"cat {path}"))
            if record.get("role") in ("prefill", "decode"):
                found[f"{record['unit']}@{host}"] = (record.get("model_path"), record.get("model_revision"))
    return found


def test_a_corrupted_file_is_found_and_fetched_again_from_a_peer_and_a_rerun_is_quiet(cluster, capsys):
    hub = cluster["hub"]["hub"]
    revision = cluster["hub"]["revisions"][0]
    victim = cluster["layout"]["decode"][-1]["name"]
    shard = f"/opt/models/DeepSeek-V4-Flash-{revision.commit}/model-00001-of-00002.safetensors"
    starts = worker_starts(cluster)
    on(victim, f"printf 'XXXX' | dd of={shard} bs=1 seek=100 conv=notrunc status=none")
    hub.reset()
    first = playbook(cluster, cluster["vars"])
    line = model_line(first.stdout)
    after = hub.stats()
    rerun = playbook(cluster, cluster["vars"])
    counts = recap(rerun.stdout)
    report(capsys, f"corrupted {shard} on {victim}: {line}; hub file bytes {after['file_bytes']}; rerun changed "
                   f"{sum(c['changed'] for c in counts.values())}")  # fmt: skip
    assert f"files found wrong and fetched again on {victim}" in line, line
    shard_bytes = len(revision.files["model-00001-of-00002.safetensors"])
    assert f"{shard_bytes} bytes from" in line, line  # the one wrong file, from a host that held it verified
    assert after["file_bytes"] == 0, after
    want = hashlib.sha256(revision.files["model-00001-of-00002.safetensors"]).hexdigest()
    assert on(victim, f"sha256sum {shard}").split()[0] == want
    assert worker_starts(cluster) == starts, "a repair restarted a worker"
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


def test_check_diff_names_what_a_new_revision_would_fetch_and_fetches_nothing(cluster, capsys):
    hub = cluster["hub"]["hub"]
    new = cluster["hub"]["revisions"][1]
    before = {host: staged_dirs(host) for host in worker_hosts(cluster)}
    hub.reset()
    proc = playbook(cluster, {**cluster["vars"], "test_model_revision": new.commit}, "--check", "--diff")
    stats = hub.stats()
    said = [m for _h, m in debug_messages(proc.stdout) if f"DeepSeek-V4-Flash-{new.commit}: would fetch" in m]
    report(capsys, f"--check --diff of revision {new.commit[:8]}: {said[:1]}; hub file bytes {stats['file_bytes']}")
    assert len(said) == len(worker_hosts(cluster)), said
    assert all(f"would fetch {len(new.files)} files, {model_bytes(new)} bytes" in m for m in said), said
    assert "+model-00002-of-00002.safetensors" in proc.stdout, "the diff names no file"
    assert stats["file_bytes"] == 0, stats
    assert {host: staged_dirs(host) for host in worker_hosts(cluster)} == before


# The revision change and the sglang-router flag change are one run (issue 49: the flag change rode on its own
# rolling run of the same four workers before): a new revision and a new flag of prefill and decode, four rolling
# batches, prefill first, under one load; judged as each was on its own. SMG's flag change keeps its own run
# (test_flag_change_rolls_out_without_a_failed_request[smg]).
def test_a_revision_change_rolls_under_load_without_a_failed_request(cluster, capsys):
    hub = cluster["hub"]["hub"]
    old, new = cluster["hub"]["revisions"][:2]
    before = model_records(cluster)
    assert set(before.values()) == {(f"/opt/models/DeepSeek-V4-Flash-{old.commit}", old.commit)}, before
    hub.reset()
    router_started = started_at(router(cluster), "sglang-router")
    since = time.time()
    output, result = converge_under_load(cluster, {"test_model_revision": new.commit, **new_flags()}, ROLLING_LOAD)
    stats = hub.stats()
    order = restart_order(output)
    impl = cluster.get("impl", "sglang_router")
    record_change(cluster, f"rolling revision and flag change, prefill then decode ({impl})", result, since, order)
    rerun = recap(playbook(cluster, cluster["vars"]).stdout)
    changed = sum(c["changed"] for c in rerun.values())
    report(capsys, f"revision {old.commit[:8]} -> {new.commit[:8]} and a flag: {model_line(output)}; hub file bytes "
                   f"{stats['file_bytes']}; restart order {order}; sent {result['total']}, failed "
                   f"{result['total'] - result['ok']}; rerun changed {changed}")  # fmt: skip
    assert stats["file_bytes"] == model_bytes(new), stats
    by_host = sorted(before, key=lambda k: (not k.startswith("sglang-prefill"), k.split("@")[1], k.split("@")[0]))
    assert order == by_host, order
    judge_flag_roll(cluster, result, order, router_started, since=since, capsys=capsys)
    after = model_records(cluster)
    assert set(after.values()) == {(f"/opt/models/DeepSeek-V4-Flash-{new.commit}", new.commit)}, after
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in rerun.values()), rerun
    # kept: the revision in use and the previous one (a rollback's)
    for host in worker_hosts(cluster):
        assert staged_dirs(host) == sorted(f"DeepSeek-V4-Flash-{r.commit}" for r in (old, new)), host


def test_a_revision_missing_a_shard_is_refused_before_any_unit_changes(cluster, capsys):
    broken = cluster["hub"]["revisions"][2]
    starts = worker_starts(cluster)
    models = model_records(cluster)
    proc = playbook(cluster, {**cluster["vars"], "test_model_revision": broken.commit}, check=False)
    report(capsys, f"revision {broken.commit[:8]} missing a shard: rc {proc.returncode}")
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert f"the staged revision /opt/models/DeepSeek-V4-Flash-{broken.commit} of sglang_model_source is not a " \
           "model sglang can load: model-00002-of-00002.safetensors, named by model.safetensors.index.json, is " \
           "missing" in flat, flat[-3000:]  # fmt: skip
    assert "PLAY [Prefill and decode, started together]" not in proc.stdout
    assert worker_starts(cluster) == starts and model_records(cluster) == models
    # what the refused run staged is no unit's: removed here (the keep-the-last-two step runs after healthy units)
    for host in worker_hosts(cluster):
        on(host, f"rm -rf /opt/models/DeepSeek-V4-Flash-{broken.commit}")


def test_a_revision_that_does_not_load_is_rolled_back_under_load(cluster, capsys):
    broken = cluster["hub"]["revisions"][3]
    serving = model_records(cluster)
    since = time.time()
    output, result = converge_under_load(cluster, {"test_model_revision": broken.commit}, ROLLING_LOAD, succeed=False)
    order = restart_order(output)
    record_change(cluster, "model revision that does not load, rolled back", result, since, order)
    workers = get_json(router(cluster), "http://127.0.0.1:8000/workers")["workers"]
    report(capsys, f"revision {broken.commit[:8]} (a shard's header not valid): restart order {order}; sent "
                   f"{result['total']}, failed {result['total'] - result['ok']}")  # fmt: skip
    assert order and order[0].startswith("sglang-prefill0@"), order
    assert "did not become healthy after its change" in output, output[-5000:]
    assert "the old configuration serves again" in output, output[-5000:]
    assert spanned(result) and result["errors"] == {} and result["ok"] == result["total"], result["errors"]
    assert model_records(cluster) == serving
    assert len(workers) == 4 and all(w["is_healthy"] for w in workers), workers
    # what the refused revision staged is no unit's: removed, so the rerun is the deployment's own
    for host in worker_hosts(cluster):
        on(host, f"rm -rf /opt/models/DeepSeek-V4-Flash-{broken.commit}")
    rerun = recap(playbook(cluster, cluster["vars"]).stdout)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in rerun.values()), rerun


# Issue 22: the router program is an inventory choice (sglang_router_impl). The day-2 tests below that take the
# router_impl fixture run for both programs: every sglang_router test first, then (tests/integration/conftest.py
# sorts them) the deployment is switched to SMG by one run under load, and the smg tests follow in file order.
# At most 20 starts/s: a refused connection fails at once, and without a rate the load would spend itself there.
SWITCH_LOAD = ["--max-new-tokens", "50", "run", "--requests", "6000", "--concurrency", "16", "--rate", "20",
               "--timeout", "30", "--deadline", "300", "--workers"]  # fmt: skip
WORKERS = [("prefill", "sglang-prefill0"), ("prefill", "sglang-prefill1"), ("prefill", "sglang-prefill2"),
           ("decode", "sglang-decode0"),
           ("decode", "sglang-decode1")]  # fmt: skip


def worker_starts(cluster):
    """{unit@host: start time} of the deployment's worker units."""
    found = {}
    for role, unit in WORKERS:
        for host in cluster["layout"][role]:
            if unit in on(host["name"], f"systemctl list-units --plain --no-legend '{unit}.service'"):
                found[f"{unit}@{host['name']}"] = started_at(host["name"], unit)
    return found


def switch_router(cluster, impl):
    """One run with sglang_router_impl IMPL under the load: what it cost and what runs afterwards."""
    workers_before, router_before = worker_starts(cluster), started_at(router(cluster), "sglang-router")
    since = time.time()
    output, result = converge_under_load(cluster, {"sglang_router_impl": impl}, SWITCH_LOAD, rolling=False)
    record_change(cluster, f"router program switched to {impl} (the router restarts)", result, since, [],
                  deployment="2P2D, one router")  # fmt: skip
    failed = [(start, end) for start, end, status in result["timeline"] if status != "200"]
    rerun = recap(playbook(cluster, cluster["vars"]).stdout)
    cluster["impl"] = impl
    return {
        "impl": impl, "output": output, "result": result, "rerun": rerun,
        "pause_s": round(max(e for _s, e in failed) - min(s for s, _e in failed), 2) if failed else 0.0,
        "failed": len(failed), "workers_before": workers_before, "workers_after": worker_starts(cluster),
        "router_before": router_before, "router_after": started_at(router(cluster), "sglang-router"),
    }  # fmt: skip


@pytest.fixture
def router_impl(request, cluster):
    """The router program the test runs against (parametrized indirectly): the deployment is switched to it by one
    run when it runs the other one (switch_router; its outcome in cluster["switch"])."""
    if cluster.get("impl", "sglang_router") != request.param:
        cluster["switch"] = switch_router(cluster, request.param)
    return request.param


@pytest.mark.parametrize("router_impl", ["smg"], indirect=True)
def test_switching_to_smg_is_one_run_with_a_short_pause_and_a_rerun_changes_nothing(cluster, router_impl, capsys):
    sw = cluster["switch"]
    result, host = sw["result"], router(cluster)
    report(capsys, f"router switch sglang_router -> {router_impl} under load: {result['ok']}/{result['total']} ok, "
                   f"{sw['failed']} failed {result['errors']} within {sw['pause_s']} s; rerun changed "
                   f"{sum(c['changed'] for c in sw['rerun'].values())}")  # fmt: skip
    said = " ".join(sw["output"].split())  # the callback folds a long message over lines
    assert (
        "sglang-router (router) restarts now: no redundancy: serving pauses until it is ready again (seconds); the "
        "workers keep running, and it changes program: sglang_router -> smg"
    ) in said, sw["output"][-3000:]
    assert sw["router_after"] != sw["router_before"], "the router did not restart onto SMG"
    assert sw["workers_after"] == sw["workers_before"], "a worker restarted for the router's switch"
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in sw["rerun"].values()), sw["rerun"]
    # A short pause: the requests that failed did so within seconds (the router's restart); the load went on after.
    last_failed = max((result["t0"] + end for _start, end, status in result["timeline"] if status != "200"), default=0)
    assert sw["pause_s"] <= 30 and served_after(result, last_failed) > 0, sw
    # What runs: SMG's module from a router venv that holds smg and not sglang-router; its worker API lists the
    # four workers ready; the old router's venv is the one kept beside it.
    unit = on(host, "cat /etc/systemd/system/sglang-router.service")
    assert "smg.launch_router" in unit and "sglang_router.launch_router" not in unit, unit
    venv = re.search(r"(/opt/sglang/venvs/router-[0-9a-f]+)/bin/python", unit).group(1)
    dists = on(host, f"ls {venv}/lib/python3*/site-packages | grep -i dist-info").split()
    assert any(d.startswith("smg-1.13.0") for d in dists) and not any(d.startswith("sglang_router") for d in dists)
    workers = get_json(host, "http://127.0.0.1:8000/workers")["workers"]
    assert sorted(w["status"] for w in workers) == ["ready"] * 4 and all(w["is_healthy"] for w in workers), workers


def test_router_lists_every_worker_at_its_advertise_address(cluster):
    workers = get_json(router(cluster), "http://127.0.0.1:8000/workers")["workers"]
    got = sorted((w["worker_type"], w["url"], w.get("bootstrap_port"), w["is_healthy"]) for w in workers)
    prefill = cluster["layout"]["prefill"][0]["address"]
    decodes = [h["address"] for h in cluster["layout"]["decode"]]
    want = sorted(
        [
            ("prefill", f"http://{prefill}:30000", 8998, True),
            ("prefill", f"http://{prefill}:30010", 9008, True),
            ("decode", f"http://{decodes[0]}:30001", None, True),
            ("decode", f"http://{decodes[1]}:30011", None, True),
        ]
    )
    assert got == want


def test_requests_reach_every_worker_and_the_handoff_crosses_hosts(cluster):
    r = router(cluster)
    body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}})
    curl = "curl -s -o /dev/null -w '%{http_code}\\n' --noproxy '*' -m 20 -H 'Content-Type: application/json'"
    loop = f"for i in $(seq {REQUESTS}); do {curl} -d {shlex.quote(body)} http://127.0.0.1:8000/generate; done"
    # this test's own requests only: a decode's log also holds the rooms of earlier tests' load, prefilled by a
    # prefill process that has restarted since (a revision change, its rollback) and whose log went with it
    since = time.time()
    codes = on(r, loop, timeout=300).split()
    assert codes == ["200"] * REQUESTS
    prefill = cluster["layout"]["prefill"][0]
    rooms = {}
    for port in (30000, 30010):
        log = get_json(r, f"http://{prefill['address']}:{port}/sim/requests")
        rooms[port] = {e["bootstrap_room"] for e in log if e["path"] == "/generate" and e["status"] == 200}
        assert rooms[port], f"prefill :{port} got no request through the router"
    bootstrap = {30000: 8998, 30010: 9008}
    for decode, port in zip(cluster["layout"]["decode"], (30001, 30011), strict=True):
        log = get_json(r, f"http://{decode['address']}:{port}/sim/requests")
        done = {
            e["bootstrap_room"] for e in log if e["path"] == "/generate" and e["status"] == 200 and e["time"] >= since
        }
        assert done, f"decode on {decode['name']} got no request through the router"
        # Each room this decode finished was prefilled on the other host; its KV was handed over there.
        for room in done:
            owner = [p for p, seen in rooms.items() if room in seen]
            assert len(owner) == 1, f"room {room} of {decode['name']} has no prefill on {prefill['name']}"
            kv = get_json(r, f"http://{prefill['address']}:{bootstrap[owner[0]]}/sim/kv/{room}?wait=0")
            assert kv["state"] == "transferred", kv
        # No prefill bootstrap server on the decode host: the handoff could only have crossed hosts.
        listening = on(decode["name"], "ss -Hltn")
        assert ":8998 " not in listening and ":9008 " not in listening
        print(f"{decode['name']}: {len(done)} requests, KV from {prefill['name']}")


def test_the_kv_probe_says_why_it_does_not_run_on_hosts_without_both_roles(cluster):
    if REUSE:
        pytest.fail("DISAGG_MULTIHOST_REUSE: no converge in this session (development mode)")
    why = "the probe measures a prefill GPU -> decode GPU pair on one host, so the KV path between hosts is not probed"
    lines = {h: m for h, m in debug_messages(cluster["first"].stdout) if m.startswith("KV probe: not run")}
    assert lines == {
        **{h["name"]: f"KV probe: not run on {h['name']}: it holds no decode instance (prefill only); {why}"
           for h in cluster["layout"]["prefill"]},
        **{h["name"]: f"KV probe: not run on {h['name']}: it holds no prefill instance (decode only); {why}"
           for h in cluster["layout"]["decode"]},
    }, lines  # fmt: skip


def report(capsys, line):
    with capsys.disabled():
        print(f"\n[multihost] {line}", flush=True)


def converge_under_load(cluster, extra_vars, load_args, *, succeed=True, rolling=True):
    """Runs site.yml with EXTRA_VARS (added to those of earlier changes); starts the load through the router
    when the run asks whether the router serves (the workers' play begins), so the load runs at full concurrency
    well before the first instance leaves the router. Returns (playbook output, load JSON).
    succeed=False: the run must fail, and EXTRA_VARS are not kept for the changes after it."""
    run_vars = {**cluster["vars"], **extra_vars}
    if succeed:
        cluster["vars"] = run_vars
    path = cluster["inventory"] / ".." / f"vars-{len(run_vars)}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(run_vars))
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    play = subprocess.Popen([str(VENV_BIN / "ansible-playbook"), "-i", str(cluster["inventory"]), "site.yml",
                             "-e", f"@{path.resolve()}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines, loader = [], None
    for line in play.stdout:
        lines.append(line)
        if loader is None and "TASK [Ask the router whether it serves" in line:
            loader = subprocess.Popen(
                ["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", router(cluster),
                 shlex.join(["python3", GUEST_LOAD, *load_args, "--stop-file", LOAD_STOP])],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    play.wait(timeout=1500)
    output = "".join(lines)
    if loader is not None:
        # The load runs until the change is over, however long it took on this machine (its deadline only bounds
        # it), and a few seconds more, so the router's listing of the last restarted worker is seen.
        time.sleep(3)
        on(router(cluster), f"touch {LOAD_STOP}")
    assert loader is not None, f"the run never reached the workers' play:\n{output[-4000:]}"
    if rolling:
        # the workers' play reached its rolling step (its batches are included only when there are some)
        assert "TASK [Restart the changed workers of roles with more instances in batches" in output, (
            f"the run never reached the rolling step:\n{output[-4000:]}"
        )
    out, _unused = loader.communicate(timeout=400)
    assert (play.returncode == 0) is succeed, failures(output) + output[-6000:]
    return output, json.loads(out)


def spanned(result):
    """The load ran through the whole change: it ended on the test's stop file, not on its request count or its
    deadline, and sent requests. How many it sent depends on the machine's speed and is not asserted (issue 37: a
    count of 300 failed a CI run at 272 with 0 failed); the requests in flight at each restart are asserted from the
    workers' own records where the test needs them."""
    assert result["stopped_by"] == "stop-file", f"the load ended on its {result['stopped_by']}, before the change did"
    return result["total"] > 0


def failures(output):
    """Each failed task of a playbook's output with the lines after it, so a failure early in a long run shows."""
    found = [output[max(0, m.start() - 300) : m.start() + 1500] for m in re.finditer(r"fatal: \[|FAILED! =>", output)]
    return "".join(f"--- failed task ---\n{text}\n" for text in found[:4])


def restart_order(output):
    """["sglang-decode0@clm-3", ...] from the run's "rolling restart, batch i/n: UNIT@HOST, ..." lines."""
    found = [re.search(r"rolling restart, batch \d+/\d+: ([^'\"]+)", line) for line in output.splitlines()]
    return [u.strip() for m in found if m for u in m.group(1).split(", ")]


def started_at(host, unit):
    """Epoch seconds at which UNIT's current process started."""
    out = on(host, f"systemctl show -P ExecMainStartTimestamp --timestamp=unix {unit}.service").strip()
    return float(out.lstrip("@"))


# The rolling load: 16 requests always in flight through the router, each about 1 s (200 tokens at the simulator's
# 5 ms), so every instance holds requests when it is taken out, and the restart happens under work in flight. It ends
# when the run is over (converge_under_load's stop file); count and deadline only bound it (a CI run's four batches
# took longer than the 120 s this deadline once was, and the last worker came back after the load had stopped).
ROLLING_LOAD = ["--max-new-tokens", "200", "run", "--requests", "8000", "--concurrency", "16", "--timeout", "30",
                "--deadline", "480", "--workers"]  # fmt: skip
MIN_IN_FLIGHT = 12  # requests in flight through the router at every restart
PORTS = {"sglang-prefill0": 30000, "sglang-prefill1": 30010, "sglang-prefill2": 30010, "sglang-decode0": 30001,
         "sglang-decode1": 30011}  # fmt: skip


def worker_url(cluster, unit, host):
    address = next(h["address"] for hs in cluster["layout"].values() for h in hs if h["name"] == host)
    return f"http://{address}:{PORTS[unit]}"


def records(cluster, unit, host, since):
    """(the record of UNIT's process that exited after SINCE, from its journal; the running process's record)."""
    journal = on(host, f"journalctl -u {unit}.service -o cat --since @{int(since)}", timeout=60)
    exited = faults.lifecycle_lines(journal)
    assert exited, f"{unit}@{host} wrote no sim_lifecycle record at exit since {since}"
    # the restarted process answers once its weights are loaded (its port is closed until then, as sglang's)
    url = shlex.quote(f"{worker_url(cluster, unit, host)}/sim/lifecycle")
    waited = on(
        router(cluster),
        f"curl -sf --noproxy '*' -m 10 --retry 60 --retry-delay 2 --retry-connrefused {url}",
        timeout=200,
    )
    return exited[0], json.loads(waited)


def in_flight_at(result, t):
    """Requests in flight through the router at epoch T, from load.py's timeline."""
    return sum(1 for start, end, _status in result["timeline"] if start <= t - result["t0"] < end)


def served_after(result, t):
    """Requests through the router that started after epoch T and were answered 200, from load.py's timeline."""
    return sum(1 for start, _end, status in result["timeline"] if start >= t - result["t0"] and status == "200")


def prefill_kv_used(cluster):
    """{unit: num_used_tokens} of every prefill, from its /v1/loads (published at once when its scheduler is idle; its
    /metrics gauges may hold a freed KV up to 30 s: faults.KV_IDLE_TIMEOUT); None for a prefill that did not answer."""
    prefill = cluster["layout"]["prefill"][0]
    used = {}
    for unit in ("sglang-prefill0", "sglang-prefill1"):
        url = f"{worker_url(cluster, unit, prefill['name'])}/v1/loads?include=core"
        page = on(router(cluster), f"curl -sf --noproxy '*' -m 10 '{url}'")
        used[unit] = faults.prefill_kv(page).get("num_used_tokens")
    return used


# A host that fails its preflight stops the run on every host (site.yml's preflight play is any_errors_fatal): the
# prefill host, whose own preflight passed, is not converged to a plan that lacks the decodes.
def test_a_host_failing_its_preflight_stops_every_host(cluster, capsys):
    bad = {**cluster["vars"], "sglang_decode_extra_flags": {"no-such-sglang-flag": 1}}
    proc = playbook(cluster, bad, check=False)
    hosts = recap(proc.stdout)
    decodes = {h["name"] for h in cluster["layout"]["decode"]}
    prefills = {h["name"] for h in cluster["layout"]["prefill"]}
    failed = sorted(h for h, counts in hosts.items() if counts.get("failed"))
    report(capsys, f"one role's preflight failed: rc {proc.returncode}, {proc.seconds:.1f} s, failed {failed}, "
                   f"changed {sum(c.get('changed', 0) for c in hosts.values())}")  # fmt: skip
    assert proc.returncode != 0
    assert "no-such-sglang-flag" in proc.stdout
    assert decodes <= set(failed) and not prefills & set(failed), hosts
    assert "PLAY [Dependencies]" not in proc.stdout, "a play after the preflight ran"
    assert all(counts.get("changed", 0) == 0 for counts in hosts.values()), hosts


def record_change(cluster, event, result, started, moved, *, deployment="2P2D, batches of one"):
    """One row of tests/bench/error_budget.py's table for a change run (faults.change_cost): STARTED the run's start
    (epoch), MOVED the workers ("unit@host") it restarted, retired or added; planned, what the router lists after."""
    if not os.environ.get("DISAGG_FAULT_REPORT"):
        return
    planned = [w["url"] for w in get_json(router(cluster), "http://127.0.0.1:8000/workers")["workers"]]
    urls = [worker_url(cluster, *u.split("@")) for u in moved]
    faults.record(event, deployment, faults.change_cost(result, started, planned, urls))


def judge_restarts(cluster, result, units, since, capsys):
    """Each restarted worker judged by its own records (issue 37 item 5), not by what a retrying router returned."""
    for unit, host in units:
        # What the restarted worker itself recorded: it held requests when the router let it go, they completed,
        # none reached it until it was back, nothing was left at SIGTERM (the drain was waited for), and the router
        # had work in flight when it stopped.
        old, new = records(cluster, unit, host, since)
        left, back = faults.out_window(result["workers"], result["t0"], worker_url(cluster, unit, host))
        assert left is not None and back is not None, f"{unit}: the router never let it go and took it back"
        problems, held = faults.drain_problems(old, new, left, back)
        sigterm_at = old["sigterm"]["time"]
        routed = in_flight_at(result, sigterm_at)
        report(capsys, f"  {unit}@{host}: out of the router {back - left:.1f} s, {old['sigterm']['in_flight']} at "
                       f"SIGTERM {sigterm_at - left:.1f} s after removal, {routed} in flight through the router "
                       f"then; {problems or 'no problem'}")  # fmt: skip
        assert problems == [], f"{unit}@{host}: {problems}"
        assert routed >= MIN_IN_FLIGHT, f"only {routed} requests in flight through the router at {unit}'s SIGTERM"
        # A decode holds each request for its handoff and its tokens: at removal it held some, and they completed.
        # (A prefill's record has shown none in flight at the moment the router's GET /workers dropped it, in every
        # run so far, though its requests take 1 s; why is not established, so it is not asserted for prefills.)
        if unit.startswith("sglang-decode"):
            assert held and all(r["completed"] for r in held), f"{unit}@{host} held {held} at removal"


def new_flags():
    """Extra vars that give prefill and decode a flag value this deployment has not had yet."""
    flags = {"watchdog-timeout": 400 + int(time.time()) % 1000}
    return {"sglang_prefill_extra_flags": flags, "sglang_decode_extra_flags": flags}


def judge_flag_roll(cluster, result, order, router_started, *, since, capsys):
    """A rolling change of every worker's flags under load: the prefills, then the decodes, each restarted once while
    the load ran, one after the other, each with the flag on its command line; no request failed; the router kept
    its process; every restart judged from the worker's own record (judge_restarts); every prefill's KV back to idle
    once the load is over (no handoff broke)."""
    units = [u.split("@") for u in order]
    # the prefills by their names now (the scale-in test renames prefill1 to prefill2, and on its next run back)
    prefills = sorted(u for u in _deployed(cluster["layout"]["prefill"][0]["name"])[0] if "prefill" in u)
    want = [*prefills, "sglang-decode0", "sglang-decode1"]
    assert [u.split("@")[0] for u in order] == want, order
    assert {h for _unused, h in units} == {h["name"] for role in ("prefill", "decode") for h in cluster["layout"][role]}
    assert started_at(router(cluster), "sglang-router") == router_started, "the router restarted"
    assert spanned(result) and result["errors"] == {} and result["ok"] == result["total"], result["errors"]
    # Every restart happened while the load ran, one after the other in the order shown.
    t_end = result["t0"] + result["elapsed"]
    starts = [started_at(host, unit) for unit, host in units]
    assert all(result["t0"] < t < t_end for t in starts), (result["t0"], starts, t_end)
    assert starts == sorted(starts)
    for unit, host in units:
        assert "--watchdog-timeout" in on(
            host, f"cat /proc/$(systemctl show -P MainPID {unit}.service)/cmdline | tr '\\0' ' '"
        )
    judge_restarts(cluster, result, units, since, capsys)
    # No handoff broke: every prefill's KV is back to idle once the load is over.
    readings = []

    def idle():
        readings.append(prefill_kv_used(cluster))
        return all(kv == 0 for kv in readings[-1].values())

    wait_until(idle, 15)
    used = readings[-1]
    assert used and all(kv == 0 for kv in used.values()), f"prefill KV not back to idle after the restarts: {used}"


# SMG's flag change (sglang-router's rides on the revision change's run above).
@pytest.mark.parametrize("router_impl", ["smg"], indirect=True)
def test_flag_change_rolls_out_without_a_failed_request(cluster, router_impl, capsys):
    """One run changes a flag of prefill and decode: four rolling batches, prefill first, under one load."""
    router_started = started_at(router(cluster), "sglang-router")
    since = time.time()
    output, result = converge_under_load(cluster, new_flags(), ROLLING_LOAD)
    order = restart_order(output)
    record_change(cluster, f"rolling flag change, prefill then decode ({router_impl})", result, since, order)
    report(capsys, f"[{router_impl}] prefill and decode flag change: restart order {order}; "
                   f"load {result['ok']}/{result['total']} "
                   f"ok, errors {result['errors']}, {result['elapsed']:.1f} s")  # fmt: skip
    judge_flag_roll(cluster, result, order, router_started, since=since, capsys=capsys)


# The control: a restart without the removal step (systemctl restart while the router still routes to it) is caught by
# the same judgement: requests reach it after SIGTERM, it holds requests at SIGTERM.
CONTROL_LOAD = ["--max-new-tokens", "200", "run", "--requests", "800", "--concurrency", "16", "--timeout", "30",
                "--deadline", "45", "--workers"]  # fmt: skip


def test_control_a_restart_without_removal_is_caught(cluster, capsys):
    unit, host = "sglang-decode1", cluster["layout"]["decode"][1]["name"]
    loader = subprocess.Popen(
        ["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", router(cluster),
         shlex.join(["python3", GUEST_LOAD, *CONTROL_LOAD])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(5)
    since = time.time()
    on(host, f"systemctl restart {unit}.service", timeout=120)
    out, _unused = loader.communicate(timeout=300)
    result = json.loads(out)
    old, new = records(cluster, unit, host, since - 1)
    # No removal: the worker is "out" from its SIGTERM until the router lists it healthy again.
    sigterm_at = old["sigterm"]["time"]
    _unused, back = faults.out_window([[t, s] for t, s in result["workers"] if result["t0"] + t >= sigterm_at],
                                      result["t0"], worker_url(cluster, unit, host))  # fmt: skip
    problems, _held = faults.drain_problems(old, new, sigterm_at, back)
    report(capsys, f"control (restart without removal) {unit}@{host}: load {result['ok']}/{result['total']} ok; "
                   f"caught: {problems}")  # fmt: skip
    assert problems, "a restart without the removal step passed the drain judgement: the judgement proves nothing"
    ready = json.loads(on(router(cluster), f"python3 {GUEST_LOAD} wait-ready --timeout 120 --probes 3", timeout=200))
    assert ready["ready"], ready


def backups_and_environ(host, unit):
    """The backup files (~) left in the unit and environment directories, and UNIT's process environment."""
    return on(host, "ls /etc/systemd/system /etc/sglang | grep '~$' || true").split(), on(
        host, f"tr '\\0' '\\n' < /proc/$(systemctl show -P MainPID {unit}.service)/environ"
    )


# Issue 19, with sglang's real unhealthy state (issue 37): a decode change whose workers come up and stall (the
# scheduler stops answering: the port takes /health and nothing answers, generations hang; sglang 0.5.23
# http_server.py health_generate, the double's SGLANG_SIM_STALL_AFTER) is rolled back in the rolling path: the first
# batch's instance is recognised as stalled after sglang_stall_timeout (12 s here; not at sglang_health_timeout, the
# cluster's in TEST_VARS, which its unit files carry: changing it restarts every worker), gets its previous unit back,
# restarted, healthy, back in the router; the second batch is left alone; the run fails with one [ERROR], naming the
# instance and its journal; no request through the router fails or hangs meanwhile (the stalled instance never
# rejoined it); the next run with the previous inventory changes nothing.
STALL_TIMEOUT = 12
STALL_RUN_BOUND = 420  # seconds: the whole failed run (plan, batch 1 drained, stalled, rolled back)


def test_a_stalled_decode_change_is_rolled_back_under_load_within_the_stall_bound(cluster, capsys):
    env = {**cluster["vars"].get("sglang_decode_extra_env", TEST_VARS["sglang_decode_extra_env"])}
    stall = {"SGLANG_SIM_STALL_AFTER": "0", "SGLANG_HEALTH_CHECK_TIMEOUT": "10"}
    bad = {"sglang_decode_extra_env": {**env, **stall}, "sglang_stall_timeout": STALL_TIMEOUT}
    router_started = started_at(router(cluster), "sglang-router")
    began, since = time.monotonic(), time.time()
    output, result = converge_under_load(cluster, bad, ROLLING_LOAD, succeed=False)
    run_s = time.monotonic() - began
    order = restart_order(output)
    impl = cluster.get("impl", "sglang_router")
    record_change(cluster, f"decode change that stalls, rolled back ({impl})", result, since, order)
    assert len(order) == 2 and all(u.startswith("sglang-decode") for u in order), (order, output[-5000:])
    first_unit, first_host = order[0].split("@")
    workers = get_json(router(cluster), "http://127.0.0.1:8000/workers")["workers"]
    errors = [line for line in output.splitlines() if line.startswith("[ERROR]")]
    longest = max((end - start for start, end, _status in result.get("timeline") or []), default=0)
    report(capsys, f"stalled decode change: run failed after {run_s:.0f} s; restart order {order}; [ERROR] lines "
                   f"{len(errors)}; load {result['ok']}/{result['total']} ok, errors {result['errors']}, longest "
                   f"request {longest:.1f} s; router lists {len(workers)} workers, "
                   f"{sum(w['is_healthy'] for w in workers)} healthy")  # fmt: skip
    journal = on(first_host, f"journalctl -o short-unix --no-pager -u {first_unit}.service --since @{int(since)}")
    recognised = faults.stall_recognition_s(journal, first_unit)  # its server's start to the rollback's stop
    report(capsys, f"stalled decode change: {first_unit} on {first_host} recognised as stalled {recognised} s after "
                   "it came up")  # fmt: skip
    assert recognised is not None and recognised < faults.STALL_RECOGNISED_WITHIN, journal[-3000:]
    assert run_s < STALL_RUN_BOUND, f"the stall was not recognised within its bound: the run took {run_s:.0f} s"
    assert len(errors) == 1, errors
    assert f"{first_unit} on {first_host} did not become healthy after its change (stalled:" in errors[0], errors
    assert "the old configuration serves again" in output, output[-5000:]
    assert "Health check failed" in output, "the journal tail of the stalled configuration is not in the output"
    assert "is undefined" not in output, "a follow-on task failed on a variable"
    assert len(workers) == 4 and all(w["is_healthy"] for w in workers), workers
    assert started_at(router(cluster), "sglang-router") == router_started, "the router restarted"
    for decode in cluster["layout"]["decode"]:
        for unit in on(decode["name"], "systemctl list-units --plain --no-legend 'sglang-decode*'").split():
            if unit.endswith(".service"):
                backups, environ = backups_and_environ(decode["name"], unit[: -len(".service")])
                # the stall's values are gone (SGLANG_HEALTH_CHECK_TIMEOUT itself stays: the plan renders
                # sglang_health_check_timeout into every worker)
                assert backups == [] and not any(f"{k}={v}" in environ.splitlines() for k, v in stall.items()), (
                    decode["name"],
                    unit,
                    backups,
                )
    assert spanned(result) and result["errors"] == {} and result["ok"] == result["total"], result["errors"]
    assert longest < 15, f"a request took {longest:.1f} s: it waited on the stalled instance"
    again = playbook(cluster, cluster["vars"])
    counts = recap(again.stdout)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), (counts, again.stdout[-3000:])


# kill -9 of one of two instances of a role under load through the router: 16 at a time, at most 20 starts/s, for
# 90 s, the kill 3 s in. systemd brings the instance back after RestartSec (10 s, the role's default) and
# STARTUP_DELAY s of simulated weight
# loading (a runtime drop-in: tests/integration/faults.py), longer than the router needs to see it gone, so what is
# tested is the router routing around a dead instance and taking it back, within the failure budget of
# faults.BUDGET.
KILL_LOAD = ["run", "--requests", "1200", "--concurrency", "16", "--rate", "20", "--timeout", "10", "--deadline", "90",
             "--workers"]  # fmt: skip
KILL_AFTER = 3.0


@pytest.mark.parametrize(
    ("role", "router_impl"),
    [("decode", "sglang_router"), ("prefill", "sglang_router"), ("decode", "smg")],
    indirect=["router_impl"],
)
def test_kill_9_of_one_of_two_under_load(cluster, role, router_impl, capsys):
    host = cluster["layout"][role][0]["name"]
    unit = f"sglang-{role}0"
    restarts = int(on(host, f"systemctl show -P NRestarts {unit}.service"))
    on(host, faults.slow_start(unit))
    try:
        loader = subprocess.Popen(
            ["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", router(cluster),
             shlex.join(["python3", GUEST_LOAD, *KILL_LOAD])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(KILL_AFTER)
        kill_at = time.time()  # the sandbox hosts share this machine's clock
        on(host, f"systemctl kill -s KILL {unit}.service")
        out, _unused = loader.communicate(timeout=300)
        ready = json.loads(on(router(cluster), f"python3 {GUEST_LOAD} wait-ready --timeout 120 --probes 3",
                              timeout=200))  # fmt: skip
    finally:
        on(host, faults.normal_start(unit))
    result = json.loads(out)
    # Recovered: the router, which had let the dead instance go, routes to it again (load.py --workers).
    left, back = faults.out_window(result["workers"], result["t0"], worker_url(cluster, unit, host))
    cost = faults.summary(result, kill_at, back)
    restarted = int(on(host, f"systemctl show -P NRestarts {unit}.service"))
    report(capsys, f"[{router_impl}] kill -9 {unit}@{host} under load, one of two: "
                   f"{cost['failed']}/{cost['sent']} failed "
                   f"{cost['errors']}; failures started {cost['first_failure_s']}..{cost['last_failure_s']} s after "
                   f"the kill; the router let it go {None if left is None else round(left - kill_at, 1)} s after "
                   f"the kill and took it back after {cost['recovery_s']} s; "
                   f"NRestarts {restarts}->{restarted}")  # fmt: skip
    faults.record(f"kill -9 {role} ({router_impl})", "2P2D (one of two)", cost)
    assert ready["ready"], ready
    assert left is not None and back is not None, f"the router never let the dead {unit} go and took it back: {cost}"
    assert restarted == restarts + 1, f"systemd did not restart {unit} once: NRestarts {restarts}->{restarted}"
    assert cost["recovery_s"] > faults.STARTUP_DELAY, f"{unit} came back before its weights loaded: {cost}"
    # The load ran on past the recovery, 16 at a time until its deadline, and was served after it (how many requests
    # that is depends on the machine's speed: not asserted).
    assert result["t0"] + result["elapsed"] > back and served_after(result, back) > 0, (cost, back)
    # on failure: the failed requests (start after the kill, seconds taken, status) and what the router routed to
    failed = [(round(result["t0"] + start - kill_at, 2), round(end - start, 2), status)
              for start, end, status in result["timeline"] if status != "200"]  # fmt: skip
    routing = [(round(result["t0"] + t - kill_at, 2), state) for t, state in result["workers"]]
    assert faults.over_budget(cost, role, True) == [], (faults.over_budget(cost, role, True), cost, failed[-10:],
                                                        routing)  # fmt: skip


# Issue 20: day-2 changes of the instance set, one after the other on the same deployment, each under the rolling
# load (16 requests in flight through the router): scale-in (decode1's host gets an empty instance list), scale-out
# (decode1 back), rename (prefill1 -> prefill2 on the same GPUs and ports). Each must lose no request and leave the
# router running (its start time unchanged: the worker list goes through its API); the test asks each host what runs
# afterwards (units, their records, the router's /workers) and a rerun after each step changes nothing.
def _decode_host_vars(cluster, instances):
    host = cluster["layout"]["decode"][1]["name"]
    (cluster["inventory"] / "host_vars" / f"{host}.yml").write_text(
        yaml.safe_dump({"sglang_decode_instances": instances})
    )


def _deployed(host):
    """{unit: active state} of the collection's units on HOST, and the units its records name."""
    listed = on(host, "systemctl list-unit-files --plain --no-legend 'sglang-*' | awk '{print $1}'").split()
    states = {u.removesuffix(".service"): on(host, f"systemctl is-active {u} || true").strip() for u in listed}
    records = on(host, "ls /var/lib/disagg-sglang/deployed 2>/dev/null || true").split()
    return states, sorted(r.removesuffix(".json") for r in records if r.endswith(".json"))


@pytest.mark.parametrize("router_impl", ["sglang_router", "smg"], indirect=True)
def test_scale_in_scale_out_and_rename_under_load(cluster, router_impl, capsys):
    decode1_host = cluster["layout"]["decode"][1]["name"]
    prefill_host = cluster["layout"]["prefill"][0]["name"]
    # An earlier run of this test that failed after its scale-in left decode1 out: put it back first (not under
    # load, not measured), so this run's scale-in has an instance to retire.
    if "sglang-decode1" not in _deployed(decode1_host)[0]:
        _decode_host_vars(cluster, [DECODE_INSTANCES[4]])
        playbook(cluster, cluster["vars"])
    router_started = started_at(router(cluster), "sglang-router")
    # The rename takes prefill1 to prefill2 (same GPUs and ports); on a deployment an earlier run renamed, back.
    was, now = ("prefill2", "prefill1") if "sglang-prefill2" in _deployed(prefill_host)[0] else ("prefill1", "prefill2")
    renamed = [
        {"name": "prefill0", "tp": 4, "port": 30000, "bootstrap_port": 8998, "dist_init_port": 30335},
        {"name": now, "tp": 4, "port": 30010, "bootstrap_port": 9008, "dist_init_port": 30345},
    ]
    # (name, the inventory change, extra vars, the unit the run must retire or None)
    steps = [
        ("scale-in: decode1 removed", lambda: _decode_host_vars(cluster, []), {}, f"sglang-decode1@{decode1_host}"),
        ("scale-out: decode1 back", lambda: _decode_host_vars(cluster, [DECODE_INSTANCES[4]]), {}, None),
        (f"rename: {was} -> {now}", lambda: None, {"sglang_prefill_instances": renamed},
         f"sglang-{was}@{prefill_host}"),
    ]  # fmt: skip
    expect = [
        ({decode1_host: {}, prefill_host: {"sglang-prefill0": "active", f"sglang-{was}": "active"}}, 3),
        ({decode1_host: {"sglang-decode1": "active"}}, 4),
        ({prefill_host: {"sglang-prefill0": "active", f"sglang-{now}": "active"}}, 4),
    ]
    table = []
    if router_impl == "smg":  # the rename goes through the same worker-API calls as scale-in and -out: CI time
        steps, expect = steps[:2], expect[:2]
    for (name, change, extra, retired), (hosts, n_workers) in zip(steps, expect, strict=True):
        change()
        since = time.time()
        output, result = converge_under_load(cluster, extra, ROLLING_LOAD)
        said = re.findall(r"retire (sglang-\S+@\S+) \(", output)
        moved = retired or f"sglang-decode1@{decode1_host}"  # the instance retired, or the one added back
        record_change(cluster, f"{name} ({router_impl})", result, since, [moved], deployment="2P2D")
        assert sorted(set(said)) == ([retired] if retired else []), (name, said)
        # The change happened under the load: requests were in flight through the router when the retired instance
        # got its SIGTERM (its own record at exit), or when the router first routed to the added one (load.py's
        # --workers timeline of the router's healthy workers).
        if retired:
            unit, host = retired.split("@")
            journal = on(host, f"journalctl -u {unit}.service -o cat --since @{int(since)}", timeout=60)
            exits = faults.lifecycle_lines(journal)
            # on failure: how the process ended (systemd's lines: a stop that timed out is a SIGKILL, no record)
            assert exits, (f"{name}: {retired} wrote no record at exit:\n"
                           + "\n".join(ln for ln in journal.splitlines() if " http " not in ln)[-3000:])  # fmt: skip
            moment = exits[-1]["sigterm"]["time"]
            # what the retired instance itself recorded: none reached it after the router let it go, what it held
            # then completed, nothing was left at SIGTERM
            left, _back = faults.out_window(result["workers"], result["t0"], worker_url(cluster, unit, host))
            assert left is not None, f"{name}: the router never let {retired} go while the load ran"
            problems, _held = faults.drain_problems(exits[-1], {"requests": []}, left, None)
            assert problems == [], f"{name}: {retired}: {problems}"
        else:
            url = worker_url(cluster, "sglang-decode1", decode1_host)
            joined = [t for t, state in result["workers"] if url in state.split(",")]
            assert joined, f"{name}: the router never routed to {url} while the load ran"
            moment = result["t0"] + joined[0]
        in_flight = in_flight_at(result, moment)
        # scale-in and -out change the router's list (handed to it through its API); the rename keeps prefill1's URL,
        # so the router's unit is unchanged and its end-of-run check puts the URL (now prefill2) back in
        assert ("only its worker list changed" in output) is (not name.startswith("rename")), name
        workers = get_json(router(cluster), "http://127.0.0.1:8000/workers")["workers"]
        rerun = recap(playbook(cluster, cluster["vars"]).stdout)
        table.append(f"  {name:<30} sent {result['total']:>5}  failed {result['total'] - result['ok']:>3}  "
                     f"in flight at the change {in_flight:>2}  "
                     f"router lists {len(workers)} ({sum(w['is_healthy'] for w in workers)} healthy)  "
                     f"rerun changed {sum(c['changed'] for c in rerun.values())}")  # fmt: skip
        report(capsys, f"[{router_impl}] day 2: " + table[-1].strip())
        assert spanned(result) and result["errors"] == {} and result["ok"] == result["total"], (name, result["errors"])
        assert in_flight >= MIN_IN_FLIGHT, f"{name}: only {in_flight} requests in flight through the router then"
        assert started_at(router(cluster), "sglang-router") == router_started, f"{name}: the router restarted"
        assert len(workers) == n_workers and all(w["is_healthy"] for w in workers), (name, workers)
        for host, units in hosts.items():
            states, records = _deployed(host)
            assert states == units, (name, host, states)
            assert records == sorted(units), (name, host, records)
        assert all(c["changed"] == 0 and c["failed"] == 0 for c in rerun.values()), (name, rerun)
    report(capsys, "day 2 steps:\n" + "\n".join(table))


# Issue 20, items 4-6: engine upgrades on the same deployment, under the rolling load. The engine is the simulator,
# whose wheelhouse holds 0.1.0, 0.2.0 (with --sim-v2-feature, a flag 0.1.0 refuses) and 0.2.1 (its scheduler stalls
# once up, sglang's unhealthy state: tests/sandbox/pdsim/sglang_pd_sim/releases.py); the sandbox inventory declares
# the three compatible. Each package set gets its own venv: --tags deps builds 0.2.0's beside the running one (no
# unit restarts, though the decodes' new flag only 0.2.0 knows); the full run rolls every worker onto it; then 0.2.1
# is tried and rolled back to 0.2.0 after its first batch stalls. The router runs its own venv and never restarts; no
# request fails.
ENGINE_PACKAGES = ["nvidia-ml-py==13.615.71", "sglang-pd-sim=={}", "numpy"]
VENVS = "/opt/sglang/venvs"


SERVER_VERSION = "sed -n 's/^[Ss]erver: sglang-pd-sim\\/\\([^ ]*\\).*/\\1/p'"
V2_FLAG = "--sim-v2-feature"


def _engines(cluster):
    """{unit@host: (the venv its record names, the venv its process runs, the version the process reports, whether
    its command line has the flag only 0.2.x knows)}, of every worker."""
    found = {}
    for h in cluster["layout"]["prefill"] + cluster["layout"]["decode"]:
        host = h["name"]
        for path in on(host, "ls /var/lib/disagg-sglang/deployed/*.json").split():
            record = json.loads(on(host, f"cat {path}"))
            if record.get("role") not in ("prefill", "decode"):
                continue
            pid = on(host, f"systemctl show -P MainPID {record['unit']}.service").strip()
            argv = on(host, f"tr '\\0' ' ' < /proc/{pid}/cmdline").split()
            venv = next((t.removesuffix("/bin/python") for t in argv if t.endswith("/bin/python")), None)
            head = f"curl -s -o /dev/null -D - --noproxy '*' -m 10 {record['health_url']}"
            version = on(host, f"{head} | {SERVER_VERSION}").strip()
            found[f"{record['unit']}@{host}"] = (record["python"].removesuffix("/bin/python"), venv, version,
                                                 V2_FLAG in argv)  # fmt: skip
    return found


def _venv_version(host, venv):
    script = "import importlib.metadata as m; print(m.version('sglang-pd-sim'))"
    return on(host, f'{venv}/bin/python -c "{script}"').strip()


def _step_line(name, result, rerun):
    return (f"  {name:<36} sent {result['total']:>5}  failed {result['total'] - result['ok']:>3}  "
            f"rerun changed {sum(c['changed'] for c in rerun.values())}")  # fmt: skip


def _started(engines):
    return {k: started_at(k.split("@")[1], k.split("@")[0]) for k in engines}


def test_engine_upgrade_and_a_failed_upgrade_rolled_back_under_load(cluster, capsys):
    router_host = router(cluster)
    router_record = "cat /var/lib/disagg-sglang/deployed/sglang-router.json"
    router_started = started_at(router_host, "sglang-router")
    router_python = json.loads(on(router_host, router_record))["python"]
    before = _engines(cluster)
    v1_venvs = {e[0] for e in before.values()}
    assert len(v1_venvs) == 1 and all(e[2] == "0.1.0" and not e[3] for e in before.values()), before
    decode_flags = {**cluster["vars"].get("sglang_decode_extra_flags", {}), V2_FLAG.removeprefix("--"): True}
    v2 = {"sglang_deps_packages": [p.format("0.2.0") for p in ENGINE_PACKAGES],
          "sglang_decode_extra_flags": decode_flags}  # fmt: skip
    hosts = [h["name"] for h in cluster["layout"]["prefill"] + cluster["layout"]["decode"]]
    table = []

    # --tags deps: the new venv is built and verified beside the running one; the preflight cannot check the decodes'
    # new flag with 0.1.0's parser and does not try (the venv that will run them is not there yet); nothing restarts.
    starts = _started(before)
    deps = playbook(cluster, {**cluster["vars"], **v2}, "--tags", "deps")
    assert _engines(cluster) == before, "--tags deps changed what runs"
    assert _started(before) == starts, "--tags deps restarted a unit"
    built = {host: [n for n in on(host, f"ls {VENVS}").split() if n.startswith("engine-")] for host in hosts}
    assert all(len(names) == 2 for names in built.values()), built
    table.append(f"  {'--tags deps: 0.2.0 built beside':<36} rc 0 in {deps.seconds:.0f} s, nothing restarted")

    # The upgrade: every worker rolls onto 0.2.0's venv, prefill first; the decodes get the flag only 0.2.0 knows.
    since = time.time()
    output, result = converge_under_load(cluster, v2, ROLLING_LOAD)
    order = restart_order(output)
    impl = cluster.get("impl", "sglang_router")
    record_change(cluster, f"engine upgrade 0.1.0 -> 0.2.0 ({impl})", result, since, order)
    after = _engines(cluster)
    rerun = recap(playbook(cluster, cluster["vars"]).stdout)
    table.append(_step_line("upgrade 0.1.0 -> 0.2.0", result, rerun))
    report(capsys, "engine: " + table[-1].strip())
    # prefill first, then decode, each by host and unit (rolling.rolling_plan); the names are the day-2 test's
    by_host = sorted(before, key=lambda k: (not k.startswith("sglang-prefill"), k.split("@")[1], k.split("@")[0]))
    assert order == by_host, order
    assert spanned(result) and result["errors"] == {} and result["ok"] == result["total"], result["errors"]
    judge_restarts(cluster, result, [u.split("@") for u in order], since, capsys)
    v2_venvs = {e[0] for e in after.values()}
    assert len(v2_venvs) == 1 and v2_venvs != v1_venvs, after
    for key, (record_venv, process_venv, version, flag) in after.items():
        assert record_venv == process_venv and version == "0.2.0", (key, record_venv, process_venv, version)
        assert flag is key.startswith("sglang-decode"), (key, flag)
        assert _venv_version(key.split("@")[1], record_venv) == "0.2.0", key
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in rerun.values()), rerun

    # A failed upgrade: 0.2.1 comes up and stalls. The first batch (prefill0) is rolled back to its
    # previous unit file, which names 0.2.0's venv; the other batches are left alone; the run fails, loses nothing.
    v21 = {"sglang_deps_packages": [p.format("0.2.1") for p in ENGINE_PACKAGES]}
    since = time.time()
    output, result = converge_under_load(cluster, v21, ROLLING_LOAD, succeed=False)
    order = restart_order(output)
    record_change(cluster, f"failed upgrade 0.2.0 -> 0.2.1, rolled back ({impl})", result, since, order)
    workers = get_json(router_host, "http://127.0.0.1:8000/workers")["workers"]
    rolled_back = _engines(cluster)
    rerun = recap(playbook(cluster, cluster["vars"]).stdout)
    table.append(_step_line("failed upgrade 0.2.0 -> 0.2.1", result, rerun))
    report(capsys, "engine: " + table[-1].strip())
    assert order and order[0].startswith("sglang-prefill0@"), order
    assert "did not become healthy after its change" in output, output[-5000:]
    assert "the old configuration serves again" in output, output[-5000:]
    assert spanned(result) and result["errors"] == {} and result["ok"] == result["total"], result["errors"]
    assert rolled_back == after, (rolled_back, after)
    assert len(workers) == 4 and all(w["is_healthy"] for w in workers), workers
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in rerun.values()), rerun
    # Kept on each host: the venv in use (0.2.0's) and the one built last (0.2.1's); 0.1.0's is gone. The router kept
    # its own venv and its process throughout.
    for host in hosts:
        engines = {f"{VENVS}/{n}" for n in on(host, f"ls {VENVS}").split() if n.startswith("engine-")}
        assert len(engines) == 2 and v2_venvs < engines and not engines & v1_venvs, (host, engines)
    assert json.loads(on(router_host, router_record))["python"] == router_python
    assert started_at(router_host, "sglang-router") == router_started, "the router restarted"
    report(capsys, "engine upgrade steps:\n" + "\n".join(table))


def playbook(cluster, extra_vars, *args, check=True):
    path = cluster["inventory"].parent / f"vars-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(extra_vars))
    return run([str(VENV_BIN / "ansible-playbook"), "-i", str(cluster["inventory"]), "site.yml", "-e", f"@{path}",
                *args], check=check, timeout=1500)  # fmt: skip


def through_router(cluster, requests=50, key=None):
    args = ["python3", GUEST_LOAD, "run", "--requests", str(requests), "--concurrency", "8", "--deadline", "60"]
    if key:  # load.py sends no key: use curl
        body = shlex.quote(json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 2}}))
        curl = "curl -s -o /dev/null -w '%{http_code}\\n' --noproxy '*' -m 20 -H 'Content-Type: application/json'"
        codes = on(router(cluster), f"for i in $(seq {requests}); do {curl} -H 'Authorization: Bearer {key}' "
                                    f"-d {body} http://127.0.0.1:8000/generate; done", timeout=300).split()  # fmt: skip
        return {"total": len(codes), "ok": codes.count("200"), "errors": sorted(set(codes) - {"200"})}
    return json.loads(on(router(cluster), shlex.join(args), timeout=200))


# Issue 11, item 10: a unit change that systemd refuses to start (the ExecStart= binary does not exist) is rolled
# back like one that starts and stays unhealthy: the previous unit file back, restarted, waited for at its own
# health URL; the run fails saying the old configuration serves again; no backup unit file is left.
def test_a_unit_systemd_refuses_to_start_is_rolled_back(cluster, capsys):
    decodes = cluster["layout"]["decode"]
    bad = {**cluster["vars"], "sglang_numactl_path": "/opt/fakegpu/bin/no-such-numactl", "sglang_rolling_batch": 0}
    proc = playbook(cluster, bad, "--tags", "decode", check=False)
    out = proc.stdout
    report(capsys, f"refused unit: rc {proc.returncode}, {proc.seconds:.1f} s; "
                   f"{out.count('the old configuration serves again') // 2} units rolled back")  # fmt: skip
    assert proc.returncode != 0
    # One failure message per decode instance (ansible prints each twice: the item, then the recap of failures).
    for unit in ("sglang-decode0", "sglang-decode1"):
        assert re.search(
            rf"{unit} did not become healthy at [^\n]*\n[^\n]*\n[^\n]*the old configuration serves again", out
        ), out[-5000:]
    assert "no-such-numactl" in out  # the journal tail of the refused configuration
    for host in decodes:
        unit_dir = on(host["name"], "ls /etc/systemd/system")
        assert "~" not in unit_dir, unit_dir
        assert "no-such-numactl" not in on(host["name"], "cat /etc/systemd/system/sglang-decode*.service")
        assert (
            on(host["name"], "systemctl is-active sglang-decode0 sglang-decode1 || true").split().count("active") == 1
        )
    after = through_router(cluster)
    assert after["ok"] == after["total"] == 50, after


# The last test of the module (it leaves the keys set), on SMG: the router's key is out of its argv there too.
@pytest.mark.parametrize("router_impl", ["smg"], indirect=True)
def test_worker_on_another_host_refuses_a_request_without_the_key(cluster, router_impl, capsys, tmp_path):
    key = "wk-" + os.urandom(8).hex()
    secrets_file, password = tmp_path / "secrets.yml", tmp_path / "vault-password"
    password.write_text(os.urandom(16).hex())
    secrets_file.write_text(f"sglang_router_api_key: {key}\nsglang_worker_api_key: {key}\n")
    run([str(VENV_BIN / "ansible-vault"), "encrypt", str(secrets_file), "--vault-password-file", str(password)])
    # with the variables of the changes before it (among them sglang_router_impl: without it the run would switch
    # the router back to the default program)
    proc = playbook(cluster, cluster["vars"], "-e", f"@{secrets_file}", "--vault-password-file", str(password))
    assert key not in proc.stdout
    decode = cluster["layout"]["decode"][0]
    # /v1/models needs the key on a worker that has one (sglang leaves only /health* and /metrics open).
    direct = "curl -s -o /dev/null -w '%{http_code}' --noproxy '*' -m 10"
    url = f"http://{decode['address']}:30001/v1/models"
    without = on(router(cluster), f"{direct} {url}")
    wrong = on(router(cluster), f"{direct} -H 'Authorization: Bearer nope' {url}")
    with_key = on(router(cluster), f"{direct} -H 'Authorization: Bearer {key}' {url}")
    routed = through_router(cluster, requests=20, key=key)
    report(capsys, f"worker key: direct without key {without}, wrong key {wrong}, with key {with_key}; "
                   f"through the router {routed['ok']}/{routed['total']} ok")  # fmt: skip
    assert (without, wrong, with_key) == ("401", "401", "200")
    assert routed["ok"] == routed["total"] == 20, routed
    # The key is in no command line and no unit file on the worker host; the worker binds to its own address.
    host = decode["name"]
    assert key not in on(host, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; cat /etc/systemd/system/sglang-*")
    # nor on the router host, where SMG runs (the launcher hands the key to it inside the process) and ps shows
    # nothing of it
    assert key not in on(
        router(cluster),
        "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; ps -eo args; cat /etc/systemd/system/sglang-*",
    )
    # SMG names its process smg::router (smg/launch_router.py); sglang-router's is sglang::router
    assert "smg::router" in on(router(cluster), "ps -eo args").split("\n"), "SMG does not run on the router host"
    assert f"{decode['address']}:30001" in on(host, "ss -Hltn")
    assert "0.0.0.0:30001" not in on(host, "ss -Hltn")
