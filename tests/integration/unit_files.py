"""Reading rendered unit files back: the command line and environment an expert would compare."""

import re
import shlex


def parse_unit(text):
    """(prefix argv, {flag: values}, env) of a rendered unit's ExecStart and Environment lines."""
    joined = re.sub(r"\\\n\s*", " ", text)
    exec_line = re.search(r"^ExecStart=(.*)$", joined, re.MULTILINE).group(1)
    tokens = shlex.split(exec_line.replace("%%", "%").replace("$$", "$"))
    first_flag = next(
        i
        for i, t in enumerate(tokens)
        if t.startswith("--")
        and i > 0
        and tokens[i - 1] != "-m"
        and not t.startswith(("--cpunodebind", "--membind", "--physcpubind"))
    )
    flags, current = {}, None
    for token in tokens[first_flag:]:
        if token.startswith("--"):
            current = token
            assert current not in flags, f"{current} rendered twice"
            flags[current] = []
        else:
            flags[current].append(token)
    env = dict(shlex.split(line)[0].split("=", 1) for line in re.findall(r"^Environment=(.*)$", joined, re.MULTILINE))
    return tokens[:first_flag], flags, env


def new_units_in_diff(output):
    """{unit: content} of the unit files a --diff run would create (diffs from nothing: @@ -0,0 +1,N @@)."""
    units = {}
    for block in re.split(r"^--- before$", output, flags=re.MULTILINE)[1:]:
        hunk = re.search(r"^@@ -0,0 \+1,(\d+) @@\n", block, re.MULTILINE)
        if not hunk:
            continue
        lines = block[hunk.end() :].split("\n")[: int(hunk.group(1))]
        assert all(line.startswith("+") for line in lines), block[:2000]
        content = "\n".join(line[1:] for line in lines) + "\n"
        name = re.search(r"^SyslogIdentifier=(\S+)$", content, re.MULTILINE)
        if name:
            units[name.group(1)] = content
    return units
