"""The variable table (plugins/module_utils/plan/variables.py): it covers every user variable of every role, agrees with
the argument specs, gives every numeric variable a range, refuses each end of each range and accepts it, names the
percent-for-a-fraction and host:port mistakes, and docs/variables.md and the README's variable table show it.

`python3 scripts/gen_variables.py` rewrites docs/variables.md and the roles' argument specs from the table.
"""

import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.disagg.sglang.plugins.module_utils.plan import variables as vt  # noqa: E402

DOC = REPO / "docs/variables.md"
# Options of entry points that are the roles' own plumbing (set by another role's task, never by a user).
PLUMBING = {
    "_sglang_units",
    "_sglang_backups",
    "_sglang_started_units",
    "_sglang_rollback",
    "_sglang_health_specs",
    "_sglang_health_restarts",
    "_sglang_health_services",
    "_sglang_health_poll_interval",
    "sglang_worker_units",
}
# argument spec type -> the table kinds that may stand for it
KINDS = {
    "bool": {"bool"},
    "int": {"int", "port"},
    "float": {"float", "fraction"},
    "str": {"str", "text", "path", "path_or_empty", "host", "choice", "duration", "mode", "secret", "pattern"},
    "path": {"path", "path_or_empty"},
    "list": {"list", "list_of_str", "list_of_path", "list_of_int"},
    "dict": {"map"},
    "raw": {"port", "int", "float", "str", "path", "choice", "map"},
}


@functools.cache
def specs():
    """{variable: (role, option spec)} over every entry point of every role."""
    found = {}
    for path in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        role = path.parts[-3]
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            for name, option in (entry.get("options") or {}).items():
                if name not in PLUMBING:
                    found.setdefault(name, (role, option))
    return found


@functools.cache
def defaults():
    """{variable: (role, default value)} of every role's defaults/main.yml."""
    found = {}
    for path in sorted(REPO.glob("roles/*/defaults/main.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            found[name] = (path.parts[-3], value)
    return found


def test_every_variable_of_every_role_is_in_the_table_with_its_role():
    want = {**{n: r for n, (r, _o) in specs().items()}, **{n: r for n, (r, _v) in defaults().items()}}
    missing = sorted(set(want) - set(vt.VARIABLES))
    assert missing == [], f"variables without a row in plugins/module_utils/plan/variables.py: {missing}"
    extra = sorted(set(vt.VARIABLES) - set(want))
    assert extra == [], f"rows of variables no role has: {extra}"
    # a variable belongs to the role whose defaults set it (sglang_topology_*: roles/sglang, though the
    # topology role's spec names it too), else to the role whose argument spec names it (sglang_model_path)
    wrong = {n: (vt.VARIABLES[n]["role"], r) for n, r in want.items() if vt.VARIABLES[n]["role"] != r}
    assert wrong == {}, wrong


@pytest.mark.parametrize("name", sorted(specs()))
def test_the_argument_spec_and_the_table_agree_on_type_and_choices(name):
    _role, option = specs()[name]
    row = vt.VARIABLES[name]
    kind = row["kind"].split(":")[0]
    allowed = KINDS[option.get("type", "str")] | ({"float", "path"} if row["also"] else set())  # "inf", "auto"
    assert kind in allowed, (name, option.get("type"), row["kind"])
    if option.get("choices") or row["choices"]:
        assert option.get("choices") == row["choices"], (name, option.get("choices"), row["choices"])


@pytest.mark.parametrize("name", sorted(vt.VARIABLES))
def test_every_numeric_variable_has_a_range_and_every_row_a_text(name):
    row = vt.VARIABLES[name]
    if row["kind"] in ("int", "float", "fraction", "list_of_int"):
        assert row["min"] is not None and row["max"] is not None and row["min"] < row["max"], row
    assert vt.range_text(name)


@pytest.mark.parametrize("name", sorted(defaults()))
def test_every_default_passes_its_own_row(name):
    role, value = defaults()[name]
    if isinstance(value, str) and "{{" in value:
        return  # templated from another variable: checked as the run templates it (the sandbox runs)
    assert vt.variable_problems(role, {name: value}) == []


def _ends(row):
    """(accepted, refused) values at the ends of a numeric row."""
    lo, hi = row["min"], row["max"]
    step = 1 if row["kind"] in ("int", "list_of_int") else min(0.001, (hi - lo) / 10)
    return [lo, hi], [lo - step, hi + step]


NUMERIC = sorted(n for n, r in vt.VARIABLES.items() if r["kind"] in ("int", "float", "fraction"))


@pytest.mark.parametrize("name", NUMERIC)
def test_each_end_of_each_range_is_accepted_and_one_step_past_it_refused(name):
    row = vt.VARIABLES[name]
    accepted, refused = _ends(row)
    for value in [*accepted, str(accepted[0])]:  # Ansible's templating hands over digits as strings
        assert vt.variable_problems(row["role"], {name: value}) == [], value
    for value in [*refused, "ten", True, None, [1]]:
        [message] = vt.variable_problems(row["role"], {name: value})
        assert message.startswith(f"{name} is ") and vt.range_text(name) in message, message


def test_a_whole_number_row_refuses_a_fraction_and_a_number_row_takes_one():
    assert vt.variable_problems("sglang", {"sglang_restart_sec": 1.5})
    assert vt.variable_problems("sglang", {"sglang_restart_sec": 2.0}) == []
    assert vt.variable_problems("sglang", {"sglang_kv_min_gbps": "2.5"}) == []


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("sglang_monitoring_kv_cache_usage_threshold", 95, "(a fraction: 0.95 for 95 %)"),
        ("sglang_monitoring_slo_quantile", 99, "(a fraction: 0.99 for 99 %)"),
        ("sglang_bench_accuracy_floor", 90, "(a fraction: 0.9 for 90 %)"),
        ("sglang_bench_accuracy_max_drop", "5", "(a fraction: 0.05 for 5 %)"),
    ],
)
def test_a_percentage_given_for_a_fraction_is_named(name, value, hint):
    [message] = vt.variable_problems(vt.VARIABLES[name]["role"], {name: value})
    assert hint in message, message


@pytest.mark.parametrize("value", ["node-1", "gpu7.example.org", "10.0.0.7", "0.0.0.0", "fd00::7", "::1"])
def test_a_host_field_takes_a_name_or_an_address(value):
    assert vt.variable_problems("sglang_router", {"sglang_router_host": value}) == []


@pytest.mark.parametrize("value", ["10.0.0.7:8000", "http://node-1", "node-1/x", "node 1", "", "-x", "[::1]:80", 7])
def test_a_host_field_refuses_a_port_a_url_a_path(value):
    [message] = vt.variable_problems("sglang", {"sglang_advertise_address": value})
    assert message.startswith("sglang_advertise_address is ") and "host name or IP address" in message, message
    if isinstance(value, str) and (":" in value or "/" in value):
        assert "no scheme, port or path" in message


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("sglang_kv_probe", "false", "a quoted 'false' is a non-empty string"),
        ("sglang_gpu_groups", "video", "a single value still needs its -"),
        ("sglang_worker_roles", ["prefill", "router"], "list of `prefill`, `decode`"),
        ("sglang_kv_p2p_policy", "warning", "choose one of `fail`, `warn`, `off`"),
        ("sglang_unit_prefix", "sglang/", "letters, digits, _ . : or -"),
        ("sglang_venvs_dir", "opt/venvs", "an absolute path"),
        ("sglang_bench_request_rate", 0, "number 0.001-1000000 or `inf`"),
        ("sglang_bench_concurrencies", [1, 0], "list of whole numbers 1-4096"),
        ("sglang_bench_concurrencies", [], "list of whole numbers 1-4096"),
        ("sglang_monitoring_slo_for", "5 minutes", "Prometheus duration"),
        ("sglang_monitoring_file_mode", "644x", "octal file mode"),
        ("sglang_router_port", 70000, "port 1-65535"),
    ],
)
def test_other_kinds_refuse_with_the_rule_in_words(name, value, fragment):
    [message] = vt.variable_problems(vt.VARIABLES[name]["role"], {name: value})
    assert fragment in message, message


def test_also_values_an_unset_variable_and_an_unknown_name():
    assert vt.variable_problems("sglang_bench", {"sglang_bench_request_rate": "inf"}) == []
    assert vt.variable_problems("sglang_bench", {"sglang_bench_accuracy_baseline": "none"}) == []
    with pytest.raises(KeyError, match="not a variable of role sglang_bench"):
        vt.variable_problems("sglang_bench", {"sglang_router_port": 1})


def _generator():
    spec = importlib.util.spec_from_file_location("gen_variables", REPO / "scripts/gen_variables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_argument_specs_and_the_variables_page_are_written_from_the_table():
    """Each role's meta/argument_specs.yml and docs/variables.md are what scripts/gen_variables.py writes from the
    table and the roles' defaults: a row, a description, a range or a default changed without the script fails."""
    files = _generator().render()
    assert DOC in files and len(files) == len(vt.ROLES) + 1
    stale = [str(path.relative_to(REPO)) for path, text in files.items() if path.read_text() != text]
    assert stale == [], f"stale: {stale}; run python3 scripts/gen_variables.py"


def test_a_changed_row_makes_its_argument_spec_stale(monkeypatch):
    """The comparison above sees a change of the table (not only of the files)."""
    path = REPO / "roles/sglang_monitoring/meta/argument_specs.yml"
    row = dict(vt.VARIABLES["sglang_monitoring_queue_threshold"], doc=["Another text."])
    monkeypatch.setitem(vt.VARIABLES, "sglang_monitoring_queue_threshold", row)
    assert _generator().render()[path] != path.read_text()


def test_every_row_has_a_default_in_its_roles_defaults_or_is_required():
    """The table and roles/*/defaults/main.yml do not drift apart: a row without a default must be required, and
    (test_every_variable_of_every_role_is_in_the_table_with_its_role) a default without a row fails."""
    found = defaults()
    lacking = sorted(n for n, row in vt.VARIABLES.items() if n not in found and not row["required"])
    assert lacking == [], f"rows without a default in roles/*/defaults/main.yml nor required=True: {lacking}"
    required_with_default = sorted(n for n, row in vt.VARIABLES.items() if row["required"] and n in found)
    assert required_with_default == []


def test_every_row_is_listed_at_an_entry_point_of_its_roles():
    listed = {n for role, entries in vt.ENTRY_POINTS.items() for e in entries for n in vt.entry_options(role, e)}
    assert sorted(set(vt.VARIABLES) - listed) == []
    for name, row in vt.VARIABLES.items():
        for where in row["at"]:
            role, entry = where.split(":")
            spec = yaml.safe_load((REPO / f"roles/{role}/meta/argument_specs.yml").read_text())
            assert entry in spec["argument_specs"], (name, where)


def _readme_rows():
    text = (REPO / "README.md").read_text()
    section = text.split("## Variables a user changes", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_the_readme_variable_table_shows_each_range():
    rows = _readme_rows()
    assert len(rows) >= 20
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = [n for n in re.findall(r"`([a-z0-9_]+)`", cells[0]) if n in vt.VARIABLES]
        assert names, line
        for name in names:
            assert vt.range_text(name) in cells[2], (name, cells[2])
