# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Check command lines with the parser of the installed program, in the venv that will run the unit.

The logic of the ``disagg.sglang.cli_check`` module, as plain functions (stdlib only) with the
command runner injected, so unit tests feed fake runners. One checker: every argv parsed by the
parser the program itself builds, under the program's own Python (``cli_argparse.py`` and
``cli_parser_script.py``), verdicts cached per (program, version, argv). ``run_check(...)`` is the
whole check; what it returns in each case:

- the parser builds: every argv's verdict; ``failed`` when any argv has a problem (argparse refused
  it, or it abbreviates a flag);
- the parser cannot be built (the venv's Python is missing - a first install, where the preflight
  play runs before the deps role makes the venv - or the script exits 3, say an import fails):
  ``checked`` is empty, ``not_checked`` says why, and a warning ``flags not checked: <why>``; not
  ``failed`` (a playbook that needs the check asserts ``not_checked is none``);
- the parser script crashes (another exit status, an answer that is not its JSON), the version
  command fails, or the module is given arguments it cannot use: ``CheckError``, the module fails.
  Nothing of such a run is cached.
"""

import shutil

from ansible_collections.disagg.sglang.plugins.module_utils.cli import cli_argparse
from ansible_collections.disagg.sglang.plugins.module_utils.cli.cli_argparse import CheckError

__all__ = ["CheckError", "run_check"]


def installed_version(run_command, version_command):
    """Stripped standard output of ``version_command`` (None without one); CheckError when it fails."""
    if not version_command:
        return None
    command = [str(token) for token in version_command]
    rc, out, err = run_command(command)
    shown = " ".join(command)
    if rc != 0:
        detail = cli_argparse.tail(err) or cli_argparse.tail(out) or "no output"
        raise CheckError(f"the version command {shown} failed with exit status {rc}: {detail}")
    if not (out or "").strip():
        raise CheckError(f"the version command {shown} printed nothing")
    return out.strip()


def failure_message(results, prog, version):
    """Every problem of every argv, one per line, each with its fix."""
    where = prog + (f" {version}" if version else "")
    lines = [f"command-line check failed against the installed {where} (its own parser):"]
    for name, result in results.items():
        for problem in result["problems"]:
            flag = f"{problem['flag']}: " if problem["flag"] else ""
            lines.append(f"  {name}: {flag}{problem['message']} -> fix: {problem['hint']}")
    return "\n".join(lines)


def _not_checked(argvs, reason, version, parser_runs):
    text = f"flags not checked ({', '.join(argvs)}): {reason}"
    return {
        "failed": False,
        "checked": [],
        "not_checked": reason,
        "results": {},
        "problems": {},
        "flag_warnings": [],
        "warnings": [text],
        "parser_runs": parser_runs,
        "version": version,
        "prog": None,
        "known_flags": None,
        "msg": text,
    }


def run_check(
    run_command,
    python,
    module,
    argvs,
    *,
    version_command=None,
    cache_dir=None,
    write_cache=True,
    parser_entry=None,
    find_executable=shutil.which,
    later=None,
):
    """The whole check: the module's result (without Ansible's own keys); see the module docstring.

    run_command(argv, data=None) -> (rc, stdout, stderr); ``data`` is the standard input.
    find_executable(path) -> the path, or None where it is no executable file (shutil.which).
    """
    for name, argv in argvs.items():
        if not isinstance(argv, (list, tuple)):
            raise CheckError(f"argvs[{name!r}] must be a list of argument tokens, got {type(argv).__name__}")
    python = str(python)
    cli_argparse.require_parse_function(module, parser_entry)
    if find_executable(python) is None:
        reason = (
            f"{python} does not exist on this host (or is not executable), so the venv that will run {module} "
            "is not installed yet" + (f"; {later}" if later else "")
        )
        return _not_checked(argvs, reason, None, 0)
    version = installed_version(run_command, version_command)
    try:
        checked = cli_argparse.parse_argvs(
            run_command,
            python,
            module,
            argvs,
            entry=parser_entry,
            version=version,
            cache_dir=cache_dir,
            write_cache=write_cache,
        )
    except cli_argparse.NoParser as exc:
        return _not_checked(argvs, str(exc) + (f"; {later}" if later else ""), version, 1)

    results = checked["results"]
    problems = {name: result["problems"] for name, result in results.items() if result["problems"]}
    flag_warnings = [dict(warning, name=name) for name, result in results.items() for warning in result["warnings"]]
    prog = checked["prog"] or module
    result = {
        "failed": bool(problems),
        "checked": list(argvs),
        "not_checked": None,
        "results": results,
        "problems": problems,
        "flag_warnings": flag_warnings,
        "warnings": [f"{w['name']}: {w['message']} ({w['hint']})" for w in flag_warnings] + checked["cache_errors"],
        "parser_runs": checked["parser_runs"],
        "version": version,
        "prog": checked["prog"],
        "known_flags": checked["known_flags"],
    }
    if problems:
        result["msg"] = failure_message(results, prog, version)
    else:
        where = prog + (f" {version}" if version else "")
        result["msg"] = f"{len(argvs)} command line(s) accepted by {where} (its own parser, {python})"
    return result
