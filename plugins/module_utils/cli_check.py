# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Check command lines against an installed argparse program: its own parser, or what its ``--help`` says.

The logic of the ``disagg.sglang.cli_check`` module, as plain functions (stdlib only) with the
command runner injected, so unit tests feed recorded help texts and fake runners.

- ``run_check(...)`` - the whole check. Method ``argparse`` (``cli_argparse.py``): every argv parsed
  by the parser the program itself builds, under the program's own Python (``cli_parser_script.py``),
  verdicts cached per (program, version, argv). Method ``help`` (``cli_help.py``, the fallback where
  that parser cannot be built): the help read into a flag table and argparse emulated on it.
- ``load_spec(...)`` runs the help command, or reads the spec cached for the installed version
  (``version_command``'s output is the key), so a no-op run does not pay for a torch import.
"""

import hashlib
import json
import os
import re

from ansible_collections.disagg.sglang.plugins.module_utils import cli_argparse
from ansible_collections.disagg.sglang.plugins.module_utils.cli_help import (
    SPEC_FORMAT,
    CheckError,
    check_argvs,
    parse_help,
)

# --------------------------------------------------------------------------------------------------
# Running the help command, with a cache keyed by the installed version
# --------------------------------------------------------------------------------------------------


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _slug(command):
    if "-m" in command[:-1]:
        name = command[command.index("-m") + 1]
    else:
        name = os.path.basename(command[0])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name.rsplit(".", 1)[-1]) or "cli"


def cache_path(cache_dir, help_command, version):
    """The cache file of one (help command, version) pair."""
    key = json.dumps({"format": SPEC_FORMAT, "help_command": help_command, "version": version}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(cache_dir, f"{_slug(help_command)}-{digest}.json")


def _read_cache(path, help_command, version):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("help_command") != help_command
        or data.get("version") != version
        or not isinstance(data.get("spec"), dict)
        or data["spec"].get("format") != SPEC_FORMAT
    ):
        return None
    return data["spec"]


def _write_cache(path, help_command, version, spec):
    cli_argparse.write_json(path, {"help_command": help_command, "version": version, "spec": spec})


def _run(run_command, command, what):
    rc, out, err = run_command(list(command))
    if rc != 0:
        raise CheckError(
            f"{what} {' '.join(command)} failed with exit status {rc}: {_tail(err) or _tail(out) or 'no output'}"
        )
    return out or "", err or ""


def installed_version(run_command, version_command):
    """Stripped standard output of ``version_command`` (None without one); CheckError when it fails."""
    if not version_command:
        return None
    out, _err = _run(run_command, [str(t) for t in version_command], "the version command")
    if not out.strip():
        raise CheckError(f"the version command {' '.join(map(str, version_command))} printed nothing")
    return out.strip()


def load_spec(run_command, help_command, version_command=None, cache_dir=None, write_cache=True, *, version=None):
    """Spec of ``help_command``'s program, from the cache when the installed version has one.

    run_command(argv) -> (rc, stdout, stderr). Returns a dict: spec, source ("cache" or "help"),
    version (stripped stdout of version_command, or None), cache_file (None without a cache),
    cache_written (bool), cache_error (why writing failed, or None). ``version``: already known
    (version_command is then not run).
    """
    help_command = [str(token) for token in help_command]
    if version is None:
        version = installed_version(run_command, version_command)
    result = {"version": version, "cache_file": None, "cache_written": False, "cache_error": None}
    if cache_dir and result["version"] is not None:
        result["cache_file"] = cache_path(cache_dir, help_command, result["version"])
        spec = _read_cache(result["cache_file"], help_command, result["version"])
        if spec is not None:
            return dict(result, spec=spec, source="cache")

    out, err = _run(run_command, help_command, "the help command")
    text = out if "usage:" in out else err if "usage:" in err else out
    try:
        spec = parse_help(text)
    except CheckError as exc:
        raise CheckError(f"{' '.join(help_command)}: {exc}; its output began: {text[:300]!r}") from exc
    if result["cache_file"] and write_cache:
        try:
            _write_cache(result["cache_file"], help_command, result["version"], spec)
            result["cache_written"] = True
        except OSError as exc:
            result["cache_error"] = f"could not write the flag cache {result['cache_file']}: {exc}"
    return dict(result, spec=spec, source="help")


def failure_message(results, prog, version, how="its --help"):
    """Every problem of every argv, one per line, each with its fix."""
    where = prog + (f" {version}" if version else "")
    lines = [f"command-line check failed against the installed {where} ({how}):"]
    for name, result in results.items():
        for problem in result["problems"]:
            lines.append(f"  {name}: {problem['flag']}: {problem['message']} -> fix: {problem['hint']}")
    return "\n".join(lines)


METHODS = ("auto", "argparse", "help")


def _check_by_help(context, argvs):
    loaded = load_spec(
        context["run_command"],
        context["help_command"],
        cache_dir=context["cache_dir"],
        write_cache=context["write_cache"],
        version=context["version"],
    )
    spec = loaded["spec"]
    results = {}
    for name, found in check_argvs(spec, argvs).items():
        results[name] = dict(found, ok=not found["problems"], source=loaded["source"], cache_file=loaded["cache_file"])
    return {
        "results": results,
        "spec_source": loaded["source"],
        "cache_file": loaded["cache_file"],
        "cache_errors": [loaded["cache_error"]] if loaded["cache_error"] else [],
        "prog": spec.get("prog"),
        "known_flags": sum(len(option["strings"]) for option in spec["options"]),
        "parser_runs": 0,
    }


def _check_by_parser(context, argvs, entry, remember):
    parsed = cli_argparse.parse_argvs(
        context["run_command"],
        context["help_command"],
        argvs,
        entry=entry,
        version=context["version"],
        cache_dir=context["cache_dir"],
        write_cache=context["write_cache"],
        remember=remember,
    )
    sources = {result["source"] for result in parsed["results"].values()}
    return dict(parsed, spec_source="cache" if sources == {"cache"} else "parser", cache_file=None)


def run_check(
    run_command,
    help_command,
    argvs,
    *,
    version_command=None,
    cache_dir=None,
    write_cache=True,
    method="auto",
    parser_entry=None,
):
    """The whole check: the module's result (without Ansible's own keys).

    run_command(argv, data=None) -> (rc, stdout, stderr); ``data`` is the standard input. ``method``:
    auto (the program's own parser, the help where that cannot be built), argparse (the parser or
    fail), help (only the help emulation).
    """
    if method not in METHODS:
        raise CheckError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    for name, argv in argvs.items():
        if not isinstance(argv, (list, tuple)):
            raise CheckError(f"argvs[{name!r}] must be a list of argument tokens, got {type(argv).__name__}")
    version = installed_version(run_command, version_command)
    context = {
        "run_command": run_command,
        "help_command": [str(token) for token in help_command],
        "version": version,
        "cache_dir": cache_dir,
        "write_cache": write_cache,
    }
    parser_error = None
    checked = None
    if method in ("auto", "argparse"):
        try:
            checked = _check_by_parser(context, argvs, parser_entry, remember=method == "auto")
            used = "argparse"
        except cli_argparse.NoParser as exc:
            if method == "argparse":
                raise CheckError(f"the program's own parser could not be used: {exc}") from exc
            parser_error = str(exc)
    if checked is None:
        try:
            checked = _check_by_help(context, argvs)
        except CheckError as exc:
            if parser_error:
                raise CheckError(f"{exc}; the program's own parser could not be used either: {parser_error}") from exc
            raise
        used = "help"

    results = checked["results"]
    problems = {name: result["problems"] for name, result in results.items() if result["problems"]}
    flag_warnings = [dict(warning, name=name) for name, result in results.items() for warning in result["warnings"]]
    warnings = [f"{w['name']}: {w['message']} ({w['hint']})" for w in flag_warnings]
    if parser_error:
        warnings.append(f"checked against --help instead of the program's own parser: {parser_error}")
    warnings += checked["cache_errors"]
    result = {
        "failed": bool(problems),
        "checked": list(argvs),
        "method": used,
        "results": results,
        "problems": problems,
        "flag_warnings": flag_warnings,
        "warnings": warnings,
        "parser_error": parser_error,
        "parser_runs": checked["parser_runs"],
        "spec_source": checked["spec_source"],
        "cache_file": checked["cache_file"],
        "version": version,
        "prog": checked["prog"],
        "known_flags": checked["known_flags"],
    }
    where = f"{checked['prog'] or help_command[0]}" + (f" {version}" if version else "")
    how = "its own parser" if used == "argparse" else "its --help"
    if problems:
        result["msg"] = failure_message(results, checked["prog"] or str(help_command[0]), version, how)
    else:
        result["msg"] = f"{len(argvs)} command line(s) accepted by {where} ({how})"
    return result
