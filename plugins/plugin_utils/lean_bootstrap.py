# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The host's half of plugin_utils/lean_module.py: this file's text, followed by a call of main(DATA), is the
program the controller pipes to the host's Python. Importing it does nothing.

DATA (JSON): the module's name and source, the sources of the collection's module_utils it imports, the parameters
the controller already checked against the module's ARGUMENT_SPEC (with Ansible's own validator, defaults filled
in), the keys whose type is `path` (expanded here, on the host, as Ansible's type check expands them), check mode
and diff. The module runs as `__main__`, unchanged: its `from ansible.module_utils.basic import AnsibleModule`
gets the stand-in below, which offers only what the collection's lean modules use (params, check_mode, _diff,
run_command, get_bin_path, exit_json, fail_json); anything else fails loudly, with the name of what is missing.
"""

import importlib.util
import json
import os
import stat
import subprocess
import sys
import traceback
import types

BASIC = "ansible.module_utils.basic"
# what ansible.module_utils.common.process.get_bin_path adds to PATH, in this order
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")


class SourceFinder:
    """Imports the modules of SOURCES ({dotted name: source}) from their text; their parent packages are empty. A
    meta path finder and its loader (not importlib.abc's classes: importing importlib.abc costs about 7 ms)."""

    def __init__(self, sources):
        self.sources = sources
        self.packages = {name.rsplit(".", depth)[0] for name in sources for depth in range(1, name.count(".") + 1)}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.sources or fullname in self.packages:
            return importlib.util.spec_from_loader(fullname, self, is_package=fullname in self.packages)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = self.sources.get(module.__name__)
        if source is None:
            module.__path__ = []
            return
        exec(compile(source, module.__name__, "exec"), module.__dict__)


def _plain(value):
    """What JSON cannot hold as it is, as AnsibleModule's encoder writes it: sets as lists, bytes as text, dates and
    times in ISO 8601."""
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _emit(result, rc):
    sys.stdout.write(json.dumps(result, default=_plain) + "\n")
    sys.stdout.flush()
    sys.exit(rc)


def _executable(path):
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and bool(mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))


class AnsibleModule:
    """The stand-in for ansible.module_utils.basic.AnsibleModule: the parameters are those the controller checked;
    the keyword arguments of the real one (argument_spec, supports_check_mode, ...) were applied there."""

    # set by main() before the module runs: {params, check_mode, diff}
    given = None

    def __init__(self, argument_spec=None, **_applied_on_the_controller):
        self.argument_spec = argument_spec
        self.params = self.given["params"]
        self.check_mode = self.given["check_mode"]
        self._diff = self.given["diff"]

    def exit_json(self, **result):
        _emit(result, 0)

    def fail_json(self, msg, **result):
        _emit({**result, "failed": True, "msg": msg}, 1)

    def get_bin_path(self, arg, opt_dirs=None):
        """As AnsibleModule.get_bin_path (not required): OPT_DIRS that exist, then PATH, then the sbin directories;
        None when no executable file is found."""
        dirs = [d for d in opt_dirs or [] if d and os.path.exists(d)]
        dirs += os.environ.get("PATH", "").split(os.pathsep)
        dirs += [d for d in SBIN_DIRS if d not in dirs and os.path.exists(d)]
        for directory in filter(None, dirs):
            path = os.path.join(directory, arg)
            if _executable(path):
                return path
        return None

    def run_command(self, args, environ_update=None):
        """As AnsibleModule.run_command for an argv: (rc, stdout, stderr) as text; a program that cannot be started
        fails the module, as there."""
        argv = [str(a) for a in args]
        env = {**os.environ, **(environ_update or {})}
        try:
            proc = subprocess.run(argv, capture_output=True, env=env, stdin=subprocess.DEVNULL, check=False)
        except OSError as exc:
            self.fail_json(msg=str(exc), cmd=argv, rc=exc.errno, stdout="", stderr="")
        stdout = proc.stdout.decode("utf-8", "surrogateescape")
        stderr = proc.stderr.decode("utf-8", "surrogateescape")
        return proc.returncode, stdout, stderr


def _expand(value, keys):
    """Expands ~ and $VARS in the values at KEYS (a key path; '*' is every element of a list), as Ansible's `path`
    type does, on this host."""
    if value is None:
        return value
    if not keys:
        return os.path.expanduser(os.path.expandvars(value)) if isinstance(value, str) else value
    head, rest = keys[0], keys[1:]
    if head == "*":
        return [_expand(element, rest) for element in value] if isinstance(value, list) else value
    if isinstance(value, dict) and head in value:
        value[head] = _expand(value[head], rest)
    return value


def main(data):
    data = json.loads(data)
    params = data["params"]
    for keys in data["paths"]:
        params = _expand(params, keys)
    AnsibleModule.given = {"params": params, "check_mode": data["check_mode"], "diff": data["diff"]}
    basic = types.ModuleType(BASIC)
    basic.AnsibleModule = AnsibleModule
    for name in ("ansible", "ansible.module_utils"):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules[name] = package
    sys.modules[BASIC] = basic
    sys.meta_path.insert(0, SourceFinder(data["sources"]))
    namespace = {"__name__": "__main__", "__file__": data["name"], "__builtins__": __builtins__}
    try:
        exec(compile(data["module"], data["name"], "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:
        _emit({"failed": True, "msg": f"{type(exc).__name__}: {exc}", "exception": traceback.format_exc()}, 1)
    _emit({"failed": True, "msg": f"{data['name']} ended without exit_json or fail_json"}, 1)
