# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Command lines checked by the installed program's OWN argparse parser (the ``cli_check`` module's first method).

``cli_parser_script.py`` runs under the program's Python and parses each argv with the parser the
program itself builds; this file, on the module's side (stdlib only, command runner injected):

- ``parser_command(help_command, entry)`` - the command that runs that script: the Python of
  ``help_command`` (``[PYTHON, -m, MODULE, --help]``) with the script's source and the module's name;
- ``verdict(result, info, argv)`` - one parse (argparse's own exit status and ``error: ...`` text)
  turned into problems and warnings shaped like the help check's: ``flag``, ``kind``, argparse's
  ``message`` and a ``hint`` saying the fix (a pure function, table-tested);
- ``parse_argvs(...)`` - every argv, each verdict cached under ``cache_dir`` per (program, installed
  version, sha256 of the argv), so a run whose command lines and version did not change starts no
  Python at all for the parser. A program whose parser cannot be built here is remembered the same way.

Argparse stops at the first error of a line (``unrecognized arguments`` lists all strays at once), so
a line with several problems shows one per run.
"""

import ast
import difflib
import hashlib
import inspect
import json
import os
import re
import tempfile

from ansible_collections.disagg.sglang.plugins.module_utils import cli_parser_script

PARSE_FORMAT = 1  # bump when verdict()'s output changes: old cache files are then ignored
EXIT_NO_PARSER = cli_parser_script.EXIT_NO_PARSER
KNOWN_MODULES = tuple(sorted(cli_parser_script.PROGRAMS))

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_AMBIGUOUS = re.compile(r"^ambiguous option: (?P<token>\S+) could match (?P<matches>.+)$")
_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (?P<rest>.*)$")
_REQUIRED = re.compile(r"^the following arguments are required: (?P<names>.+)$")
_ARGUMENT = re.compile(r"^argument (?P<display>\S+): (?P<what>.*)$", re.S)
_CHOICE = re.compile(r"^invalid choice: (?P<value>.+?) \(choose from (?P<choices>.*)\)$", re.S)
_TYPE = re.compile(r"^invalid (?P<type>\S+) value: (?P<value>.+)$")
_COUNT = re.compile(r"^expected (?P<count>.+) arguments?$")
_EXPLICIT = re.compile(r"^ignored explicit argument (?P<value>.+)$")
_NOT_ALLOWED = re.compile(r"^not allowed with argument (?P<other>.+)$")
_FLAG_IN_TEXT = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


class NoParser(Exception):
    """The program's own parser cannot be built or run on this host (the reason is the message)."""


def _problem(flag, kind, message, hint):
    return {"flag": flag, "kind": kind, "message": message, "hint": hint}


# --------------------------------------------------------------------------------------------------
# The command that runs the parser script
# --------------------------------------------------------------------------------------------------


_SOURCE = []


def script_source():
    """The parser script's text, sent to the program's Python with ``-c``."""
    if not _SOURCE:
        _SOURCE.append(inspect.getsource(cli_parser_script))
    return _SOURCE[0]


def program_module(help_command, entry=None):
    """``[PYTHON, -m, MODULE, ...]`` -> MODULE; with only ``entry`` (``MOD:FUNC``), MOD. None: not Python."""
    command = [str(token) for token in help_command]
    if "-m" in command[1:-1]:
        return command[command.index("-m", 1) + 1]
    if entry:
        return entry.partition(":")[0]
    return None


def parser_command(help_command, entry=None):
    """The command that parses argvs (JSON on stdin) with the program's parser; NoParser when there is none."""
    module = program_module(help_command, entry)
    if module is None:
        raise NoParser(
            f"help_command {' '.join(map(str, help_command))} does not run a Python module (PYTHON -m MODULE), "
            "so there is no Python to build the parser with; set parser_entry, or method: help"
        )
    if module not in cli_parser_script.PROGRAMS and not entry:
        raise NoParser(
            f"no parse function is known for {module} (known: {', '.join(KNOWN_MODULES)}); "
            "name one with parser_entry: MODULE:FUNCTION"
        )
    command = [str(help_command[0]), "-c", script_source(), "--module", module]
    return command + (["--entry", entry] if entry else [])


# --------------------------------------------------------------------------------------------------
# One parse -> problems and warnings (pure)
# --------------------------------------------------------------------------------------------------


def _canonical(display):
    """argparse's ``--model-path/--model`` -> ``--model-path``."""
    return display.split("/")[0]


def _choice_names(text):
    """``'auto', 'fp8_e4m3'`` (Python <= 3.12) or ``auto, fp8_e4m3`` (later) -> [auto, fp8_e4m3]."""
    names = []
    for raw in text.split(", "):
        name = raw.strip()
        if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"":
            try:
                name = str(ast.literal_eval(name))
            except (ValueError, SyntaxError):
                name = name[1:-1]
        names.append(name)
    return names


def _is_option(token):
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


def _resolve(name, options):
    """An option string as argparse matches it: exact, else the one option it is a prefix of."""
    if name in options:
        return name
    matches = [option for option in options if name.startswith("--") and option.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def _stray_hint(argv, stray, info):
    """``--enable-metrics true``: say the switch takes no value; otherwise where a stray value comes from."""
    options, switches = info.get("options", []), set(info.get("switches", []))
    if stray in argv:
        for token in reversed(argv[: argv.index(stray)]):
            if _is_option(token):
                flag = _resolve(token.partition("=")[0], options)
                if flag in switches:
                    return f"{flag} is a switch and takes no value: drop {stray!r}"
                break
    return "no flag takes it: remove it, or put the flag it belongs to before it"


def problem_from_error(error, argv, info):
    """argparse's ``error: ...`` text -> one problem {flag, kind, message, hint}."""
    prog = info.get("prog") or "this program"
    match = _AMBIGUOUS.match(error)
    if match:
        matches = [name.strip() for name in match["matches"].split(",")]
        return _problem(
            match["token"].partition("=")[0], "ambiguous", error, f"spell the flag out in full: {' or '.join(matches)}"
        )
    match = _UNRECOGNIZED.match(error)
    if match:
        first = match["rest"].split(" ")[0]
        if _is_option(first):
            name = first.partition("=")[0]
            close = difflib.get_close_matches(name, info.get("options", []), n=3, cutoff=0.75)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            return _problem(name, "unknown", error, hint + f"{prog} has no such flag: rename or remove it")
        return _problem(first, "unrecognized_argument", error, _stray_hint(argv, first, info))
    match = _REQUIRED.match(error)
    if match:
        flag = _canonical(match["names"].split(", ")[0])
        return _problem(flag, "required", error, f"add {flag}")
    match = _ARGUMENT.match(error)
    if not match:
        return _problem("", "error", error, f"see {prog} --help")
    flag, what = _canonical(match["display"]), match["what"]
    choice = _CHOICE.match(what)
    if choice:
        return _problem(flag, "choice", error, f"set {flag} to one of: {', '.join(_choice_names(choice['choices']))}")
    kind_type = _TYPE.match(what)
    if kind_type:
        return _problem(flag, "type", error, f"give {flag} a value {prog} reads as {kind_type['type']}")
    if _COUNT.match(what):
        return _problem(flag, "value_count", error, f"give {flag} the values it expects ({what})")
    if _EXPLICIT.match(what):
        return _problem(flag, "explicit_argument", error, f"{flag} takes no value: write {flag} alone")
    exclusive = _NOT_ALLOWED.match(what)
    if exclusive:
        return _problem(flag, "exclusive", error, f"keep only one of {flag} and {exclusive['other']}")
    return _problem(flag, "value", error, f"give {flag} a value it accepts, as the message says")  # its type refused it


def _exits_problem(argv, result):
    flag = next((token for token in argv if token in ("-h", "--help", "--version", "-V")), "")
    first = (result.get("output") or "").strip().splitlines()[:1]
    return _problem(
        flag,
        "exits",
        "the program prints and exits (status 0) instead of starting" + (f": {first[0]}" if first else ""),
        f"remove {flag or 'the flag that prints and exits'}",
    )


def _warning(text, argv, info):
    flags = _FLAG_IN_TEXT.findall(text)
    options = info.get("options", [])
    flag = next((f for f in flags if f in options), flags[0] if flags else "")
    if "deprecat" in text.lower():
        return _problem(flag, "deprecated", text, "switch to the replacement its message names before it is removed")
    return _problem(flag, "warning", text, "read the program's message")


def verdict(result, info, argv):
    """One RESULT of the parser script -> {"ok", "problems", "warnings", "error", "flags"} of the check."""
    argv = [str(token) for token in argv]
    problems, warnings = [], []
    if result.get("ok"):
        options = info.get("options", [])
        parsed = result.get("flags") or {}
        for token in argv:
            if token == "--":
                break
            name = token.partition("=")[0]
            if not name.startswith("--") or name in options:
                continue
            full = _resolve(name, options)
            if full is not None and full in parsed:
                warnings.append(
                    _problem(
                        name,
                        "abbreviation",
                        f"{name} is accepted as an abbreviation of {full}",
                        f"write {full} in full: a flag added later can make the abbreviation ambiguous",
                    )
                )
        warnings += [_warning(text, argv, info) for text in result.get("warnings") or []]
    elif result.get("exit_status") == 0:
        problems.append(_exits_problem(argv, result))
    else:
        error = result.get("error") or (result.get("message") or "").strip()
        error = error or f"exit status {result.get('exit_status')}"
        problems.append(problem_from_error(error, argv, info))
    return {
        "ok": not problems,
        "problems": problems,
        "warnings": warnings,
        "error": result.get("error") or "",
        "flags": result.get("flags") or {},
    }


# --------------------------------------------------------------------------------------------------
# Running the script, with a cache per (program, version, argv)
# --------------------------------------------------------------------------------------------------


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.]+", "_", str(text)).strip("_")[:60] or "x"


def _digest(key):
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _program_key(help_command, entry, version):
    return {
        "format": PARSE_FORMAT,
        "script": hashlib.sha256(script_source().encode()).hexdigest()[:16],
        "python": str(help_command[0]),
        "module": program_module(help_command, entry),
        "entry": entry,
        "version": version,
    }


def argv_cache_path(cache_dir, help_command, name, argv, *, entry, version):
    """The cache file of one unit's verdict: per program, installed version and sha256 of the argv."""
    key = dict(_program_key(help_command, entry, version), argv=[str(t) for t in argv])
    module = program_module(help_command, entry) or "cli"
    return os.path.join(cache_dir, f"argparse-{_slug(module)}-{_slug(name)}-{_digest(key)}.json"), key


def no_parser_cache_path(cache_dir, help_command, entry, version):
    key = _program_key(help_command, entry, version)
    module = program_module(help_command, entry) or "cli"
    return os.path.join(cache_dir, f"noparser-{_slug(module)}-{_digest(key)}.json"), key


def read_json(path, key):
    """The record cached at ``path`` if its key is ``key``; None otherwise (missing, corrupt, stale)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    return data


def write_json(path, record):
    """Write ``record`` to ``path`` atomically (mode 0644), creating its directory."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, indent=1, sort_keys=True)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _prune(path):
    """Remove this unit's older verdicts of the same program (other argvs, other versions)."""
    directory, base = os.path.split(path)
    stem = base[: -len("0123456789abcdef.json")]
    pattern = re.compile(re.escape(stem) + r"[0-9a-f]{16}\.json$")
    for other in os.listdir(directory):
        if other != base and pattern.match(other):
            try:
                os.unlink(os.path.join(directory, other))
            except OSError:
                pass


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def run_parser(run_command, help_command, entry, argvs):
    """Run the script over ``argvs``; returns (info, {name: RESULT}). NoParser when it cannot parse here."""
    command = parser_command(help_command, entry)
    request = json.dumps({name: [str(t) for t in argv] for name, argv in argvs.items()})
    rc, out, err = run_command(command, data=request)
    shown = f"{command[0]} -c <cli_parser_script> {' '.join(command[3:])}"
    if rc != 0:
        raise NoParser(f"{shown} failed with exit status {rc}: {_tail(err) or _tail(out) or 'no output'}")
    try:
        answer = json.loads(out)
        info, results = answer["info"], answer["results"]
    except (ValueError, KeyError, TypeError) as exc:
        raise NoParser(f"{shown} did not answer JSON ({exc}); its output began: {(out or '')[:200]!r}") from exc
    if set(results) != set(argvs):
        raise NoParser(f"{shown} answered for {sorted(results)}, asked for {sorted(argvs)}")
    return info, results


def parse_argvs(
    run_command, help_command, argvs, *, entry=None, version=None, cache_dir=None, write_cache=True, remember=True
):
    """Every argv's verdict from the program's own parser, cached per (program, version, argv).

    Returns {"results": {name: verdict + source ("cache"|"parser") + cache_file}, "prog", "known_flags",
    "parser_runs" (0 or 1), "cache_errors" [...]}. Raises NoParser when the parser cannot be built, so
    the caller falls back to the help; with ``remember`` (and a cache) that is noted per version and
    not tried again until the version or the script changes.
    """
    cached = bool(cache_dir) and version is not None
    out = {"results": {}, "prog": None, "known_flags": None, "parser_runs": 0, "cache_errors": []}
    if cached and remember:
        path, key = no_parser_cache_path(cache_dir, help_command, entry, version)
        remembered = read_json(path, key)
        if remembered is not None:
            raise NoParser(f"{remembered.get('reason')} (remembered for version {version}: {path})")
    missing, paths = {}, {}
    for name, argv in argvs.items():
        if cached:
            paths[name], key = argv_cache_path(cache_dir, help_command, name, argv, entry=entry, version=version)
            record = read_json(paths[name], key)
            if record is not None and isinstance(record.get("verdict"), dict):
                out["results"][name] = dict(record["verdict"], source="cache", cache_file=paths[name])
                out["prog"], out["known_flags"] = record.get("prog"), record.get("known_flags")
                continue
        missing[name] = argv
    if missing:
        try:
            out["parser_runs"] = 1
            info, results = run_parser(run_command, help_command, entry, missing)
        except NoParser as exc:
            if cached and write_cache and remember:
                path, key = no_parser_cache_path(cache_dir, help_command, entry, version)
                try:
                    write_json(path, {"key": key, "reason": str(exc)})
                except OSError:
                    pass  # it is tried again next run
            raise
        out["prog"], out["known_flags"] = info.get("prog"), len(info.get("options", []))
        for name, argv in missing.items():
            found = verdict(results[name], info, argv)
            out["results"][name] = dict(found, source="parser", cache_file=paths.get(name))
            if cached and write_cache:
                key = argv_cache_path(cache_dir, help_command, name, argv, entry=entry, version=version)[1]
                record = {"key": key, "verdict": found, "prog": out["prog"], "known_flags": out["known_flags"]}
                try:
                    write_json(paths[name], record)
                    _prune(paths[name])
                except OSError as exc:
                    out["cache_errors"].append(f"could not write the verdict cache {paths[name]}: {exc}")
    out["results"] = {name: out["results"][name] for name in argvs}
    return out
