"""Controller-side access to the real sglang parser (any Python >= 3.11; stdlib only).

build_venv.sh makes the Python 3.11 venv; the collection's own parser script
(plugins/module_utils/cli/cli_parser_script.py, what the cli_check module runs on a host) runs inside it
with ``--module sglang.launch_server``. Tests use:

    python, seconds = ensure_venv()             # raises ParserUnavailable, saying why
    results = parse_argvs(python, {"prefill0": [...], "decode0": [...]})
    table = action_table(python)                # every action, to compare with REFERENCE_TABLE

Run as a script (``build``) to make the venv ahead of the tests.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD_SCRIPT = HERE / "build_venv.sh"
PARSER_SCRIPT = ROOT / "plugins" / "module_utils" / "cli" / "cli_parser_script.py"
SGLANG_MODULE = "sglang.launch_server"  # the -m module whose parse function the script calls
# The action table of `sglang serve` 0.5.23 (flags, dest, type, default, choices, action), read off its parser.
REFERENCE_TABLE = HERE / "sglang-0.5.23-serve-flags.tsv"

# Choices built from sets follow the hash seed: pin it (and the locale) so every machine sees one order.
PARSER_ENV = {"PYTHONHASHSEED": "0", "LC_ALL": "C"}


class ParserUnavailable(RuntimeError):
    """The real parser's venv could not be built or the parser could not run."""


def _tail(text, lines=40):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def ensure_venv(timeout=900, program="sglang"):
    """Build (or reuse) .cache/sglang-parser-venv (PROGRAM smg: .cache/smg-parser-venv); return (python path,
    seconds spent)."""
    started = time.monotonic()
    try:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT), program], capture_output=True, text=True, timeout=timeout,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise ParserUnavailable(f"{BUILD_SCRIPT} did not finish within {timeout}s") from exc
    if proc.returncode != 0:
        raise ParserUnavailable(
            f"{BUILD_SCRIPT} failed (exit status {proc.returncode}):\n{_tail(proc.stderr)}\n{_tail(proc.stdout)}"
        )
    python = Path(proc.stdout.strip().splitlines()[-1])
    if not python.is_file():
        raise ParserUnavailable(f"{BUILD_SCRIPT} printed {python}, which is not a file")
    return python, time.monotonic() - started


def run_parser(python, args, stdin=None, env=None, timeout=120):
    """Run the parser script (sglang's parser) under the venv's python; returns the CompletedProcess."""
    full_env = dict(os.environ, **PARSER_ENV, **(env or {}))
    argv = [str(python), str(PARSER_SCRIPT), "--module", SGLANG_MODULE, *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=full_env, check=False)


def _checked(proc, what):
    if proc.returncode != 0:
        raise ParserUnavailable(
            f"{PARSER_SCRIPT.name} {what} failed (exit status {proc.returncode}):\n{_tail(proc.stderr)}"
        )
    return proc.stdout


def info(python):
    """{"version", "prog", "allow_abbrev", "actions", "options", "switches", ...} of the real parser."""
    return json.loads(_checked(run_parser(python, ["--info"]), "--info"))


def action_table(python):
    """[{flags, dest, type, default, choices, action, help_suppressed}] of every action."""
    return json.loads(_checked(run_parser(python, ["--table"]), "--table"))


def parse_argvs(python, argvs):
    """{name: argv} -> {name: result} (see cli_parser_script.py for the result's keys)."""
    request = {name: [str(token) for token in argv] for name, argv in argvs.items()}
    return json.loads(_checked(run_parser(python, [], stdin=json.dumps(request)), "(parse)"))["results"]


def main(argv):
    if argv == ["build"]:
        python, seconds = ensure_venv()
        print(f"{python} ({seconds:.1f}s)")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
