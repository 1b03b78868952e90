# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Write what the variable table (plugins/module_utils/plan/variables.yml, read by variables.py) says into the files
that show it.

  * roles/*/meta/argument_specs.yml: the option of every variable of the table at the entry points that list it
    (variables.entry_options), its type, choices, description, and its default as roles/*/defaults/main.yml sets it.
    The entry points' own texts and the options that are not users' variables (the facts one task file hands
    another) are kept as the file has them: they are edited there.
  * docs/variables.md: every variable with its role and range.

    python3 scripts/gen_variables.py          write them
    python3 scripts/gen_variables.py --check  exit 1 naming the stale files (tests/unit/plan/test_variables.py does too)

A new variable is one row of the table and, where it has one, its default in the role's defaults/main.yml; the test
fails when a default and the table disagree (a default without a row, a row without a default nor `required`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.disagg.sglang.plugins.module_utils.plan import variables as vt  # noqa: E402

DOC = REPO / "docs/variables.md"
HEADER = """\
---
# Written by scripts/gen_variables.py: the options of the users' variables come from the variable table
# (plugins/module_utils/plan/variables.yml: description, type, choices) and roles/*/defaults/main.yml (default); edit
# them there and run the script. The entry points' texts and their other options are edited here.
"""


WIDTH = 120
# a word that would begin a continuation line of a plain scalar and might be read as YAML syntax stays on its line
SYNTAX = tuple("-?:,[]{}#&*!|>'\"%@`")


def _plain(text):
    """Whether TEXT may stand unquoted (PyYAML's own verdict, on one line)."""
    return text != "" and not yaml.safe_dump(text, width=float("inf")).startswith(("'", '"'))


def _words(first, text, indent, plain):
    """Lines of TEXT: FIRST (the key and what precedes the value) then words, each line within WIDTH; the
    continuation lines at INDENT."""
    lines, line = [], first
    words = []
    for word in text.split(" "):
        if plain and words and word.startswith(SYNTAX):
            words[-1] += " " + word  # never at the start of a line
        else:
            words.append(word)
    fresh = True  # nothing of the value on this line yet: the word follows FIRST as it is
    for word in words:
        if fresh or len(line) + 1 + len(word) <= WIDTH:
            line = line + word if fresh else line + " " + word
            fresh = False
        else:
            lines.append(line)
            line = " " * indent + word
    return [*lines, line]


def _scalar(first, value, indent):
    """FIRST followed by the scalar VALUE, wrapped."""
    if not isinstance(value, str):
        return [first + yaml.safe_dump(value, default_flow_style=True, width=float("inf")).split("\n...")[0].strip()]
    if " " in value and "  " not in value and _plain(value):
        return _words(first, value, indent, True)
    if _plain(value):
        return [first + value]
    if "\\" in value or "\n" in value or any(ord(c) < 32 for c in value):
        return [first + yaml.safe_dump(value, width=float("inf")).split("\n")[0]]
    quoted = value.replace("'", "''")
    lines = _words(first + "'", quoted, indent, False)
    lines[-1] += "'"
    return lines


def _shared(value, counts=None):
    """{id: count} of the mappings and lists in VALUE, counted at each place they appear (aliases included)."""
    counts = {} if counts is None else counts
    if isinstance(value, (dict, list)):
        counts[id(value)] = counts.get(id(value), 0) + 1
        if counts[id(value)] == 1:
            for item in value.values() if isinstance(value, dict) else value:
                _shared(item, counts)
    return counts


def _emit(value, indent, anchors, seen):
    """The lines of a mapping VALUE at INDENT; ANCHORS {id: name} of the objects written once and referred to after."""
    lines = []
    pad = " " * indent
    for key, item in value.items():
        head = f"{pad}{key}:"
        name = anchors.get(id(item)) if isinstance(item, (dict, list)) else None
        if name and name in seen:
            lines.append(f"{head} *{name}")
            continue
        if name:
            seen.add(name)
            head += f" &{name}"
        if isinstance(item, dict) and item and any(isinstance(v, (dict, list)) or (isinstance(v, str) and " " in v)
                                                   for v in item.values()):  # fmt: skip
            lines.append(head)
            lines += _emit(item, indent + 2, anchors, seen)
        elif isinstance(item, list) and item and all(isinstance(v, str) for v in item) and any(" " in v for v in item):
            lines.append(head)
            for member in item:
                lines += _scalar(f"{pad}  - ", member, indent + 4)
        elif isinstance(item, (dict, list)):
            flow = yaml.safe_dump(item, default_flow_style=True, width=float("inf")).strip()
            if len(head) + 1 + len(flow) <= WIDTH:
                lines.append(f"{head} {flow}")
            else:
                lines.append(head)
                block = yaml.safe_dump(item, default_flow_style=False, sort_keys=False, width=WIDTH - indent - 2)
                lines += [f"{pad}  {line}" for line in block.splitlines()]
        else:
            lines += _scalar(head + " ", item, indent + 2)
    return lines


def defaults():
    """{variable: value} of every role's defaults/main.yml."""
    found = {}
    for path in sorted(REPO.glob("roles/*/defaults/main.yml")):
        found.update(yaml.safe_load(path.read_text()) or {})
    return found


def argument_specs(role, current, default_values):
    """ROLE's argument specs: CURRENT (the file's content) with the options of the table's variables written anew."""
    specs = current["argument_specs"]
    missing = [entry for entry in vt.ENTRY_POINTS[role] if entry not in specs]
    if missing:
        raise SystemExit(f"roles/{role}/meta/argument_specs.yml lacks the entry points {missing} (variables.py)")
    built, sets, anchors = {}, {}, {}
    for entry, spec in specs.items():
        own = {name: option for name, option in (spec.get("options") or {}).items() if name not in vt.VARIABLES}
        names = vt.entry_options(role, entry)
        for name in names:
            if name not in built:
                built[name] = vt.argument_spec(name, default_values.get(name, vt.UNSET))
                anchors[id(built[name])] = name
        options = {**{name: built[name] for name in names}, **own}
        key = tuple(options)
        # an entry point with the options of an earlier one shares them (one anchor, as a person would write it)
        if key in sets and all(sets[key][n] is options[n] for n in key):
            options = sets[key]
        else:
            sets.setdefault(key, options)
            anchors.setdefault(id(options), f"{role}_{entry}_options")
        spec.pop("options", None)
        if options:
            spec["options"] = options
    return current, anchors


def _own_comments(text):
    """The comment lines a file has between the header and its content (a note on the role's entry points)."""
    header = set(HEADER.splitlines())
    lines = []
    for line in text.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if line not in header:
            lines.append(line + "\n")
    return "".join(lines)


def render():
    """{path: text} of every file the table writes."""
    default_values = defaults()
    files = {DOC: vt.markdown() + "\n"}
    for role in vt.ROLES:
        path = REPO / "roles" / role / "meta" / "argument_specs.yml"
        data, anchors = argument_specs(role, yaml.safe_load(path.read_text()), default_values)
        counts = _shared(data)
        anchors = {key: name for key, name in anchors.items() if counts.get(key, 0) > 1}
        text = "\n".join(_emit(data, 0, anchors, set())) + "\n"
        if yaml.safe_load(text) != data:  # the emitter above is small: it must write what YAML reads back
            raise SystemExit(f"scripts/gen_variables.py wrote {path} wrong: it does not read back as the specs")
        files[path] = HEADER + _own_comments(path.read_text()) + text
    return files


def main(argv):
    stale = [path for path, text in render().items() if not path.is_file() or path.read_text() != text]
    if argv[1:] == ["--check"]:
        for path in stale:
            print(f"stale: {path.relative_to(REPO)} (python3 scripts/gen_variables.py)")
        return 1 if stale else 0
    for path, text in render().items():
        if path in stale:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
