# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module disagg.sglang.cli_check (logic in module_utils/cli_check.py)."""

DOCUMENTATION = r"""
---
module: cli_check
short_description: Check command lines against the installed program's own argparse --help
version_added: "0.1.0"
description:
  - Runs O(help_command) on the host (for example the installed sglang's C(python -m sglang.launch_server --help),
    or C(python -m sglang_router.launch_router --help)), reads the argparse help it prints into a flag
    table, and checks every argv in O(argvs) the way argparse would parse it.
  - Reports, per argv name, unknown flags, ambiguous prefixes (argparse accepts a unique prefix of a
    flag, and refuses one that several flags start with, such as C(--cuda-graph-max-bs) in sglang 0.5.23),
    values outside the choices the help lists, missing or surplus values, and missing required flags.
    The module fails listing every problem with the flag and a fix.
  - Deprecated flags (help text starting with or containing C(Deprecated)) and abbreviations that
    argparse accepts today are reported as warnings.
  - With O(version_command) and O(cache_dir), the flag table is cached per (help command, installed
    version), so a run on an unchanged host does not run the help command (for sglang it imports torch,
    which takes seconds).
  - Meant to run before anything that starts the programs changes, so a flag a new version refuses
    never reaches a unit that would crash-loop.
  - Value types are not checked (the help does not show them), nor flags hidden from the help
    (C(help=SUPPRESS)), choices hidden behind a custom metavar, or mutually exclusive groups.
author:
  - disagg.sglang contributors
options:
  help_command:
    description:
      - The command that prints the program's argparse help, as a list (no shell).
      - Its standard output (or standard error, if only that holds a C(usage:) line) is parsed.
      - It runs with C(LC_ALL=C) so argparse's messages are the English ones.
    type: list
    elements: str
    required: true
  version_command:
    description:
      - A cheap command whose standard output names the installed version, such as
        C(python -c "import importlib.metadata as m; print(m.version('sglang'))"); it keys the cache.
      - Pick one that changes whenever the flags can change (for an editable install, include the commit).
      - Without it, nothing is cached and O(help_command) runs every time.
    type: list
    elements: str
  cache_dir:
    description:
      - Directory of the cached flag tables (one JSON file per help command and version), created when missing.
      - In check mode the cache is read but never written.
    type: path
  argvs:
    description:
      - The command lines to check, by name (an instance name such as C(prefill0)). Each is a list of
        argument tokens without the program itself; numbers are compared as their text.
    type: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Reads the cache and runs the help command (read-only); does not write the cache.
  diff_mode:
    support: none
notes:
  - The module never changes the host's configuration; C(changed) is always false. Writing the cache is bookkeeping.
seealso:
  - name: argparse prefix matching (allow_abbrev)
    description: How argparse resolves abbreviated long options.
    link: https://docs.python.org/3/library/argparse.html#allow-abbrev
"""

EXAMPLES = r"""
- name: Check the workers' command lines against the installed sglang
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

- name: Check the router's command line
  disagg.sglang.cli_check:
    help_command: ["{{ sglang_router_venv }}/bin/python", -m, sglang_router.launch_router, --help]
    version_command:
      - "{{ sglang_router_venv }}/bin/python"
      - -c
      - "import importlib.metadata as m; print(m.version('sglang-router'))"
    cache_dir: /var/cache/disagg-sglang/cli-check
    argvs:
      router: [--pd-disaggregation, --prefill, "http://10.0.0.1:30000", "8998", --decode, "http://10.0.0.2:30001"]
  register: __router_cli_check
"""

RETURN = r"""
checked:
  description: Names of the argvs that were checked.
  returned: always
  type: list
  elements: str
  sample: [prefill0, decode0]
problems:
  description:
    - Problems per argv name (only names with problems). Each has C(flag), C(kind) (one of C(unknown),
      C(ambiguous), C(choice), C(value_count), C(explicit_argument), C(unrecognized_argument), C(required)),
      C(message) (argparse's wording) and C(hint) (the fix).
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
        --disable-cuda-graph is deprecated: Deprecated.
        Use --cuda-graph-backend-{decode,prefill}=disabled instead.
      hint: switch to the replacement its help names before it is removed
warnings:
  description: The same warnings as text (Ansible shows them), plus a cache that could not be written.
  returned: when there are any
  type: list
  elements: str
spec_source:
  description: Where the flag table came from, C(cache) (no help command ran) or C(help).
  returned: always
  type: str
  sample: cache
cache_file:
  description: The cache file of this help command and version; null without O(version_command) and O(cache_dir).
  returned: always
  type: str
  sample: /var/cache/disagg-sglang/cli-check/launch_server-3f1c0a9b2d4e5f60.json
version:
  description: Standard output of O(version_command), stripped; null without it.
  returned: always
  type: str
  sample: 0.5.23
prog:
  description: The program name its usage line shows.
  returned: always
  type: str
  sample: sglang serve
known_flags:
  description: How many option strings (aliases included) the help lists.
  returned: always
  type: int
  sample: 559
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
        },
        supports_check_mode=True,
    )

    def run_command(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    try:
        result = run_check(
            run_command,
            module.params["help_command"],
            module.params["argvs"],
            version_command=module.params["version_command"],
            cache_dir=module.params["cache_dir"],
            write_cache=not module.check_mode,
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
