"""The preflight's one look at a host (plugins/module_utils/host/host_look.py, module host_look) on temp trees, the
deployment-wide bind check that reads it (cluster_rules.deployment_bind_problems), and the flag check grouped by
program (plan.cli_check_groups): tables of cases."""

import json
import os

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.host import host_look
from ansible_collections.disagg.sglang.plugins.module_utils.plan import cluster_rules, plan
from ansible_collections.disagg.sglang.plugins.module_utils.units import units

# A /proc/net/tcp header and rows: (local address, state, inode); 0A is LISTEN.
TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def tcp_row(index, local, state, inode):
    return f"   {index}: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode}\n"


def fake_proc(root, sockets, processes):
    """A /proc under ROOT: SOCKETS [(table, local, state, inode)], PROCESSES {pid: {fds: [inode], cgroup, comm}}."""
    (root / "net").mkdir(parents=True)
    for table in ("tcp", "tcp6"):
        rows = [tcp_row(i, local, state, inode) for i, (t, local, state, inode) in enumerate(sockets) if t == table]
        (root / "net" / table).write_text(TCP_HEADER + "".join(rows))
    for pid, process in processes.items():
        fd_dir = root / str(pid) / "fd"
        fd_dir.mkdir(parents=True)
        for number, inode in enumerate(process.get("fds", [])):
            os.symlink(f"socket:[{inode}]" if isinstance(inode, int) else inode, fd_dir / str(number))
        if "cgroup" in process:
            (root / str(pid) / "cgroup").write_text(process["cgroup"])
        if "comm" in process:
            (root / str(pid) / "comm").write_text(process["comm"] + "\n")
    return root


LISTENER_CASES = [
    pytest.param(
        [("tcp", "0100007F:7530", "0A", 111)],
        {10: {"fds": [111], "cgroup": "0::/system.slice/sglang-prefill0.service\n", "comm": "python3"}},
        {"30000": "sglang-prefill0.service"},
        id="a-listener-is-owned-by-the-unit-of-its-cgroup",
    ),
    pytest.param(
        [("tcp6", "00000000000000000000000000000000:1F90", "0A", 222)],
        {11: {"fds": [222], "cgroup": "0::/user.slice/session-3.scope\n", "comm": "nginx"}},
        {"8080": "nginx"},
        id="a-listener-outside-a-service-is-named-by-its-command-tcp6-too",
    ),
    pytest.param(
        [("tcp", "0100007F:7531", "01", 333)],
        {12: {"fds": [333], "cgroup": "0::/system.slice/x.service\n", "comm": "x"}},
        {},
        id="an-established-connection-is-no-listener",
    ),
    pytest.param(
        [("tcp", "0100007F:7532", "0A", 444)],
        {13: {"fds": [444]}},
        {},
        id="a-process-that-cannot-be-read-is-left-out",
    ),
    pytest.param(
        [("tcp", "0100007F:7533", "0A", 555)],
        {14: {"fds": ["pipe:[555]", "/dev/null"], "cgroup": "0::/system.slice/y.service\n", "comm": "y"}},
        {},
        id="fds-that-are-no-sockets-are-ignored",
    ),
    pytest.param(
        [("tcp", "0100007F:7534", "0A", 666)],
        {
            15: {"fds": [666], "cgroup": "0::/system.slice/first.service\n", "comm": "a"},
            16: {"fds": [666], "cgroup": "0::/system.slice/second.service\n", "comm": "b"},
        },
        {"30004": "first.service"},
        id="a-socket-shared-by-two-processes-keeps-the-first-owner",
    ),
]


@pytest.mark.parametrize(("sockets", "processes", "expect"), LISTENER_CASES)
def test_listeners_name_the_owner_of_each_listening_port(tmp_path, sockets, processes, expect):
    assert host_look.listeners(str(fake_proc(tmp_path / "proc", sockets, processes))) == expect


def test_listeners_without_a_proc_are_none(tmp_path):
    assert host_look.listeners(str(tmp_path / "no-proc")) == {}


RECORD_CASES = [
    pytest.param(
        {"sglang-decode0.json": {"unit": "sglang-decode0", "role": "decode"}},
        {"sglang-decode0": "decode"},
        id="a-record-is-read-by-its-unit-name",
    ),
    pytest.param(
        {"sglang-decode1.json": "{not json"},
        {"sglang-decode1": "unreadable"},
        id="a-record-that-is-not-json-is-named-unreadable",
    ),
    pytest.param(
        {"sglang-decode0.json.1234.2026-12-01@10:00:00~": {"role": "decode"}},
        {},
        id="a-backup-of-a-record-is-no-record",
    ),
    pytest.param(None, {}, id="no-record-directory-is-no-record"),
]


@pytest.mark.parametrize(("files", "expect"), RECORD_CASES)
def test_records_of_the_units_deployed_here(tmp_path, files, expect):
    record_dir = tmp_path / "records"
    if files is not None:
        record_dir.mkdir()
        for name, content in files.items():
            (record_dir / name).write_text(content if isinstance(content, str) else json.dumps(content))
    found = host_look.records(str(record_dir))
    assert {unit: r.get("role") or ("unreadable" if "unreadable" in r else None) for unit, r in found.items()} == expect


def test_paths_say_whether_each_exists_and_is_a_directory(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "file").write_text("x")
    found = host_look.paths({"a": str(tmp_path / "model"), "b": str(tmp_path / "file"), "c": str(tmp_path / "none")})
    assert found == {
        "a": {"path": str(tmp_path / "model"), "exists": True, "isdir": True},
        "b": {"path": str(tmp_path / "file"), "exists": True, "isdir": False},
        "c": {"path": str(tmp_path / "none"), "exists": False, "isdir": None},
    }


def test_the_look_is_what_the_plans_rules_read(tmp_path):
    """host_plan reads {variable: {path, exists, isdir}}: a missing model directory fails the plan's path rule."""
    looked = host_look.look({"sglang_model_path": str(tmp_path / "none")}, None, False, ["127.0.0.1"])
    assert looked["records"] == {} and looked["listeners"] == {} and looked["bind"] == {"127.0.0.1": "ok"}
    from ansible_collections.disagg.sglang.plugins.module_utils.plan import rules  # noqa: PLC0415

    problems = rules.host_path_problems("h1", looked["paths"])
    assert problems and "sglang_model_path" in problems[0] and str(tmp_path / "none") in problems[0]


def spec(host, name, address, python="/opt/sglang/venvs/engine-aaa/bin/python", module="sglang.launch_server"):
    return {
        "host": host,
        "name": name,
        "unit": f"sglang-{name}",
        "python": python,
        "module": module,
        "flags": {"host": address},
        "lines": [["--host", address], ["--port", "30000"]],
    }


BIND_CASES = [
    pytest.param([spec("p1", "prefill0", "10.0.0.1")], {"p1": {"10.0.0.1": "ok"}}, [], id="an-own-address-passes"),
    pytest.param(
        [spec("p1", "prefill0", "10.0.0.9")],
        {"p1": {"10.0.0.9": "not an address of this host (10.0.0.9)"}},
        ["sglang_advertise_address 10.0.0.9 of p1: not an address of this host"],
        id="a-foreign-address-names-the-host-and-variable",
    ),
    pytest.param(
        [spec("p1", "prefill0", "0.0.0.0"), spec("p2", "decode0", "127.0.0.1")],
        {},
        [],
        id="wildcard-and-loopback-are-not-checked",
    ),
    pytest.param(
        [spec("p1", "prefill0", "10.0.0.1")],
        {},
        ["10.0.0.1 of p1: not checked on the host"],
        id="an-address-its-host-did-not-try-is-named-never-passed",
    ),
    pytest.param(
        [spec("p1", "prefill0", "10.0.0.1"), spec("p1", "decode0", "10.0.0.1")],
        {"p1": {"10.0.0.1": "cannot bind: denied"}},
        ["10.0.0.1 of p1: cannot bind: denied"],
        id="one-message-per-address-of-a-host",
    ),
]


@pytest.mark.parametrize(("specs", "outcomes", "expect"), BIND_CASES)
def test_the_bind_check_of_the_deployment_reads_each_hosts_own_outcome(specs, outcomes, expect):
    found = cluster_rules.deployment_bind_problems(specs, outcomes)
    assert len(found) == len(expect)
    for message, fragment in zip(found, expect, strict=True):
        assert fragment in message


def test_the_flags_of_every_host_are_checked_once_per_program_on_a_host_that_has_the_venv():
    other = "/opt/sglang/venvs/engine-bbb/bin/python"
    groups = plan.cli_check_groups(
        {
            "p1": [spec("p1", "prefill0", "10.0.0.1")],
            "p2": [spec("p2", "prefill0", "10.0.0.2"), spec("p2", "decode0", "10.0.0.2")],
            "p3": [spec("p3", "decode0", "10.0.0.3", python=other)],
            "r1": [],
        },
        {"p1": {other: True}, "p2": {"/opt/sglang/venvs/engine-aaa/bin/python": True}, "p3": {}},
    )
    assert [(g["python"], g["hosts"], g["delegate"]) for g in groups] == [
        ("/opt/sglang/venvs/engine-aaa/bin/python", ["p1", "p2"], "p2"),
        (other, ["p3"], "p3"),  # no host has it yet: its first host says "flags not checked"
    ]
    # every host's line, named so the parser's message still reads "NAME: --flag"
    assert groups[0]["argvs"] == {
        "p1 prefill0": ["--host", "10.0.0.1", "--port", "30000"],
        "p2 prefill0": ["--host", "10.0.0.2", "--port", "30000"],
        "p2 decode0": ["--host", "10.0.0.2", "--port", "30000"],
    }
    assert groups[0]["units"] == ["sglang-prefill0", "sglang-decode0"] and groups[1]["units"] == ["sglang-decode0"]


def record_of(one, **changed):
    """The record a run wrote for ONE (as units.record keys it), with CHANGED in the spec it was written from."""
    return {"unit": one["unit"], "argv_key": units.argv_key({**one, **changed})}


# A command line its record says the same parser accepted is not asked again; anything that changes what the parser
# would be asked (a flag, the venv, the module) is, and so is a unit without a record or with a record of before.
@pytest.mark.parametrize(
    ("record", "checked"),
    [
        pytest.param(None, True, id="no-record-a-new-unit"),
        pytest.param({"unit": "sglang-prefill0"}, True, id="a-record-without-argv-key-from-before"),
        pytest.param("same", False, id="the-record-of-the-same-command-line"),
        pytest.param({"lines": [["--host", "10.0.0.1"], ["--port", "30001"]]}, True, id="a-flag-changed"),
        pytest.param({"python": "/opt/sglang/venvs/engine-bbb/bin/python"}, True, id="another-venv"),
        pytest.param({"module": "sglang.launch_router"}, True, id="another-module"),
    ],
)
def test_a_command_line_its_record_says_was_accepted_is_not_checked_again(record, checked):
    one = spec("p1", "prefill0", "10.0.0.1")
    if record == "same":
        record = record_of(one)
    elif record is not None and "unit" not in record:
        record = record_of(one, **record)
    deployed = {"p1": {"sglang-prefill0": record}} if record is not None else {}
    groups = plan.cli_check_groups({"p1": [one, spec("p1", "decode0", "10.0.0.1")]}, {}, deployed)
    argvs = {name for group in groups for name in group["argvs"]}
    assert ("p1 prefill0" in argvs) is checked
    assert "p1 decode0" in argvs  # its own record is not there: checked
    # a group with nothing left to check is no group (no module run for it)
    both = {"sglang-prefill0": record_of(one), "sglang-decode0": record_of(spec("p1", "decode0", "10.0.0.1"))}
    assert plan.cli_check_groups({"p1": [one, spec("p1", "decode0", "10.0.0.1")]}, {}, {"p1": both}) == []


def test_a_units_record_holds_the_argv_key_of_what_its_flag_check_asked():
    one = spec("p1", "prefill0", "10.0.0.1")
    written = units.record({**one, "role": "prefill", "gpus": [0]}, "/etc/systemd/system")
    assert written["argv_key"] == units.argv_key(one)
    assert units.checked_argv(one) == ["--host", "10.0.0.1", "--port", "30000"]


def test_the_placement_shown_names_gpus_node_cpus_and_warnings():
    lines = plan.placement_lines(
        [
            {"unit": "sglang-prefill0", "gpus": [0, 1], "numa_node": 0, "cpus": "0-31", "warnings": []},
            {"unit": "sglang-decode0", "gpus": [4], "numa_node": None, "cpus": "32-63", "warnings": ["a", "b"]},
        ]
    )
    assert lines == [
        "sglang-prefill0: GPUs 0,1, NUMA node 0, CPUs 0-31",
        "sglang-decode0: GPUs 4, NUMA node None, CPUs 32-63; WARNING: a; b",
    ]


def test_a_running_instance_the_plan_moves_to_other_gpus_is_announced_with_both_placements():
    """Issue 38: decode0 ran on GPUs 0,1 (NUMA node 0); a new prefill0 now claims them and decode0 goes to 2,3 on node
    1. The preflight names both placements and who takes the old GPUs; an instance that stays, or a new one, says
    nothing."""
    topology = {"gpus": [{"index": 0, "numa_node": 0}, {"index": 1, "numa_node": 0}, {"index": 2, "numa_node": 1},
                         {"index": 3, "numa_node": 1}]}  # fmt: skip
    specs = [
        {"unit": "sglang-prefill0", "gpus": [0, 1], "numa_node": 0, "cpus": "0-31"},
        {"unit": "sglang-decode0", "gpus": [2, 3], "numa_node": 1, "cpus": "32-63"},
    ]
    deployed = {"sglang-decode0": {"unit": "sglang-decode0", "gpus": [0, 1]}}
    assert plan.moved_lines(specs, deployed, topology) == [
        "sglang-decode0 moves from GPUs 0,1 (NUMA node 0) to GPUs 2,3 (NUMA node 1, CPUs 32-63): its GPUs 0,1 go to "
        "sglang-prefill0"
    ]
    assert plan.moved_lines(specs, {"sglang-decode0": {"gpus": [2, 3]}}, topology) == []
    assert plan.moved_lines(specs, {}, topology) == []


def test_the_model_directory_is_read_as_sglang_s_loader_needs_it(tmp_path):
    """host_look.model: config.json and every shard the index names (else a weight file); None where no directory."""
    from tests.sandbox import fakegpu  # noqa: PLC0415 (the sandbox's model directory, as it renders it)

    model = tmp_path / "m"
    fakegpu.render_model(model)
    assert host_look.model(str(model)) == []
    (model / "model-00002-of-00002.safetensors").unlink()
    assert host_look.model(str(model)) == [
        "model-00002-of-00002.safetensors, named by model.safetensors.index.json, is missing"
    ]
    (model / "config.json").unlink()
    (model / "model.safetensors.index.json").unlink()
    assert host_look.model(str(model)) == ["config.json is missing"]  # model-00001 is still a weight file
    (model / "model-00001-of-00002.safetensors").unlink()
    assert host_look.model(str(model)) == [
        "config.json is missing",
        "no weight file (*.safetensors) and no model.safetensors.index.json",
    ]
    assert host_look.model(str(tmp_path / "none")) is None
    assert host_look.look({}, None, False, model_dir=str(tmp_path / "none"))["model"] is None
