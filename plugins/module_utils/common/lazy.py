# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""A module of this collection's module_utils, imported when one of its names is first read (issue 24).

Ansible compiles every template of a task in a worker process forked for that task and host, and compiling a
template loads each filter plugin it names, used or not (a `when:` that is false still compiles the filter in its
args). A filter file that imported the whole plan at its top made every such worker pay that import; with `lazy`,
a worker imports only the logic of the filters it really calls.
"""

from importlib import import_module

PACKAGE = "ansible_collections.disagg.sglang.plugins.module_utils"


class Lazy:
    """Stands for module_utils/NAME.py; the first attribute read imports it (then Python's module cache answers)."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(import_module(f"{PACKAGE}.{self._name}"), attr)
