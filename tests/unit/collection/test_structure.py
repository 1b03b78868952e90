"""The shape of the product's Python, read with ast: no function longer than LONGEST lines, and no import cycle
between the packages of plugins/module_utils (a package that imports another which imports it back: the two can
then only be read, tested and changed together)."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PREFIX = "ansible_collections.disagg.sglang.plugins.module_utils."
# The longest a product function may be, decorators and docstring included: a longer one is split into named steps.
LONGEST = 80


def product_files():
    """Every product Python file: the plugins, and the scripts the roles copy to the hosts."""
    return sorted([*(REPO / "plugins").rglob("*.py"), *(REPO / "roles").glob("*/files/*.py")])


def long_functions(path, longest=LONGEST, base=REPO):
    """["FILE:LINE NAME (N lines)"] for each function or method of PATH longer than LONGEST lines, counted from its
    first decorator to its last line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = node.end_lineno - start + 1
            if lines > longest:
                found.append(f"{path.relative_to(base)}:{start} {node.name} ({lines} lines)")
    return found


def test_no_product_function_is_longer_than_80_lines():
    files = product_files()
    assert len(files) > 100, files  # the walk found the product
    found = [f for path in files for f in long_functions(path)]
    assert found == [], "split these into named steps: " + "; ".join(found)


def test_the_length_check_names_a_long_function_and_method(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST - 2))
    method = "".join(f"    {line}\n" for line in f"@staticmethod\ndef m():\n{body}".splitlines())
    source = tmp_path / "long.py"
    source.write_text(f"def short():\n    return 1\n\n\n@decorated\ndef f():\n{body}    y = 1\n    z = 2\n\n\n"
                      f"class C:\n{method}")  # fmt: skip
    assert long_functions(source, base=tmp_path) == [f"long.py:5 f ({LONGEST + 2} lines)"]
    assert long_functions(source, base=tmp_path, longest=LONGEST - 1) == [
        f"long.py:5 f ({LONGEST + 2} lines)",
        f"long.py:{LONGEST + 10} m ({LONGEST} lines)",
    ]


def package_imports(root=MODULE_UTILS):
    """{package: {package it imports}} between the packages of module_utils, from every import statement (top level
    or inside a function: both make the two packages one unit)."""
    graph = {}
    for path in sorted(root.glob("*/*.py")):
        package = path.parent.name
        edges = graph.setdefault(package, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith(PREFIX):
                    other = name[len(PREFIX) :].split(".")[0]
                    if other != package and (root / other).is_dir():
                        edges.add(other)
    return graph


def cycles(graph):
    """Each import cycle of GRAPH once, as ["a", "b", ..., "a"] starting at its smallest package."""
    found = set()

    def walk(path):
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.add((*path, nxt))
            elif nxt not in path and nxt > path[0]:
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return [list(c) for c in sorted(found)]


def test_no_import_cycle_between_module_utils_packages():
    graph = package_imports()
    assert {"plan", "host", "units", "router"} <= set(graph), graph  # the walk found the packages
    assert cycles(graph) == [], "import cycles between module_utils packages: " + "; ".join(
        " -> ".join(c) for c in cycles(graph)
    )


@pytest.mark.parametrize(
    ("graph", "expect"),
    [
        pytest.param({"a": {"b"}, "b": set()}, [], id="one way"),
        pytest.param({"host": {"plan"}, "plan": {"host"}}, [["host", "plan", "host"]], id="two packages"),
        pytest.param({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c", "a"]], id="three packages"),
        pytest.param({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}, [["a", "b", "a"], ["a", "c", "a"]], id="two loops"),
    ],
)
def test_the_cycle_check_names_each_cycle(graph, expect):
    assert cycles(graph) == expect


def test_the_import_walk_reads_imports_inside_functions_too(tmp_path):
    for package, text in {
        "host": "def f():\n    from ansible_collections.disagg.sglang.plugins.module_utils.plan import rules\n",
        "plan": "from ansible_collections.disagg.sglang.plugins.module_utils.host.address_probes import REACHABLE\n",
    }.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text(text)
    assert cycles(package_imports(tmp_path)) == [["host", "plan", "host"]]
