# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Command lines checked by the installed program's OWN argparse parser (the ``cli_check`` module's checker).

``cli_parser_script.py`` runs under the Python of the venv that will run the unit and parses each argv
with the parser the program itself builds; this file, on the module's side (stdlib only, command
runner injected):

- ``parser_command(python, module, entry)`` - the command that runs that script;
- ``run_parser(...)`` - runs it. Three outcomes: its answer; ``NoParser`` (exit status 3: the parser
  cannot be built there, say an import fails - the flags are then not checked, and the module says so);
  ``CheckError`` for anything else (a crash: another exit status, an answer that is not the JSON asked
  for), which fails the check with the script's standard error;
- ``verdict(result, info, argv)`` - one parse (argparse's own exit status and ``error: ...`` text, the
  abbreviations it resolved) turned into problems and warnings: ``flag``, ``kind``, argparse's
  ``message`` and a ``hint`` saying the fix (a pure function, table-tested);
- ``parse_argvs(...)`` - every argv, each verdict cached under ``cache_dir`` per (program, installed
  version, sha256 of the argv), so a run whose command lines and version did not change starts no
  Python at all for the parser. Only verdicts are cached, and only those that depend on nothing but
  that key (``cacheable``): never a crash, a parser that could not be built, a program that failed before
  argparse decided, or an argv whose verdict also depends on a file it names (``--config``).

Argparse stops at the first error of a line (``unrecognized arguments`` lists all strays at once), so
a line with several problems shows one per run, next to every abbreviation of the line.
"""

import ast
import difflib
import hashlib
import inspect
import json
import os
import re
import tempfile

from ansible_collections.disagg.sglang.plugins.module_utils.cli import cli_parser_script

PARSE_FORMAT = 2  # bump when verdict()'s output changes: old cache files are then ignored
EXIT_NO_PARSER = cli_parser_script.EXIT_NO_PARSER
KNOWN_MODULES = tuple(sorted(cli_parser_script.PROGRAMS))
# Flags whose value names a file the program's parse reads (sglang's and the simulator's YAML config):
# the verdict of such an argv also depends on that file, which the cache key does not hold.
FILE_FLAGS = ("--config",)
# Exit statuses at which argparse itself decided (0: parsed, or printed and exited; 2: refused).
DECIDED_BY_ARGPARSE = (0, 2)

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


class CheckError(Exception):
    """The check could not run, or the parser script crashed: the module fails with this message."""


class NoParser(Exception):
    """The program's own parser cannot be built on this host: the flags are not checked (the message says why)."""


def _problem(flag, kind, message, hint):
    return {"flag": flag, "kind": kind, "message": message, "hint": hint}


def tail(text, lines=15):
    """The last ``lines`` lines of ``text``, stripped."""
    return "\n".join((text or "").strip().splitlines()[-lines:])


# --------------------------------------------------------------------------------------------------
# The command that runs the parser script, and its three outcomes
# --------------------------------------------------------------------------------------------------


_SOURCE = []
_SCRIPT_SAYS = "cli_parser_script: "  # how the script's own reason starts on its standard error


def script_source():
    """The parser script's text, sent to the program's Python with ``-c``."""
    if not _SOURCE:
        _SOURCE.append(inspect.getsource(cli_parser_script))
    return _SOURCE[0]


def require_parse_function(module, entry=None):
    """CheckError when no parse function is known for ``module`` and ``entry`` names none: a mistake in
    the module's arguments, which no later run on the host fixes."""
    if module not in cli_parser_script.PROGRAMS and not entry:
        raise CheckError(
            f"module: no parse function is known for {module} (known: {', '.join(KNOWN_MODULES)}); "
            "name the program's function that calls ArgumentParser.parse_args with parser_entry: MODULE:FUNCTION"
        )


def parser_command(python, module, entry=None):
    """The command that parses argvs (JSON on stdin) with ``module``'s parser under ``python``."""
    require_parse_function(module, entry)
    command = [str(python), "-c", script_source(), "--module", module]
    return command + (["--entry", entry] if entry else [])


def _shown(command):
    return f"{command[0]} -c <cli_parser_script> {' '.join(command[3:])}"


def _crashed(command, what, err):
    return CheckError(
        f"the parser script crashed, so the flags could not be checked: {_shown(command)} {what}; "
        f"its standard error ends:\n{tail(err) or '(nothing)'}"
    )


def run_parser(run_command, python, module, entry, argvs):
    """Run the script over ``argvs``; returns (info, {name: RESULT}).

    NoParser: it exited with EXIT_NO_PARSER (the parser cannot be built under ``python``; its reason).
    CheckError: any other failure (a crash), with the tail of its standard error.
    """
    command = parser_command(python, module, entry)
    request = json.dumps({name: [str(t) for t in argv] for name, argv in argvs.items()})
    rc, out, err = run_command(command, data=request)
    if rc == EXIT_NO_PARSER:
        said = [line for line in (err or "").splitlines() if line.startswith(_SCRIPT_SAYS)]
        reason = said[-1][len(_SCRIPT_SAYS) :] if said else tail(err, 5) or "it gave no reason"
        raise NoParser(f"the parser of {module} cannot be built with {python}: {reason}")
    if rc != 0:
        raise _crashed(command, f"exited with status {rc}", err or out)
    try:
        answer = json.loads(out)
        info, results = answer["info"], answer["results"]
        if not isinstance(info, dict) or not all(isinstance(r, dict) for r in results.values()):
            raise TypeError("info and every result must be objects")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _crashed(
            command, f"exited 0 without the JSON answer ({exc}); its output began {(out or '')[:200]!r}", err
        ) from exc
    if set(results) != set(argvs):
        raise _crashed(command, f"answered for {sorted(results)}, asked for {sorted(argvs)}", err)
    return info, results


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


def _match(token, info):
    """How the parser of ``info`` reads ``token`` (cli_parser_script.match_option)."""
    return cli_parser_script.match_option(
        token, info.get("options", []), info.get("prefix_chars", "-"), info.get("allow_abbrev", True)
    )


def _stray_hint(argv, stray, info):
    """``--enable-metrics true``: say the switch takes no value; otherwise where a stray value comes from."""
    switches = set(info.get("switches", []))
    if stray in argv:
        for token in reversed(argv[: argv.index(stray)]):
            kind, flag = _match(token, info)
            if kind != "value":
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
        if _match(first, info)[0] != "value":
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


def abbreviation_problem(found):
    """One abbreviation the parser resolved ({"flag", "full"}) -> a problem: argparse accepts it, the check not."""
    flag, full = found["flag"], found["full"]
    return _problem(
        flag,
        "abbreviation",
        f"{flag} is an abbreviation of {full}: write the full flag name",
        f"write {full} instead of {flag}: the rules of this collection (and the program's own checks of raw "
        "arguments) match full names only, and a flag added later can make the abbreviation ambiguous",
    )


def _exits_problem(argv, result):
    flag = next((token for token in argv if token in ("-h", "--help", "--version", "-V")), "")
    first = (result.get("output") or "").strip().splitlines()[:1]
    return _problem(
        flag,
        "exits",
        "the program prints and exits (status 0) instead of starting" + (f": {first[0]}" if first else ""),
        f"remove {flag or 'the flag that prints and exits'}",
    )


def _warning(text, info):
    flags = _FLAG_IN_TEXT.findall(text)
    options = info.get("options", [])
    flag = next((f for f in flags if f in options), flags[0] if flags else "")
    if "deprecat" in text.lower():
        return _problem(flag, "deprecated", text, "switch to the replacement its message names before it is removed")
    return _problem(flag, "warning", text, "read the program's message")


def verdict(result, info, argv):
    """One RESULT of the parser script -> {"ok", "problems", "warnings", "error", "flags"} of the check.

    Problems: argparse's refusal (or the program printing and exiting) first, then every abbreviation.
    """
    argv = [str(token) for token in argv]
    problems, warnings = [], []
    if result.get("ok"):
        warnings = [_warning(text, info) for text in result.get("warnings") or []]
    elif result.get("exit_status") == 0:
        problems.append(_exits_problem(argv, result))
    else:
        error = result.get("error") or (result.get("message") or "").strip()
        error = error or f"exit status {result.get('exit_status')}"
        problems.append(problem_from_error(error, argv, info))
    problems += [abbreviation_problem(found) for found in result.get("abbreviations") or []]
    return {
        "ok": not problems,
        "problems": problems,
        "warnings": warnings,
        "error": result.get("error") or "",
        "flags": result.get("flags") or {},
    }


def cacheable(argv, result):
    """Whether the verdict of ``result`` depends only on (program, version, argv), the cache key.

    Not when the program failed before argparse decided (a missing file, say), nor for an argv that
    names a file its parse reads (FILE_FLAGS): the verdict then also depends on the host.
    """
    if result.get("exit_status") not in DECIDED_BY_ARGPARSE:
        return False
    return not any(str(token).partition("=")[0] in FILE_FLAGS for token in argv)


# --------------------------------------------------------------------------------------------------
# Running the script, with a cache per (program, version, argv)
# --------------------------------------------------------------------------------------------------


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.]+", "_", str(text)).strip("_")[:60] or "x"


def _digest(key):
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def argv_cache_path(cache_dir, program, name, argv):
    """The cache file of one unit's verdict, and its key: per program, installed version and argv.

    ``program``: {"python", "module", "entry", "version"}.
    """
    key = {
        "format": PARSE_FORMAT,
        "script": hashlib.sha256(script_source().encode()).hexdigest()[:16],
        "python": str(program["python"]),
        "module": program["module"],
        "entry": program["entry"],
        "version": program["version"],
        "argv": [str(t) for t in argv],
    }
    return os.path.join(cache_dir, f"argparse-{_slug(program['module'])}-{_slug(name)}-{_digest(key)}.json"), key


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


def _cached_verdict(path, key):
    record = read_json(path, key)
    if record is None or not isinstance(record.get("verdict"), dict):
        return None
    return record


def parse_argvs(run_command, python, module, argvs, *, entry=None, version=None, cache_dir=None, write_cache=True):
    """Every argv's verdict from the program's own parser, cached per (program, version, argv).

    Returns {"results": {name: verdict + source ("cache"|"parser") + cache_file (null when not in
    the cache)}, "prog", "known_flags", "parser_runs" (0 or 1), "cache_errors" [...]}. NoParser and
    CheckError (see run_parser) propagate, and nothing is written then.
    """
    program = {"python": str(python), "module": module, "entry": entry, "version": version}
    cached = bool(cache_dir) and version is not None
    out = {"results": {}, "prog": None, "known_flags": None, "parser_runs": 0, "cache_errors": []}
    missing, paths = {}, {}
    for name, argv in argvs.items():
        if cached:
            paths[name], key = argv_cache_path(cache_dir, program, name, argv)
            record = _cached_verdict(paths[name], key)
            if record is not None:
                out["results"][name] = dict(record["verdict"], source="cache", cache_file=paths[name])
                out["prog"], out["known_flags"] = record.get("prog"), record.get("known_flags")
                continue
        missing[name] = argv
    if missing:
        out["parser_runs"] = 1
        info, results = run_parser(run_command, python, module, entry, missing)
        out["prog"], out["known_flags"] = info.get("prog"), len(info.get("options", []))
        for name, argv in missing.items():
            found = verdict(results[name], info, argv)
            stored = None
            if name in paths and write_cache and cacheable(argv, results[name]):
                key = argv_cache_path(cache_dir, program, name, argv)[1]
                record = {"key": key, "verdict": found, "prog": out["prog"], "known_flags": out["known_flags"]}
                try:
                    write_json(paths[name], record)
                    _prune(paths[name])
                    stored = paths[name]
                except OSError as exc:
                    out["cache_errors"].append(f"could not write the verdict cache {paths[name]}: {exc}")
            out["results"][name] = dict(found, source="parser", cache_file=stored)
    out["results"] = {name: out["results"][name] for name in argvs}
    return out
