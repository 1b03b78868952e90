"""sglang's own `sglang serve` argument parser, built without torch, triton or zmq.

Run by the parser venv's Python (``tests/sglang_parser/build_venv.sh`` makes it): the sglang wheel is
installed there with ``--no-deps`` plus the few small packages its argument modules import. This script

- registers a bare ``sglang`` module whose ``__path__`` is the installed package directory, so the
  package's heavy ``__init__`` (transformers patches, the frontend language, torch) never runs;
- puts a meta-path finder in front that answers ``torch``, ``triton`` and ``zmq`` (and their
  submodules) with permissive stub modules;
- builds the parser exactly as ``sglang.srt.server_args.prepare_server_args`` does (the function behind
  ``sglang serve`` and ``python -m sglang.launch_server``): ``argparse.ArgumentParser(prog="sglang
  serve")`` with argparse's defaults (prefix matching on), then ``ServerArgs.add_cli_args(parser)``.

What is real: every flag, alias, type, choice list, action (deprecation warnings included) and
argparse's own matching. What is out of reach: the resolution hooks that need torch and the model's
config (``ServerArgs.__post_init__`` and later), so a value that parses may still be refused at start.

Usage:
    python real_parser.py                # stdin: {"name": [argv...]}; stdout: {"name": RESULT}
    python real_parser.py --help         # the real parser's help, as `sglang serve --help` prints it
    python real_parser.py --info         # {"version", "prog", "allow_abbrev", "actions"} as JSON
    python real_parser.py --table        # every action: flags, dest, type, default, choices, action
    python real_parser.py --parse ARGV.. # one argv, RESULT as JSON; exit status as sglang's

RESULT: {"ok": bool, "exit_status": int (2 = argparse refused it), "message": argparse's stderr,
"error": the "error: ..." part of it, "warnings": what the actions logged (deprecations),
"namespace": {dest: value} of the actions the argv invoked, "flags": {full option string: value}
(a prefix such as --tp is reported under the flag it matched, --tp-size)}.
"""

import abc
import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import json
import logging
import re
import sys
import types

STUBBED_PACKAGES = ("torch", "triton", "zmq")
# Attributes the stubs must NOT have: sglang probes them with hasattr() to pick a platform.
ABSENT_ATTRIBUTES = frozenset({"npu"})
STUB_TORCH_VERSION = "2.14.1"  # what sglang 0.5.23 pins; only its shape matters here

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --------------------------------------------------------------------------------------------------
# Permissive stubs
# --------------------------------------------------------------------------------------------------


class _StubMeta(abc.ABCMeta):
    """Metaclass of stub values: every attribute is another stub class, calls return stubs.

    A stub is a class (so ``class Foo(torch.nn.Module, ABC)`` works: ABCMeta is its base), converts
    with int()/float()/bool() (0, 0.0, False), iterates as empty, indexes and unions to itself, and
    used as a decorator (one callable argument) hands the decorated function back unchanged.
    """

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in ABSENT_ATTRIBUTES:
            raise AttributeError(name)
        child = make_stub(f"{cls.__qualname__}.{name}")
        type.__setattr__(cls, name, child)
        return child

    def __call__(cls, *args, **kwargs):
        if not cls.__dict__.get("_is_stub"):
            return super().__call__(*args, **kwargs)  # a real subclass of a stub: instantiate it
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]  # @torch.compile, @triton.jit, @torch.no_grad(), ...
        return make_stub(f"{cls.__qualname__}()")

    def __int__(cls):
        return 0

    def __index__(cls):
        return 0

    def __float__(cls):
        return 0.0

    def __bool__(cls):
        return False

    def __len__(cls):
        return 0

    def __iter__(cls):
        return iter(())

    def __contains__(cls, item):
        return False

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __enter__(cls):
        return cls

    def __exit__(cls, *exc):
        return False

    def __repr__(cls):
        return f"<stub {cls.__qualname__}>"


def make_stub(qualname):
    """A new stub class named ``qualname``."""
    stub = _StubMeta(qualname.rsplit(".", 1)[-1] or "stub", (), {"_is_stub": True})
    stub.__qualname__ = qualname
    return stub


class StubModule(types.ModuleType):
    """A stubbed package or submodule: attributes are stub classes; submodules import as stubs."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in ABSENT_ATTRIBUTES:
            raise AttributeError(name)
        child = make_stub(f"{self.__name__}.{name}")
        setattr(self, name, child)
        return child


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta-path finder in front of the real ones: torch, triton, zmq and their submodules are stubs."""

    def __init__(self, packages=STUBBED_PACKAGES):
        self.packages = tuple(packages)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []
        if spec.name == "torch":
            module.__version__ = STUB_TORCH_VERSION
        return module

    def exec_module(self, module):
        return None


# --------------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------------


class _Recorder:
    """What the actions of one parse did: (option string as argparse matched it, dest) in order."""

    calls: list[tuple[str | None, str]] | None = None


def _record_actions(parser):
    """Give each action a subclass that notes its call before doing what it always did."""
    classes = {}
    for action in parser._actions:
        base = type(action)
        if base not in classes:

            def call(self, parser, namespace, values, option_string=None, _base=base):
                if _Recorder.calls is not None:
                    _Recorder.calls.append((option_string, self.dest))
                return _base.__call__(self, parser, namespace, values, option_string)

            classes[base] = type(base.__name__, (base,), {"__call__": call, "__module__": base.__module__})
        action.__class__ = classes[base]


def install_import_hooks():
    """Bare ``sglang`` package (no ``__init__``) and stub torch/triton/zmq. Returns the package dir."""
    if not any(isinstance(f, StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, StubFinder())
    if "sglang" not in sys.modules:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("sglang is not installed in this interpreter's environment")
        package = types.ModuleType("sglang")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = "sglang"
        package.__spec__ = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
        package.__spec__.submodule_search_locations = package.__path__
        sys.modules["sglang"] = package
    return sys.modules["sglang"].__path__[0]


def build_parser():
    """The parser of ``sglang serve``, built the way ``prepare_server_args`` builds it."""
    install_import_hooks()  # must come first: the import below goes through the stubs
    server_args = importlib.import_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.ServerArgs.add_cli_args(parser)
    return parser


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(_ANSI.sub("", record.getMessage()))


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def parse(parser, argv):
    """Parse one argv the way sglang does; never exits. Returns the result mapping."""
    argv = [str(token) for token in argv]
    if "--config" in argv:  # as prepare_server_args: merge the YAML file, the command line wins
        config_parser = importlib.import_module("sglang.srt.utils.server_args_config_parser")
        argv = config_parser.ConfigArgumentMerger(parser).merge_config_with_args(argv)
    capture = _Capture()
    root = logging.getLogger()
    root.addHandler(capture)
    stderr, stdout = io.StringIO(), io.StringIO()
    _Recorder.calls = []
    exit_status = 0
    namespace = None
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            namespace = parser.parse_args(argv)
    except SystemExit as exc:
        exit_status = exc.code if isinstance(exc.code, int) else 1
    finally:
        root.removeHandler(capture)
        calls, _Recorder.calls = _Recorder.calls, None
    values, flags = {}, {}
    if namespace is not None:
        for option_string, dest in calls:
            values[dest] = _jsonable(getattr(namespace, dest, None))
            if option_string:
                flags[option_string] = values[dest]
    message = _ANSI.sub("", stderr.getvalue())
    errors = [line for line in message.splitlines() if line.startswith(f"{parser.prog}: error: ")]
    return {
        "ok": exit_status == 0,
        "exit_status": exit_status,
        "message": message,
        "error": errors[-1][len(parser.prog) + 9 :] if errors else "",
        "warnings": capture.messages,
        "namespace": values,
        "flags": flags,
    }


def action_table(parser):
    """Every action as the reference table lists it: flags, dest, type, default, choices, action."""
    rows = []
    for action in parser._actions:
        kind = getattr(action.type, "__name__", None) if action.type is not None else None
        rows.append(
            {
                "flags": list(action.option_strings),
                "dest": action.dest,
                "type": str(kind),
                "default": repr(action.default),
                "choices": [str(c) for c in action.choices] if action.choices is not None else None,
                "action": type(action).__name__,
                "help_suppressed": action.help == argparse.SUPPRESS,
            }
        )
    return rows


def parse_many(parser, argvs):
    return {name: parse(parser, argv) for name, argv in argvs.items()}


def main(args=None):
    args = sys.argv[1:] if args is None else args
    parser = build_parser()
    _record_actions(parser)
    if args and args[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    if args and args[0] == "--info":
        info = {
            "version": importlib.metadata.version("sglang"),
            "prog": parser.prog,
            "allow_abbrev": parser.allow_abbrev,
            "actions": len(parser._actions),
        }
        print(json.dumps(info))
        return 0
    if args and args[0] == "--table":
        print(json.dumps(action_table(parser), indent=1))
        return 0
    if args and args[0] == "--parse":
        result = parse(parser, args[1:])
        print(json.dumps(result, indent=1))
        return result["exit_status"]
    if args:
        print(__doc__, file=sys.stderr)
        return 2
    request = json.load(sys.stdin)
    if not isinstance(request, dict) or not all(isinstance(v, list) for v in request.values()):
        print("stdin must be a JSON object {name: [argv tokens]}", file=sys.stderr)
        return 2
    json.dump(parse_many(parser, request), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
