# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Runs one of this collection's modules on its host as one plain Python program piped to the host's interpreter,
without AnsiballZ's ansible.module_utils.basic (the host's half: lean_bootstrap.py).

Why: a module run through AnsiballZ imports ansible.module_utils.basic on the host, compiled from the zip on every
run: about 185 of the 245 ms of CPU an ansible.builtin.ping costs on these machines (host_look with the topology:
0.38 s of CPU through AnsiballZ, 0.14 to 0.19 s here, four nvidia-smi runs included). The preflight runs one look
per host; a no-op converge runs several read-only modules in a row.

What runs on the host is the module's own code, unchanged: its source and the sources of the collection's
module_utils it imports (found by reading their import statements), with an AnsibleModule stand-in that takes
the parameters the controller checked against the module's ARGUMENT_SPEC with Ansible's own validator
(ModuleArgumentSpecValidator, the one AnsibleModule uses: types, defaults, choices, required_*; the same
"Unsupported parameters" message). Values of type `path` are expanded on the host, as there. Values of no_log
options are masked in the result, as AnsibleModule masks them.

When: only where Ansible itself would pipeline the module (ActionBase._is_pipelining_enabled: pipelining on, a
connection and become method that allow it, no async, remote files not kept), on the ansible-core this was tested
with (TESTED_CORE), and only for a module whose imports stay within the collection's module_utils, the standard
library and ansible.module_utils.basic (described() says why not). Everywhere else the module runs as Ansible runs
it. The interpreter, its discovery and the task's environment are Ansible's own (shebang(): the interpreter part of
ActionBase._configure_module; _compute_environment_string); the result is parsed by Ansible's own parser
(_parse_returned_data). Unlike AnsibleModule, the stand-in does not log the invocation to the host's syslog.
"""

import ast
import importlib
import json
import os
from pathlib import Path

from ansible import constants as C
from ansible.executor.interpreter_discovery import InterpreterDiscoveryRequiredError, discover_interpreter
from ansible.executor.module_common import _get_shebang
from ansible.module_utils.common.arg_spec import ModuleArgumentSpecValidator
from ansible.module_utils.common.json import Direction, get_module_encoder
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.release import __version__ as CORE_VERSION

TESTED_CORE = "2.21."
PACKAGE = "ansible_collections.disagg.sglang.plugins"
MODULE_UTILS = PACKAGE + ".module_utils"
BASIC = "ansible.module_utils.basic"
PLUGINS = Path(__file__).resolve().parents[1]
BOOTSTRAP = Path(__file__).with_name("lean_bootstrap.py")
# the serialization profile of a module that declares none (the collection's modules declare none)
PROFILE = "legacy"
# AnsibleModule's keyword arguments that the controller applies (MODULE_OPTIONS of a module)
VALIDATOR_OPTIONS = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")


class NotLean(Exception):
    """The module cannot run lean (the message says why); it runs as Ansible runs it."""


def _imported(tree):
    """Every dotted name an import statement of TREE names (a `from X import y` names X and X.y)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise NotLean("a relative import")
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _local_imports(path):
    """The collection's module_utils (file names without .py) that the file PATH imports; NotLean for an import of
    anything of Ansible but ansible.module_utils.basic, or of another collection."""
    found = set()
    for name in _imported(ast.parse(path.read_text(encoding="utf-8"))):
        if name == BASIC or name.startswith(BASIC + "."):
            continue
        if name.startswith(MODULE_UTILS + "."):
            found.add(name[len(MODULE_UTILS) + 1 :].split(".")[0])
        elif name.split(".")[0] in ("ansible", "ansible_collections") and name not in (MODULE_UTILS, PACKAGE):
            raise NotLean(f"{path.name} imports {name}")
    return found


def closure(name):
    """(module source, {dotted name: source} of the module_utils it needs) of the collection's module NAME (short
    name); NotLean says why the module cannot run lean."""
    module = PLUGINS / "modules" / f"{name}.py"
    todo, seen = [module], {}
    while todo:
        path = todo.pop()
        for util in sorted(_local_imports(path)):
            util_path = PLUGINS / "module_utils" / f"{util}.py"
            if f"{MODULE_UTILS}.{util}" not in seen:
                if not util_path.is_file():
                    raise NotLean(f"{path.name} imports module_utils {util}, which is not a file")
                seen[f"{MODULE_UTILS}.{util}"] = util_path.read_text(encoding="utf-8")
                todo.append(util_path)
    return module.read_text(encoding="utf-8"), seen


def described(name):
    """What the lean run of module NAME needs, {source, sources, spec, options} (its ARGUMENT_SPEC and
    MODULE_OPTIONS), or {not_lean: why}. Worked out once per run: every task of every host runs in a forked worker
    of its own, so the first one keeps it in the run's local temp directory (where Ansible keeps its AnsiballZ
    payloads) and the others read it."""
    cache = Path(C.DEFAULT_LOCAL_TMP) / "disagg_sglang_lean" / f"{name}.json"
    try:
        return json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    try:
        source, sources = closure(name)
        module = importlib.import_module(f"{PACKAGE}.modules.{name}")
        found = {"source": source, "sources": sources, "spec": module.ARGUMENT_SPEC,
                 "options": getattr(module, "MODULE_OPTIONS", {})}  # fmt: skip
        text = json.dumps(found)
    except Exception as exc:  # NotLean, a module without ARGUMENT_SPEC, a spec that is not plain data, ...
        found = {"not_lean": f"{type(exc).__name__}: {exc}"}
        text = json.dumps(found)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, cache)
    except OSError:
        pass  # not kept: the next task works it out again
    return found


def _paths_as_str(spec, prefix=()):
    """(SPEC with every `path` type as `str`, the key paths of those values) - the host expands them, not the
    controller; '*' stands for every element of a list."""
    out, keys = {}, []
    for key, given in spec.items():
        option = dict(given)
        here = (*prefix, key)
        if option.get("type") == "path":
            option["type"] = "str"
            keys.append(list(here))
        if option.get("type") == "list" and option.get("elements") == "path":
            option["elements"] = "str"
            keys.append([*here, "*"])
        if option.get("options"):
            inner = (*here, "*") if option.get("type") == "list" else here
            option["options"], nested = _paths_as_str(option["options"], inner)
            keys += nested
        out[key] = option
    return out, keys


def validate(module_name, spec, options, args):
    """(parameters, no_log values, key paths of `path` values) of ARGS checked against SPEC and OPTIONS (a module's
    ARGUMENT_SPEC and MODULE_OPTIONS) as AnsibleModule checks them; (None, None, message) when they fail it."""
    checked_spec, path_keys = _paths_as_str(spec)
    validator = ModuleArgumentSpecValidator(checked_spec, *(options.get(key) for key in VALIDATOR_OPTIONS))
    result = validator.validate({k: v for k, v in args.items() if not str(k).startswith("_ansible_")})
    if result.error_messages:
        message = result.errors.msg
        if isinstance(result.errors[0], UnsupportedError):
            message = f"Unsupported parameters for ({module_name}) module: {message}"
        return None, None, message
    return result.validated_parameters, result._no_log_values, path_keys


def program(name, found, params, path_keys, *, check_mode=False, diff=False):
    """The bytes piped to the host's Python: the bootstrap, then main() of everything it runs (FOUND: described())."""
    data = {"name": f"{name}.py", "module": found["source"], "sources": found["sources"], "params": params,
            "paths": path_keys, "check_mode": bool(check_mode), "diff": bool(diff)}  # fmt: skip
    encoded = json.dumps(data, cls=get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE))
    return (BOOTSTRAP.read_text(encoding="utf-8") + f"\nmain({encoded!r})\n").encode("utf-8")


def shebang(action, task_vars):
    """The #! line Ansible would give the module (ActionBase._configure_module without building the AnsiballZ
    payload, which costs the controller about 60 ms a run: it reads the module's imports again every time):
    ansible_python_interpreter, else the interpreter discovery, whose result is kept as the host's fact
    discovered_interpreter_python, as there."""
    delegate = action._task.delegate_to
    use_vars = task_vars["ansible_delegated_vars"][delegate] if delegate else task_vars
    remote_is_local = bool(getattr(action._connection, "_remote_is_local", False))
    try:
        return _get_shebang("/usr/bin/python", use_vars, action._templar, remote_is_local=remote_is_local)[0]
    except InterpreterDiscoveryRequiredError as idre:
        key = f"discovered_interpreter_{idre.interpreter_name}"
        found = discover_interpreter(action=action, interpreter_name=idre.interpreter_name,
                                     discovery_mode=idre.discovery_mode, task_vars=use_vars)  # fmt: skip
        use_vars["ansible_facts"][key] = found
        if not delegate or action._task.delegate_facts:
            task_vars["ansible_facts"][key] = found
            action._discovered_interpreter_key = key
            action._discovered_interpreter = found
        else:
            task_vars["ansible_delegated_vars"][delegate]["ansible_facts"][key] = found
    return _get_shebang("/usr/bin/python", use_vars, action._templar, remote_is_local=remote_is_local)[0]


def execute(action, module_name, module_args, task_vars, *, wrap_async=False):
    """The result of the collection's module MODULE_NAME (disagg.sglang.NAME) with MODULE_ARGS, run by ACTION
    (an ActionBase) lean where it can, else through ActionBase._execute_module (WRAP_ASYNC as there: an async task
    is never pipelined, so it always runs there)."""
    name = module_name.rsplit(".", 1)[-1]
    task = action._task
    found = described(name)
    pipelined = action._is_pipelining_enabled("new", wrap_async=bool(task.async_val))
    why = (
        f"ansible-core {CORE_VERSION}" if not CORE_VERSION.startswith(TESTED_CORE)
        else "Ansible would not pipeline it" if not pipelined
        else found.get("not_lean")
    )  # fmt: skip
    if why:
        return action._execute_module(
            module_name=module_name, module_args=module_args, task_vars=task_vars, wrap_async=wrap_async
        )
    spec, options = found["spec"], found["options"]
    if task.check_mode and not options.get("supports_check_mode"):
        return {"skipped": True, "msg": f"remote module ({module_name}) does not support check mode"}
    # plain data first: the validator copies the parameters, and a copy of Ansible's tagged values costs more
    plain = json.loads(json.dumps(module_args, cls=get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE)))
    params, no_log, path_keys = validate(module_name, spec, options, plain)
    if params is None:
        return {"failed": True, "msg": path_keys}
    environment = action._compute_environment_string()
    command = action._connection._shell.build_module_command(environment, shebang(action, task_vars), "")
    res = action._low_level_execute_command(
        command,
        sudoable=True,
        in_data=program(name, found, params, path_keys, check_mode=task.check_mode, diff=task.diff),
    )
    utr = action._parse_returned_data(res, PROFILE)
    utr.remove_internal_keys()
    if action._discovered_interpreter_key:
        utr.set_fact(action._discovered_interpreter_key, action._discovered_interpreter)
    result = utr.as_result_dict(for_round_trip=True)
    return remove_values(result, no_log) if no_log else result
