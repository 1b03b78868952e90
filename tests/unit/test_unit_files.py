"""The units' files written in one call (module_utils/units/unit_files.py), in a temp dir: a file changes only when its
content or mode differs, a changed file keeps a backup, check mode writes nothing, a secret file never shows in a
diff, and the answer per kind is shaped as units_changed.yml reads it."""

import os
import shutil
import stat

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.units import unit_files


def fs():
    def backup(path):
        target = f"{path}.1.2026-12-03@08:00:00~"
        shutil.copy2(path, target)
        return target

    return {"backup": backup, "replace": os.replace}


@pytest.fixture(name="specs")
def fixture_specs(tmp_path):
    texts = {"d0": {"unit_file": "[Service]\nExecStart=/bin/true\n", "env_file": 'HF_TOKEN="s3cret"\n',
                    "record": '{"unit": "d0"}'}}  # fmt: skip
    files = unit_files.file_specs(["d0"], texts, str(tmp_path / "units"), str(tmp_path / "records"))
    secret = unit_files.env_file_specs([{"unit": "d0", "environment_file": str(tmp_path / "env" / "d0.env")}], texts)
    for spec in files + secret:  # the owner is root's in the role; here the test's own
        spec.pop("owner"), spec.pop("group")
    dirs = [
        {"path": str(tmp_path / d), "mode": m} for d, m in (("units", "0755"), ("records", "0755"), ("env", "0700"))
    ]
    return {"files": files + [{**s, "secret": True} for s in secret], "dirs": dirs, "tmp": tmp_path}


def test_a_first_write_creates_everything_with_its_mode_and_keeps_no_backup(specs):
    result = unit_files.write(specs["files"], specs["dirs"], False, fs())
    assert result["changed"] and all(f["changed"] for f in result["files"])
    assert not any("backup_file" in f for f in result["files"])
    tmp = specs["tmp"]
    assert (tmp / "records" / "d0.json").read_text() == '{"unit": "d0"}\n'
    assert stat.S_IMODE(os.stat(tmp / "env" / "d0.env").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp / "env").st_mode) == 0o700
    assert [d.get("before_header") for d in result["diff"]] == [None, None]  # new files: "--- before"
    assert all("s3cret" not in d["after"] for d in result["diff"])


def test_a_second_write_changes_nothing(specs):
    unit_files.write(specs["files"], specs["dirs"], False, fs())
    again = unit_files.write(specs["files"], specs["dirs"], False, fs())
    assert not again["changed"] and again["diff"] == []


def test_a_file_edited_by_hand_is_put_back_with_a_backup_of_the_edit(specs):
    unit_files.write(specs["files"], specs["dirs"], False, fs())
    unit = specs["tmp"] / "units" / "d0.service"
    unit.write_text("[Service]\nExecStart=/bin/false\n")
    result = unit_files.write(specs["files"], specs["dirs"], False, fs())
    changed = [f for f in result["files"] if f["changed"]]
    assert [(f["kind"], f["item"]) for f in changed] == [("unit_file", {"unit": "d0"})]
    assert unit.read_text() == "[Service]\nExecStart=/bin/true\n"
    assert open(changed[0]["backup_file"]).read() == "[Service]\nExecStart=/bin/false\n"
    assert unit_files.of_kind(result, "unit_file")["changed"] and not unit_files.of_kind(result, "record")["changed"]


def test_a_mode_changed_by_hand_is_put_back_without_a_rewrite(specs):
    unit_files.write(specs["files"], specs["dirs"], False, fs())
    env = specs["tmp"] / "env" / "d0.env"
    os.chmod(env, 0o644)
    result = unit_files.write(specs["files"], specs["dirs"], False, fs())
    assert [f["kind"] for f in result["files"] if f["changed"]] == ["env_file"]
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o600 and result["diff"] == []


def test_check_mode_says_what_would_change_and_writes_nothing(specs):
    unit_files.write(specs["files"], specs["dirs"], False, fs())
    changed = [{**f, "content": f["content"] + "# more\n"} for f in specs["files"]]
    result = unit_files.write(changed, specs["dirs"], True, fs())
    assert result["changed"] and [d["before_header"] for d in result["diff"]] == [
        str(specs["tmp"] / "units" / "d0.service"),
        str(specs["tmp"] / "records" / "d0.json"),
    ]
    assert "# more" not in (specs["tmp"] / "units" / "d0.service").read_text()
    assert not any(name.endswith("~") for name in os.listdir(specs["tmp"] / "units"))
