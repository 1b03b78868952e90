# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module disagg.sglang.cli_check (logic in module_utils/cli_check.py, cli_help.py and cli_argparse.py)."""

DOCUMENTATION = r"""
---
module: cli_check
short_description: Check command lines with the installed program's own argparse parser
version_added: "0.1.0"
description:
  - Parses every argv in O(argvs) with the argument parser of the program installed on the host, built
    by the program's own code, and fails naming the argv, the flag, argparse's message and the fix.
  - The parser is found through O(help_command) (C(PYTHON -m MODULE --help)) - PYTHON runs a small script
    that calls the module's own argv-parsing function with C(ArgumentParser.parse_args) hooked, so the
    parser is exactly the program's (its flags, aliases, types, choices, actions, prefix matching) and
    nothing after parsing runs (no C(ServerArgs.__post_init__), no start-up). For C(sglang.launch_server)
    that is C(prepare_server_args) (C(ArgumentParser(prog="sglang serve")) with C(ServerArgs.add_cli_args)),
    with the package's C(__init__) skipped and torch, triton and zmq stubbed, so it needs no GPU and no torch
    import; for C(sglang_router.launch_router) C(parse_router_args); for the sandbox's simulator
    C(sglang_pd_sim) its C(cli.parse_args). O(parser_entry) names the function for another program.
  - So values a flag's type refuses (C(--context-length 8K) for sglang 0.5.23, whose suffixes are
    case-sensitive), values outside the choices, unknown flags, ambiguous prefixes (C(--cuda-graph-max-bs)
    in sglang 0.5.23), missing values and missing required flags all fail. Argparse stops at the first
    error of a line, so one problem per argv is reported.
  - Deprecation messages the program's actions log and abbreviations argparse accepts are returned as warnings.
  - With O(version_command) and O(cache_dir), each argv's verdict is cached per (program, installed version,
    sha256 of the argv), so a run whose command lines and version did not change does not start the parser.
  - Where the parser cannot be built (no known parse function, an import that fails), it falls back to reading
    the program's C(--help) into a flag table and emulating argparse on it (O(method=auto)); C(method) in
    the result says which ran. The emulation cannot see value types, hidden flags or custom metavars.
  - Meant to run before anything that starts the programs changes, so a flag a new version refuses
    never reaches a unit that would crash-loop.
author:
  - disagg.sglang maintainers (!UNKNOWN)
options:
  help_command:
    description:
      - The program's help command as a list (no shell), C(PYTHON -m MODULE --help).
      - PYTHON (the first item) builds the parser; MODULE picks the parse function (see O(parser_entry)).
      - Run (with C(LC_ALL=C)) only by the help emulation; its standard output (or standard error, if only that
        holds a C(usage:) line) is parsed.
    type: list
    elements: str
    required: true
  version_command:
    description:
      - A cheap command whose standard output names the installed version, such as
        C(python -c "import importlib.metadata as m; print(m.version('sglang'))"); it keys the cache.
      - Pick one that changes whenever the flags can change (for an editable install, include the commit).
      - Without it, nothing is cached and the parser (or the help command) runs every time.
    type: list
    elements: str
  cache_dir:
    description:
      - Directory of the cached verdicts (one JSON file per argv name, program and version; older ones of the
        same name are removed) and help flag tables, created when missing.
      - In check mode the cache is read but never written.
    type: path
  argvs:
    description:
      - The command lines to check, by name (an instance name such as C(prefill0)). Each is a list of
        argument tokens without the program itself.
    type: dict
    required: true
  method:
    description:
      - V(auto) parses with the program's own parser and falls back to the help emulation where that parser
        cannot be built (a warning says why, and is remembered per version when O(cache_dir) is set).
      - V(argparse) fails when the parser cannot be built; V(help) only emulates argparse on the help.
    type: str
    choices: [auto, argparse, help]
    default: auto
  parser_entry:
    description:
      - C(MODULE:FUNCTION), the program's function that turns an argv list into its arguments by calling
        C(ArgumentParser.parse_args), for a program the module does not know. Known without it are
        C(sglang.launch_server), C(sglang_router.launch_router) and C(sglang_pd_sim).
    type: str
attributes:
  check_mode:
    support: full
    description: Reads the cache and runs the parser (read-only); does not write the cache.
  diff_mode:
    support: none
    description: Changes nothing on the host, so there is nothing to show.
notes:
  - The module never changes the host's configuration; C(changed) is always false. Writing the cache is bookkeeping.
  - The parser script is sent to PYTHON with C(-c); it imports the program's argument modules, nothing else.
seealso:
  - name: argparse prefix matching (allow_abbrev)
    description: How argparse resolves abbreviated long options.
    link: https://docs.python.org/3/library/argparse.html#allow-abbrev
"""

EXAMPLES = r"""
- name: Check the workers' command lines against the installed sglang's own parser
  disagg.sglang.cli_check:
    help_command: ["{{ sglang_venv }}/bin/python", -m, sglang.launch_server, --help]
    version_command:
      - "{{ sglang_venv }}/bin/python"
      - -c
      - "import importlib.metadata as m; print(m.version('sglang'))"
    cache_dir: /var/cache/disagg-sglang/cli-check
    argvs:
      prefill0: [--model-path, /models/DeepSeek-V4-Flash, --tp-size, "4", --page-size, "256"]
      decode0: [--model-path, /models/DeepSeek-V4-Flash, --tp-size, "4", --cuda-graph-max-bs-decode, "64"]

- name: Check the router's command line; fail if its parser cannot be built
  disagg.sglang.cli_check:
    help_command: ["{{ sglang_router_venv }}/bin/python", -m, sglang_router.launch_router, --help]
    version_command:
      - "{{ sglang_router_venv }}/bin/python"
      - -c
      - "import importlib.metadata as m; print(m.version('sglang-router'))"
    cache_dir: /var/cache/disagg-sglang/cli-check
    method: argparse
    argvs:
      router: [--pd-disaggregation, --prefill, "http://10.0.0.1:30000", "8998", --decode, "http://10.0.0.2:30001"]
  register: __router_cli_check
"""

RETURN = r"""
method:
  description: What checked the argvs, C(argparse) (the program's own parser) or C(help) (the help emulation).
  returned: always
  type: str
  sample: argparse
results:
  description:
    - Per argv name, C(ok), C(problems) and C(warnings) (as below), C(error) (argparse's own C(error:) text,
      empty for the help emulation), C(flags) (each flag the parser read, under its full name, with the value
      it parsed; empty for the help emulation), C(source) (C(parser), C(cache) or C(help)) and C(cache_file)
      (the verdict's cache file, or the help table's; null without a cache).
  returned: always
  type: dict
  sample:
    prefill0:
      ok: false
      problems:
        - flag: --context-length
          kind: value
          message: >-
            argument --context-length: Invalid integer value: '8K'. Use a plain integer, SI suffixes (1k, 1M),
            or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.
          hint: give --context-length a value it accepts, as the message says
      warnings: []
      error: "argument --context-length: Invalid integer value: '8K'. ..."
      flags: {}
      source: parser
      cache_file: /var/cache/disagg-sglang/cli-check/argparse-sglang.launch_server-prefill0-5d0c2b7f3e1a9c44.json
checked:
  description: Names of the argvs that were checked.
  returned: always
  type: list
  elements: str
  sample: [prefill0, decode0]
problems:
  description:
    - Problems per argv name (only names with problems). Each has C(flag), C(kind) (C(unknown), C(ambiguous),
      C(choice), C(type), C(value) (the type's own message), C(value_count), C(explicit_argument),
      C(unrecognized_argument), C(required), C(exclusive), C(exits), C(error)), C(message) (argparse's wording)
      and C(hint) (the fix).
  returned: always
  type: dict
  sample:
    decode0:
      - flag: --cuda-graph-max-bs
        kind: ambiguous
        message: >-
          ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode,
          --cuda-graph-max-bs-prefill
        hint: "spell the flag out in full: --cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill"
flag_warnings:
  description: Deprecated flags and abbreviations, each with C(name), C(flag), C(kind), C(message), C(hint).
  returned: always
  type: list
  elements: dict
  sample:
    - name: prefill0
      flag: --disable-cuda-graph
      kind: deprecated
      message: >-
        '--disable-cuda-graph' is deprecated and will be removed in a future release.
        Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.
      hint: switch to the replacement its message names before it is removed
warnings:
  description: >-
    The same warnings as text (Ansible shows them), plus why the parser could not be used and a cache that
    could not be written.
  returned: when there are any
  type: list
  elements: str
parser_error:
  description: Why the program's own parser was not used (C(method=help) after O(method=auto)); null otherwise.
  returned: always
  type: str
  sample: null
parser_runs:
  description: How many times the parser script ran (0 when every verdict came from the cache, else 1).
  returned: always
  type: int
  sample: 0
spec_source:
  description: >-
    C(cache) (every verdict, or the help table, came from the cache), C(parser) (the parser ran) or C(help)
    (the help command ran).
  returned: always
  type: str
  sample: cache
cache_file:
  description: The help table's cache file (help emulation only); null otherwise (see RV(results)).
  returned: always
  type: str
  sample: null
version:
  description: Standard output of O(version_command), stripped; null without it.
  returned: always
  type: str
  sample: 0.5.23
prog:
  description: The program's name as its parser shows it.
  returned: always
  type: str
  sample: sglang serve
known_flags:
  description: How many option strings (aliases included) the program's parser (or its help) has.
  returned: always
  type: int
  sample: 561
msg:
  description: >-
    On failure one line per problem, C(NAME: FLAG: MESSAGE -> fix: HINT); otherwise a summary.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.cli_check import CheckError, run_check


def main():
    module = AnsibleModule(
        argument_spec={
            "help_command": {"type": "list", "elements": "str", "required": True},
            "version_command": {"type": "list", "elements": "str"},
            "cache_dir": {"type": "path"},
            "argvs": {"type": "dict", "required": True},
            "method": {"type": "str", "choices": ["auto", "argparse", "help"], "default": "auto"},
            "parser_entry": {"type": "str"},
        },
        supports_check_mode=True,
    )

    def run_command(argv, data=None):
        # The parser command (the one with standard input) carries a script: no ~ or $VAR expansion in it.
        return module.run_command(
            argv, data=data, expand_user_and_vars=data is None, environ_update={"LC_ALL": "C", "LANG": "C"}
        )

    try:
        result = run_check(
            run_command,
            module.params["help_command"],
            module.params["argvs"],
            version_command=module.params["version_command"],
            cache_dir=module.params["cache_dir"],
            write_cache=not module.check_mode,
            method=module.params["method"],
            parser_entry=module.params["parser_entry"],
        )
    except CheckError as exc:
        module.fail_json(msg=str(exc), changed=False)

    warnings = result.pop("warnings")
    for warning in warnings:
        module.warn(warning)
    if result.pop("failed"):
        module.fail_json(changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
