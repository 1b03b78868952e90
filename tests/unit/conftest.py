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
for _path in (COLLECTIONS, Path(__file__).resolve().parent):  # the collection; topology_fakes
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
