"""ansible-doc renders every module, filter and role of the collection. The names come from the files, so a
new plugin or role is covered without touching this test. The README stays a user's page: short, the two commands
of a fresh machine, pipelining in its ansible.cfg, the tags that exist."""

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_DOC = str(Path(sys.executable).with_name("ansible-doc"))

MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
INTERNAL_ROLE = "sglang"
ROLES = sorted(p.parents[1].name for p in (REPO / "roles").glob("*/meta/argument_specs.yml"))


def _filters():
    names = []
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        plugin = importlib.import_module(f"ansible_collections.disagg.sglang.plugins.filter.{path.stem}")
        names += plugin.FilterModule().filters()
    return sorted(names)


FILTERS = _filters()
ITEMS = [("module", n) for n in MODULES] + [("filter", n) for n in FILTERS] + [("role", n) for n in ROLES]


def ansible_doc(*args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([ANSIBLE_DOC, *args], capture_output=True, text=True, env=env, check=False)


@pytest.fixture(scope="module")
def docs():
    """One ansible-doc --json call per plugin type, for every name of that type."""
    found = {}
    for kind in ("module", "filter", "role"):
        names = [f"disagg.sglang.{n}" for k, n in ITEMS if k == kind]
        proc = ansible_doc("-t", kind, "--json", *names)
        assert proc.returncode == 0, proc.stderr
        found[kind] = json.loads(proc.stdout)
    return found


def test_every_kind_has_plugins():
    assert MODULES and FILTERS and ROLES


@pytest.mark.parametrize(("kind", "name"), ITEMS, ids=[f"{k}:{n}" for k, n in ITEMS])
def test_ansible_doc_renders(docs, kind, name):
    doc = docs[kind].get(f"disagg.sglang.{name}")
    assert doc, f"ansible-doc -t {kind} disagg.sglang.{name} found no documentation"
    if kind == "role" and name == INTERNAL_ROLE:
        # no main: Ansible would validate it on every host in every play of a public role (its dependency)
        assert "main" not in doc["entry_points"], f"the internal role {name} has a main entry point"
        for entry, spec in doc["entry_points"].items():
            assert spec.get("short_description"), f"role {name}: entry point {entry} has no short_description"
    elif kind == "role":
        main = doc["entry_points"]["main"]
        assert main.get("short_description"), f"role {name}: meta/argument_specs.yml main has no short_description"
    else:
        assert doc["doc"].get("short_description"), f"{kind} {name} has no short_description"
        assert doc.get("examples"), f"{kind} {name} has no EXAMPLES"


@pytest.mark.parametrize("kind", ["module", "filter"])
def test_listing_has_no_undocumented(kind):
    proc = ansible_doc("-t", kind, "-l", "disagg.sglang")
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    names = MODULES if kind == "module" else FILTERS
    assert set(listed) == {f"disagg.sglang.{n}" for n in names}
    assert [line for line in listed.values() if "UNDOCUMENTED" in line] == []


# The filters a user's own playbooks may call; every other filter says in its short description that it is the
# roles' own plumbing, so `ansible-doc -t filter -l disagg.sglang` tells the two apart.
USER_FILTERS = {"pd_placement", "scrape_targets", "kv_transfer_report",
                "in_flight_requests"}  # fmt: skip


def test_the_filter_listing_tells_a_users_filters_from_the_roles_plumbing():
    proc = ansible_doc("-t", "filter", "-l", "disagg.sglang")
    listed = {line.split()[0].removeprefix("disagg.sglang."): line for line in proc.stdout.splitlines() if line.strip()}
    plumbing = {name for name, line in listed.items() if "The roles' own plumbing" in line}
    assert set(listed) - plumbing == USER_FILTERS, sorted(set(listed) - plumbing)


def test_the_internal_role_applied_on_its_own_stops_every_host_and_names_the_public_roles(tmp_path):
    """What its entry points say: applied on its own (not as the public roles' dependency) it fails, once for the
    play (run_once: no host goes on), and names what to run instead."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"a": local, "b": local}}}))
    (tmp_path / "play.yml").write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                                    "roles": [f"disagg.sglang.{INTERNAL_ROLE}"]}]))  # fmt: skip
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1")
    playbook = str(Path(sys.executable).with_name("ansible-playbook"))
    proc = subprocess.run([playbook, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    flat = " ".join(proc.stdout.split())
    assert "disagg.sglang.sglang is internal to the collection: run the playbook disagg.sglang.site" in flat, flat
    assert "sglang_deps, sglang_topology, sglang_worker and sglang_router" in flat, flat
    ran = {line.split(":", 1)[0].strip() for line in proc.stdout.split("PLAY RECAP", 1)[1].splitlines()
           if "ok=" in line}  # fmt: skip
    assert ran == {"a"}, f"a host went on past the guard: {proc.stdout[-1500:]}"
    assert "failed=1" in proc.stdout.split("PLAY RECAP", 1)[1]


README = REPO / "README.md"


def test_the_readme_is_a_users_page_under_250_lines():
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: the design belongs in docs/architecture.md"


def test_the_readme_gives_a_fresh_machine_exactly_two_commands_make_demo_and_make_test():
    text = README.read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    assert commands == ["make demo", "make test"], commands
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_readme_turns_on_pipelining_in_its_ansible_cfg():
    text = README.read_text()
    ini = text.split("```ini\n", 1)[1].split("```", 1)[0]
    assert re.search(r"^\[connection\]\npipelining = true$", ini, re.M), ini


def test_every_tag_the_readme_names_is_a_tag_of_site_yml():
    """The README's tag list is exactly the tags of the playbooks site.yml imports (always aside)."""
    tags = set()
    for path in [*(REPO / "playbooks").glob("*.yml"), *(REPO / "roles").glob("*/tasks/*.yml")]:
        for found in re.findall(r"^\s*tags: \[([^\]]*)\]", path.read_text(), re.M):
            tags |= {t.strip() for t in found.split(",")}
    tags -= {"always"}
    line = next(line for line in README.read_text().splitlines() if line.startswith("Tags: "))
    named = set(re.findall(r"`([a-z_]+)`", line.split(".", 1)[0]))
    assert named == tags, (sorted(named), sorted(tags))


def _own_documentation(name):
    source = (REPO / "plugins" / "modules" / f"{name}.py").read_text()
    return yaml.safe_load(source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])


@pytest.mark.parametrize("name", MODULES)
def test_a_module_takes_its_authors_and_attribute_meanings_from_the_shared_fragment(docs, name):
    """plugins/doc_fragments/module.py says once who maintains the modules and what check_mode and diff_mode mean;
    each module says only how it behaves in them (details)."""
    own = _own_documentation(name)
    assert "disagg.sglang.module" in own["extends_documentation_fragment"], name
    assert "author" not in own, f"{name} names its authors itself"
    for attribute in ("check_mode", "diff_mode"):
        own_attribute = own.get("attributes", {}).get(attribute, {})
        assert "description" not in own_attribute, f"{name}: {attribute} says what it means itself"
        rendered = docs["module"][f"disagg.sglang.{name}"]["doc"]["attributes"][attribute]
        assert rendered["description"] and rendered["details"], (name, attribute, rendered)


ARCHITECTURE = REPO / "docs" / "architecture.md"
MODULE_UTILS = REPO / "plugins" / "module_utils"


def _package_rows():
    """{package: [files]} from the module_utils table of docs/architecture.md."""
    section = ARCHITECTURE.read_text().split("## plugins/module_utils", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            rows[cells[0].strip("`").rstrip("/")] = re.findall(r"`([a-z0-9_]+\.py)`", cells[2])
    return rows


def test_the_architecture_names_each_module_utils_package_and_no_other():
    packages = {p.name for p in MODULE_UTILS.iterdir() if (p / "__init__.py").is_file()}
    rows = _package_rows()
    assert set(rows) == packages, f"docs/architecture.md lacks {packages - set(rows)}, names {set(rows) - packages}"
    flat = sorted(p.name for p in MODULE_UTILS.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"module_utils files outside a package: {flat}"


def test_the_architecture_lists_the_files_of_each_module_utils_package():
    for package, named in _package_rows().items():
        files = sorted(p.name for p in (MODULE_UTILS / package).glob("*.py") if p.name != "__init__.py")
        assert sorted(named) == files, f"{package}/: the doc names {sorted(named)}, the package has {files}"


def test_every_repository_path_the_architecture_names_exists():
    tops = ("plugins/", "roles/", "playbooks/", "profiles/", "tests/", "inventories/", "docs/", "molecule/")
    named = {t.rstrip("/") for t in re.findall(r"`([^`\s]+)`", ARCHITECTURE.read_text()) if t.startswith(tops)}
    missing = sorted(p for p in named if "*" not in p and "NAME" not in p and not (REPO / p).exists())
    assert named and missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_readme_states_the_ansible_core_the_collection_requires():
    """meta/runtime.yml's range (">=2.19.0,<2.22": the oldest and the newest release tested) in the README's words."""
    required = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    oldest, major, below = re.fullmatch(r">=(\d+\.\d+)(?:\.0)?,<(\d+)\.(\d+)", required).groups()
    newest = f"{major}.{int(below) - 1}"
    assert f"ansible-core {oldest} to {newest} (`meta/runtime.yml`" in " ".join(README.read_text().split()), required
