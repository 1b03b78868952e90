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
