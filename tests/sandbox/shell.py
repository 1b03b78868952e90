"""What every part of the sandbox tool shares: the machine-wide cache, host commands, log lines, locks, mounts."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DISAGG_SANDBOX_CACHE", "/var/cache/disagg-sglang"))
WHEELHOUSE = CACHE / "wheelhouse"


class SandboxError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"sandbox: {msg}", file=sys.stderr, flush=True)


def run(*cmd: str, check: bool = True, capture: bool = False, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        cmd,
        text=True,
        check=False,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        **kw,
    )
    if check and proc.returncode:
        detail = (proc.stderr or "").strip() if capture else ""
        raise SandboxError(f"{' '.join(cmd)} exited {proc.returncode}{': ' + detail if detail else ''}")
    return proc


@contextlib.contextmanager
def locked(name: str):
    """A machine-wide lock (flock on a file in the cache dir)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            point = line.split()[4].encode().decode("unicode_escape")
            if (point + "/").startswith(prefix):
                found.append(point)
    return sorted(found, key=len, reverse=True)
