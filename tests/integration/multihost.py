"""The multi-host sandbox scenario: hosts, topologies and the inventory a user would write for them.

Four sandbox hosts, each its own machine with its own GPU box (tests/sandbox/topologies):

    NAME-1  cpu-only        router                        (no GPU, only the router's venv)
    NAME-2  rtxpro6000-8x   prefill0 (GPUs 0-3, node 0), prefill1 (GPUs 4-7, node 1)
    NAME-3  rtxpro6000-8x   decode0
    NAME-4  rtxpro6000-4x   decode1  (another GPU box: one socket, four GPUs)

The inventory is laid out as inventories/multihost-example (hosts.yml with ansible_host and
sglang_advertise_address per host, group_vars per group) and reuses its group_vars files: all.yml,
prefill.yml and decode.yml as they are, router.yml with the router group's own deps lists (no engine, no NIXL)
added, the sandbox's stand-ins (inventories/sandbox/group_vars/all.yml) after them, and one decode instance per
decode host in host_vars (the 4-GPU box holds one TP4 instance).
Used by tests/integration/test_multihost*.py and tests/bench/converge_speed.py (P4).
"""

import json
from pathlib import Path

import yaml

from tests.sandbox.engine_timing import LOAD_S, WARMUP_S

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "multihost-example" / "group_vars"
SANDBOX_VARS = REPO / "inventories" / "sandbox" / "group_vars"
# The router group's own deps lists (write_inventory): what the field's inventory set there.
ROUTER_GROUP_DEPS = {"sglang_deps_packages": ["nvidia-ml-py==13.615.71"], "sglang_deps_packages_nodeps": []}
TOPOLOGIES = ["cpu-only", "rtxpro6000-8x", "rtxpro6000-8x", "rtxpro6000-4x"]
ROLES = {1: "router", 2: "prefill", 3: "decode", 4: "decode"}
DECODE_INSTANCES = {
    3: {"name": "decode0", "tp": 4, "port": 30001, "dist_init_port": 30435},
    4: {"name": "decode1", "tp": 4, "port": 30011, "dist_init_port": 30445},
}
# Every sandbox host starts its engines as sglang does, only shorter (tests/sandbox/engine_timing.py, issue 37): a
# weight load of LOAD_S s with the port closed, then a warm-up of WARMUP_S s answering /health 503; together longer
# than the router's health-check interval (10 s) and several of the run's health polls, so a re-add racing a loading
# worker, a health wait over many polls and a rollback that waits out two loads are what the scenarios exercise.
# After its drain a worker stops as sglang's does (ShutdownReq, then the scheduler's exit) but its scheduler exits in
# 5 s, not the double's default 15 s (sglang's bound, _SCHEDULER_EXIT_TIMEOUT_SECS): the scenarios restart about 35
# workers, and the full 15 s would cost CI about 6 more minutes. The stop timeout against the full 15 s is exercised by
# the one-host sandbox modules (test_site, test_faults: the double's default) and
# tests/sandbox/pdsim/tests/test_pdsim_drain.py.
SCHEDULER_EXIT_S = 5
ENGINE_STOP_ENV = {"SGLANG_SIM_SCHEDULER_EXIT": str(SCHEDULER_EXIT_S)}
# Settings of the test run (not of the example): sglang_restart_sec at its production value (the role's default),
# simulated prefill and decode time so the rolling and fault loads have requests in flight on every worker, and a
# health wait a few loads long, so a change whose workers never become healthy is rolled back within a test.
TEST_VARS = {
    "sglang_health_timeout": 4 * (LOAD_S + WARMUP_S),
    # a prefill that takes 1 s (16 at once), so a prefill taken out of the router under load still holds requests
    "sglang_prefill_extra_env": {
        **ENGINE_STOP_ENV,
        "SGLANG_SIM_TOKEN_LATENCY": "0.005",
        "SGLANG_SIM_PREFILL_LATENCY": "1.0",
        "SGLANG_SIM_PREFILL_SLOTS": "16",
    },
    "sglang_decode_extra_env": {**ENGINE_STOP_ENV, "SGLANG_SIM_TOKEN_LATENCY": "0.005"},
}


def hosts_json(name):
    return json.loads((REPO / ".cache" / "sandbox" / name / "hosts.json").read_text())


def sandbox_up_command(name):
    return ["-m", "tests.sandbox", "up", "--name", name, "--hosts", str(len(TOPOLOGIES)),
            "--topology", ",".join(TOPOLOGIES)]  # fmt: skip


# Issue 40: the deployment stages its model from a hub source, the test bed's hub double (tests/sandbox/hubsim) on this
# controller; each guest reaches the controller at its own veth address (tests/sandbox/nspawn.py host_address), so the
# source's endpoint names each worker host's test_hub_address (hosts.yml). A repository of two ~1 MiB shards.
MODEL_REPO = "deepseek-ai/DeepSeek-V4-Flash"
MODEL_SHARDS = {"shards": 2, "shard_bytes": 1 << 20}


# The revision is a variable of the test (group_vars), so a test changes it for every host with one extra var.
MODEL_SOURCE = {
    "hub": MODEL_REPO,
    "revision": "{{ test_model_revision }}",
    "endpoint": "http://{{ test_hub_address }}:{{ test_hub_port }}",
}


def write_inventory(directory, name, extra_vars=None, hub=None):
    """The multi-host inventory of sandbox NAME in DIRECTORY; returns {role: [host]} and the addresses.
    hub: {port, revision}: every worker host stages the model from the hub double at its own veth address."""
    directory = Path(directory)
    (directory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (directory / "host_vars").mkdir(exist_ok=True)
    hosts = {h["index"] if "index" in h else i: h for i, h in enumerate(hosts_json(name), start=1)}
    children = {"prefill": {"hosts": {}}, "decode": {"hosts": {}}, "router": {"hosts": {}}}
    layout = {}
    for index, role in ROLES.items():
        host = hosts[index]
        entry = {"ansible_host": host["address"]}
        if role != "router":
            entry["sglang_advertise_address"] = host["address"]
        if hub:  # where this guest reaches the hub double (the router host stages nothing; its plan reads the source)
            entry["test_hub_address"] = host["host_address"]
        children[role]["hosts"][host["name"]] = entry
        layout.setdefault(role, []).append({"name": host["name"], "address": host["address"],
                                            "host_address": host["host_address"]})  # fmt: skip
        host_vars = {}
        if index in DECODE_INSTANCES:
            host_vars["sglang_decode_instances"] = [DECODE_INSTANCES[index]]
        if host_vars:
            (directory / "host_vars" / f"{host['name']}.yml").write_text(yaml.safe_dump(host_vars))
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "ssh",
                "ansible_user": "root",
                "ansible_ssh_common_args": f"-F {REPO / '.cache' / 'sandbox' / name / 'ssh_config'}",
            },
            "children": children,
        }
    }
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    # group_vars/all/: the example's, then the sandbox's stand-ins over it, then the test's settings.
    (directory / "group_vars" / "all" / "10-example.yml").symlink_to(EXAMPLE / "all.yml")
    (directory / "group_vars" / "all" / "20-sandbox.yml").symlink_to(SANDBOX_VARS / "all.yml")
    # one source for every worker host (group_vars, as a user writes it: the revision must agree, issue 40's KV rule)
    hub_vars = (
        {"sglang_model_source": MODEL_SOURCE, "test_hub_port": hub["port"], "test_model_revision": hub["revision"]}
        if hub
        else {}
    )
    (directory / "group_vars" / "all" / "30-test.yml").write_text(
        yaml.safe_dump({**TEST_VARS, **hub_vars, **(extra_vars or {})})
    )
    for group in ("prefill", "decode"):
        (directory / "group_vars" / f"{group}.yml").symlink_to(EXAMPLE / f"{group}.yml")
    # The router group sets its own deps lists, as an inventory from the field did: no engine and no NIXL on the host
    # that only routes, while every worker host pins the tested combination (sandbox all.yml). The preflight judges
    # each combination where it runs (plan/cross-host rules), so this converges and its rerun changes nothing.
    example = yaml.safe_load((EXAMPLE / "router.yml").read_text()) or {}
    (directory / "group_vars" / "router.yml").write_text(yaml.safe_dump({**example, **ROUTER_GROUP_DEPS}))
    return layout
