"""Tables for plugins/module_utils/plan/cluster_rules.py, host/address_probes.py and rolling.py (pure functions, no
network)."""

import errno
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.host import address_probes
from ansible_collections.disagg.sglang.plugins.module_utils.plan import cluster_rules, rules
from ansible_collections.disagg.sglang.plugins.module_utils.units import rolling, units
from samples import INSTANCES, PLACEMENT, PROFILE
from samples import UNIT_SETTINGS as SETTINGS

DECODE = INSTANCES["decode"]


@pytest.mark.parametrize(
    ("worker", "router", "expect"),
    [
        ("", "", None),
        ("", "k", None),
        ("k", "k", None),
        ("k", "", "sglang_router_api_key is empty"),
        ("k", "other", "differs from sglang_router_api_key"),
        (None, None, None),
    ],
)
def test_worker_api_key_problems(worker, router, expect):
    found = cluster_rules.worker_api_key_problems(worker, router)
    assert (found == []) if expect is None else (len(found) == 1 and expect in found[0])


def _raise(exc):
    def connect(_addr, _timeout):
        raise exc

    return connect


class _Conn:
    def close(self):
        pass


@pytest.mark.parametrize(
    ("connect", "outcome"),
    [
        (lambda _a, _t: _Conn(), "open"),
        (_raise(ConnectionRefusedError()), "refused"),
        (_raise(TimeoutError()), "timeout"),
        (_raise(TimeoutError()), "timeout"),
        (_raise(OSError(errno.EHOSTUNREACH, "No route to host")), "unreachable"),
        (_raise(OSError(errno.ENETUNREACH, "Network is unreachable")), "unreachable"),
        (_raise(socket.gaierror(-2, "Name or service not known")), "unresolved: Name or service not known"),
    ],
)
def test_connect_outcome(connect, outcome):
    assert address_probes.connect_outcome("10.0.0.1", 30000, 1, connect=connect) == outcome


def test_connect_problems_name_the_unit_and_the_fix():
    outcomes = [
        {"unit": "sglang-decode0", "host": "d1", "address": "10.0.0.2", "port": 30001, "outcome": "refused"},
        {"unit": "sglang-decode1", "host": "d2", "address": "10.0.0.3", "port": 30011, "outcome": "timeout"},
    ]
    found = cluster_rules.connect_problems("r1", outcomes)
    assert len(found) == 1
    assert "sglang-decode1 on d2" in found[0] and "10.0.0.3:30011 (timeout)" in found[0]
    assert "sglang_advertise_address" in found[0]


def test_bind_outcome_on_loopback_and_a_foreign_address():
    assert address_probes.bind_outcome("127.0.0.1") == "ok"

    def no_such_address(_addr):
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")

    assert address_probes.bind_outcome("127.0.0.1", bind=no_such_address).startswith("not an address of this host")
    found = cluster_rules.bind_problems("p1", {"10.9.9.9": "not an address of this host (10.9.9.9)", "10.0.0.1": "ok"})
    assert len(found) == 1 and "sglang_advertise_address 10.9.9.9 of p1" in found[0]


def test_connect_targets_from_worker_urls():
    specs = [{"unit": "sglang-p0", "host": "p1", "url": "http://10.0.0.1:30000"},
             {"unit": "sglang-d0", "host": "d1", "url": "http://[fd00::2]:30001/"}]  # fmt: skip
    assert cluster_rules.connect_targets(specs) == [
        {"unit": "sglang-p0", "host": "p1", "address": "10.0.0.1", "port": 30000},
        {"unit": "sglang-d0", "host": "d1", "address": "fd00::2", "port": 30001},
    ]


def _u(unit, role, host):
    return {"unit": unit, "role": role, "host": host, "existed": True, "previous": f"/etc/{unit}~"}


@pytest.mark.parametrize(
    ("unit", "totals", "serving", "batch", "deferred"),
    [
        (_u("d0", "decode", "h"), {"decode": 2}, True, 1, True),
        (_u("d0", "decode", "h"), {"decode": 1}, True, 1, False),  # no redundancy: restarts now
        (_u("d0", "decode", "h"), {"decode": 2}, False, 1, False),  # router not serving (first run)
        (_u("d0", "decode", "h"), {"decode": 2}, True, 0, False),  # rolling switched off
        ({**_u("d0", "decode", "h"), "existed": False}, {"decode": 2}, True, 1, False),  # a new unit
    ],
)
def test_defer(unit, totals, serving, batch, deferred):
    assert rolling.defer(unit, totals, serving, batch) is deferred


HOST_UNITS = [{"unit": "p0", "role": "prefill"}, {"unit": "d0", "role": "decode"}, {"unit": "r", "role": "router"}]


@pytest.mark.parametrize(
    ("changed", "new", "rule", "now", "deferred"),
    [
        (["p0", "d0"], [], ({"prefill": 2, "decode": 2}, True, 1), [], ["p0", "d0"]),  # both roll
        (["p0", "d0"], [], ({"prefill": 1, "decode": 2}, True, 1), ["p0"], ["d0"]),  # the only prefill: now
        (["p0", "d0"], ["d0"], ({"prefill": 2, "decode": 2}, True, 1), ["d0"], ["p0"]),  # a new unit starts now
        (["p0", "d0"], [], ({"prefill": 2, "decode": 2}, False, 1), ["p0", "d0"], []),  # the router does not serve
        (["p0", "d0"], [], ({"prefill": 2, "decode": 2}, True, 0), ["p0", "d0"], []),  # rolling off
        (["r"], [], ({"prefill": 2, "decode": 2, "router": 2}, True, 1), ["r"], []),  # the router never rolls
        (["d0", "d0", "p0"], [], ({"prefill": 2, "decode": 2}, True, 1), [], ["d0", "p0"]),  # unit + env file changed
        ([], [], ({"prefill": 2, "decode": 2}, True, 1), [], []),
        (["gone"], [], ({"prefill": 2}, True, 1), ["gone"], []),  # not a planned unit of the host: never deferred
    ],
)
def test_restart_decision(changed, new, rule, now, deferred):
    """rule: (role totals of the deployment, the router serves, sglang_rolling_batch)."""
    inputs = dict(zip(("totals", "router_serving", "batch"), rule, strict=True))
    assert rolling.restart_decision(HOST_UNITS, changed, new, inputs) == {"now": now, "deferred": deferred,
                                                                          "synced": []}  # fmt: skip


ROUTER = {"unit": "r", "role": "router", "restart_key": "k1"}


# name: (the router's record, changed, new, env_changed) -> restarts now (else: synced through its worker API)
ROUTER_CASES = {
    "only its worker list changed: synced": ({"r": {"restart_key": "k1"}}, ["r"], [], [], False),
    "another flag changed: restarts": ({"r": {"restart_key": "k0"}}, ["r"], [], [], True),
    "its secrets changed too: restarts": ({"r": {"restart_key": "k1"}}, ["r", "r"], [], ["r"], True),
    "a new router: starts": ({}, ["r"], ["r"], [], True),
    "no record (deployed before records): restarts": ({}, ["r"], [], [], True),
    "an unreadable record: restarts": ({"r": "not json"}, ["r"], [], [], True),
}


@pytest.mark.parametrize("case", ROUTER_CASES, ids=list(ROUTER_CASES))
def test_a_router_whose_worker_list_alone_changed_is_not_restarted(case):
    records, changed, new, env_changed, restarts = ROUTER_CASES[case]
    records = {k: v for k, v in records.items() if isinstance(v, dict)}
    inputs = {"totals": {"prefill": 2, "decode": 2}, "router_serving": True, "batch": 1, "records": records,
              "env_changed": env_changed}  # fmt: skip
    decision = rolling.restart_decision([ROUTER], changed, new, inputs)
    assert decision == ({"now": ["r"], "deferred": [], "synced": []} if restarts
                        else {"now": [], "deferred": [], "synced": ["r"]})  # fmt: skip


# name: (the router's record, changed, new, router_roll) -> {now, deferred, synced} of router r (issue 39)
ROUTER_ROLL_CASES = {
    "behind HAProxy with a second router: rolls": ({"r": {"restart_key": "k0"}}, ["r"], [], True, "deferred"),
    "one router (no roll): restarts now": ({"r": {"restart_key": "k0"}}, ["r"], [], False, "now"),
    "a new router behind HAProxy: starts now": ({}, ["r"], ["r"], True, "now"),
    "only its worker list changed behind HAProxy: synced": ({"r": {"restart_key": "k1"}}, ["r"], [], True, "synced"),
}


@pytest.mark.parametrize("case", ROUTER_ROLL_CASES, ids=list(ROUTER_ROLL_CASES))
def test_a_changed_router_behind_a_serving_haproxy_with_a_second_router_waits_for_the_roll(case):
    records, changed, new, roll, where = ROUTER_ROLL_CASES[case]
    inputs = {"totals": {"prefill": 2, "decode": 2}, "router_serving": True, "batch": 1, "records": records,
              "router_roll": roll}  # fmt: skip
    decision = rolling.restart_decision([*HOST_UNITS[:2], ROUTER], [*changed, "d0"], new, inputs)
    expect = {"now": [], "deferred": [], "synced": []}
    expect[where] = ["r"]
    # the workers' rule is the same with the roll: a decode of two rolls in its batch
    expect["deferred"] = [*expect["deferred"], "d0"] if where == "deferred" else ["d0"]
    assert decision == expect


def test_retired_are_the_recorded_workers_of_the_roles_that_the_plan_no_longer_has():
    records = {
        "sglang-decode1": {"unit": "sglang-decode1", "role": "decode"},
        "sglang-decode0": {"unit": "sglang-decode0", "role": "decode"},
        "sglang-prefill1": {"unit": "sglang-prefill1", "role": "prefill"},
        "sglang-router": {"unit": "sglang-router", "role": "router"},
    }
    assert [r["unit"] for r in rolling.retired(records, ["sglang-decode0"], ["prefill", "decode"])] == [
        "sglang-decode1", "sglang-prefill1"]  # fmt: skip
    # --tags decode: only the decode role is applied, so only its units may go; the router is never a worker
    assert [r["unit"] for r in rolling.retired(records, [], ["decode"])] == ["sglang-decode0", "sglang-decode1"]
    assert rolling.retired(records, list(records), ["prefill", "decode"]) == []


@pytest.mark.parametrize(
    ("batch", "totals", "expect"),
    [
        (1, {"prefill": 2, "decode": 2}, [["p0@a"], ["p1@a"], ["d0@b"], ["d1@c"]]),
        (2, {"prefill": 2, "decode": 2}, [["p0@a"], ["p1@a"], ["d0@b"], ["d1@c"]]),  # never every instance
        (2, {"prefill": 3, "decode": 3}, [["p0@a", "p1@a"], ["d0@b", "d1@c"]]),
        (0, {"prefill": 2, "decode": 2}, [["p0@a"], ["p1@a"], ["d0@b"], ["d1@c"]]),
    ],
)
def test_rolling_plan_prefill_first_one_role_per_batch(batch, totals, expect):
    changed = [_u("d1", "decode", "c"), _u("p1", "prefill", "a"), _u("d0", "decode", "b"), _u("p0", "prefill", "a")]
    got = rolling.rolling_plan(changed, {"batch": batch, "totals": totals})
    assert [[f"{u['unit']}@{u['host']}" for u in b] for b in got] == expect


def test_worker_api_key_reaches_the_worker_through_its_environment_file_only():
    plain = units.worker_units([DECODE], PLACEMENT, PROFILE, "decode", SETTINGS)[0]
    keyed = units.worker_units([DECODE], PLACEMENT, PROFILE, "decode", dict(SETTINGS, worker_api_key_set=True))[0]
    assert "SGLANG_WORKER_API_KEY" not in plain["secret_env"] and "-m" in plain["exec"]
    assert keyed["secret_env"]["SGLANG_WORKER_API_KEY"] == "sglang_worker_api_key"
    # numactl prefix kept; python -c LAUNCHER puts --api-key into argv inside the process.
    assert keyed["exec"][:3] == plain["exec"][:3]
    assert keyed["exec"][4] == "-c" and "'--api-key', 'SGLANG_WORKER_API_KEY'" in keyed["exec"][5]
    assert keyed["lines"] == plain["lines"]  # never on the command line


D1 = {"unit": "sglang-decode1", "role": "decode", "host": "h4"}
D0 = {"unit": "sglang-decode0", "role": "decode", "host": "h3"}


# name: (records to retire, planned totals, sglang_retire_roles) -> the problem named (None: the run may go on)
RETIRE = {
    "one of two decodes goes": ([D1], {"prefill": 2, "decode": 1}, [], None),
    "every decode goes": ([D0, D1], {"prefill": 2}, [], "would retire every deployed one (sglang-decode0@h3, "),
    "every decode goes, on purpose": ([D0, D1], {"prefill": 2}, ["decode"], None),
    "a rename (one goes, one comes)": ([D1], {"prefill": 2, "decode": 2}, [], None),
    "nothing goes": ([], {}, [], None),
}


@pytest.mark.parametrize("case", RETIRE, ids=list(RETIRE))
def test_retiring_every_instance_of_a_role_needs_sglang_retire_roles(case):
    retired, totals, allowed, want = RETIRE[case]
    problems = cluster_rules.retire_problems(retired, totals, allowed)
    assert (problems == []) if want is None else (len(problems) == 1 and want in problems[0]), problems
    if want:
        assert "sglang_retire_roles: [decode]" in problems[0]


def test_an_empty_instance_list_is_said_not_refused():
    assert rules.empty_role_warnings("h4", "decode", [{"name": "decode1"}]) == []
    (warning,) = rules.empty_role_warnings("h4", "decode", [])
    assert "h4 is in group decode with an empty sglang_decode_instances" in warning and "retired" in warning


def test_the_record_scan_reads_every_record_names_an_unreadable_one_and_skips_backups(tmp_path):
    """roles/sglang/vars/main.yml's _sglang_record_scan, run as plan.yml runs it (python3 -c SCRIPT DIR)."""
    script = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/sglang/vars/main.yml").read_text())[
        "_sglang_record_scan"
    ]
    (tmp_path / "sglang-decode0.json").write_text(json.dumps({"unit": "sglang-decode0", "role": "decode"}))
    (tmp_path / "sglang-decode1.json").write_text("{not json")
    (tmp_path / "sglang-decode0.json.1234.2026-12-01@10:00:00~").write_text(json.dumps({"role": "decode"}))
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    records = json.loads(out.stdout)
    assert sorted(records) == ["sglang-decode0", "sglang-decode1"]
    assert records["sglang-decode0"]["role"] == "decode" and "unreadable" in records["sglang-decode1"]
    # an unreadable record has no role: it is never taken for a worker to retire
    assert rolling.retired(records, [], ("prefill", "decode")) == [records["sglang-decode0"]]
    missing = subprocess.run([sys.executable, "-c", script, str(tmp_path / "none")], capture_output=True, text=True,
                             check=True)  # fmt: skip
    assert json.loads(missing.stdout) == {}


def test_the_address_check_module_dials_the_workers_urls_and_names_their_hosts_bind_problems(monkeypatch, capsys):
    """The router's plan hands address_check the worker specs and what each worker host found binding its address:
    the module connects to each spec's URL and names a bind address its host could not bind, bind problems first."""
    from ansible.module_utils import testing  # noqa: PLC0415
    from ansible_collections.disagg.sglang.plugins.modules import address_check  # noqa: PLC0415

    dialed = []

    def outcome(address, port, timeout=3.0):
        dialed.append((address, port))
        return "refused" if address == "10.0.0.2" else "timeout"

    monkeypatch.setattr(address_probes, "connect_outcome", outcome)
    specs = [
        {"unit": "p0", "host": "a", "url": "http://10.0.0.2:30000", "flags": {"host": "10.0.0.2"}},
        {"unit": "d0", "host": "b", "url": "http://[fd00::3]:30001", "flags": {"host": "fd00::3"}},
    ]
    bind = {"a": {"10.0.0.2": "ok"}, "b": {"fd00::3": "not an address of this host"}}
    with testing.patch_module_args({"workers": specs, "bind_outcomes": bind, "name": "r"}), pytest.raises(SystemExit):
        address_check.main()
    out = json.loads(capsys.readouterr().out)
    assert dialed == [("10.0.0.2", 30000), ("fd00::3", 30001)]
    assert [c["outcome"] for c in out["connect"]] == ["refused", "timeout"]
    assert len(out["problems"]) == 2
    assert out["problems"][0].startswith("sglang_advertise_address fd00::3 of b: not an address of this host.")
    assert out["problems"][1].startswith("d0 on b: the router host r cannot reach fd00::3:30001 (timeout).")


def test_the_deployment_plan_counts_each_roles_instances_and_refuses_retiring_a_whole_role(monkeypatch):
    """disagg.sglang.deployment_plan joins the hosts' plans once: the role totals the restart rule and the rolling
    step read, and the retire check (cluster_rules.retire_problems) on every host's retired units, with
    sglang_retire_roles, which the preflight's last play asserts."""
    from ansible_collections.disagg.sglang.plugins.action.deployment_plan import deployment_plan  # noqa: PLC0415
    from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan  # noqa: PLC0415

    gone = {"unit": "sglang-decode0", "role": "decode", "host": "b"}
    looks = {
        "a": {"plan": {"units": [{"unit": "p0", "role": "prefill"}, {"unit": "p1", "role": "prefill"}]}},
        "b": {"plan": {"units": [], "retired": [gone]}},
    }
    # the KV agreement: tests/unit/plan/test_kv_rules.py
    monkeypatch.setattr(plan, "pd_problems", lambda specs, inputs: [])
    monkeypatch.setattr(plan, "cli_check_groups", lambda units, ready, deployed: [])
    found = deployment_plan(looks, [], 1)
    assert found["role_totals"] == {"prefill": 2} and found["retired"] == [gone]
    [problem] = found["retire_problems"]
    assert "would retire every deployed one (sglang-decode0@b)" in problem
    assert deployment_plan(looks, [], 1, ["decode"])["retire_problems"] == []
