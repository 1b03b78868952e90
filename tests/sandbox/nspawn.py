"""Sandbox host lifecycle: overlay roots on the cached rootfs (rootfs.py), veth pairs, cgroups, systemd-nspawn.

A sandbox NAME is N hosts NAME-1..N. Each host is a systemd-nspawn container booting real
systemd from an overlayfs (lower: the shared Debian rootfs, upper: its own dir), reachable
over its own veth pair (a /30 from SUBNET: host side .1, guest side .2; the host forwards
between the sandbox's veths so hosts reach each other, and the guests get no route out).
Everything a host owns is recorded in its host.json before it is created, so `down` can
remove it all: processes, veth, mounts, cgroup dirs, files.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from . import engine_timing, fakegpu
from .rootfs import ensure_rootfs
from .shell import REPO, WHEELHOUSE, SandboxError, locked, log, mounts_under, run

STATE_ROOT = REPO / ".cache" / "sandbox"
SUBNET = ipaddress.ip_network(os.environ.get("DISAGG_SANDBOX_SUBNET", "10.213.0.0/16"))
CGROUP_PARENT = "disagg-sandbox"
GUEST_IF = "host0"
BOOT_TIMEOUT = 90.0


# ---------------------------------------------------------------- cgroups, mounts, processes


def cgroup_hierarchies() -> list[Path]:
    """Where a launcher gets its own dir: the unified root, or name=systemd + unified on hybrid."""
    fs = Path("/sys/fs/cgroup")
    if (fs / "cgroup.controllers").exists():
        return [fs]
    return [p for p in (fs / "systemd", fs / "unified") if (p / "cgroup.procs").exists()]


def all_cgroup_roots() -> list[Path]:
    fs = Path("/sys/fs/cgroup")
    if (fs / "cgroup.controllers").exists():
        return [fs]
    return [p for p in sorted(fs.iterdir()) if (p / "cgroup.procs").exists()]


def sandbox_cgroup_dirs(host: str | None = None) -> list[Path]:
    """Our cgroup dirs (the parent, or one host's) in every hierarchy where they exist."""
    rel = Path(CGROUP_PARENT) / host if host else Path(CGROUP_PARENT)
    return [root / rel for root in all_cgroup_roots() if (root / rel).is_dir()]


def cgroup_pids(dirs: list[Path]) -> set[int]:
    pids: set[int] = set()
    for top in dirs:
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
    return pids


def remove_cgroup_dirs(dirs: list[Path]) -> None:
    for top in dirs:
        for dirpath, _subdirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            for attempt in range(50):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 49:
                        raise
                    time.sleep(0.1)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def is_launcher(pid: int, root: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and argv[0].endswith(b"systemd-nspawn") and root.encode() in argv


# ---------------------------------------------------------------- hosts


def state_dir(name: str) -> Path:
    return STATE_ROOT / name


def host_names(name: str, count: int) -> list[str]:
    return [f"{name}-{i}" for i in range(1, count + 1)]


def interface_name(host: str) -> str:
    """The host-side veth: ve-HOST, shortened with a hash past the 15-byte kernel limit."""
    full = f"ve-{host}"
    return full if len(full) <= 15 else f"ve-{host[:6]}-{hashlib.sha1(host.encode()).hexdigest()[:5]}"


def used_slots() -> set[int]:
    """/30 slots of SUBNET in use: by any sandbox state on this checkout or any address on the host."""
    used: set[int] = set()
    for record in STATE_ROOT.glob("*/hosts/*/host.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.add(json.loads(record.read_text())["slot"])
    out = run("ip", "-4", "-o", "addr", "show", capture=True).stdout
    for line in out.splitlines():
        addr = ipaddress.ip_interface(line.split()[3]).ip
        if addr in SUBNET:
            used.add((int(addr) - int(SUBNET.network_address)) // 4)
    return used


def slot_addresses(slot: int) -> tuple[str, str]:
    net = int(SUBNET.network_address) + 4 * slot
    return str(ipaddress.ip_address(net + 1)), str(ipaddress.ip_address(net + 2))


def read_host(record: Path) -> dict | None:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return None


def host_running(host: dict) -> bool:
    return bool(host.get("pid")) and pid_alive(host["pid"]) and is_launcher(host["pid"], host["root"])


def ensure_key(sdir: Path) -> Path:
    key = sdir / "id_ed25519"
    if not key.exists():
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"disagg-sandbox-{sdir.name}", "-f", str(key))
    return key


def render_guest(upper: Path, host: dict, peers: list[dict], pubkey: str) -> None:
    """Files a host gets before boot, written straight into its overlay upper dir."""
    etc = upper / "etc"
    (etc / "systemd/network").mkdir(parents=True, exist_ok=True)
    (etc / "machine-id").write_text(uuid.uuid5(uuid.NAMESPACE_URL, f"disagg-sandbox:{host['name']}").hex + "\n")
    (etc / "hosts").write_text(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        + "".join(f"{p['address']}\t{p['name']}\n" for p in peers)
    )
    (etc / "systemd/network/10-sandbox.network").write_text(
        f"[Match]\nName={GUEST_IF}\n\n[Network]\nAddress={host['address']}/30\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n\n"
        f"[Route]\nDestination={SUBNET}\nGateway={host['host_address']}\n"
    )
    ssh = upper / "root/.ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    ssh.chmod(0o700)
    (ssh / "authorized_keys").write_text(pubkey)
    (ssh / "authorized_keys").chmod(0o600)
    # The tests' ssh commands share one connection per host (mux_options): sshd's default of 10 sessions on one
    # connection is fewer than a test may run at once (loads, probes and fingerprints beside each other).
    (etc / "ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (etc / "ssh/sshd_config.d/sandbox.conf").write_text("MaxSessions 100\n")
    fakegpu.render(upper, host["name"], host["topology"])
    engine_timing.render(upper)


def launch(host: dict, base: Path) -> None:
    """Mount the overlay and start systemd-nspawn in the host's own cgroup dirs."""
    hdir = Path(host["dir"])
    for sub in ("upper", "work", "root"):
        (hdir / sub).mkdir(parents=True, exist_ok=True)
    run(
        "mount",
        "-t",
        "overlay",
        "overlay",
        "-o",
        f"lowerdir={base},upperdir={hdir / 'upper'},workdir={hdir / 'work'}",
        host["root"],
    )
    cgroups = [root / CGROUP_PARENT / host["name"] for root in cgroup_hierarchies()]
    for cg in cgroups:
        cg.mkdir(parents=True, exist_ok=True)

    def enter_cgroups() -> None:  # runs in the child before exec
        for cg in cgroups:
            (cg / "cgroup.procs").write_text(str(os.getpid()))

    cmd = [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        "--directory",
        host["root"],
        "--machine",
        host["name"],
        "--register=no",
        "--keep-unit",
        "--console=passive",
        "--link-journal=no",
        "--private-network",
        f"--network-veth-extra={host['interface']}:{GUEST_IF}",
        f"--bind-ro={host['wheelhouse']}:/opt/wheelhouse",
    ]
    with open(hdir / "console.log", "ab") as console:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=enter_cgroups,  # noqa: PLW1509 (no threads here)
        )
    host["pid"] = proc.pid
    write_host(host)


def configure_veth(host: dict, deadline: float) -> None:
    """Address the host side of the veth once nspawn has made it; let it forward to sibling hosts."""
    ifname = host["interface"]
    while not Path(f"/sys/class/net/{ifname}").exists():
        if not host_running(host) or time.monotonic() > deadline:
            raise SandboxError(f"{host['name']}: nspawn did not create {ifname}:\n{console_tail(host)}")
        time.sleep(0.02)
    run("ip", "addr", "replace", f"{host['host_address']}/30", "dev", ifname)
    run("ip", "link", "set", ifname, "up")
    Path(f"/proc/sys/net/ipv4/conf/{ifname}/forwarding").write_text("1")


def console_tail(host: dict, lines: int = 25) -> str:
    try:
        text = Path(host["dir"], "console.log").read_text(errors="replace")
    except OSError:
        return "(no console log)"
    return "\n".join(text.splitlines()[-lines:])


def ssh_cmd(sdir: Path, host: str, *cmd: str) -> list[str]:
    return ["ssh", "-F", str(sdir / "ssh_config"), "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", host, *cmd]


def wait_ready(sdir: Path, host: dict, deadline: float) -> str:
    """Until ssh answers and systemd reports the boot finished (running or degraded)."""
    while True:
        proc = run(*ssh_cmd(sdir, host["name"], "systemctl", "is-system-running", "--wait"), check=False, capture=True)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return state
        if not host_running(host):
            raise SandboxError(f"{host['name']}: container exited during boot:\n{console_tail(host)}")
        if time.monotonic() > deadline:
            raise SandboxError(
                f"{host['name']}: not ready after {BOOT_TIMEOUT:.0f} s "
                f"(ssh: {proc.stderr.strip() or state}):\n{console_tail(host)}"
            )
        time.sleep(0.1)


def write_host(host: dict) -> None:
    Path(host["dir"], "host.json").write_text(json.dumps(host, indent=2) + "\n")


def load_hosts(name: str) -> list[dict]:
    hosts = [read_host(p) for p in sorted(state_dir(name).glob("hosts/*/host.json"))]
    return sorted((h for h in hosts if h), key=lambda h: h["index"])


def control_path(host: dict) -> str:
    """The socket of the host's ssh master connection: short (a unix socket's path has at most 107 bytes, and ssh
    adds 17 while it creates it) and new with every boot of the host, so no command ever rides a master of an earlier
    boot at the same address."""
    return f"/tmp/disagg-ssh-{host['mux']}"


def mux_options(host: dict) -> str:
    """Every `ssh -F ssh_config HOST` of the tests shares one connection per host (a new connection costs about
    0.15 CPU-s between the two ends, a session on a shared one 0.01: measured on a sandbox host, 20 calls each).
    Ansible's own connections keep theirs: its command line names its own ControlPath. A master whose host went away
    ends after three missed keep-alives; `down` ends the others (stop_mux)."""
    if not host.get("mux"):
        return ""
    return (
        f"  ControlMaster auto\n  ControlPath {control_path(host)}\n  ControlPersist 120\n"
        "  ServerAliveInterval 5\n  ServerAliveCountMax 3\n"
    )


def stop_mux(host: dict) -> None:
    """End the host's ssh master connection, if one is up (before the host goes, so none is left behind)."""
    if host.get("mux") and Path(control_path(host)).exists():
        subprocess.run(
            ["ssh", "-o", f"ControlPath={control_path(host)}", "-O", "exit", host["name"]],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
        with contextlib.suppress(OSError):
            Path(control_path(host)).unlink()


def write_access_files(name: str, hosts: list[dict]) -> None:
    """ssh_config, hosts.json and an Ansible inventory for the hosts that are up."""
    sdir = state_dir(name)
    key = sdir / "id_ed25519"
    ssh = [f"# sandbox {name}: ssh -F {sdir / 'ssh_config'} {hosts[0]['name'] if hosts else 'HOST'}\n"]
    for h in hosts:
        ssh.append(
            f"Host {h['name']} {h['address']}\n  HostName {h['address']}\n  User root\n"
            f"  Port 22\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n" + mux_options(h)
        )
    (sdir / "ssh_config").write_text("\n".join(ssh))
    public = [
        {k: h[k] for k in ("name", "address", "host_address", "interface", "topology")}
        | {
            "user": "root",
            "port": 22,
            "identity_file": str(key),
            "ssh_config": str(sdir / "ssh_config"),
            "sysfs_root": fakegpu.SYSFS_ROOT,
            "numactl": fakegpu.NUMACTL,
            "nvidia_smi": fakegpu.NVIDIA_SMI,
            "wheelhouse": "/opt/wheelhouse",
        }
        for h in hosts
    ]
    (sdir / "hosts.json").write_text(json.dumps(public, indent=2) + "\n")
    inv = [f"# sandbox {name}: ansible-inventory -i {sdir / 'inventory.yml'} --list\n", "all:\n  hosts:\n"]
    inv += [f"    {h['name']}:\n      ansible_host: {h['address']}\n" for h in hosts]
    inv.append(
        f"  vars:\n    ansible_connection: ssh\n    ansible_user: root\n"
        f"    ansible_ssh_private_key_file: {key}\n"
        f"    ansible_ssh_common_args: -F {sdir / 'ssh_config'}\n"
        "    ansible_python_interpreter: /usr/bin/python3\n"
    )
    (sdir / "inventory.yml").write_text("".join(inv))


def up(name: str, count: int, topology: str | list[str]) -> list[dict]:
    """Boot NAME-1..count (the ones not already running); return all hosts of the sandbox.

    topology: one fixture name for every host, or a list: host i gets the i-th (the last one repeats), so a
    multi-host sandbox can mix a GPU-less router host and worker hosts of different GPU boxes.
    """
    topologies = [topology] if isinstance(topology, str) else list(topology)
    started = time.monotonic()
    base = ensure_rootfs()
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    sdir = state_dir(name)
    (sdir / "hosts").mkdir(parents=True, exist_ok=True)
    pubkey = Path(str(ensure_key(sdir)) + ".pub").read_text()
    existing = {h["name"]: h for h in load_hosts(name)}
    wanted = host_names(name, count)
    to_boot = []
    with locked("network"):
        for index, hname in enumerate(wanted, start=1):
            old = existing.get(hname)
            topology = topologies[min(index, len(topologies)) - 1]
            if old and host_running(old):
                if old["topology"] != topology:
                    log(
                        f"{hname} is up with topology {old['topology']}; --topology {topology} ignored "
                        "(take the sandbox down to change it)"
                    )
                continue
            if old:  # leftovers of a host that died: clear them before reusing the name
                teardown_host(old)
            slot = min(set(range(1, SUBNET.num_addresses // 4)) - used_slots())
            host_address, address = slot_addresses(slot)
            existing[hname] = {
                "name": hname,
                "index": index,
                "slot": slot,
                "address": address,
                "host_address": host_address,
                "interface": interface_name(hname),
                "topology": topology,
                "dir": str(sdir / "hosts" / hname),
                "root": str(sdir / "hosts" / hname / "root"),
                "wheelhouse": str(WHEELHOUSE),
                "pid": None,
                "mux": uuid.uuid4().hex[:16],  # this boot's ssh master connection (control_path)
            }
            Path(existing[hname]["dir"]).mkdir(parents=True, exist_ok=True)
            write_host(existing[hname])
            to_boot.append(existing[hname])
    hosts = sorted(existing.values(), key=lambda h: h["index"])
    write_access_files(name, hosts)
    if not to_boot:
        log(f"{name}: {len(hosts)} host(s) already up")
        return hosts
    boot_started = time.monotonic()
    deadline = boot_started + BOOT_TIMEOUT
    try:
        for host in to_boot:
            render_guest(Path(host["dir"], "upper"), host, hosts, pubkey)
            launch(host, base)
        for host in to_boot:
            configure_veth(host, deadline)
        states = {h["name"]: wait_ready(sdir, h, deadline) for h in to_boot}
    except BaseException:
        for host in to_boot:
            with contextlib.suppress(Exception):
                teardown_host(host)
        write_access_files(name, load_hosts(name))
        raise
    booted = time.monotonic()
    log(
        f"{name}: booted {len(to_boot)} host(s) in {booted - boot_started:.1f} s "
        f"(up took {booted - started:.1f} s): " + ", ".join(f"{k} {v}" for k, v in states.items())
    )
    return hosts


def teardown_host(host: dict) -> None:
    """Stop the container and remove all it had: its ssh master connection, processes, veth, mounts, cgroup dirs,
    files."""
    stop_mux(host)
    pid = host.get("pid")
    if pid and host_running(host):
        os.kill(pid, signal.SIGTERM)  # nspawn asks the container's systemd to power off
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    cgroups = sandbox_cgroup_dirs(host["name"])
    for _attempt in range(100):
        pids = cgroup_pids(cgroups) | ({pid} if pid and host_running(host) else set())
        if not pids:
            break
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.05)
    else:
        raise SandboxError(f"{host['name']}: processes survive SIGKILL: {sorted(pids)}")
    with contextlib.suppress(ChildProcessError, OSError):
        if pid:
            os.waitpid(pid, os.WNOHANG)
    if Path(f"/sys/class/net/{host['interface']}").exists():
        run("ip", "link", "delete", host["interface"], check=False, capture=True)
    for point in mounts_under(Path(host["dir"])):
        if run("umount", point, check=False, capture=True).returncode:
            run("umount", "--lazy", point)
    remove_cgroup_dirs(cgroups)
    shutil.rmtree(host["dir"], ignore_errors=True)


def bare_record(hdir: Path) -> dict:
    """What teardown needs of a host whose host.json is missing: its cgroup dirs, veth and dir follow from the name."""
    return {"name": hdir.name, "pid": None, "interface": interface_name(hdir.name), "dir": str(hdir), "root": ""}


def down(name: str) -> int:
    """Tear down every host of NAME and its state dir; returns how many hosts were removed."""
    started = time.monotonic()
    sdir = state_dir(name)
    hosts = load_hosts(name)
    known = {h["name"] for h in hosts}
    hosts += [bare_record(d) for d in sorted(sdir.glob("hosts/*")) if d.is_dir() and d.name not in known]
    for host in hosts:
        teardown_host(host)
    shutil.rmtree(sdir, ignore_errors=True)
    remove_cgroup_parents()
    log(f"{name}: {len(hosts)} host(s) down in {time.monotonic() - started:.1f} s")
    return len(hosts)


def remove_cgroup_parents() -> None:
    for parent in sandbox_cgroup_dirs():
        with contextlib.suppress(OSError):
            parent.rmdir()  # only succeeds once no other sandbox is up


def sandboxes() -> list[str]:
    if not STATE_ROOT.is_dir():
        return []
    return sorted(p.name for p in STATE_ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))


def sweep_orphans() -> None:
    """Hosts of this checkout whose state dir is gone (cgroup dirs whose nspawn runs under STATE_ROOT)."""
    recorded = {h["name"] for name in sandboxes() for h in load_hosts(name)}
    for parent in sandbox_cgroup_dirs():
        for child in [c for c in parent.iterdir() if c.is_dir() and c.name not in recorded]:
            cmdlines = []
            for pid in cgroup_pids([child]):
                with contextlib.suppress(OSError):
                    cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            if not cmdlines or any(str(STATE_ROOT).encode() in c for c in cmdlines):
                log(f"removing orphaned host {child.name}")
                teardown_host(bare_record(STATE_ROOT / ".orphans" / child.name))
    for point in mounts_under(STATE_ROOT):
        run("umount", "--lazy", point, check=False)
    shutil.rmtree(STATE_ROOT / ".orphans", ignore_errors=True)
    remove_cgroup_parents()


def status(name: str) -> list[dict]:
    sdir = state_dir(name)
    out = []
    for host in load_hosts(name):
        running = host_running(host)
        system = "stopped"
        if running:
            proc = run(*ssh_cmd(sdir, host["name"], "systemctl", "is-system-running"), check=False, capture=True)
            system = proc.stdout.strip() or f"ssh failed: {proc.stderr.strip()}"
        out.append(
            {
                "name": host["name"],
                "address": host["address"],
                "interface": host["interface"],
                "pid": host["pid"] if running else None,
                "running": running,
                "system": system,
                "topology": host["topology"],
            }
        )
    return out
