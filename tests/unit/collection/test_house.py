"""The house keeps no dead names and no hidden entry points: every public name of plugins/module_utils has a caller
in the product (plugins/, roles/; scripts/ for the generator of the argument specs), not only in tests; and every
role's README names each entry point of its meta/argument_specs.yml, so a reader finds every tasks_from there."""

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
MODULE_UTILS = sorted((REPO / "plugins" / "module_utils").glob("**/*.py"))
ROLES = sorted(p.parents[1].name for p in (REPO / "roles").glob("*/meta/argument_specs.yml"))
PRODUCT_SUFFIXES = (".py", ".yml", ".yaml", ".j2")


def product_texts():
    """{path: text} of the product's files (and scripts/, whose generator writes the argument specs); no tests."""
    paths = [p for top in ("plugins", "roles", "scripts") for p in (REPO / top).glob("**/*")]
    return {p: p.read_text() for p in paths if p.is_file() and p.suffix in (*PRODUCT_SUFFIXES, ".sh")}


def public_names(text):
    """The top-level functions, classes and assigned names of Python TEXT that do not begin with _."""
    names = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def uncalled(texts):
    """'path:name' of each public module_utils name that no product file uses: not its own file past the definition,
    nor a file that names its module and the name."""
    words = {path: set(re.findall(r"\w+", text)) for path, text in texts.items()}
    found = []
    for path in MODULE_UTILS:
        own = texts[path]
        for name in public_names(own):
            used = len(re.findall(rf"\b{re.escape(name)}\b", own)) > 1 or any(
                other != path and path.stem in have and name in have for other, have in words.items()
            )
            if not used:
                found.append(f"{path.relative_to(REPO)}:{name}")
    return found


def test_every_public_module_utils_name_has_a_product_caller():
    assert uncalled(product_texts()) == [], "no caller in plugins/ or roles/ (remove it, or make it _private)"


def test_a_name_only_tests_call_is_found(tmp_path):
    """The check itself: a name called from a test file only is dead, one its own file calls is not."""
    lib = REPO / "plugins" / "module_utils" / "units" / "drain.py"
    texts = product_texts()
    texts[lib] = texts[lib] + "\n\ndef only_tests_call_me():\n    return 1\n"
    names = set(uncalled(texts))
    assert "plugins/module_utils/units/drain.py:only_tests_call_me" in names
    assert "plugins/module_utils/units/drain.py:drain_instance" not in names


def entry_points(role):
    return list(yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"])


def missing_entry_points(role, readme):
    """The entry points of ROLE that README does not name in backticks (`rollback`, `tasks_from: rollback`)."""
    return [e for e in entry_points(role) if not re.search(rf"`(?:tasks_from: )?{re.escape(e)}(?:\.yml)?`", readme)]


@pytest.mark.parametrize("role", ROLES)
def test_each_roles_readme_names_every_entry_point(role):
    readme = REPO / "roles" / role / "README.md"
    assert readme.is_file(), f"roles/{role} has no README.md"
    assert missing_entry_points(role, readme.read_text()) == []


def test_a_readme_without_an_entry_point_is_caught():
    text = (REPO / "roles" / "sglang" / "README.md").read_text().replace("`rollback`", "rollback")
    assert "rollback" in missing_entry_points("sglang", text)
