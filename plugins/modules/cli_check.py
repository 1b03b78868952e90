# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module disagg.sglang.cli_check (logic: module_utils/cli/)."""

DOCUMENTATION = r"""
---
module: cli_check
short_description: Check command lines with the installed program's own argparse parser
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Parses every argv in O(argvs) with the argument parser of the program installed in the venv that will
    run it, built by the program's own code, and fails naming the argv, the flag, argparse's message and the fix.
  - O(python) runs a small script that calls the program's own argv-parsing function with
    C(ArgumentParser.parse_args) hooked, so the parser is exactly the program's (its flags, aliases, types,
    choices, actions) and nothing after parsing runs (no C(ServerArgs.__post_init__), no start-up). For
    C(sglang.launch_server) that is C(prepare_server_args) (C(ArgumentParser(prog="sglang serve")) with
    C(ServerArgs.add_cli_args)), with the package's C(__init__) skipped and torch, triton and zmq stubbed, so it
    needs no GPU and no torch import; for C(sglang_router.launch_router) C(parse_router_args); for the sandbox's
    simulator C(sglang_pd_sim) its C(cli.parse_args). O(parser_entry) names the function for another program.
  - So values a flag's type refuses (C(--context-length 8K) for sglang 0.5.23, whose suffixes are
    case-sensitive), values outside the choices, unknown flags, ambiguous prefixes (C(--cuda-graph-max-bs)
    in sglang 0.5.23), missing values and missing required flags all fail. Argparse stops at the first
    error of a line, so one such problem per argv is reported.
  - An abbreviated flag fails too (C(--tp 4) or C(--tp=4) for C(--tp-size)), though argparse accepts a unique
    prefix. The flag rules of this collection, and the program's own checks of its raw arguments, match full
    names only, so an abbreviation would slip past them. Every abbreviation of a line is reported.
  - Deprecation messages the program's actions log are returned as warnings.
  - With O(version_command) and O(cache_dir), each argv's verdict is cached per (program, installed version,
    sha256 of the argv), so a run whose command lines and version did not change does not start the parser.
    Only argparse's verdicts are cached; not one of a program that failed before argparse decided (a missing
    file), nor one of an argv with C(--config), which also depends on that file.
  - >-
    Where the parser cannot be built - O(python) does not exist yet (a first install, before the venv is made),
    or the script reports that it cannot build the parser (an import fails; exit status 3) - the module does
    not fail and does not claim a check either. RV(checked) is empty, RV(not_checked) says why, and it warns
    C(flags not checked (NAMES): WHY). A playbook that requires the check asserts RV(not_checked) is none.
  - A crash of the parser script (any other exit status, an answer that is not its JSON) fails the module with
    the tail of the script's standard error, and is never cached.
  - Meant to run before anything that starts the programs changes, so a flag a new version refuses
    never reaches a unit that would crash-loop.
options:
  python:
    description:
      - The Python of the venv that will run the program (the unit's interpreter); it builds the parser.
    type: path
    required: true
  module:
    description:
      - The module the unit runs with C(python -m MODULE); it picks the parse function (see O(parser_entry)).
    type: str
    required: true
  version_command:
    description:
      - A cheap command whose standard output names the installed version, such as
        C(python -c "import importlib.metadata as m; print(m.version('sglang'))"); it keys the cache.
      - Pick one that changes whenever the flags can change (for an editable install, include the commit).
      - Without it, nothing is cached and the parser runs every time. When it fails, the module fails.
    type: list
    elements: str
  cache_dir:
    description:
      - Directory of the cached verdicts (one JSON file per argv name, program and version; older ones of the
        same name are removed), created when missing.
      - In check mode the cache is read but never written.
    type: path
  argvs:
    description:
      - The command lines to check, by name (an instance name such as C(prefill0)). Each is a list of
        argument tokens without the program itself.
    type: dict
    required: true
  owners:
    description:
      - Whom each argv of O(argvs) belongs to, by argv name (the collection's preflight checks the command lines of
        many hosts in one call and names each refused host in RV(refused)). An argv without an owner is in no
        RV(refused) entry.
    type: dict
  parser_entry:
    description:
      - C(MODULE:FUNCTION), the program's function that turns an argv list into its arguments by calling
        C(ArgumentParser.parse_args), for a program the module does not know (the module then fails without it).
        Known without it are C(sglang.launch_server), C(sglang_router.launch_router) and C(sglang_pd_sim).
    type: str
  later:
    description:
      - What the run does about flags it cannot check now, added to the warning (e.g. the preflight of a first
        install - this run checks them after its deps step). Left out, the warning says only why.
    type: str
attributes:
  check_mode:
    support: full
    details: Reads the cache and runs the parser (read-only); does not write the cache.
  diff_mode:
    support: none
    details: Changes nothing on the host, so there is nothing to show.
notes:
  - The module never changes the host's configuration; C(changed) is always false. Writing the cache is bookkeeping.
  - The parser script is sent to O(python) with C(-c); it imports the program's argument modules, nothing else.
seealso:
  - name: argparse prefix matching (allow_abbrev)
    description: How argparse resolves abbreviated long options, which this module refuses.
    link: https://docs.python.org/3/library/argparse.html#allow-abbrev
"""

EXAMPLES = r"""
- name: Check the workers' command lines against the installed sglang's own parser
  disagg.sglang.cli_check:
    python: "/opt/sglang/venvs/engine-0123456789ab/bin/python"
    module: sglang.launch_server
    version_command:
      - "/opt/sglang/venvs/engine-0123456789ab/bin/python"
      - -c
      - "import importlib.metadata as m; print(m.version('sglang'))"
    cache_dir: /var/cache/disagg-sglang/cli-check
    argvs:
      prefill0: [--model-path, /models/DeepSeek-V4-Flash, --tp-size, "4", --page-size, "256"]
      decode0: [--model-path, /models/DeepSeek-V4-Flash, --tp-size, "4", --cuda-graph-max-bs-decode, "64"]

- name: Check the router's command line (no cache); fail when its parser cannot be built
  disagg.sglang.cli_check:
    python: "/opt/sglang/venvs/router-0123456789ab/bin/python"
    module: sglang_router.launch_router
    argvs:
      router: [--pd-disaggregation, --prefill, "http://10.0.0.1:30000", "8998", --decode, "http://10.0.0.2:30001"]
  register: __router_cli_check
  failed_when: __router_cli_check is failed or __router_cli_check.not_checked is not none
"""

RETURN = r"""
checked:
  description: Names of the argvs that were checked; empty when the flags were not checked (see RV(not_checked)).
  returned: always
  type: list
  elements: str
  sample: [prefill0, decode0]
not_checked:
  description: >-
    Why the flags were not checked (the parser cannot be built on this host: O(python) is missing, or the
    script's reason, such as a failing import); null when they were.
  returned: always
  type: str
  sample: null
verdicts:
  description:
    - Per argv name, C(ok), C(problems) and C(warnings) (as below), C(error) (argparse's own C(error:) text),
      C(flags) (each flag the parser read, under its full name, with the value it parsed), C(source)
      (C(parser) or C(cache)) and C(cache_file) (the verdict's cache file; null when it is not cached).
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
problems:
  description:
    - Problems per argv name (only names with problems). Each has C(flag), C(kind) (C(abbreviation),
      C(unknown), C(ambiguous), C(choice), C(type), C(value) (the type's own message), C(value_count),
      C(explicit_argument), C(unrecognized_argument), C(required), C(exclusive), C(exits), C(error)),
      C(message) (argparse's wording, or the abbreviation's) and C(hint) (the fix).
  returned: always
  type: dict
  sample:
    decode0:
      - flag: --tp
        kind: abbreviation
        message: "--tp is an abbreviation of --tp-size: write the full flag name"
        hint: >-
          write --tp-size instead of --tp: the rules of this collection (and the program's own checks of raw
          arguments) match full names only, and a flag added later can make the abbreviation ambiguous
refused:
  description:
    - Per owner (O(owners)) of an argv with problems, the module's message in a list (a list, so that the refusals
      of several calls merge with C(combine(list_merge='append'))); empty when nothing was refused or no owners
      were given.
  returned: always
  type: dict
  sample:
    gpu-1: ["sglang refuses gpu-1 decode0 (--tp is an abbreviation of --tp-size) ..."]
flag_warnings:
  description: Deprecated flags (what the program logs), each with C(name), C(flag), C(kind), C(message), C(hint).
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
    The same warnings as text (Ansible shows them), C(flags not checked ...) when RV(not_checked) is set, and a
    cache that could not be written.
  returned: when there are any
  type: list
  elements: str
parser_runs:
  description: How many times the parser script ran (0 when every verdict came from the cache, else 1).
  returned: always
  type: int
  sample: 0
version:
  description: Standard output of O(version_command), stripped; null without it (or when O(python) is missing).
  returned: always
  type: str
  sample: 0.5.23
prog:
  description: The program's name as its parser shows it; null when the flags were not checked.
  returned: always
  type: str
  sample: sglang serve
known_flags:
  description: How many option strings (aliases included) the program's parser has; null when not checked.
  returned: always
  type: int
  sample: 561
msg:
  description: >-
    On failure one line per problem, C(NAME: FLAG: MESSAGE -> fix: HINT); C(flags not checked (NAMES): WHY);
    otherwise a summary.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.cli.cli_check import CheckError, run_check

# The options of DOCUMENTATION, as AnsibleModule checks them.
ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "module": {"type": "str", "required": True},
    "argvs": {"type": "dict", "required": True},
    "version_command": {"type": "list", "elements": "str"},
    "cache_dir": {"type": "path"},
    "parser_entry": {"type": "str"},
    "later": {"type": "str"},
    "owners": {"type": "dict"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)

    def run_command(argv, data=None):
        # The parser command (the one with standard input) carries a script: no ~ or $VAR expansion in it.
        return module.run_command(
            argv, data=data, expand_user_and_vars=data is None, environ_update={"LC_ALL": "C", "LANG": "C"}
        )

    try:
        result = run_check(
            run_command,
            module.params["python"],
            module.params["module"],
            module.params["argvs"],
            version_command=module.params["version_command"],
            cache_dir=module.params["cache_dir"],
            write_cache=not module.check_mode,
            parser_entry=module.params["parser_entry"],
            later=module.params["later"],
        )
    except CheckError as exc:
        module.fail_json(msg=str(exc), changed=False)

    owners = module.params["owners"] or {}
    refused = dict.fromkeys(owners[name] for name in result.get("problems") or {} if name in owners)
    result["refused"] = {owner: [result.get("msg", "")] for owner in refused}
    for warning in result.pop("warnings"):
        module.warn(warning)
    # "results" is Ansible's key for a loop's items: ansible-core 2.19 renames a module's mapping of that name to
    # ansible_module_results with a warning on every run, so the verdicts go back as "verdicts"
    result["verdicts"] = result.pop("results")
    if result.pop("failed"):
        module.fail_json(changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
