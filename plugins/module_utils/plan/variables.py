# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Every variable a user of the collection sets: its role, its kind, and its range or choices. One table,
variables.yml beside this file (a row per variable; its header says what each key means), and the checks it drives.

site.yml's preflight checks the variables of every play of the run against it in its one task per host (the action
disagg.sglang.host_plan, whose `variables` names the roles), before anything on a host changes; a public role run on
its own checks its own in its first task (the action disagg.sglang.check_variables). Rules that relate two variables
(the drain below the stop timeout), or look inside a structured one (instances, packages, flags, secrets, the
account), are the rule modules' (rules.py's header lists them); this table checks each variable on its own.
tests/unit/plan/test_variables.py fails when a role's argument specs name a variable this table lacks, when the two
disagree on its type or choices, and when a numeric variable has no range; each role's meta/argument_specs.yml (the
options of these variables: type, choices, description) and docs/variables.md are written from this table by `python3
scripts/gen_variables.py`, and the test fails when they are stale.
"""

import os
import re

try:
    import yaml
except ImportError:  # ansible-test's import check of module_utils runs without PyYAML; the controller has it
    yaml = None

from ansible_collections.disagg.sglang.plugins.module_utils.plan.rules import kind_of

ROLES = ("sglang", "sglang_deps", "sglang_topology", "sglang_worker", "sglang_router", "sglang_bench",
         "sglang_monitoring")  # fmt: skip

# A host field: a host name or an IP address, nothing around it (a port, a scheme or a path would be rendered into
# a command line or a URL as is).
LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST = re.compile(rf"^(?=.{{1,253}}$){LABEL}(\.{LABEL})*$")
IPV6 = re.compile(r"^[0-9A-Fa-f:.]+$")
DIGITS = re.compile(r"^\s*-?[0-9]+\s*$")
NUMBER = re.compile(r"^\s*-?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?\s*$")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")  # Prometheus' duration (the alert rules' `for:`)
MODE = re.compile(r"^0?[0-7]{3}$")
UNIT_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]*$")
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "variables.yml")


# The keys a row of variables.yml may leave out, with their values then.
ROW_DEFAULTS = {"min": None, "max": None, "choices": None, "also": [], "what": "", "doc": [], "docs_in": None,
                "at": [], "argtype": None, "elements": None, "required": False}  # fmt: skip


def _row(name, row):
    """One row of variables.yml (its header says what each key means), with the defaults of the keys it leaves out."""
    unknown = sorted(set(row) - set(ROW_DEFAULTS) - {"role", "kind"})
    if unknown or "role" not in row or "kind" not in row:
        raise ValueError(f"variables.yml: {name} needs role and kind and takes {sorted(ROW_DEFAULTS)}, not {unknown}")
    full = dict(ROW_DEFAULTS, **row)
    doc = full["doc"]
    return dict(full, also=list(full["also"]), doc=[doc] if isinstance(doc, str) else list(doc),
                docs_in=tuple(full["docs_in"] or (full["role"],)), at=tuple(full["at"]))  # fmt: skip


def _table():
    """The rows of variables.yml, by variable, in its order. PyYAML comes with ansible-core on the controller, where
    this table is read (the actions and scripts/gen_variables.py); a target's module never imports this file."""
    if yaml is None:
        return {}
    with open(TABLE, encoding="utf-8") as handle:
        rows = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # the C loader where built
        return {name: _row(name, row) for name, row in rows.items()}


VARIABLES = _table()
# The entry points of each role where a user's variables are documented (a row's docs_in names the roles); the other
# entry points list the rows whose `at` names them.
ENTRY_POINTS = {
    "sglang": ("plan",),
    "sglang_deps": ("main", "preflight"),
    "sglang_topology": ("main",),
    "sglang_worker": ("main",),
    "sglang_router": ("main", "plan"),
    "sglang_bench": ("main", "preflight", "deployment", "prepare", "accuracy"),
    "sglang_monitoring": ("main",),
}
# kind -> the type of its option in the argument specs (Ansible's role argument validation converts to it)
ARGUMENT_TYPES = {"bool": "bool", "int": "int", "port": "int", "float": "float", "fraction": "float", "path": "path",
                  "list_of_str": "list", "list_of_int": "list", "list_of_path": "list", "list": "list",
                  "map": "dict"}  # fmt: skip
ELEMENTS = {"list_of_str": "str", "list_of_int": "int", "list_of_path": "path"}
# Kinds whose values the rules check in full, with messages that say how to write them (instances: rules.py, package
# lists: deps/deps_rules.py, secrets: rules.py): the table documents them and leaves the value to those rules.
OWN_RULES = ("list", "secret")
NOUNS = {"int": "whole number", "float": "number", "fraction": "fraction", "list_of_int": "list of whole numbers"}
PATTERNS = {"MODULE": MODULE, "UNIT_PREFIX": UNIT_PREFIX}
# The value query('ansible.builtin.vars', ..., default=UNSET) gives a variable that is not defined.
UNSET = "__disagg_sglang_unset__"


def names(role):
    """The variables of ROLE, in table order (a KeyError for a role the table does not have)."""
    if role not in ROLES:
        raise KeyError(f"{role!r} is not a role of the variable table (one of {', '.join(ROLES)})")
    return [name for name, spec in VARIABLES.items() if spec["role"] == role]


def entry_options(role, entry):
    """The variables the argument spec of ROLE's entry point ENTRY lists, in table order."""
    if role not in ENTRY_POINTS:
        raise KeyError(f"{role!r} is not a role of the variable table (one of {', '.join(ROLES)})")
    user = entry in ENTRY_POINTS[role]
    return [name for name, row in VARIABLES.items()
            if (user and role in row["docs_in"]) or f"{role}:{entry}" in row["at"]]  # fmt: skip


def argument_type(name):
    """The type of NAME's option in the argument specs: the row's argtype, else the one its kind implies (a value
    the table also takes, such as `inf` or `auto`, keeps it a string)."""
    row = VARIABLES[name]
    return row["argtype"] or ("str" if row["also"] else ARGUMENT_TYPES.get(row["kind"], "str"))


def argument_spec(name, default=UNSET):
    """NAME's option in a role's argument specs, from its row. DEFAULT: its value in the roles' defaults (UNSET: none;
    a templated one is left out: the description says what it follows)."""
    row = VARIABLES[name]
    spec = {"type": argument_type(name)}
    if row["elements"] or row["kind"] in ELEMENTS:
        spec["elements"] = row["elements"] or ELEMENTS[row["kind"]]
    if row["choices"]:
        spec["choices"] = list(row["choices"])
    if not (isinstance(default, str) and (default == UNSET or "{{" in default)):
        spec["default"] = default
    if row["required"]:
        spec["required"] = True
    if row["kind"] == "secret":
        spec["no_log"] = True
    spec["description"] = row["doc"][0] if len(row["doc"]) == 1 else list(row["doc"])
    return spec


def _number(value, integer):
    """value as an int or float, or None: a bool is not a number; a string of digits (Ansible's templating makes
    strings) is."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return None if integer and not value.is_integer() else (int(value) if integer else value)
    if isinstance(value, str) and (DIGITS if integer else NUMBER).match(value):
        return int(value) if integer else float(value)
    return None


def range_text(name):
    """The kind and range of a variable in words, as docs/variables.md and the README show them."""
    spec = VARIABLES[name]
    kind, lo, hi = spec["kind"], spec["min"], spec["max"]
    extra = "".join(f" or `{a}`" for a in spec["also"])
    if kind == "port":
        return "port 1-65535"
    if kind == "choice":
        return "one of " + ", ".join(f"`{c}`" for c in spec["choices"])
    if kind == "list_of_str" and spec["choices"]:
        return "list of " + ", ".join(f"`{c}`" for c in spec["choices"])
    if kind in ("int", "float", "fraction", "list_of_int"):
        return f"{NOUNS[kind]} {_fmt(lo)}-{_fmt(hi)}{extra}"
    words = {
        "bool": "true or false", "str": "non-empty string", "text": "string (may be empty)",
        "path": "absolute path", "path_or_empty": 'absolute path or `""`', "host": "host name or IP address",
        "duration": "Prometheus duration (`5m`)", "mode": "octal file mode (`0644`)",
        "list_of_str": "list of strings", "list_of_path": "list of absolute paths", "map": "mapping (NAME: value)",
        "list": "list (rules of its own)",
        "secret": "single-line string (vault)",
    }  # fmt: skip
    if kind.startswith("pattern:"):
        return spec["what"]
    return words[kind] + extra


def _fmt(number):
    return f"{number:g}" if isinstance(number, float) else str(number)


def _shown(value):
    """The value as the message quotes it, with what it is in YAML's words: 'false' (a string)."""
    return f"{value!r} ({kind_of(value)})"


def _a(text):
    """range_text with the article "it must be" wants."""
    if text.startswith(("true", "one of", "port", "letters")) or not text[0].isalpha():
        return text
    return ("an " if text[0] in "aeio" else "a ") + text


def _fraction_hint(spec, number):
    """A fraction given as a percentage (95 for 0.95) is the common mistake: name it."""
    if spec["kind"] == "fraction" and number is not None and 1 < number <= 100:
        return f" (a fraction: {number / 100:g} for {_fmt(number)} %)"
    return ""


def _problem(name, value):
    """What is wrong with VALUE for NAME, or None."""
    spec = VARIABLES[name]
    kind = spec["kind"]
    if kind in OWN_RULES or (isinstance(value, str) and value in spec["also"]):
        return None
    if kind in ("int", "float", "fraction", "port"):
        number = _number(value, kind in ("int", "port"))
        lo, hi = (1, 65535) if kind == "port" else (spec["min"], spec["max"])
        if number is None or not lo <= number <= hi:
            hint = _fraction_hint(spec, _number(value, False)) + _what(spec)
            return f"{name} is {_shown(value)}: it must be {_a(range_text(name))}{hint}"
        return None
    if kind == "list_of_int":
        bad = not isinstance(value, list) or not value
        bad = bad or any((n := _number(v, True)) is None or not spec["min"] <= n <= spec["max"] for v in value)
        return f"{name} is {_shown(value)}: it must be a non-empty {range_text(name)}" if bad else None
    if kind == "choice":
        return None if value in spec["choices"] else f"{name} is {_shown(value)}: choose {range_text(name)}"
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str) and v.strip() != "",
        "text": lambda v: isinstance(v, str),
        "path": lambda v: isinstance(v, str) and v.startswith("/"),
        "path_or_empty": lambda v: isinstance(v, str) and (v == "" or v.startswith("/")),
        "host": _host_ok,
        "duration": lambda v: isinstance(v, str) and bool(DURATION.match(v)),
        "mode": lambda v: isinstance(v, str) and bool(MODE.match(v)),
        "list_of_str": lambda v: isinstance(v, list) and not _bad_members(spec, v),
        "list_of_path": lambda v: isinstance(v, list) and not _bad_members(spec, v),
        "map": lambda v: v is None or isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        "secret": lambda v: v is None or isinstance(v, str),
    }  # fmt: skip
    if kind.startswith("pattern:"):
        ok[kind] = lambda v: isinstance(v, str) and bool(PATTERNS[kind[8:]].match(v))
    if ok[kind](value):
        return None
    hint = ""
    if kind == "bool" and isinstance(value, str):
        hint = " (a quoted 'false' is a non-empty string, which counts as true: write it unquoted)"
    if kind == "host" and isinstance(value, str) and (":" in value or "/" in value):
        hint = " (a host name or address only: no scheme, port or path; the port has its own variable)"
    if kind in ("list_of_str", "list_of_path") and isinstance(value, str):
        hint = " (a single value still needs its - in YAML)"
    elif kind in ("list_of_str", "list_of_path") and isinstance(value, list):
        bad = ", ".join(repr(m) for m in _bad_members(spec, value))
        what = "one of them" if spec["choices"] else "an absolute path" if kind == "list_of_path" else "a string"
        what = what if what != "a string" else "a non-empty string"
        hint = f" ({bad}: not {what}; correct or remove it)"
    return f"{name} is {_shown(value)}: it must be {_a(range_text(name))}{hint}{_what(spec)}"


def _what(spec):
    """What the value means, after the rule: ' (seconds)'; nothing for a pattern (its rule is its meaning)."""
    return f" ({spec['what']})" if spec["what"] and not spec["kind"].startswith("pattern:") else ""


def _bad_members(spec, value):
    """The members of a list VALUE that its row refuses: not a non-empty string, not one of the row's choices, not an
    absolute path (list_of_path)."""

    def ok(member):
        if not isinstance(member, str) or not member.strip():
            return False
        if spec["kind"] == "list_of_path" and not member.startswith("/"):
            return False
        return not spec["choices"] or member in spec["choices"]

    return [member for member in value if not ok(member)]


def _host_ok(value):
    if not isinstance(value, str) or not value:
        return False
    if HOST.match(value):
        return True
    # an IPv6 address (two colons at least, hex digits): no brackets, no port
    return value.count(":") >= 2 and bool(IPV6.match(value))


def variable_problems(role, values):
    """ROLE's variables checked against the table. values: {name: value} (UNSET for a variable that is not
    defined: skipped; the role's own rules name the required ones). A name not in the table is a bug of the role."""
    problems = []
    for name, value in (values or {}).items():
        if name not in VARIABLES or VARIABLES[name]["role"] != role:
            raise KeyError(f"{name} is not a variable of role {role} in plugins/module_utils/plan/variables.py")
        if isinstance(value, str) and value == UNSET:
            continue
        problem = _problem(name, value)
        if problem:
            problems.append(problem)
    return problems


def documented(role):
    """The variables the user entry points of ROLE list (ENTRY_POINTS; a row's docs_in): those a role run on its own
    reads, whichever role's defaults set them (the topology role's are the internal role's rows)."""
    if role not in ENTRY_POINTS:
        raise KeyError(f"{role!r} is not a role of the variable table (one of {', '.join(ROLES)})")
    return [name for name, row in VARIABLES.items() if role in row["docs_in"]]


def role_problems(role, values):
    """The defined variables of documented(ROLE) in VALUES ({name: value}, every variable of the task may be in it)
    checked against the table, in table order."""
    problems = []
    for name in documented(role):
        value = (values or {}).get(name, UNSET)
        problem = None if isinstance(value, str) and value == UNSET else _problem(name, value)
        if problem:
            problems.append(problem)
    return problems


# Variables the collection no longer reads, and what replaced them: an inventory that still sets one is refused
# (deps preflight), so a setting is never silently ignored.
REMOVED = {
    "sglang_venv": (
        "is no longer used: each package set now gets its own venv under sglang_venvs_dir (default "
        "/opt/sglang/venvs), named by its pins, and the units name their venv. Remove sglang_venv from the "
        "inventory, and set sglang_venvs_dir if the venvs must live elsewhere; the next run builds the venvs there "
        "and rolls the units onto them, and leaves the old venv alone (remove it by hand once no unit uses it)"
    ),
}


def removed_problems(values):
    """Messages for the removed variables (REMOVED) that VALUES ({name: value}, e.g. every defined variable) sets."""
    return [f"{name} ({values[name]!r}) {why}" for name, why in REMOVED.items() if name in (values or {})]


def markdown():
    """docs/variables.md: every variable with its role and range, from the table."""
    lines = [
        "# Variables and their ranges",
        "",
        "Written from the table in `plugins/module_utils/plan/variables.yml` by `python3 scripts/gen_variables.py`; "
        "a unit test fails when this page is stale. Each role's preflight refuses a value outside its range.",
        "",
    ]
    for role in ROLES:
        lines += [f"## {role}", "", "| variable | kind and range |", "|---|---|"]
        lines += [f"| `{name}` | {range_text(name)} |" for name in names(role)]
        lines.append("")
    return "\n".join(lines)
