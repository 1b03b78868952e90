"""What the sandbox integration tests share: commands run from the repository root with the project venv,
sandbox hosts up and down, and an inventory of them that reuses inventories/sandbox/group_vars.

Each test module uses its own sandbox name, so modules never share hosts.
"""

import json
import os
import re
import shlex
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
GROUPS = ("prefill", "decode", "router")


def run(cmd, *, check=True, timeout=900, env=None, stdin=None, quiet=False):
    """Run a command from the repository root with the venv on PATH; fail the test with its output on error.

    The result carries `seconds`, the wall time of the command.
    """
    started = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        input=stdin,
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
    proc.seconds = time.monotonic() - started
    if not quiet:
        print(f"$ {shlex.join(cmd)}  ({proc.seconds:.1f} s, rc {proc.returncode})")
    if check and proc.returncode != 0:
        pytest.fail(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    return proc


def wait_until(probe, timeout, what=None, interval=1.0):
    """probe()'s first truthy answer within TIMEOUT seconds (polled every INTERVAL s). Past the timeout: the test fails
    saying WHAT it waited for and probe's last answer, or, with WHAT None, the last answer is returned (the test then
    asserts on what it saw). Every wait of the sandbox modules is this one loop."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    if what is not None:
        pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
    return last


def ssh_config(name):
    """The ssh config `python -m tests.sandbox up --name NAME` writes."""
    return REPO / ".cache" / "sandbox" / name / "ssh_config"


def up(name, hosts=1):
    run([str(VENV_BIN / "python"), "-m", "tests.sandbox", "up", "--name", name, "--hosts", str(hosts)])


def down(name):
    run([str(VENV_BIN / "python"), "-m", "tests.sandbox", "down", "--name", name], check=False)


def write_inventory(directory, name, host, groups=GROUPS, host_vars=None):
    """An inventory of one sandbox host in `groups`, with the sandbox inventory's group_vars linked in."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    host_entry = dict(host_vars) if host_vars else None
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "ssh",
                "ansible_user": "root",
                "ansible_ssh_common_args": f"-F {ssh_config(name)}",
            },
            "children": {group: {"hosts": {host: host_entry}} for group in groups},
        }
    }
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (directory / "group_vars").symlink_to(REPO / "inventories" / "sandbox" / "group_vars")
    return directory


def one_host(tmp_path_factory, name, label, host_vars=None):
    """Boots sandbox NAME's one host and writes an inventory of it (write_inventory: every group, the sandbox
    inventory's group_vars) in a fresh folder LABEL; returns {"dir": that folder, "inventory", "ssh_config"}."""
    up(name)
    directory = tmp_path_factory.mktemp(label)
    inventory = write_inventory(directory / "inventory", name, f"{name}-1", host_vars=host_vars)
    return {"dir": directory, "inventory": str(inventory), "ssh_config": str(ssh_config(name))}


def debug_messages(output):
    """[(host, msg)] of every `ok: [host] => msg: ...` result in ansible-playbook output, a loop's
    `ok: [host] => (item=LABEL) => msg: ...` too (the default callback with callback_result_format = yaml wraps a
    long msg over several lines: each is read back as YAML)."""
    found = []
    pattern = r"^ok: \[([^\]]+)\](?: => \(item=[^\n]*\))? => ?\n((?:    .*\n?)+)"
    for match in re.finditer(pattern, output, re.MULTILINE):
        try:
            doc = yaml.safe_load(textwrap.dedent(match.group(2)))
        except yaml.YAMLError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("msg"), str):
            found.append((match.group(1), doc["msg"]))
    return found


def controller_playbook(inventory, playbook, variables, home, *args, check=True):
    """The venv's ansible-playbook of PLAYBOOK on INVENTORY with VARIABLES as extra vars, from the repository root
    with its ansible.cfg, in a bare environment whose HOME is the test's folder HOME. Fails the test with its output
    when it fails (unless CHECK is false); returns the CompletedProcess. For unit tests that run roles on the
    controller."""
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), "-e", json.dumps(variables), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(home)},
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"ansible-playbook failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return proc


def local_play(tmp_path, children, play, variables, *args):
    """ansible-playbook of PLAY (YAML text) over local connections on an inventory of CHILDREN ({group: {hosts:
    {name: vars}}}) with VARIABLES as extra vars; fails the test with its output on error, returns its stdout.
    For unit tests that run one of the roles' task files on the controller."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": children}}))
    path = tmp_path / "play.yml"
    path.write_text(play)
    return controller_playbook(inv, path, variables, tmp_path, *args).stdout


def recap(stdout):
    """{host: {ok, changed, failed, ...}} from a playbook's PLAY RECAP."""
    hosts = {}
    for line in stdout.split("PLAY RECAP", 1)[-1].splitlines():
        if ":" in line and "=" in line:
            host, _unused, counts = line.partition(":")
            hosts[host.strip()] = {k: int(v) for k, v in (p.split("=") for p in counts.split())}
    return hosts
