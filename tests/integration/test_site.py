"""site.yml on a sandbox host: rerun, partial runs, check mode, and the rtxpro6000-8x inventory rendered.

One sandbox host (the 8x RTX PRO 6000 shape) is booted and converged once for the module; each test then
runs ansible-playbook against it as a user would, and asks systemd what happened.
"""

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
SANDBOX = "pytest-site"
HOST = f"{SANDBOX}-1"
UNITS = ["sglang-prefill0", "sglang-decode0", "sglang-router"]
EXPECTED = yaml.safe_load((REPO / "tests/integration/expected/rtxpro6000-8x.yml").read_text())


def run(cmd, *, check=True, env=None, timeout=900):
    started = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            **os.environ,
            "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            **(env or {}),
        },
    )
    print(f"$ {shlex.join(cmd)}  ({time.monotonic() - started:.1f} s, rc {proc.returncode})")
    if check and proc.returncode != 0:
        pytest.fail(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    return proc


def recap(output):
    """{'ok': n, 'changed': n, ...} of the one host in PLAY RECAP."""
    match = re.search(rf"^{re.escape(HOST)}\s+:\s+(.*)$", output, re.MULTILINE)
    assert match, f"no recap for {HOST} in:\n{output[-3000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A converged sandbox host and an inventory for it (the sandbox inventory's group_vars)."""
    run([str(VENV_BIN / "python"), "-m", "tests.sandbox", "up", "--name", SANDBOX, "--hosts", "1"])
    inv = tmp_path_factory.mktemp("inventory")
    ssh_config = REPO / ".cache" / "sandbox" / SANDBOX / "ssh_config"
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "ansible_connection": "ssh",
                        "ansible_user": "root",
                        "ansible_ssh_common_args": f"-F {ssh_config}",
                    },
                    "children": {group: {"hosts": {HOST: None}} for group in ("prefill", "decode", "router")},
                }
            }
        )
    )
    (inv / "group_vars").symlink_to(REPO / "inventories" / "sandbox" / "group_vars")
    first = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml"])
    print(f"first converge recap: {recap(first.stdout)}")
    yield {"inventory": str(inv), "ssh_config": str(ssh_config)}
    run([str(VENV_BIN / "python"), "-m", "tests.sandbox", "down", "--name", SANDBOX], check=False)


def playbook(sandbox, *args, **kwargs):
    return run([str(VENV_BIN / "ansible-playbook"), "-i", sandbox["inventory"], "site.yml", *args], **kwargs)


def on_host(sandbox, command):
    return run(["ssh", "-F", sandbox["ssh_config"], HOST, command]).stdout


def start_times(sandbox):
    out = on_host(
        sandbox,
        " ; ".join(f"systemctl show --property=ExecMainStartTimestampMonotonic --value {u}.service" for u in UNITS),
    )
    times = dict(zip(UNITS, out.split(), strict=True))
    assert all(int(t) > 0 for t in times.values()), f"a unit is not running: {times}"
    return times


def unit_sums(sandbox):
    out = on_host(sandbox, "sha256sum " + " ".join(f"/etc/systemd/system/{u}.service" for u in UNITS))
    return dict(line.split()[::-1] for line in out.splitlines())


def test_rerun_changes_nothing_and_restarts_nothing(sandbox):
    before = start_times(sandbox)
    out = playbook(sandbox).stdout
    assert recap(out)["changed"] == 0, out[-4000:]
    assert start_times(sandbox) == before
    assert re.search(r"The capital of France is -> \S", out), "no answer through the router was printed"


def test_check_diff_shows_the_unit_diff_and_changes_nothing(sandbox):
    before, sums = start_times(sandbox), unit_sums(sandbox)
    out = playbook(sandbox, "--check", "--diff", "-e", '{"sglang_decode_extra_flags": {"log-level": "debug"}}').stdout
    assert "+    --log-level debug" in out, out[-4000:]
    assert "sglang-decode0.service" in out
    assert start_times(sandbox) == before
    assert unit_sums(sandbox) == sums


def test_tags_decode_after_a_decode_flag_change_restarts_decode_only(sandbox):
    before, sums = start_times(sandbox), unit_sums(sandbox)
    try:
        out = playbook(
            sandbox, "--tags", "decode", "-e", '{"sglang_decode_extra_flags": {"log-level": "debug"}}'
        ).stdout
        after = start_times(sandbox)
        assert after["sglang-decode0"] != before["sglang-decode0"], "decode was not restarted"
        assert after["sglang-prefill0"] == before["sglang-prefill0"], "prefill was restarted"
        assert after["sglang-router"] == before["sglang-router"], "the router was restarted"
        new_sums = unit_sums(sandbox)
        assert (
            new_sums["/etc/systemd/system/sglang-decode0.service"] != sums["/etc/systemd/system/sglang-decode0.service"]
        )
        for unit in ("sglang-prefill0", "sglang-router"):
            assert new_sums[f"/etc/systemd/system/{unit}.service"] == sums[f"/etc/systemd/system/{unit}.service"]
        changed = re.findall(r"^changed: \[[^\]]+\] => \(item=(\S+)\)", out, re.MULTILINE)
        assert changed and all(item.startswith("sglang-decode0") for item in changed), changed
        assert "--log-level debug" in on_host(sandbox, "systemctl cat sglang-decode0.service")
    finally:
        playbook(sandbox, "--tags", "decode")  # back to the inventory's flags


def parse_unit(text):
    """(prefix argv, {flag: values}, env) of a rendered unit's ExecStart and Environment lines."""
    joined = re.sub(r"\\\n\s*", " ", text)
    exec_line = re.search(r"^ExecStart=(.*)$", joined, re.MULTILINE).group(1)
    tokens = shlex.split(exec_line.replace("%%", "%").replace("$$", "$"))
    first_flag = next(
        i
        for i, t in enumerate(tokens)
        if t.startswith("--")
        and i > 0
        and tokens[i - 1] != "-m"
        and not t.startswith(("--cpunodebind", "--membind", "--physcpubind"))
    )
    flags, current = {}, None
    for token in tokens[first_flag:]:
        if token.startswith("--"):
            current = token
            assert current not in flags, f"{current} rendered twice"
            flags[current] = []
        else:
            flags[current].append(token)
    env = dict(shlex.split(line)[0].split("=", 1) for line in re.findall(r"^Environment=(.*)$", joined, re.MULTILINE))
    return tokens[:first_flag], flags, env


def test_rtxpro6000_inventory_renders_the_units_an_expert_writes(sandbox, tmp_path):
    """inventories/rtxpro6000-8x in check mode against a host of its shape: the diff's new units."""
    hosts = json.loads((REPO / ".cache" / "sandbox" / SANDBOX / "hosts.json").read_text())
    target = {
        "ansible_host": hosts[0]["address"],
        "ansible_ssh_private_key_file": hosts[0]["identity_file"],
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        # The sandbox's fake GPU box stands in for the real one: only where facts are read from changes.
        "sglang_topology_sysfs_root": hosts[0]["sysfs_root"],
    }
    sums = unit_sums(sandbox)
    extra = tmp_path / "target.json"
    extra.write_text(json.dumps(target))
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "inventories/rtxpro6000-8x",
            "site.yml",
            "--check",
            "--diff",
            "--tags",
            "topology,prefill,decode,router",
            "-e",
            f"@{extra}",
        ],
        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
    )
    result = json.loads(proc.stdout)
    rendered = {}
    for play in result["plays"]:
        for task in play["tasks"]:
            host = next(iter(task["hosts"].values()))
            for item in host.get("results", []):
                for diff in item.get("diff", []) if isinstance(item.get("diff"), list) else []:
                    name = Path(diff.get("after_header", "")).name
                    if name.endswith(".service") and "after" in diff:
                        rendered[name.removesuffix(".service")] = diff["after"]
    assert set(rendered) == set(EXPECTED), f"rendered {sorted(rendered)}"
    for unit, want in EXPECTED.items():
        prefix, flags, env = parse_unit(rendered[unit])
        assert prefix == want["prefix"], unit
        assert flags == want["flags"], unit
        assert env == want["env"], unit
    assert unit_sums(sandbox) == sums, "check mode wrote a unit"
