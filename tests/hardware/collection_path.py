"""Import the collection's module_utils from a plain script, as Ansible names them; run one of its modules.

The module_utils files import each other as `ansible_collections.disagg.sglang.plugins.module_utils.*`;
a script run from the checkout (the device machine has no Ansible) gets those names from a temporary
folder holding `ansible_collections/disagg/sglang` -> the checkout, put first on sys.path.
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_ROOT = None


def collections_root():
    """The folder that holds ansible_collections/disagg/sglang -> REPO (made once per process)."""
    global _ROOT  # noqa: PLW0603 (one link per process)
    if _ROOT is None:
        root = Path(tempfile.mkdtemp(prefix="disagg-collections-"))
        link = root / "ansible_collections" / "disagg" / "sglang"
        link.parent.mkdir(parents=True)
        link.symlink_to(REPO)
        _ROOT = root
        sys.path.insert(0, str(root))
    return _ROOT


def subprocess_runner(argv, timeout=60):
    """The command runner of gpu_topology.gather() for plain scripts: (rc, stdout, stderr) with LC_ALL=C;
    rc 127 when it cannot run. (The modules pass AnsibleModule.run_command instead.)"""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run(argv, capture_output=True, env=env, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def module_utils(name):
    """The collection's plugins/module_utils/<name>.py as a module."""
    collections_root()
    return importlib.import_module(f"ansible_collections.disagg.sglang.plugins.module_utils.{name}")


def adhoc(ansible, module, args, **run):
    """One ad-hoc run of the collection's MODULE on localhost (a local connection, this Python as the interpreter,
    one line of output): `ANSIBLE localhost ... -m MODULE -a ARGS...` (ANSIBLE: the argv that runs ansible, ARGS:
    the module's arguments, then any more options). RUN goes to subprocess.run (env, cwd, timeout). Returns (the
    CompletedProcess, its status such as "localhost | SUCCESS", the module's result or None when not JSON)."""
    argv = [*ansible, "localhost", "-i", "localhost,", "-c", "local", "-o",
            "-e", f"ansible_python_interpreter={sys.executable}", "-m", module, "-a", *args]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **run)
    head, sep, body = proc.stdout.partition("=> ")
    try:
        result = json.loads(body) if sep else None
    except ValueError:
        result = None
    return proc, head.strip(), result
