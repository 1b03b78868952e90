# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The ``help`` method of the ``cli_check`` module: argparse emulated on what a program's ``--help`` says.

Plain functions (stdlib only); ``cli_check.py`` runs the help command and caches the spec this reads.

- ``parse_help(text)`` reads any argparse help (``sglang serve``/``sglang.launch_server``, the
  router's ``launch_router``, a test double) into a *spec*: every option with its aliases, how many
  values it takes, its choices when the help shows them (``{a,b}``), whether it is required, and
  whether its help calls it deprecated.
- ``check_argv(spec, argv)`` walks an argv the way argparse does (exact match, ``--flag=value``,
  unique-prefix matching with ``allow_abbrev``, negative numbers as values) and reports every
  problem argparse would stop at - unknown flags, ambiguous prefixes, values outside the choices,
  missing or surplus values, missing required flags - plus warnings for deprecated flags and for
  abbreviations (accepted today, but a flag added later turns them ambiguous).

What the help does not show is out of the emulation's reach (the parser method sees it): value types
(``--context-length 8K``), flags hidden with ``help=SUPPRESS``, choices behind a custom metavar,
mutually exclusive groups, positional arguments (none of the programs checked here has any; a stray
value is reported as argparse does, "unrecognized").
"""

import difflib
import re

SPEC_FORMAT = 1  # bump when parse_help's output changes: old cache files are then ignored

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_ENTRY_INDENT_MAX = 4  # option lines sit at 2 (4 in nested groups); help text at the help column
_HELP_SPLIT = re.compile(r"\s{2,}")


class CheckError(Exception):
    """The check could not run (help or version command failed, help not understood)."""


# --------------------------------------------------------------------------------------------------
# Reading argparse help
# --------------------------------------------------------------------------------------------------


def _split_top(text, sep):
    """Split on ``sep`` outside brackets and braces."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _arity(args):
    """argparse's args string -> (least, most) values; most None = unbounded."""
    args = args.strip()
    if not args:
        return 0, 0
    if args == "...":  # argparse.REMAINDER
        return 0, None
    if re.fullmatch(r"\[\S+ \.\.\.\]", args) or re.fullmatch(r"\[(\S+) \[\1 \.\.\.\]\]", args):
        return 0, None  # nargs="*" (the second form is Python < 3.9)
    if re.fullmatch(r"(\S+) \[\1 \.\.\.\]", args):
        return 1, None  # nargs="+"
    if re.fullmatch(r"\[\S+\]", args):
        return 0, 1  # nargs="?"
    if re.fullmatch(r"\S+ \.\.\.", args):
        return 1, None  # argparse.PARSER
    count = len(args.split())
    return count, count  # nargs=None (1) or an integer


def _choices(args):
    match = re.search(r"\{([^{}]*)\}", args)
    return match.group(1).split(",") if match else None


def _parse_invocation(invocation):
    """``--a A, --alias A`` (or Python 3.13's ``-a, --alias A``) -> (option strings, args string)."""
    strings, args = [], ""
    for part in _split_top(invocation, ", "):
        option, _sep, part_args = part.strip().partition(" ")
        if not re.fullmatch(r"-{1,2}[^\s\[\]{}()|,]+", option):
            return None
        strings.append(option)
        args = part_args.strip() or args
    return strings, args


def _join_help(lines):
    text = ""
    for line in lines:
        if not text:
            text = line
        elif re.search(r"\w-$", text):  # textwrap broke a hyphenated word: mend it
            text += line
        else:
            text += " " + line
    return text


def _is_deprecated(help_text):
    return help_text.lower().startswith("deprecated") or re.search(r"\bDeprecated\b", help_text) is not None


def _required_in_usage(usage):
    """Option strings shown outside any [] or () in the usage: argparse's required options."""
    required, depth = set(), 0
    for token in re.findall(r"[\[\]()]|[^\s\[\]()|]+", usage):
        if token in "[(":
            depth += 1
        elif token in "])":
            depth -= 1
        elif depth == 0 and token.startswith("-"):
            required.add(token)
    return required


def _usage_position(usage, strings, args):
    """Where the option appears in the usage (argparse prints every action there, in parser order)."""
    for option in strings:
        text = option + (" " + args if args else "")
        match = re.search(r"(?<![\w-])" + re.escape(text) + r"(?=[\]\)\s|]|$)", usage)
        if match:
            return match.start()
    return None


def parse_help(text):
    """argparse ``--help`` output -> spec (a JSON-able dict; see the module docstring)."""
    lines = text.expandtabs().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("usage:")), None)
    if start is None:
        raise CheckError("the help output has no 'usage:' line, so it is not argparse help")
    usage_lines = [lines[start][len("usage:") :]]
    i = start + 1
    while i < len(lines) and lines[i].strip():
        usage_lines.append(lines[i])
        i += 1
    usage = " ".join(part.strip() for part in usage_lines)
    prog = re.split(r"\s+(?=[\[(-])", usage, maxsplit=1)[0].strip()

    entries, current = [], None
    for line in lines[i:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if stripped.startswith("-") and indent <= _ENTRY_INDENT_MAX:
            invocation, *rest = _HELP_SPLIT.split(stripped, maxsplit=1)
            parsed = _parse_invocation(invocation)
            if parsed is not None:
                current = {"indent": indent, "strings": parsed[0], "args": parsed[1], "help": rest}
                entries.append(current)
                continue
        if current is not None and stripped and indent > current["indent"]:
            current["help"].append(stripped)
        elif stripped or current is None:
            current = None

    for entry in entries:
        entry["position"] = _usage_position(usage, entry["strings"], entry["args"])
    shown = [entry for entry in entries if entry["position"] is not None]
    if shown:  # drop example lines of descriptions and epilogs: real options are all in the usage
        entries = sorted(shown, key=lambda entry: entry["position"])

    required = _required_in_usage(usage[len(prog) :])
    options, seen = [], {}
    for entry in entries:
        least, most = _arity(entry["args"])
        help_text = _join_help(entry["help"])
        option = {
            "strings": entry["strings"],
            "args": entry["args"],
            "min_args": least,
            "max_args": most,
            "remainder": entry["args"] in ("...",) or entry["args"].endswith(" ..."),
            "choices": _choices(entry["args"]),
            "required": any(s in required for s in entry["strings"]),
            "deprecated": _is_deprecated(help_text),
            "help": help_text if _is_deprecated(help_text) else "",
        }
        key = entry["strings"][0]
        if key in seen:  # the same option twice (an example line that looks like one): last wins
            options[seen[key]] = option
        else:
            seen[key] = len(options)
            options.append(option)
    if not options:
        raise CheckError("no options found in the help output")
    return {"format": SPEC_FORMAT, "prog": prog, "allow_abbrev": True, "options": options}


# --------------------------------------------------------------------------------------------------
# Checking an argv
# --------------------------------------------------------------------------------------------------


class _Index:
    def __init__(self, spec):
        self.spec = spec
        self.by_string = {}
        for option in spec["options"]:
            for string in option["strings"]:
                self.by_string.setdefault(string, option)
        self.negative_number_options = any(_NEGATIVE_NUMBER.match(s) for s in self.by_string)
        self.allow_abbrev = spec.get("allow_abbrev", True)

    def prefix_matches(self, arg):
        """argparse's _get_option_tuples: [(option, option string, explicit value)]."""
        result = []
        if arg.startswith("--"):
            if self.allow_abbrev:
                prefix, sep, value = arg.partition("=")
                explicit = value if sep else None
                result = [(o, s, explicit) for s, o in self.by_string.items() if s.startswith(prefix)]
        else:
            short, short_value = arg[:2], arg[2:]
            for string, option in self.by_string.items():
                if string == short:
                    result.append((option, string, short_value))
                elif string.startswith(arg):
                    result.append((option, string, None))
        return result

    def classify(self, arg):
        """argparse's _parse_optional: None (a value) or (kind, option, option string, explicit value)."""
        if not arg or arg[0] != "-":
            return None
        if arg in self.by_string:
            return ("exact", self.by_string[arg], arg, None)
        if len(arg) == 1:
            return None
        if "=" in arg:
            string, _sep, value = arg.partition("=")
            if string in self.by_string:
                return ("exact", self.by_string[string], string, value)
        matches = self.prefix_matches(arg)
        if len(matches) > 1:
            return ("ambiguous", None, [s for _option, s, _explicit in matches], None)
        if len(matches) == 1:
            option, string, value = matches[0]
            return ("prefix", option, string, value)
        if _NEGATIVE_NUMBER.match(arg) and not self.negative_number_options:
            return None
        if " " in arg:
            return None
        return ("unknown", None, arg, None)


def _expected(option):
    least, most = option["min_args"], option["max_args"]
    if least == most == 1:
        return "expected one argument"
    if most is None:
        return "expected at least one argument"
    if least == 0 and most == 1:
        return "expected at most one argument"
    return f"expected {least} argument" + ("s" if least != 1 else "")


def _problem(flag, kind, message, hint):
    return {"flag": flag, "kind": kind, "message": message, "hint": hint}


def check_argv(spec, argv):
    """Check one argv against a spec. Returns {"problems": [...], "warnings": [...]}.

    Each problem or warning: {flag, kind, message, hint}. Problem kinds: unknown, ambiguous,
    choice, value_count, explicit_argument, unrecognized_argument, required. Warning kinds:
    deprecated, abbreviation.
    """
    index = _Index(spec)
    argv = [str(token) for token in argv]
    problems, warnings, used = [], [], []

    kinds = []
    after_dashes = False
    for token in argv:
        if after_dashes:
            kinds.append(None)
        elif token == "--":
            after_dashes = True
            kinds.append("--")
        else:
            kinds.append(index.classify(token))

    def following_values(start):
        end = start
        while end < len(argv) and kinds[end] is None:
            end += 1
        return end

    i = 0
    while i < len(argv):
        token, kind = argv[i], kinds[i]
        if kind == "--":
            i += 1
            continue
        if kind is None:
            end = following_values(i)
            stray = argv[i:end]
            previous = _previous_flag(argv, kinds, i)
            hint = "no flag takes it: remove it, or put the flag it belongs to before it"
            if previous is not None and previous["max_args"] == 0:
                hint = f"{previous['strings'][0]} is a switch and takes no value: drop {' '.join(stray)!r}"
            problems.append(
                _problem(token, "unrecognized_argument", f"unrecognized arguments: {' '.join(stray)}", hint)
            )
            i = end
            continue
        match, option, string, explicit = kind
        if match == "ambiguous":
            end = following_values(i + 1)
            problems.append(
                _problem(
                    token.partition("=")[0],
                    "ambiguous",
                    f"ambiguous option: {token} could match {', '.join(string)}",
                    f"spell the flag out in full: {' or '.join(string)}",
                )
            )
            i = end
            continue
        if match == "unknown":
            end = following_values(i + 1)
            name = token.partition("=")[0]
            close = difflib.get_close_matches(name, list(index.by_string), n=3, cutoff=0.75)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            hint += f"{spec.get('prog') or 'this program'} has no such flag: rename or remove it"
            problems.append(_problem(name, "unknown", f"unrecognized arguments: {' '.join(argv[i:end])}", hint))
            i = end
            continue

        canonical = option["strings"][0]
        used.append(option)
        if match == "prefix":
            warnings.append(
                _problem(
                    token.partition("=")[0],
                    "abbreviation",
                    f"{token.partition('=')[0]} is accepted as an abbreviation of {string}",
                    f"write {string} in full: a flag added later can make the abbreviation ambiguous",
                )
            )
        if option["deprecated"]:
            warnings.append(
                _problem(
                    string,
                    "deprecated",
                    f"{string} is deprecated: {option['help']}",
                    "switch to the replacement its help names before it is removed",
                )
            )
        if explicit is not None:
            values, i = [explicit], i + 1
            if option["max_args"] == 0:
                if string.startswith("--") or not _combined_short(index, explicit):
                    problems.append(
                        _problem(
                            string,
                            "explicit_argument",
                            f"argument {_display(option)}: ignored explicit argument {explicit!r}",
                            f"{string} takes no value: write {string} alone",
                        )
                    )
                continue
            if option["min_args"] > 1:
                problems.append(
                    _problem(
                        string,
                        "value_count",
                        f"argument {_display(option)}: {_expected(option)}",
                        f"give {string} {option['min_args']} values, separated by spaces",
                    )
                )
                continue
        else:
            end = following_values(i + 1)
            available = end - (i + 1)
            if option["remainder"]:
                end = len(argv)
                available = end - (i + 1)
            if available < option["min_args"]:
                problems.append(
                    _problem(
                        string,
                        "value_count",
                        f"argument {_display(option)}: {_expected(option)}",
                        f"give {string} a value" if option["min_args"] == 1 else f"give {string} more values",
                    )
                )
                i = end
                continue
            take = available if option["max_args"] is None else min(available, option["max_args"])
            values = argv[i + 1 : i + 1 + take]
            i = i + 1 + take
        if option["choices"] is not None and not option["remainder"]:
            for value in values:
                if value != "--" and value not in option["choices"]:
                    choices = ", ".join(repr(c) for c in option["choices"])
                    problems.append(
                        _problem(
                            canonical,
                            "choice",
                            f"argument {_display(option)}: invalid choice: {value!r} (choose from {choices})",
                            f"set {canonical} to one of: {', '.join(option['choices'])}",
                        )
                    )

    if "--config" not in argv:  # sglang fills required flags from its --config file
        for option in index.spec["options"]:
            if option["required"] and not any(option is seen for seen in used):
                problems.append(
                    _problem(
                        option["strings"][0],
                        "required",
                        f"the following arguments are required: {_display(option)}",
                        f"add {option['strings'][0]}",
                    )
                )
    return {"problems": problems, "warnings": warnings}


def _display(option):
    return "/".join(option["strings"])


def _combined_short(index, letters):
    """``-xyz``: every letter a known short switch (argparse accepts the combination)."""
    for letter in letters:
        option = index.by_string.get("-" + letter)
        if option is None or option["max_args"] != 0:
            return False
    return True


def _previous_flag(argv, kinds, i):
    for j in range(i - 1, -1, -1):
        if kinds[j] is not None and kinds[j] != "--":
            return kinds[j][1] if kinds[j][0] in ("exact", "prefix") else None
    return None


def check_argvs(spec, argvs):
    """{name: argv} -> {name: {"problems": [...], "warnings": [...]}}; argvs must be lists."""
    results = {}
    for name, argv in argvs.items():
        if not isinstance(argv, (list, tuple)):
            raise CheckError(f"argvs[{name!r}] must be a list of argument tokens, got {type(argv).__name__}")
        results[name] = check_argv(spec, argv)
    return results
