"""roles/sglang_worker/tasks/kv_probe.yml on the controller: a host that does not hold both a prefill and a
decode instance says "KV probe: not run" and why, instead of skipping silently; a host with both runs the probe.

The inventory is the multi-host layout of inventories/multihost-example (prefill hosts, decode hosts, a
GPU-less router host) plus one host holding both roles, each host's sglang_worker_units standing in for what
site.yml's preflight plans; the play is site.yml's KV probe task, run with a local connection.
"""

import re
from pathlib import Path

import pytest
from sandbox_hosts import debug_messages, local_play

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"
# site.yml's "Prove the KV path between the prefill and decode GPUs of each host" (play hosts: prefill:decode)
PLAY = """
- name: KV probe
  hosts: prefill:decode
  gather_facts: false
  tasks:
    - name: Prove the KV path between the prefill and decode GPUs of each host
      ansible.builtin.include_role:
        name: disagg.sglang.sglang_worker
        tasks_from: kv_probe.yml
"""
WHY = "the probe measures a prefill GPU -> decode GPU pair on one host, so the KV path between hosts is not probed"


def unit(name, role, gpus):
    """The keys of a planned spec that kv_probe.yml reads (plugins/module_utils/units/units.py has many more)."""
    return {"unit": f"sglang-{name}", "name": name, "role": role, "gpus": gpus, "user": "sglang", "group": "sglang",
            "environment": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))},
            "hardening": [["ProtectSystem", "strict"]]}  # fmt: skip


HOSTS = {
    "prefill-01": {"groups": ["prefill"], "units": [unit("prefill0", "prefill", [0, 1, 2, 3])]},
    "decode-01": {"groups": ["decode"], "units": [unit("decode0", "decode", [0, 1, 2, 3])]},
    "router-01": {"groups": ["router"], "units": []},
    "both-01": {
        "groups": ["prefill", "decode"],
        "units": [unit("prefill0", "prefill", [0, 1, 2, 3]), unit("decode0", "decode", [4, 5, 6, 7])],
    },
}


def run_play(tmp_path, *args, **extra):
    children = {}
    for name, spec in HOSTS.items():
        for group in spec["groups"]:
            children.setdefault(group, {"hosts": {}})["hosts"][name] = {"sglang_worker_units": spec["units"]}
    # a venv that is not there: the probe on the host with both roles skips saying so, and runs nothing
    venvs = {"engine": str(tmp_path / "no-venv")}
    variables = {"sglang_deps_venv_paths": venvs, "sglang_model_path": "/models/m", **extra}
    return local_play(tmp_path, children, PLAY, variables, *args)


def not_run_lines(out):
    """{host: why} of the "KV probe: not run on HOST: why" lines."""
    prefix = "KV probe: not run on "
    return {host: msg.removeprefix(f"{prefix}{host}: ") for host, msg in debug_messages(out) if msg.startswith(prefix)}


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_hosts_without_both_roles_say_the_probe_does_not_run_and_why(tmp_path, check):
    out = run_play(tmp_path, *(["--check"] if check else []))
    assert not_run_lines(out) == {
        "prefill-01": f"it holds no decode instance (prefill only); {WHY}",
        "decode-01": f"it holds no prefill instance (decode only); {WHY}",
    }, out[-4000:]
    assert "router-01" not in out  # not a worker host: not in the play, as in site.yml
    if not check:
        # the host with both roles runs the probe (here it skips for the missing venv, and says so)
        probe = [msg for host, msg in debug_messages(out) if host == "both-01"]
        assert len(probe) == 1 and re.match(r"KV transport probe skipped: \S+ does not exist", probe[0]), out


def test_a_disabled_probe_prints_nothing(tmp_path):
    out = run_play(tmp_path, sglang_kv_probe=False)
    assert debug_messages(out) == [], out[-4000:]


def test_the_message_of_a_host_without_instances(tmp_path):
    HOSTS["empty-01"] = {"groups": ["prefill"], "units": []}
    try:
        out = run_play(tmp_path)
    finally:
        del HOSTS["empty-01"]
    assert not_run_lines(out)["empty-01"] == f"it holds no prefill and no decode instance (none); {WHY}"
