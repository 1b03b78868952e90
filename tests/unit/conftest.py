"""The unit tests' own fixtures and helper modules: this folder (samples, topology_fakes, inventory_vars,
plan_stages) and tests/integration (unit_files, faults, sandbox_hosts) go on sys.path; tests/conftest.py makes the
collection importable (ansible_collections.disagg.sglang) and holds the fixtures of the test doubles.
"""

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]
for _path in (Path(__file__).resolve().parent, _TESTS / "integration"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import pytest  # noqa: E402
import real_parser_client as rpc  # noqa: E402
import topology_fakes as tf  # noqa: E402


@pytest.fixture(scope="module")
def real_python():
    """Python of the venv holding sglang 0.5.23's real parser (built once, tests/sglang_parser). Never skipped:
    when it cannot be built, the test fails and says why."""
    try:
        python, seconds = rpc.ensure_venv()
    except rpc.ParserUnavailable as exc:
        pytest.fail(f"the real sglang parser could not be built: {exc}", pytrace=False)
    print(f"parser venv ready in {seconds:.1f}s: {python}")
    return python


@pytest.fixture(scope="module")
def smg_python():
    """Python of a venv holding SMG 1.13 (the second router program; built once, tests/sglang_parser/build_venv.sh
    smg), apart from this venv's sglang-router: both ship an `smg` command. Never skipped."""
    try:
        python, seconds = rpc.ensure_venv(program="smg")
    except rpc.ParserUnavailable as exc:
        pytest.fail(f"the SMG venv could not be built: {exc}", pytrace=False)
    print(f"smg venv ready in {seconds:.1f}s: {python}")
    return python


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    """gpu_topology facts of the sandbox's 8x RTX PRO 6000 host (tests/fixtures/topology/rtxpro6000-8x)."""
    return tf.gather(tf.load_host("rtxpro6000-8x"), tmp_path_factory.mktemp("sysfs"), "nvml")
