"""sglang_profile: a shipped name, a name in the inventory's profiles/, or a file path."""

from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.plan.plan_inputs import profile_file

REPO = Path(__file__).resolve().parents[3]
SHIPPED = str(REPO / "profiles")


@pytest.fixture
def inventory(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.yml").write_text("flags: {common: {page-size: 64}}\n")
    # An inventory profile of a shipped name wins over the shipped one.
    (tmp_path / "profiles" / "deepseek_v4_flash_sm120.yml").write_text("flags: {}\n")
    (tmp_path / "elsewhere.yml").write_text("flags: {}\n")
    return tmp_path


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("mine", "{inv}/profiles/mine.yml"),
        ("deepseek_v4_flash_sm120", "{inv}/profiles/deepseek_v4_flash_sm120.yml"),
        ("elsewhere.yml", "{inv}/elsewhere.yml"),
        ("{inv}/elsewhere.yml", "{inv}/elsewhere.yml"),
    ],
)
def test_the_profile_is_found_where_the_user_put_it(inventory, name, found):
    result = profile_file(name.format(inv=inventory), str(inventory), SHIPPED)
    assert result == {"path": found.format(inv=inventory), "problems": []}


def test_a_shipped_profile_without_an_inventory_copy(tmp_path):
    result = profile_file("deepseek_v4_flash_sm120", str(tmp_path), SHIPPED)
    assert result["path"] == f"{SHIPPED}/deepseek_v4_flash_sm120.yml"


def test_an_unknown_profile_says_where_it_looked_and_what_exists(inventory):
    (problem,) = profile_file("llama_sm90", str(inventory), SHIPPED)["problems"]
    assert "sglang_profile 'llama_sm90' is not a shipped profile nor a file of the inventory" in problem
    assert f"{inventory}/profiles/llama_sm90.yml" in problem and "choose one of deepseek_v4_flash_sm120" in problem
    assert "put llama_sm90.yml into the inventory's profiles/ directory" in problem
