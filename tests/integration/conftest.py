"""Fixtures the sandbox test modules share.

`sandbox_root` (a module's `pytestmark = pytest.mark.usefixtures("sandbox_root")`): sandbox hosts need root
(systemd-nspawn, veth pairs, overlay mounts). Not being root fails the module's tests, saying so; it never
skips them, so that `make test` cannot pass with the sandbox tests left out.

The repository root goes on sys.path: the tests' shared modules by their package name (tests.http_client).
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(scope="module")
def sandbox_root():
    if os.geteuid() != 0:
        pytest.fail(
            "sandbox hosts need root (systemd-nspawn, veth pairs, overlay mounts): run the tests as root "
            "(make test does); these tests are not skipped",
            pytrace=False,
        )


def router_impl_of(item):
    """The router program a test item runs against (its router_impl parameter), or None."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("router_impl") if callspec else None


def pytest_collection_modifyitems(items):
    """Within each module, the items that run against SMG (router_impl "smg") come after all others, in file order:
    the module's deployment switches routers once (test_multihost.py's router_impl fixture), never back."""
    modules = {}
    for index, item in enumerate(items):
        modules.setdefault(item.module.__name__ if item.module else "", index)
    items.sort(key=lambda item: (modules[item.module.__name__ if item.module else ""],
                                 router_impl_of(item) == "smg"))  # fmt: skip
