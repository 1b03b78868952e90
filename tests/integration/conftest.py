"""Fixtures the sandbox test modules share.

`sandbox_root` (a module's `pytestmark = pytest.mark.usefixtures("sandbox_root")`): sandbox hosts need root
(systemd-nspawn, veth pairs, overlay mounts). Not being root fails the module's tests, saying so; it never
skips them, so that `make test` cannot pass with the sandbox tests left out.
"""

import os

import pytest


@pytest.fixture(scope="module")
def sandbox_root():
    if os.geteuid() != 0:
        pytest.fail(
            "sandbox hosts need root (systemd-nspawn, veth pairs, overlay mounts): run the tests as root "
            "(make test does); these tests are not skipped",
            pytrace=False,
        )
