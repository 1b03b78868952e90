"""The cached Debian rootfs every sandbox host boots from (the overlay's lower layer): built once with
debootstrap, customised, kept under the cache keyed by its recipe, and shared by all sandboxes of the machine."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from pathlib import Path

from .shell import CACHE, SandboxError, locked, log, mounts_under, run

SUITE = "bookworm"
PACKAGES = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "iproute2",
    "openssh-server",
    "sudo",
    "ca-certificates",
    "numactl",
    "curl",
    "python3-packaging",  # ansible.builtin.pip imports it on the target
    "python3-apt",  # ansible.builtin.package (apt) needs it; real Debian hosts have it
    # HAProxy 2.6.12 (bookworm), the load balancer in front of the routers (issue 39): the role installs it with
    # ansible.builtin.package, which finds it here as on a host that has it already (the guests have no route out)
    "haproxy",
]
# Units that only cost boot time in a throwaway container.
MASKED_UNITS = [
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "dpkg-db-backup.timer",
    "systemd-firstboot.service",
    "getty@tty1.service",
    "console-getty.service",
]
# Bump when the customisation below changes: it is part of the cache key.
ROOTFS_RECIPE = "3"


def debian_mirror() -> str:
    """The machine's own Debian mirror, read from its apt sources (deb822 or one-line)."""
    if os.environ.get("DISAGG_SANDBOX_MIRROR"):
        return os.environ["DISAGG_SANDBOX_MIRROR"]
    sources = Path("/etc/apt/sources.list.d")
    files = [*sorted(sources.glob("*.sources")), Path("/etc/apt/sources.list"), *sorted(sources.glob("*.list"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".sources":
            for stanza in text.split("\n\n"):
                fields = {}
                for line in stanza.splitlines():
                    if line.strip() and not line.lstrip().startswith("#") and ":" in line:
                        key, _sep, value = line.partition(":")
                        fields[key.strip().lower()] = value.split()
                if (
                    "deb" in fields.get("types", [])
                    and SUITE in fields.get("suites", [])
                    and fields.get("enabled", ["yes"])[0] != "no"
                    and fields.get("uris")
                ):
                    return fields["uris"][0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()  # drop [options]
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    raise SandboxError(
        f"no 'deb ... {SUITE}' source in /etc/apt/sources.list(.d); set DISAGG_SANDBOX_MIRROR to a Debian mirror"
    )


def rootfs_key() -> str:
    return hashlib.sha256(f"{SUITE} {' '.join(PACKAGES)} {ROOTFS_RECIPE}".encode()).hexdigest()[:12]


def rootfs_paths() -> tuple[Path, Path]:
    key = rootfs_key()
    return CACHE / f"rootfs-{SUITE}-{key}.tar.zst", CACHE / f"rootfs-{SUITE}-{key}"


def customize_rootfs(root: Path) -> None:
    """Shape a fresh debootstrap tree into a container image that boots fast."""
    for pattern in (
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/lib/apt/lists/*",
        "usr/share/doc/*",
        "usr/share/man/*",
        "usr/share/info/*",
        "usr/share/locale/*",
    ):
        for path in root.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for name in ("etc/hostname", "etc/machine-id"):  # per host: nspawn sets the hostname, up writes the id
        (root / name).unlink(missing_ok=True)
    (root / "etc/machine-id").write_text("")
    (root / "etc/default/locale").write_text("LANG=C.UTF-8\n")
    (root / "etc/ssh/sshd_config.d/sandbox.conf").write_text(
        "# disagg sandbox: root logs in with the key that `up` puts in\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n"
    )
    (root / "opt/wheelhouse").mkdir(parents=True, exist_ok=True)
    run("systemctl", f"--root={root}", "enable", "systemd-networkd.service", capture=True)
    run("systemctl", f"--root={root}", "mask", *MASKED_UNITS, capture=True)


def ensure_rootfs() -> Path:
    """The extracted base rootfs, built with debootstrap once and cached as a tarball."""
    tarball, base = rootfs_paths()
    ready = base.with_name(base.name + ".ready")
    with locked("rootfs"):
        if ready.exists():
            return base
        shutil.rmtree(base, ignore_errors=True)
        if tarball.exists():
            started = time.monotonic()
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            run(
                "tar",
                "-C",
                str(tmp),
                "--numeric-owner",
                "--xattrs",
                "--xattrs-include=*",
                "-I",
                "zstd",
                "-xf",
                str(tarball),
            )
            tmp.rename(base)
            log(f"rootfs extracted from {tarball} in {time.monotonic() - started:.1f} s")
        else:
            build_rootfs(tarball, base)
        ready.touch()
        prune_rootfs(keep=base)
    return base


def prune_rootfs(keep: Path) -> None:
    """Remove rootfs builds of older recipes, unless a running host still has one as its lower dir."""
    mounts = Path("/proc/self/mountinfo").read_text()
    for path in CACHE.glob(f"rootfs-{SUITE}-*"):
        base = CACHE / path.name.split(".")[0]
        if base == keep or f"lowerdir={base}" in mounts:
            continue
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def unmount_all_under(path: Path) -> None:
    """Lazily unmount what is mounted below path (debootstrap can leave the target's /proc mounted)."""
    if path.exists():
        for point in mounts_under(path):
            run("umount", "--lazy", point, check=False, capture=True)


def build_rootfs(tarball: Path, base: Path) -> None:
    mirror = debian_mirror()
    work = base.with_name(base.name + ".build")
    unmount_all_under(work)
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    log(f"building the {SUITE} rootfs with debootstrap (about a minute, once)")
    proc = run(
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(work),
        mirror,
        check=False,
        capture=True,
    )
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        shutil.rmtree(work, ignore_errors=True)
        raise SandboxError(f"debootstrap failed ({proc.returncode}):\n{tail}")
    unmount_all_under(work)
    customize_rootfs(work)
    built = time.monotonic()
    tmp = tarball.with_name(tarball.name + ".tmp")
    run(
        "tar",
        "-C",
        str(work),
        "--numeric-owner",
        "--one-file-system",
        "--xattrs",
        "--xattrs-include=*",
        "-I",
        "zstd -T0 -3",
        "-cf",
        str(tmp),
        ".",
    )
    tmp.rename(tarball)
    work.rename(base)
    log(
        f"rootfs built in {built - started:.1f} s, tarball {tarball.stat().st_size / 2**20:.0f} MiB "
        f"in {time.monotonic() - built:.1f} s: {tarball}"
    )
