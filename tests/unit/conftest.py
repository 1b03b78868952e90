"""Unit tests import the collection as Ansible does: ansible_collections.disagg.sglang.

scripts/bootstrap.sh links the checkout at .collections/ansible_collections/disagg/sglang; this puts
.collections on sys.path (and makes the link if bootstrap has not run yet).
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".collections"
_link = COLLECTIONS / "ansible_collections" / "disagg" / "sglang"
if not _link.exists():
    _link.parent.mkdir(parents=True, exist_ok=True)
    _link.symlink_to(REPO)
# The collection; this folder (topology_fakes, samples); the real sglang parser's client; the unit-file reader.
_TESTS = REPO / "tests"
for _path in (COLLECTIONS, Path(__file__).resolve().parent, _TESTS / "sglang_parser", _TESTS / "integration"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
# The repository root: the tests' shared modules by their package name (tests.http_client). Its other folders are
# no packages (no __init__.py), so they shadow nothing installed.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pytest  # noqa: E402
import real_parser_client as rpc  # noqa: E402


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


@pytest.fixture
def sims(tmp_path):
    """Simulators a test starts on loopback (tests/sandbox/pdsim/pdsim_testing.py), all stopped after it."""
    sys.path.insert(0, str(_TESTS / "sandbox" / "pdsim"))
    from pdsim_testing import SimPool  # noqa: PLC0415 (only the simulator tests need it)

    pool = SimPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()
