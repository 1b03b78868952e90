"""What every test under tests/ may use: the collection importable as Ansible imports it, and the fixtures that
start the test doubles (tests/sandbox) on loopback, shared by the collection's unit tests and the doubles' own.

scripts/bootstrap.sh links the checkout at .collections/ansible_collections/disagg/sglang; this puts .collections
on sys.path (and makes the link if bootstrap has not run yet), the repository root (the tests' shared modules by
their package name: tests.http_client, tests.sandbox.hubsim) and tests/sglang_parser (the real sglang parser's
client, real_parser_client).
"""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / ".collections"
_link = COLLECTIONS / "ansible_collections" / "disagg" / "sglang"
if not _link.exists():
    _link.parent.mkdir(parents=True, exist_ok=True)
    _link.symlink_to(REPO)
# The repository's other folders are no packages (no __init__.py), so they shadow nothing installed.
for _path in (REPO / "tests" / "sglang_parser", REPO, COLLECTIONS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


@pytest.fixture
def sims(tmp_path):
    """Simulators a test starts on loopback (tests/sandbox/pdsim/pdsim_testing.py), all stopped after it."""
    sys.path.insert(0, str(REPO / "tests" / "sandbox" / "pdsim"))
    from pdsim_testing import SimPool  # noqa: PLC0415 (only the simulator tests need it)

    pool = SimPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def serve_hub():
    """serve_hub(repos, token=None) -> (hub, server): a hub simulator (tests/sandbox/hubsim) serving REPOS (repo id ->
    revisions) on loopback in a thread of this process; every one started is stopped after the test."""
    from tests.sandbox.hubsim import Hub, start  # noqa: PLC0415 (only the model tests need it)

    servers = []

    def serve(repos, token=None):
        hub = Hub(repos, token=token)
        servers.append(start(hub))
        return hub, servers[-1]

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hub(serve_hub):
    """(hub, server, revisions): two generated revisions of REPO behind TOKEN (tests/sandbox/hubsim/testing.py)."""
    from tests.sandbox.hubsim import generate  # noqa: PLC0415 (only the model tests need it)
    from tests.sandbox.hubsim.testing import REPO, TOKEN  # noqa: PLC0415

    revisions = [generate(0), generate(1)]
    return (*serve_hub({REPO: revisions}, token=TOKEN), revisions)
