"""scripts/test_budget.py: the suite's per-module and slowest-test tables from JUnit XML, and the budget's verdict."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("test_budget_script", REPO / "scripts" / "test_budget.py")
budget = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(budget)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.integration.test_site" name="test_converge" time="300.5"/>
<testcase classname="tests.integration.test_site" name="test_rerun" time="20.0"><failure message="x"/></testcase>
<testcase classname="tests.unit.plan.test_rules.TestTable" name="test_row[a]" time="0.25"/>
<testcase classname="tests.unit.plan.test_rules" name="test_skip" time="0.0"><skipped message="y"/></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def results(tmp_path):
    (tmp_path / "B-pytest.xml").write_text(JUNIT)
    (tmp_path / "steps.tsv").write_text("B-lint\t480\t0\nB-pytest\t2781\t1\n")
    return tmp_path


def test_rows_carry_lane_step_module_and_outcome(results):
    rows = budget.read_results(results)
    assert [(r["lane"], r["step"], r["module"], r["outcome"]) for r in rows] == [
        ("B", "pytest", "tests/integration/test_site.py", "passed"),
        ("B", "pytest", "tests/integration/test_site.py", "failure"),
        ("B", "pytest", "tests/unit/plan/test_rules.py", "passed"),
        ("B", "pytest", "tests/unit/plan/test_rules.py", "skipped"),
    ]


def test_modules_sum_their_tests_slowest_first(results):
    assert budget.by_module(budget.read_results(results)) == [
        ("B-pytest", "tests/integration/test_site.py", 2, 320.5),
        ("B-pytest", "tests/unit/plan/test_rules.py", 2, 0.25),
    ]


@pytest.mark.parametrize(("elapsed", "rc"), [(2699, 0), (2700, 0), (2701, 1)])
def test_the_suite_fails_only_past_its_budget_and_says_where_the_time_went(results, capsys, elapsed, rc):
    assert budget.main([str(results), "--budget", "2700", "--elapsed", str(elapsed), "--lane", "B=2690"]) == rc
    out, err = capsys.readouterr()
    assert f"suite {elapsed} s of a 2700 s budget; lanes: B 2690 s" in out
    assert "| B-lint | 480 | 0 |" in out
    assert "| B-pytest | tests/integration/test_site.py::test_converge | 300 | passed |" in out
    assert ("past its budget of 2700 s" in err) == bool(rc)


def test_the_markdown_file_holds_what_was_printed(results, tmp_path, capsys):
    table = tmp_path / "durations.md"
    budget.main([str(results), "--budget", "10", "--elapsed", "5", "--markdown", str(table)])
    assert table.read_text() == capsys.readouterr().out
