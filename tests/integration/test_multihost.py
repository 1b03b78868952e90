"""Multi-host PD on four sandbox hosts, converged by site.yml through an inventory shaped like
inventories/multihost-example (see multihost.py): a GPU-less router host, a prefill host with two TP4 instances
(one per NUMA node), and two decode hosts with different GPU boxes.

The tests ask the services what happened: the router's worker list, the simulator's request log
(/sim/requests) on every worker, and the prefill bootstrap server's handoff state of each room.
"""

import json
import os
import shlex

import pytest
from multihost import sandbox_up_command, write_inventory
from sandbox_hosts import VENV_BIN, down, run, ssh_config

SANDBOX = os.environ.get("DISAGG_MULTIHOST_SANDBOX", "clm")  # hosts clm-1..4
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")
REQUESTS = 24


def recap(stdout):
    """{host: {ok, changed, failed, ...}} from a playbook's PLAY RECAP."""
    hosts = {}
    for line in stdout.split("PLAY RECAP", 1)[-1].splitlines():
        if ":" in line and "=" in line:
            host, _, counts = line.partition(":")
            hosts[host.strip()] = {k: int(v) for k, v in (p.split("=") for p in counts.split())}
    return hosts


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    run([str(VENV_BIN / "python"), *sandbox_up_command(SANDBOX)])
    try:
        inv = tmp_path_factory.mktemp("multihost-inventory")
        layout = write_inventory(inv, SANDBOX)
        first = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml"], timeout=1500)
        second = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml"], timeout=1500)
        print(f"converge {first.seconds:.1f} s, rerun {second.seconds:.1f} s")
        yield {"inventory": inv, "layout": layout, "first": first, "second": second}
    finally:
        if not os.environ.get("DISAGG_MULTIHOST_KEEP"):
            down(SANDBOX)


def on(host, command, timeout=120):
    proc = run(["ssh", "-F", str(ssh_config(SANDBOX)), "-o", "BatchMode=yes", host, command], timeout=timeout,
               quiet=True)  # fmt: skip
    return proc.stdout


def get_json(host, url):
    return json.loads(on(host, f"curl -sf --noproxy '*' -m 10 {shlex.quote(url)}"))


def router(cluster):
    return cluster["layout"]["router"][0]["name"]


def test_rerun_changes_nothing(cluster):
    counts = recap(cluster["second"].stdout)
    assert set(counts) == {h["name"] for hs in cluster["layout"].values() for h in hs}
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


def test_router_lists_every_worker_at_its_advertise_address(cluster):
    workers = get_json(router(cluster), "http://127.0.0.1:8000/workers")["workers"]
    got = sorted((w["worker_type"], w["url"], w.get("bootstrap_port"), w["is_healthy"]) for w in workers)
    prefill = cluster["layout"]["prefill"][0]["address"]
    decodes = [h["address"] for h in cluster["layout"]["decode"]]
    want = sorted([("prefill", f"http://{prefill}:30000", 8998, True), ("prefill", f"http://{prefill}:30010", 9008, True),
                   ("decode", f"http://{decodes[0]}:30001", None, True),
                   ("decode", f"http://{decodes[1]}:30011", None, True)])  # fmt: skip
    assert got == want


def test_requests_reach_every_worker_and_the_handoff_crosses_hosts(cluster):
    r = router(cluster)
    body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}})
    loop = (f"for i in $(seq {REQUESTS}); do curl -s -o /dev/null -w '%{{http_code}}\\n' --noproxy '*' -m 20 "
            f"-H 'Content-Type: application/json' -d {shlex.quote(body)} http://127.0.0.1:8000/generate; done")  # fmt: skip
    codes = on(r, loop, timeout=300).split()
    assert codes == ["200"] * REQUESTS
    prefill = cluster["layout"]["prefill"][0]
    rooms = {}
    for port in (30000, 30010):
        log = get_json(r, f"http://{prefill['address']}:{port}/sim/requests")
        rooms[port] = {e["bootstrap_room"] for e in log if e["path"] == "/generate" and e["status"] == 200}
        assert rooms[port], f"prefill :{port} got no request through the router"
    bootstrap = {30000: 8998, 30010: 9008}
    for decode, port in zip(cluster["layout"]["decode"], (30001, 30011)):
        log = get_json(r, f"http://{decode['address']}:{port}/sim/requests")
        done = {e["bootstrap_room"] for e in log if e["path"] == "/generate" and e["status"] == 200}
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
