"""The units' files written in one call (module_utils/units/unit_files.py), in a temp dir: a file changes only when its
content or mode differs, a changed file keeps a backup, check mode writes nothing, a secret file never shows in a
diff; one backup set per unit ({unit_file, env_file, record}) from the write to its restore and drop; the units
step's answer (what changed, what restarts now, what rolls) from one write."""

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
    # one backup set for the unit: its unit file's backup, nothing kept for the files that did not change
    want = {"d0": {"unit_file": changed[0]["backup_file"], "env_file": "", "record": ""}}
    assert unit_files.backup_sets(result["files"]) == want


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


SPEC = {"unit": "d0", "role": "decode", "host": "h1", "health_url": "http://127.0.0.1:30001/health", "port": 30001,
        "flags": {"page-size": 64}}  # fmt: skip


def deploy_entry(tmp_path, unit_text="[Service]\nExecStart=/bin/true\n", env_text='HF_TOKEN="s3cret"\n', **spec):
    spec = {**SPEC, "environment_file": str(tmp_path / "env" / "d0.env"), **spec}
    return {"spec": spec, "unit_file": unit_text, "env_file": env_text}


def deploy(tmp_path, entries, rule=None):
    """What the module does with O(deploy): the three files of each unit written (the test's own owner), then the
    units step's answer."""
    files = unit_files.deploy_files(entries, str(tmp_path / "units"), str(tmp_path / "records"))
    for spec in files:
        spec.pop("owner"), spec.pop("group")
    dirs = [{"path": str(tmp_path / d)} for d in ("units", "records", "env")]
    result = unit_files.write(files, dirs, False, fs())
    return {**result, **unit_files.deployed(entries, result, rule)}


RULE = {"totals": {"decode": 2}, "router_serving": True, "batch": 1, "records": {}}


def test_the_record_is_written_as_to_nice_json_of_the_units_record(tmp_path):
    """The record the module makes from the spec is the text the units step rendered with to_nice_json(sort_keys=true)
    before: a run after the upgrade rewrites no record."""
    import json  # noqa: PLC0415

    from ansible.plugins.filter.core import to_nice_json  # noqa: PLC0415
    from ansible_collections.disagg.sglang.plugins.module_utils.units import units  # noqa: PLC0415

    spec = {**SPEC, "environment_file": "/e/d0.env", "gpus": [0, 1], "name": "d\u00e9code"}
    text = unit_files.record_text(spec, "/etc/systemd/system")
    assert text == to_nice_json(units.record(spec, "/etc/systemd/system"), sort_keys=True) + "\n"
    assert json.loads(text)["unit_file"] == "/etc/systemd/system/d0.service"


def test_a_first_deploy_starts_the_unit_and_keeps_an_empty_backup_set(tmp_path):
    got = deploy(tmp_path, [deploy_entry(tmp_path)], RULE)
    assert got["kinds_changed"] == ["unit_file", "record", "env_file"]
    # a new unit restarts (starts) now, never rolls: it ran nowhere before
    assert got["restart"] == {"now": ["d0"], "deferred": [], "synced": []}
    assert got["backups"] == {"d0": {"unit_file": "", "env_file": "", "record": ""}}
    assert got["started"] == [{**deploy_entry(tmp_path)["spec"], "backup": got["backups"]["d0"]}]
    assert got["deferred"] == []
    assert (tmp_path / "records" / "d0.json").read_text().endswith("}\n")


def test_a_changed_unit_of_a_role_with_a_second_instance_rolls_with_its_backup_set(tmp_path):
    deploy(tmp_path, [deploy_entry(tmp_path)], RULE)
    got = deploy(tmp_path, [deploy_entry(tmp_path, unit_text="[Service]\nExecStart=/bin/false\n", port=30009)], RULE)
    assert got["kinds_changed"] == ["unit_file", "record"]
    assert got["restart"] == {"now": [], "deferred": ["d0"], "synced": []}
    [rolled] = got["deferred"]
    assert open(rolled["backup"]["unit_file"]).read() == "[Service]\nExecStart=/bin/true\n"
    assert rolled["backup"]["record"] and rolled["backup"]["env_file"] == ""
    # a deferred unit is waited for in its batch, and its backup set travels with it, not in backups
    assert got["started"] == [] and got["backups"] == {}


def test_only_the_secrets_changed_restarts_now_alone_and_keeps_the_environment_files_backup(tmp_path):
    deploy(tmp_path, [deploy_entry(tmp_path)], RULE)
    got = deploy(tmp_path, [deploy_entry(tmp_path, env_text='HF_TOKEN="n3w"\n')], dict(RULE, totals={"decode": 1}))
    assert got["kinds_changed"] == ["env_file"] and got["restart"]["now"] == ["d0"]
    backup = got["backups"]["d0"]
    assert (backup["unit_file"], backup["record"]) == ("", "") and open(
        backup["env_file"]
    ).read() == 'HF_TOKEN="s3cret"\n'


def test_without_a_rule_as_in_check_mode_nothing_restarts_or_rolls(tmp_path):
    got = deploy(tmp_path, [deploy_entry(tmp_path)])
    assert got["restart"] == {"now": [], "deferred": [], "synced": []} and [s["unit"] for s in got["started"]] == ["d0"]


def test_a_backup_set_is_restored_where_each_file_came_from_then_dropped(tmp_path):
    first = deploy_entry(tmp_path)
    deploy(tmp_path, [first], RULE)
    before = {p: (tmp_path / p).read_text() for p in ("units/d0.service", "env/d0.env", "records/d0.json")}
    changed = deploy_entry(tmp_path, unit_text="[Service]\nExecStart=/bin/false\n", env_text='HF_TOKEN="n3w"\n',
                           port=30009)  # fmt: skip
    got = deploy(tmp_path, [changed], dict(RULE, totals={"decode": 1}))
    backup = got["backups"]["d0"]
    os.chmod(tmp_path / "env" / "d0.env", 0o644)
    entry = {**changed["spec"], "backup": backup}
    put = unit_files.restore([entry], str(tmp_path / "units"), str(tmp_path / "records"), fs(), owner=None)
    assert {p: (tmp_path / p).read_text() for p in before} == before
    assert stat.S_IMODE(os.stat(tmp_path / "env" / "d0.env").st_mode) == 0o600
    # the previous record is read back: the rollback waits at its health URL
    assert put["records"]["d0"]["port"] == 30001 and len(put["restored"]) == 3
    assert sorted(unit_files.drop([entry])) == sorted(backup.values())
    assert not any(p.name.endswith("~") for p in tmp_path.rglob("*"))


def test_a_unit_without_backups_restores_nothing_and_drops_nothing(tmp_path):
    """A unit of the batches a failed rolling restart left alone that kept no backup (its
    files did not change) is handed to restore and drop like the others, and neither touches a file."""
    deploy(tmp_path, [deploy_entry(tmp_path)], RULE)
    entry = {**SPEC, "environment_file": str(tmp_path / "env" / "d0.env"), "backup": dict(unit_files.NO_BACKUP)}
    put = unit_files.restore([entry], str(tmp_path / "units"), str(tmp_path / "records"), fs(), owner=None)
    assert put == {"restored": [], "records": {"d0": {}}}
    assert unit_files.drop([entry]) == []


def test_dropping_in_check_mode_removes_nothing(tmp_path):
    kept = tmp_path / "d0.service.1~"
    kept.write_text("x")
    assert unit_files.drop([{"unit_file": str(kept), "env_file": "", "record": ""}], check=True) == [str(kept)]
    assert kept.exists()


def run_module(args, capsys):
    import json  # noqa: PLC0415

    from ansible.module_utils import testing  # noqa: PLC0415
    from ansible_collections.disagg.sglang.plugins.modules import unit_files as module  # noqa: PLC0415

    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def test_the_module_drops_backup_sets_on_their_own_without_the_units_directories(tmp_path, capsys):
    """wait_outcome.yml and the rolling batch call unit_files with drop alone: no unit_dir or record_dir asked."""
    kept = tmp_path / "d0.service.1~"
    kept.write_text("x")
    rc, out = run_module({"drop": [{"unit_file": str(kept), "env_file": "", "record": ""}]}, capsys)
    assert (rc, out["changed"], out["dropped"]) == (0, True, [str(kept)]) and not kept.exists()


def test_the_module_refuses_a_deploy_without_the_units_directories(tmp_path, capsys):
    rc, out = run_module({"deploy": [deploy_entry(tmp_path)]}, capsys)
    assert rc == 1 and out["msg"] == "unit_dir and record_dir are required with deploy or restore"


def test_the_module_answers_a_host_with_no_unit_left_to_deploy(tmp_path, capsys):
    """A scale-in of a host's last instance: the units step writes nothing and still reads what changed (nothing),
    the units to wait for and to roll (none), as roles/sglang/tasks/units.yml does."""
    args = {"deploy": [], "unit_dir": str(tmp_path / "units"), "record_dir": str(tmp_path / "records"),
            "restart_rule": {"totals": {}, "router_serving": True, "batch": 1, "records": {}}}  # fmt: skip
    rc, out = run_module(args, capsys)
    assert rc == 0 and out["changed"] is False, out
    assert (out["kinds_changed"], out["started"], out["deferred"]) == ([], [], []), out


def test_a_rolled_back_unit_is_waited_for_at_its_previous_records_health_url():
    """The rollback waits where the configuration put back answers: its previous record's health URL and, for a
    router, its previous worker count; a unit that kept no record at the planned ones."""
    entries = [
        {"unit": "r0", "host": "a", "health_url": "http://a:8001/readiness", "expected_workers": 4},
        {"unit": "d0", "host": "a", "health_url": "http://a:30009/health"},
    ]
    records = {"r0": {"health_url": "http://a:8000/readiness", "expected_workers": 2}, "d0": {}}
    got = unit_files.rolled_back(entries, records)
    assert [(s["unit"], s["health_url"], s.get("expected_workers")) for s in got] == [
        ("r0", "http://a:8000/readiness", 2),
        ("d0", "http://a:30009/health", None),
    ]
    assert got[0]["host"] == "a" and "expected_workers" not in got[1]


def test_systemd_is_reloaded_only_when_a_unit_file_went_back():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "", ""

    assert unit_files.reload_systemd(run, ["/etc/disagg-sglang/env/d0.env", "/var/lib/r/d0.json"]) == (False, "")
    assert calls == []
    assert unit_files.reload_systemd(run, ["/etc/systemd/system/d0.service"]) == (True, "")
    assert calls == [["systemctl", "daemon-reload"]]


def test_a_failed_reload_says_so():
    reloaded, error = unit_files.reload_systemd(lambda argv: (1, "", "Access denied\n"), ["/u/d0.service"])
    assert reloaded and error == "systemctl daemon-reload failed (rc 1): Access denied"
