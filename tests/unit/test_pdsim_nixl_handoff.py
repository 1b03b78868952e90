"""The simulator's optional NIXL handoff (tests/sandbox/pdsim/sglang_pd_sim/nixl_handoff.py).

The pure parts run everywhere. The real two-process write needs a Python with nixl 1.5.1 (+ nixl-cu13): give
it as SGLANG_SIM_NIXL_PYTHON (e.g. a scratch venv: `pip install --no-deps nixl==1.5.1 nixl-cu13==1.5.1 numpy`),
otherwise that test is skipped (the project venv has no NIXL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PDSIM = Path(__file__).resolve().parents[1] / "sandbox" / "pdsim"
sys.path.insert(0, str(PDSIM))

from sglang_pd_sim import nixl_handoff as nh  # noqa: E402


def test_available_only_for_nixl_and_not_when_switched_off():
    assert nh.available("mooncake", {}) == (False, "transfer backend is 'mooncake', not nixl")
    assert nh.available("nixl", {"SGLANG_SIM_KV_NIXL": "0"}) == (False, "SGLANG_SIM_KV_NIXL=0")
    ok, why = nh.available("nixl", {})
    try:
        import nixl._api  # noqa: F401, PLC0415
    except Exception:
        assert not ok and why.startswith("nixl does not import: ")
    else:
        assert ok and why == ""


def test_sizes_and_pattern():
    assert nh.max_bytes({}) == 64 * 2**20 and nh.max_bytes({"SGLANG_SIM_KV_NIXL_MAX_MIB": "0.5"}) == 2**19
    assert nh.max_bytes({"SGLANG_SIM_KV_NIXL_MAX_MIB": "x"}) == 64 * 2**20
    assert nh.kv_nbytes(100, 35136, 2**30) == 3513600
    assert nh.kv_nbytes(10**6, 35136, 2**20) == 2**20 and nh.kv_nbytes(0, 35136, 2**20) == 1
    p7, p8 = nh.pattern(7, 1000), nh.pattern(8, 1000)
    assert len(p7) == 1000 and 0 not in p7 and p7 != p8 and p7[0] == 8 and p7[1:] == p8[:-1]
    assert nh.pattern(7, 600) == nh.pattern(7 + 251, 600)
    assert nh.notif(12) == b"sim-kv:12"


def _nixl_python():
    python = os.environ.get("SGLANG_SIM_NIXL_PYTHON")
    if not python:
        pytest.skip("SGLANG_SIM_NIXL_PYTHON not set (a Python with nixl 1.5.1 + nixl-cu13 1.5.1)")
    return python


def test_rooms_go_through_real_nixl_between_two_processes():
    proc = subprocess.run(
        [_nixl_python(), "-m", "sglang_pd_sim.nixl_handoff", "--selftest", "--mib", "4"],
        cwd=PDSIM,
        env={**os.environ, "PYTHONPATH": str(PDSIM)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("NIXL_HANDOFF_SELFTEST ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(line.split(" ", 1)[1])
    assert result["ok"] is True and proc.returncode == 0, result
    assert [d["bytes_verified"] for d in result["decode"]] == [4 * 2**20] * 3
    assert {d["peer"] for d in result["decode"]} == {"sim-prefill"}
