"""What the deps role reads before it builds (deps/deps_state.py): a venv is whole only when its Python runs,
its stamp is this run's and every requirement (with the dependencies pip would install) is there at an allowed
version. The distribution check runs for real, in this venv's Python, over distributions made in a temp dir."""

import collections
import grp
import json
import os
import pwd
import subprocess
import sys

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.disagg.sglang.plugins.module_utils.deps import deps_state
from ansible_collections.disagg.sglang.plugins.modules import deps_state as deps_state_module


def make_dist(site, name, version, requires=()):
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture(name="site")
def fixture_site(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "disagg-top", "1.2.0", ["disagg-dep>=2", "disagg-gone", 'disagg-win; sys_platform == "win32"',
                                            'disagg-extra; extra == "more"'])  # fmt: skip
    make_dist(site, "disagg-dep", "2.1")
    return site


def check(site, wanted):
    proc = subprocess.run(
        [sys.executable, "-c", deps_state.SATISFIED_SCRIPT, json.dumps(wanted)],
        capture_output=True, text=True, check=True, env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    return json.loads(proc.stdout)["problems"]


@pytest.mark.parametrize(
    ("wanted", "problems"),
    [
        ([["disagg-dep==2.1", True]], []),
        ([["Disagg_Dep>=2,<3", True]], []),  # names compare as pip compares them
        ([["disagg-dep==2.0", True]], ["disagg-dep 2.1 is installed, disagg-dep==2.0 wants ==2.0"]),
        ([["disagg-none", True]], ["disagg-none is not installed"]),
        # with dependencies: a dependency removed by hand is found; a marker that does not hold asks for nothing
        ([["disagg-top==1.2.0", True]], ["disagg-gone is not installed (required by disagg-top 1.2.0)"]),
        # without them (sglang_deps_packages_nodeps): only the package itself
        ([["disagg-top==1.2.0", False]], []),
        # an extra asked for brings its requirement
        ([["disagg-top[more]", False], ["disagg-top[more]==1.2.0", True]],
         ["disagg-gone is not installed (required by disagg-top 1.2.0)",
          "disagg-extra is not installed (required by disagg-top 1.2.0)"]),
        ([["./wheels/disagg_dep-2.1-py3-none-any.whl", True]],
         ["./wheels/disagg_dep-2.1-py3-none-any.whl is not a name and version: pip decides"]),
    ],
)  # fmt: skip
def test_the_distribution_check_finds_what_pip_would_install(site, wanted, problems):
    assert check(site, wanted) == problems


STAMP = {"kind": "engine", "name": "engine-abc", "packages": ["disagg-dep==2.1"], "nodeps": ["disagg-top"]}
VENV = {"kind": "engine", "path": "/v/engine-abc", "stamp": STAMP}


def fake_run(rc=0, out='{"problems": []}', err=""):
    calls = []

    def run(argv):
        calls.append(argv)
        return rc, out, err

    run.calls = calls
    return run


@pytest.mark.parametrize(
    ("run", "files", "whole", "problems"),
    [
        (fake_run(), {"/v/engine-abc/disagg-venv.json": json.dumps(STAMP)}, True, []),
        (fake_run(), {}, False, ["it has no disagg-venv.json (never verified)"]),
        (fake_run(), {"/v/engine-abc/disagg-venv.json": json.dumps({**STAMP, "packages": []})}, False,
         ["its disagg-venv.json names another package set (not verified as it is)"]),
        (fake_run(out='{"problems": ["disagg-dep is not installed"]}'),
         {"/v/engine-abc/disagg-venv.json": json.dumps(STAMP)}, False, ["disagg-dep is not installed"]),
        (fake_run(rc=1, out="", err="Traceback\nImportError: libpython3.11.so"),
         {"/v/engine-abc/disagg-venv.json": json.dumps(STAMP)}, False,
         ["its distribution check did not run (ImportError: libpython3.11.so)"]),
    ],
)  # fmt: skip
def test_a_venv_is_whole_only_when_checked_and_stamped_for_this_run(run, files, whole, problems):
    state = deps_state.venv_state(VENV, run, files.get, lambda path: path == "/v/engine-abc/bin/python")
    assert (state["whole"], state["problems"]) == (whole, problems)
    argv = run.calls[0]
    assert argv[0] == "/v/engine-abc/bin/python"
    assert json.loads(argv[3]) == [["disagg-dep==2.1", True], ["disagg-top", False]]


def test_a_venv_without_python_does_not_exist_and_nothing_runs_in_it():
    run = fake_run()
    state = deps_state.venv_state(VENV, run, {}.get, lambda path: False, lambda path: True)
    assert state == {"python": False, "whole": False, "checked": False, "problems": ["it does not exist"]}
    assert run.calls == []


# The fast path of a no-op run: a venv stamped for this run's set whose site-packages did not change since is whole
# without an interpreter; anything else runs the check as before (a stamp of another set, a changed site-packages).
@pytest.mark.parametrize(
    ("stamp", "untouched", "out", "expected"),
    [
        (STAMP, True, '{"problems": ["never asked"]}', (True, False, [])),
        (STAMP, False, '{"problems": ["disagg-dep is not installed"]}', (False, True, ["disagg-dep is not installed"])),
        (STAMP, False, '{"problems": []}', (True, True, [])),
        ({**STAMP, "packages": []}, True, '{"problems": []}',
         (False, True, ["its disagg-venv.json names another package set (not verified as it is)"])),
        (None, True, '{"problems": []}', (False, True, ["it has no disagg-venv.json (never verified)"])),
    ],
)  # fmt: skip
def test_a_venv_untouched_since_its_stamp_is_whole_without_its_check(stamp, untouched, out, expected):
    """EXPECTED: (whole, checked, problems)."""
    whole, checked, problems = expected
    run = fake_run(out=out)
    files = {"/v/engine-abc/disagg-venv.json": json.dumps(stamp)} if stamp else {}
    asked = []

    def untouched_since(path):
        asked.append(path)
        return untouched

    state = deps_state.venv_state(VENV, run, files.get, lambda path: True, untouched_since)
    assert state == {"python": True, "whole": whole, "checked": checked, "problems": problems}
    assert len(run.calls) == (1 if checked else 0)
    assert asked == (["/v/engine-abc"] if stamp == STAMP else [])


def make_venv(root, python="python3.11", versions=("3.11",)):
    """A venv's shape under ROOT: bin/python linked to a file named PYTHON, lib/pythonX.Y/site-packages for each
    of VERSIONS, and a stamp."""
    (root / "bin").mkdir(parents=True)
    (root / python).write_text("")
    (root / "bin" / "python").symlink_to(root / python)
    for version in versions:
        (root / "lib" / f"python{version}" / "site-packages").mkdir(parents=True)
    (root / deps_state.STAMP).write_text("{}")
    return root


def age(path, seconds):
    """Sets PATH's mtime to SECONDS (since the epoch)."""
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))


@pytest.mark.parametrize(
    ("case", "site_time", "stamp_time", "expected"),
    [
        ("site-packages older than the stamp", 1000, 2000, True),
        ("a distribution added or removed after the stamp", 3000, 2000, False),
        ("the same time (a coarse clock cannot tell the order)", 2000, 2000, False),
    ],
)
def test_untouched_since_stamp_compares_the_site_packages_with_the_stamp(tmp_path, case, site_time, stamp_time,
                                                                         expected):  # fmt: skip
    venv = make_venv(tmp_path / "engine-abc")
    age(venv / "lib" / "python3.11" / "site-packages", site_time)
    age(venv / deps_state.STAMP, stamp_time)
    assert deps_state.untouched_since_stamp(str(venv)) is expected, case


def test_untouched_since_stamp_reads_the_site_packages_of_the_python_the_venv_runs(tmp_path):
    # python3 upgraded under the venv: bin/python now resolves to 3.12, whose site-packages the venv does not have
    venv = make_venv(tmp_path / "moved", python="python3.12", versions=("3.11",))
    age(venv / "lib" / "python3.11" / "site-packages", 1000)
    assert deps_state.untouched_since_stamp(str(venv)) is False
    # a Python whose file name has no version: it cannot tell
    plain = make_venv(tmp_path / "plain", python="python")
    age(plain / "lib" / "python3.11" / "site-packages", 1000)
    assert deps_state.untouched_since_stamp(str(plain)) is False
    # no stamp
    gone = make_venv(tmp_path / "gone")
    age(gone / "lib" / "python3.11" / "site-packages", 1000)
    (gone / deps_state.STAMP).unlink()
    assert deps_state.untouched_since_stamp(str(gone)) is False


def test_an_uninstall_makes_the_venv_touched(tmp_path):
    venv = make_venv(tmp_path / "engine-abc")
    site = venv / "lib" / "python3.11" / "site-packages"
    make_dist(site, "disagg-dep", "2.1")
    age(site, 1000)
    age(venv / deps_state.STAMP, 2000)
    assert deps_state.untouched_since_stamp(str(venv)) is True
    for path in sorted((site / "disagg_dep-2.1.dist-info").iterdir()):
        path.unlink()
    (site / "disagg_dep-2.1.dist-info").rmdir()  # what pip uninstall removes: the mtime is now's
    assert deps_state.untouched_since_stamp(str(venv)) is False


@pytest.mark.parametrize(
    ("answers", "missing"),
    [
        ({"dpkg-query": (0, "numactl install ok installed\npython3-venv install ok installed\n", "")}, []),
        ({"dpkg-query": (1, "numactl install ok installed\n", "dpkg-query: no packages found matching python3-venv")},
         ["python3-venv"]),
        ({"dpkg-query": (0, "numactl deinstall ok config-files\npython3-venv install ok installed\n", "")},
         ["numactl"]),
        ({"dpkg-query": (127, "", "not found"), "rpm": (1, "numactl\npackage python3-venv is not installed\n", "")},
         ["python3-venv"]),
        ({"dpkg-query": (127, "", "not found"), "rpm": (127, "", "not found")}, None),
    ],
)  # fmt: skip
def test_the_os_packages_missing_are_named_or_unknown(answers, missing):
    assert deps_state.os_missing(["numactl", "python3-venv"], lambda argv: answers[argv[0]]) == missing


def test_the_pythons_in_use_come_from_the_records():
    records = {"a": {"python": "/v/engine-abc/bin/python"}, "b": {"unreadable": "x"}, "c": None,
               "d": {"python": "/v/engine-abc/bin/python"}, "e": {"python": "/v/router-1/bin/python"}}  # fmt: skip
    assert deps_state.in_use(records) == ["/v/engine-abc/bin/python", "/v/router-1/bin/python"]


def test_the_module_names_the_venvs_the_host_no_longer_needs(tmp_path, capsys):
    """deps_state as roles/sglang_deps/tasks/prune.yml reads it: of the stamped venvs under venvs_dir, those no unit
    runs (the records), that are not this run's (the planned venvs) and are older than the newest other of their kind
    (venvs.to_remove); a stamped directory of another name is never ours."""
    venvs_dir, record_dir = tmp_path / "venvs", tmp_path / "records"
    record_dir.mkdir()
    for age, name in enumerate(["engine-a", "engine-b", "engine-c", "engine-d", "other"]):
        (venvs_dir / name).mkdir(parents=True)
        stamp = venvs_dir / name / "disagg-venv.json"
        stamp.write_text("{}")
        os.utime(stamp, (1000 + age, 1000 + age))
    # a unit still runs a (the previous one, kept), this run plans d: b and c go; "other" is not ours
    (record_dir / "sglang-prefill0.json").write_text(json.dumps({"python": f"{venvs_dir}/engine-a/bin/python"}))
    planned = [{"kind": "engine", "path": str(venvs_dir / "engine-d"), "stamp": {"kind": "engine"}}]
    args = {"venvs": planned, "venvs_dir": str(venvs_dir), "record_dir": str(record_dir), "os_packages": []}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        deps_state_module.main()
    result = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 0, result
    assert result["to_remove"] == [str(venvs_dir / "engine-b"), str(venvs_dir / "engine-c")]
    assert result["in_use"] == [f"{venvs_dir}/engine-a/bin/python"]


# ---------------------------------------------------------------- the service account (user.yml runs only on drift)

Pw = collections.namedtuple("Pw", "pw_name pw_uid pw_gid pw_dir pw_shell pw_gecos")
Gr = collections.namedtuple("Gr", "gr_name gr_gid gr_mem")
HOME_UID, HOME_GID = os.getuid(), os.getgid()


def account_host(users, groups):
    def getpwnam(name):
        return users[name]

    def getgrnam(name):
        return groups[name]

    return getpwnam, getgrnam


def sglang_user(**changes):
    fields = {"pw_name": "sglang", "pw_uid": HOME_UID, "pw_gid": HOME_GID, "pw_dir": "HOME",
              "pw_shell": "/usr/sbin/nologin", "pw_gecos": "disagg.sglang services"}  # fmt: skip
    return Pw(**{**fields, **changes})


GROUPS = {"sglang": Gr("sglang", HOME_GID, []), "video": Gr("video", 44, ["sglang"]), "render": Gr("render", 105, [])}

# name: (users, groups, the state directory's mode or None for missing) -> drift
ACCOUNT_CASES = {
    "in place": ({"sglang": sglang_user()}, {**GROUPS, "render": Gr("render", 105, ["sglang"])}, 0o750, []),
    "a GPU group the host lacks is no drift": (
        {"sglang": sglang_user()},
        {k: v for k, v in GROUPS.items() if k != "render"},
        0o750,
        [],
    ),
    "not in an existing GPU group": ({"sglang": sglang_user()}, GROUPS, 0o750, ["user sglang is not in group render"]),
    "no user": ({}, GROUPS, 0o750, ["user sglang does not exist"]),
    "no group and no user": ({}, {}, None, ["group sglang does not exist", "user sglang does not exist"]),
    "a login shell": (
        {"sglang": sglang_user(pw_shell="/bin/bash")},
        {**GROUPS, "render": Gr("render", 105, ["sglang"])},
        0o750,
        ["user sglang has shell '/bin/bash', not '/usr/sbin/nologin'"],
    ),
    "another primary group": (
        {"sglang": sglang_user(pw_gid=7)},
        {**GROUPS, "render": Gr("render", 105, ["sglang"])},
        0o750,
        ["user sglang has another primary group than sglang"],
    ),
    "state directory missing": (
        {"sglang": sglang_user()},
        {**GROUPS, "render": Gr("render", 105, ["sglang"])},
        None,
        ["HOME does not exist"],
    ),
    "state directory mode": (
        {"sglang": sglang_user()},
        {**GROUPS, "render": Gr("render", 105, ["sglang"])},
        0o755,
        ["HOME has mode 0755, not 0750"],
    ),
}


@pytest.mark.parametrize("case", ACCOUNT_CASES, ids=list(ACCOUNT_CASES))
def test_account_drift(case, tmp_path):
    users, groups, mode, want = ACCOUNT_CASES[case]
    home = tmp_path / "state"
    if mode is not None:
        home.mkdir()
        home.chmod(mode)
    users = {name: pw._replace(pw_dir=str(home)) for name, pw in users.items()}
    getpwnam, getgrnam = account_host(users, groups)
    account = {"user": "sglang", "group": "sglang", "home": str(home), "groups": ["video", "render"],
               "shell": "/usr/sbin/nologin", "comment": "disagg.sglang services", "mode": "0750"}  # fmt: skip
    drift = deps_state.account_drift(account, getpwnam=getpwnam, getgrnam=getgrnam)
    assert drift == [line.replace("HOME", str(home)) for line in want]


def test_account_drift_reads_the_real_host(tmp_path):
    """With the host's own user and group databases: root, in root's group, in a temp dir of root's."""
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    me = pwd.getpwuid(os.getuid())
    account = {"user": me.pw_name, "group": grp.getgrgid(me.pw_gid).gr_name, "home": str(home), "groups": [],
               "shell": me.pw_shell, "comment": me.pw_gecos, "mode": "0700"}  # fmt: skip
    assert deps_state.account_drift(account) == [f"user {me.pw_name} has home {me.pw_dir!r}, not {str(home)!r}"]
