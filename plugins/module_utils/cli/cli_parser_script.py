# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Parse command lines with an installed program's OWN argparse parser (stdlib only, no side effects on import).

This file is a script for the Python of the venv the program is installed in. The ``cli_check``
module (``module_utils/cli/cli_check.py``) sends its source there as ``python -c SOURCE --module MOD``
with the argvs as JSON on stdin; the tests run it as a file (``tests/sglang_parser``).

How the parser is found: the program's own function that turns ``argv`` into its arguments (the one
``python -m MOD`` calls) runs with ``argparse.ArgumentParser.parse_args`` hooked. The hook parses with
the parser that function built - its own flags, types, choices, actions and prefix matching - and then
stops the function, so nothing after parsing runs (sglang's ``ServerArgs.__post_init__``, the
router's ``RouterArgs.from_cli_args``). The programs it knows (``PROGRAMS``):

- ``sglang.launch_server``: ``sglang.srt.server_args.prepare_server_args`` (behind both ``sglang serve``
  and ``python -m sglang.launch_server``: ``ArgumentParser(prog="sglang serve")`` +
  ``ServerArgs.add_cli_args``, ``--config`` merged). The package's heavy ``__init__`` is skipped (a
  bare ``sglang`` module whose ``__path__`` is the installed directory) and torch, triton and zmq are
  answered by permissive stub modules, so it runs without a GPU and without importing torch.
- ``sglang_router.launch_router``: ``sglang_router.launch_router.parse_router_args``.
- ``smg.launch_router``: ``smg.launch_router.parse_router_args`` (SMG 1.13).
- ``sglang_pd_sim`` (the sandbox's worker simulator): ``sglang_pd_sim.cli.parse_args``.

``--entry MOD:FUNC`` names any other such function (it must call ``ArgumentParser.parse_args``).

Usage (exit status 3: the parser could not be built, the reason on stderr - the module then says "flags not
checked"; any other failure is a crash, which fails the check):
    python cli_parser_script.py --module MOD            # stdin {name: [argv]}; stdout {"info", "results"}
    python cli_parser_script.py --module MOD --info     # {"module", "entry", "version", "prog", ...}
    python cli_parser_script.py --module MOD --table    # every action: flags, dest, type, default, ...
    python cli_parser_script.py --module MOD --help     # the parser's help, as the program prints it
    python cli_parser_script.py --module MOD --parse ARGV...  # one RESULT; exit status as the program's

RESULT: {"ok": bool, "exit_status": int (2 = argparse refused it), "message": what went to stderr,
"error": the "error: ..." part of it, "warnings": what the actions logged (deprecations),
"namespace": {dest: value} of the actions the argv invoked, "flags": {full option string: value}
(a prefix such as --tp is reported under the flag it matched, --tp-size), "abbreviations": the tokens
argparse took as a prefix of a longer flag, [{"token", "flag", "full"}] (``abbreviations()``; the
module refuses them: value rules elsewhere are written for full names)}.
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

# -m module -> (function that parses argv, its distribution, packages stubbed, package imported bare)
PROGRAMS = {
    "sglang.launch_server": {
        "entry": "sglang.srt.server_args:prepare_server_args",
        "dist": "sglang",
        "stubs": ("torch", "triton", "zmq"),
        "bare": "sglang",
    },
    "sglang_router.launch_router": {
        "entry": "sglang_router.launch_router:parse_router_args",
        "dist": "sglang-router",
        "stubs": (),
        "bare": None,
    },
    # SMG 1.13 (smg/launch_router.py): argparse over RouterArgs.add_cli_args, then RouterArgs.from_cli_args
    "smg.launch_router": {"entry": "smg.launch_router:parse_router_args", "dist": "smg", "stubs": (), "bare": None},
    "sglang_pd_sim": {"entry": "sglang_pd_sim.cli:parse_args", "dist": "sglang-pd-sim", "stubs": (), "bare": None},
}

EXIT_NO_PARSER = 3
# Attributes the stubs must NOT have: sglang probes them with hasattr() to pick a platform.
ABSENT_ATTRIBUTES = frozenset({"npu"})
STUB_TORCH_VERSION = "2.14.1"  # what sglang 0.5.23 pins; only its shape matters here

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class NoParser(Exception):
    """The program's parser could not be built here."""


# --------------------------------------------------------------------------------------------------
# Permissive stubs (for sglang: torch, triton, zmq)
# --------------------------------------------------------------------------------------------------


class _StubMeta(abc.ABCMeta):
    """Metaclass of stub values: every attribute is another stub class, calls return stubs.

    A stub is a class (so ``class Foo(torch.nn.Module, ABC)`` works: ABCMeta is its base), converts
    with int()/float()/bool() (0, 0.0, False), iterates as empty, indexes and unions to itself, and
    used as a decorator (one callable argument) hands the decorated function back unchanged.
    """

    def __getattr__(cls, name):
        return _stub_attribute(cls, cls.__qualname__, name)

    def __call__(cls, *args, **kwargs):
        if not cls.__dict__.get("_is_stub"):
            return super().__call__(*args, **kwargs)  # a real subclass of a stub: instantiate it
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]  # @torch.compile, @triton.jit, @torch.no_grad(), ...
        return make_stub(cls.__qualname__ + "()")

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
        return "<stub " + cls.__qualname__ + ">"


def make_stub(qualname):
    """A new stub class named ``qualname``."""
    stub = _StubMeta(qualname.rsplit(".", 1)[-1] or "stub", (), {"_is_stub": True})
    stub.__qualname__ = qualname
    return stub


def _stub_attribute(owner, owner_name, name):
    """A missing attribute of a stub class or module: a new stub, kept on ``owner`` (dunders and
    ABSENT_ATTRIBUTES stay missing)."""
    if (name.startswith("__") and name.endswith("__")) or name in ABSENT_ATTRIBUTES:
        raise AttributeError(name)
    child = make_stub(owner_name + "." + name)
    setattr(owner, name, child)
    return child


class StubModule(types.ModuleType):
    """A stubbed package or submodule: attributes are stub classes; submodules import as stubs."""

    def __getattr__(self, name):
        return _stub_attribute(self, self.__name__, name)


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta-path finder in front of the real ones: the named packages and their submodules are stubs."""

    def __init__(self, packages):
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


def install_import_hooks(stubs, bare):
    """Stub ``stubs``; register ``bare`` as its installed directory without running its ``__init__``."""
    if stubs and not any(isinstance(f, StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, StubFinder(stubs))
    if bare and bare not in sys.modules:
        spec = importlib.util.find_spec(bare)
        if spec is None or not spec.submodule_search_locations:
            raise NoParser(bare + " is not installed in this interpreter's environment (" + sys.executable + ")")
        package = types.ModuleType(bare)
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = bare
        package.__spec__ = importlib.machinery.ModuleSpec(bare, None, is_package=True)
        package.__spec__.submodule_search_locations = package.__path__
        sys.modules[bare] = package


# --------------------------------------------------------------------------------------------------
# How argparse reads one token (its prefix matching, mirrored), and the abbreviations of an argv
# --------------------------------------------------------------------------------------------------

# argparse's _negative_number_matcher: such a token is a value unless the parser has options like it.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def match_option(token, option_strings, prefix_chars="-", allow_abbrev=True):
    """How argparse reads ``token`` (one argv token before ``--``): (kind, the option string it means).

    The steps of ``ArgumentParser._parse_optional`` and ``_get_option_tuples`` (Python 3.11 to 3.13):
    "value" (no prefix character, a lone one, a negative number, a space: None), "exact" (an option
    string, or one before "=": ``--tp-size=4``), "short" (a one-character option with its value, or more
    switches, attached: ``-p8000``), "abbreviation" (the one option string it is a prefix of: ``--tp``,
    ``--tp=4`` -> ``--tp-size``), "ambiguous" (a prefix of several: None) or "unknown" (None).
    """
    options = list(option_strings)
    if not token or token[0] not in prefix_chars:
        return "value", None
    if token in options:
        return "exact", token
    if len(token) == 1:
        return "value", None
    name, sep, _value = token.partition("=")
    if sep and name in options:
        return "exact", name
    matches = []
    if token[1] in prefix_chars:  # --long: a prefix up to the "=", only with allow_abbrev
        if allow_abbrev:
            matches = [("abbreviation", option) for option in options if option.startswith(name)]
    else:  # -x: a short option with its value attached, or a prefix of a single-dash long option
        for option in options:
            if option == token[:2]:
                matches.append(("short", option))
            elif option.startswith(token):
                matches.append(("abbreviation", option))
    if len(matches) > 1:
        return "ambiguous", None
    if matches:
        return matches[0]
    if _NEGATIVE_NUMBER.match(token) and not any(_NEGATIVE_NUMBER.match(option) for option in options):
        return "value", None
    if " " in token:
        return "value", None
    return "unknown", None


def abbreviations(args, option_strings, prefix_chars="-", allow_abbrev=True):
    """Each token of ``args`` that argparse takes as an abbreviation: [{"token", "flag", "full"}].

    ``flag`` is the abbreviation as written (``--tp`` of ``--tp=4``), ``full`` the option string argparse
    resolves it to. Tokens after the first ``--`` are values, as argparse reads them.
    """
    found = []
    for token in args:
        if token == "--":
            break
        kind, option = match_option(token, option_strings, prefix_chars, allow_abbrev)
        if kind == "abbreviation":
            found.append({"token": token, "flag": token.partition("=")[0], "full": option})
    return found


# --------------------------------------------------------------------------------------------------
# The program's parser, caught inside its own parse function
# --------------------------------------------------------------------------------------------------


class _Stop(BaseException):
    """Raised by the hook once the program's parser has parsed: nothing after parse_args runs."""


class _Recorder:
    """What the actions of one parse did: (option string as argparse matched it, dest) in order."""

    calls = None


def _record_actions(parser):
    """Give each action a subclass that notes its call before doing what it always did."""
    classes = {}
    for action in parser._actions:
        base = type(action)
        if getattr(base, "_records_calls", False):
            continue
        if base not in classes:

            def call(self, parser, namespace, values, option_string=None, _base=base):
                if _Recorder.calls is not None:
                    _Recorder.calls.append((option_string, self.dest))
                return _base.__call__(self, parser, namespace, values, option_string)

            classes[base] = type(
                base.__name__, (base,), {"__call__": call, "__module__": base.__module__, "_records_calls": True}
            )
        action.__class__ = classes[base]


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


class Program:
    """One installed program: its module, its parse function, and a parser caught from it."""

    def __init__(self, module, entry=None):
        known = PROGRAMS.get(module, {})
        self.module = module
        self.entry = entry or known.get("entry")
        if not self.entry:
            raise NoParser(
                "no parse function is known for " + module + " (known: " + ", ".join(sorted(PROGRAMS)) + "); "
                "name one with --entry MODULE:FUNCTION"
            )
        self.dist = known.get("dist")
        self.stubs = known.get("stubs", ())
        install_import_hooks(self.stubs, known.get("bare"))
        entry_module, _sep, function = self.entry.partition(":")
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON answer only
            try:
                self._set_argv0()
                self.function = getattr(importlib.import_module(entry_module), function)
            except Exception as exc:  # any import failure means: no parser here
                raise NoParser(
                    f"cannot import {self.entry} with {sys.executable}: {type(exc).__name__}: {exc}"
                ) from exc
        self.parser = None
        probe = self.parse([])  # builds the parser once: it must reach parse_args
        if self.parser is None:
            raise NoParser(
                self.entry + " did not call ArgumentParser.parse_args: " + (probe["error"] or probe["message"] or "")
            )

    def _set_argv0(self):
        """As ``python -m MOD`` sets it: argparse's default prog is its basename."""
        try:
            spec = importlib.util.find_spec(self.module)
            if spec is not None and spec.submodule_search_locations:
                spec = importlib.util.find_spec(self.module + ".__main__")
            if spec is not None and spec.origin:
                sys.argv[0] = spec.origin
        except Exception:  # keep argv[0]; only a default prog depends on it
            pass

    def parse(self, argv):
        """Run the program's parse function on ``argv``; never exits. Returns RESULT (see the docstring)."""
        argv = [str(token) for token in argv]
        state = {"namespace": None, "exit_status": 0}
        original = argparse.ArgumentParser.parse_args
        program = self

        def hook(parser, args=None, namespace=None):
            if state.get("reached"):
                return original(parser, args, namespace)
            state["reached"] = True
            if program.parser is None:
                program.parser = parser
            # What the parser reads (sglang's --config merged in), with the parser's own option strings.
            state["abbreviations"] = abbreviations(
                [str(token) for token in (sys.argv[1:] if args is None else args)],
                parser._option_string_actions,
                parser.prefix_chars,
                parser.allow_abbrev,
            )
            _record_actions(parser)
            try:
                state["namespace"] = original(parser, args, namespace)
            except SystemExit as exc:
                state["exit_status"] = exc.code if isinstance(exc.code, int) else 1
            raise _Stop

        capture = _Capture()
        root = logging.getLogger()
        root.addHandler(capture)
        stderr, stdout = io.StringIO(), io.StringIO()
        _Recorder.calls = []
        argparse.ArgumentParser.parse_args = hook
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
                self.function(list(argv))
        except _Stop:
            pass
        except SystemExit as exc:  # the function exited before it parsed (sglang_pd_sim: a bad --config)
            state["exit_status"] = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # before parsing: a missing --config file, ...
            state["exit_status"] = 1
            stderr.write(self.module + ": error: " + type(exc).__name__ + ": " + str(exc) + "\n")
        finally:
            argparse.ArgumentParser.parse_args = original
            root.removeHandler(capture)
            calls, _Recorder.calls = _Recorder.calls, None
        values, flags = {}, {}
        if state["namespace"] is not None:
            for option_string, dest in calls:
                values[dest] = _jsonable(getattr(state["namespace"], dest, None))
                if option_string:
                    flags[option_string] = values[dest]
        message = _ANSI.sub("", stderr.getvalue())
        errors = [line.split(": error: ", 1)[1] for line in message.splitlines() if ": error: " in line]
        warnings = list(capture.messages)
        if state["exit_status"] == 0:  # what the actions printed (the simulator's deprecation lines)
            warnings += [line.strip() for line in message.splitlines() if line.strip()]
        return {
            "ok": state["exit_status"] == 0 and state["namespace"] is not None,
            "exit_status": state["exit_status"],
            "message": message,
            "error": errors[-1] if errors else "",
            "output": stdout.getvalue(),
            "warnings": warnings,
            "namespace": values,
            "flags": flags,
            "abbreviations": state.get("abbreviations", []),
        }

    def info(self):
        parser = self.parser
        version = None
        if self.dist:
            try:
                version = importlib.metadata.version(self.dist)
            except importlib.metadata.PackageNotFoundError:
                version = None
        return {
            "module": self.module,
            "entry": self.entry,
            "python": sys.executable,
            "version": version,
            "prog": parser.prog,
            "allow_abbrev": parser.allow_abbrev,
            "prefix_chars": parser.prefix_chars,
            "actions": len(parser._actions),
            "options": sorted(parser._option_string_actions),
            "switches": sorted(s for s, a in parser._option_string_actions.items() if a.nargs == 0),
            "stubbed": list(self.stubs),
        }


def action_table(parser):
    """Every action: flags, dest, type, default, choices, action, whether its help is suppressed."""
    rows = []
    for action in parser._actions:
        kind = getattr(action.type, "__name__", None) if action.type is not None else None
        base = type(action).__mro__[1] if getattr(type(action), "_records_calls", False) else type(action)
        rows.append(
            {
                "flags": list(action.option_strings),
                "dest": action.dest,
                "type": str(kind),
                "default": repr(action.default),
                "choices": [str(c) for c in action.choices] if action.choices is not None else None,
                "action": base.__name__,
                "help_suppressed": action.help == argparse.SUPPRESS,
            }
        )
    return rows


def _options(args):
    """``[--module MOD] [--entry MOD:FUNC] REST...`` -> (module, entry, rest)."""
    args, found = list(args), {"--module": None, "--entry": None}
    while len(args) >= 2 and args[0] in found:
        found[args[0]] = args[1]
        args = args[2:]
    return found["--module"], found["--entry"], args


def main(args=None):
    args = sys.argv[1:] if args is None else args
    module, entry, rest = _options(args)
    if not module:
        sys.stderr.write(__doc__)
        return 2
    try:
        program = Program(module, entry)
    except NoParser as exc:
        sys.stderr.write("cli_parser_script: " + str(exc) + "\n")
        return EXIT_NO_PARSER
    if rest and rest[0] in ("-h", "--help"):
        program.parser.print_help()
        return 0
    if rest and rest[0] == "--info":
        print(json.dumps(program.info()))  # pylint: disable=ansible-bad-function  # standalone program (venv python), not module code
        return 0
    if rest and rest[0] == "--table":
        print(json.dumps(action_table(program.parser), indent=1))  # pylint: disable=ansible-bad-function  # standalone program (venv python), not module code
        return 0
    if rest and rest[0] == "--parse":
        result = program.parse(rest[1:])
        print(json.dumps(result, indent=1))  # pylint: disable=ansible-bad-function  # standalone program (venv python), not module code
        return result["exit_status"]
    if rest:
        sys.stderr.write(__doc__)
        return 2
    request = json.load(sys.stdin)
    if not isinstance(request, dict) or not all(isinstance(v, list) for v in request.values()):
        sys.stderr.write("stdin must be a JSON object {name: [argv tokens]}\n")
        return 2
    results = {name: program.parse(argv) for name, argv in request.items()}
    json.dump({"info": program.info(), "results": results}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function  # standalone program (venv python), not module code
