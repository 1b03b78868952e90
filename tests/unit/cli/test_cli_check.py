"""disagg.sglang.cli_check: command lines checked by the installed program's own argparse parser.

Data-driven: the cases are in cli_check_cases.yml.
- parser_cases run through the programs' REAL parsers, built by the collection's parser script under
  each program's own Python: sglang 0.5.23 (the parser venv of tests/sglang_parser), sglang-router
  0.3.2 (this venv), the sandbox simulator sglang_pd_sim (tests/sandbox/pdsim on PYTHONPATH).
- tokens: how argparse reads one token (the mirror that finds abbreviations), checked against the
  argparse of this Python too.
- verdicts turn argparse's error texts and the abbreviations into the problems the module shows (pure).
- runs: the whole check with a fake runner and a cache: checked, flags not checked (no venv, no parser),
  a crash of the parser script (fails, never cached), what the cache holds after each.
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.filter.core import combine
from ansible_collections.disagg.sglang.plugins.module_utils.cli import cli_argparse as ca
from ansible_collections.disagg.sglang.plugins.module_utils.cli import cli_check as cc
from ansible_collections.disagg.sglang.plugins.module_utils.cli import cli_parser_script as cps
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan as plan_rules
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.modules import cli_check as cli_check_module

REPO = Path(__file__).resolve().parents[3]
CASES = yaml.safe_load((Path(__file__).parent / "cli_check_cases.yml").read_text())
PROFILES = REPO / "profiles"

from samples import INSTANCES, SETTINGS  # noqa: E402

PYTHON = "/opt/sglang/venv/bin/python"
MODULE = "sglang.launch_server"
VERSION_COMMAND = [PYTHON, "-c", "import importlib.metadata as m; print(m.version('sglang'))"]


def case_argv(case):
    if "argv" in case:
        return [str(token) for token in case["argv"]]
    if "render" in case:
        spec = case["render"]
        profile = yaml.safe_load((PROFILES / f"{spec['profile']}.yml").read_text())
        lines = sf.render_lines(sf.worker_flags(profile, spec["role"], INSTANCES[spec["role"]], SETTINGS))
        return sf.argv(lines) + [str(token) for token in spec.get("extra", [])]
    spec = case["render_router"]
    return sf.argv(rf.router_lines(spec["prefills"], spec["decodes"], spec["settings"]))


def assert_matches(got, want, what):
    assert len(got) == len(want), f"{what}: got {json.dumps(got, indent=1)}"
    for item, expected in zip(got, want, strict=True):
        assert item["flag"] == expected["flag"], item
        assert item["kind"] == expected["kind"], item
        if "message" in expected:
            assert item["message"] == expected["message"]
        if "message_contains" in expected:
            assert expected["message_contains"] in item["message"]
        if "hint_contains" in expected:
            assert expected["hint_contains"] in item["hint"]
        if "hint" in expected:
            assert item["hint"] == expected["hint"]


# --------------------------------------------------------------------------------------------------
# How argparse reads one token: the mirror that finds abbreviations (data-driven)
# --------------------------------------------------------------------------------------------------


def _argparse_reads(token, options, allow_abbrev):
    """What this Python's own argparse makes of ``token``, in match_option's terms (its private
    _parse_optional: 3 items up to 3.12, 4 after; it exits, or raises, on an ambiguous prefix)."""
    parser = argparse.ArgumentParser(prog="t", add_help=False, allow_abbrev=allow_abbrev)
    for option in options:
        parser.add_argument(option)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            found = parser._parse_optional(token)
    except (SystemExit, argparse.ArgumentError):
        return "ambiguous", None
    if found is None:
        return "value", None
    action, option = found[0], found[1]
    if action is None:
        return "unknown", None
    name, sep, _value = token.partition("=")
    if option == token or (sep and option == name):
        return "exact", option
    if token[1] not in parser.prefix_chars and option == token[:2]:
        return "short", option
    return "abbreviation", option


@pytest.mark.parametrize(
    "row",
    CASES["tokens"],
    ids=[
        f"{r['options']}:{r['token']!r}{'' if r.get('allow_abbrev', True) else ':no-abbrev'}" for r in CASES["tokens"]
    ],
)
def test_token_read_as_argparse_reads_it(row):
    options = CASES["token_parsers"][row["options"]]
    allow_abbrev = row.get("allow_abbrev", True)
    want = (row["kind"], row["option"])
    assert cps.match_option(row["token"], options, "-", allow_abbrev) == want
    assert _argparse_reads(row["token"], options, allow_abbrev) == want, "this Python's argparse reads it otherwise"


def test_abbreviations_of_an_argv_stop_at_the_double_dash():
    options = CASES["token_parsers"]["small"]
    argv = ["--tp", "4", "--model", "m", "--page-=1", "-p8000", "--", "--tp"]
    assert cps.abbreviations(argv, options) == [
        {"token": "--tp", "flag": "--tp", "full": "--tp-size"},
        {"token": "--page-=1", "flag": "--page-", "full": "--page-size"},
    ]
    assert cps.abbreviations(["--tp", "4"], options, allow_abbrev=False) == [], "no prefix matching: argparse refuses"


# --------------------------------------------------------------------------------------------------
# Verdicts: the script's RESULT -> the module's problems (pure, data-driven)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES["verdicts"], ids=[case["id"] for case in CASES["verdicts"]])
def test_verdict(case):
    result = dict({"ok": False, "exit_status": 2, "error": "", "warnings": [], "flags": {}}, **case["result"])
    found = ca.verdict(result, CASES["verdict_info"], case["argv"])
    assert found["ok"] is (not case["problems"])
    assert_matches(found["problems"], case["problems"], "problems")
    assert_matches(found["warnings"], case["warnings"], "warnings")


# --------------------------------------------------------------------------------------------------
# The whole check with a fake runner and a cache (data-driven)
# --------------------------------------------------------------------------------------------------

FAKE_INFO = {**CASES["verdict_info"], "prog": "sglang serve", "allow_abbrev": True, "prefix_chars": "-"}
ACCEPTED = {
    "ok": True,
    "exit_status": 0,
    "message": "",
    "error": "",
    "output": "",
    "warnings": [],
    "namespace": {},
    "flags": {},
    "abbreviations": [],
}
CANNOT_BUILD = (
    "a line the import printed\n"
    f"cli_parser_script: cannot import sglang.srt.server_args:prepare_server_args with {PYTHON}: "
    "ModuleNotFoundError: No module named 'sglang.srt'\n"
)
TRACEBACK = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nKeyError: 'options'\n"
PARSER_ANSWERS = {
    "cannot_build": lambda _asked, _results: (3, "", CANNOT_BUILD),
    "crash": lambda _asked, _results: (1, "", TRACEBACK),
    "killed": lambda _asked, _results: (-9, "", ""),
    "garbage": lambda _asked, _results: (0, "not JSON\n", "a stray warning\n"),
    "wrong_names": lambda _asked, _results: (0, json.dumps({"info": FAKE_INFO, "results": {"other": ACCEPTED}}), ""),
    "answers": lambda asked, results: (
        0,
        json.dumps({"info": FAKE_INFO, "results": {name: dict(ACCEPTED, **results.get(name, {})) for name in asked}}),
        "",
    ),
}


class FakeRunner:
    """run_command for run_check: the version command and the parser script, as the run's row says."""

    def __init__(self, run, **override):
        self.run, self.ran = dict(run, **override), []

    def __call__(self, argv, data=None):
        if argv[1:2] == ["-c"] and "--module" in argv:
            self.ran.append("parser")
            assert argv[0] == PYTHON
            assert argv[3:5] == ["--module", self.run.get("module", MODULE)]
            asked = json.loads(data)
            assert all(asked[name] == [str(t) for t in self.run["argvs"][name]] for name in asked), asked
            return PARSER_ANSWERS[self.run.get("parser", "answers")](asked, self.run.get("results", {}))
        assert argv == VERSION_COMMAND, argv
        self.ran.append("version")
        return self.run.get("version_rc", 0), f"{self.run['version']}\n", "version failed\n"


def check(run, runner, cache_dir, **override):
    run = dict(run, **override)
    exists = run.get("python", "present") == "present"
    return cc.run_check(
        runner,
        PYTHON,
        run.get("module", MODULE),
        run["argvs"],
        version_command=VERSION_COMMAND if run["version"] is not None else None,
        cache_dir=cache_dir,
        write_cache=not run.get("check_mode", False),
        find_executable=lambda path: path if exists else None,
    )


def cache_files(cache_dir, run):
    """{argv name: mtime_ns of its valid verdict file for this run's program and version}."""
    found = {}
    if not cache_dir or run["version"] is None:
        return found
    program = {"python": PYTHON, "module": run.get("module", MODULE), "entry": None, "version": run["version"]}
    for name, argv in run["argvs"].items():
        if not isinstance(argv, list):
            continue
        path, key = ca.argv_cache_path(cache_dir, program, name, argv)
        if ca.read_json(path, key) is not None:
            found[name] = os.stat(path).st_mtime_ns
    return found


def prepare_cache(run, cache_dir):
    if run["cache"] == "none":
        return None
    cache_dir.mkdir()
    cache = str(cache_dir)
    plain = {"check_mode": False, "python": "present"}
    if run["cache"] == "warm":
        check(run, FakeRunner(run, parser="answers", version_rc=0), cache, **plain)
    elif run["cache"] == "stale":
        check(run, FakeRunner(run, parser="answers", version="0.5.22"), cache, version="0.5.22", **plain)
    elif run["cache"] == "after_cannot_build":
        check(run, FakeRunner(run, parser="cannot_build"), cache, **plain)
    elif run["cache"] == "corrupt":
        program = {"python": PYTHON, "module": MODULE, "entry": None, "version": run["version"]}
        for name, argv in run["argvs"].items():
            Path(ca.argv_cache_path(cache, program, name, argv)[0]).write_text("{not json")
    return cache


@pytest.mark.parametrize("run", CASES["runs"], ids=[run["id"] for run in CASES["runs"]])
def test_run(run, tmp_path):
    cache_dir = prepare_cache(run, tmp_path / "cache")
    before = cache_files(cache_dir, run)
    runner = FakeRunner(run)
    expect = run["expect"]
    if "error_contains" in expect:
        with pytest.raises(cc.CheckError) as error:
            check(run, runner, cache_dir)
        for text in expect["error_contains"]:
            assert text in str(error.value), str(error.value)
        result = None
    else:
        result = check(run, runner, cache_dir)
        assert runner.ran == expect["ran"]
        assert result["failed"] is expect["failed"], result["msg"]
        assert result["parser_runs"] == expect["ran"].count("parser")
        if expect.get("not_checked_contains"):
            assert result["checked"] == [] and result["results"] == {}
            assert result["msg"].startswith(f"flags not checked ({', '.join(run['argvs'])}): "), result["msg"]
            for text in expect["not_checked_contains"]:
                assert text in result["not_checked"], result["not_checked"]
        else:
            assert result["not_checked"] is None
            assert result["checked"] == list(run["argvs"])
        for text in expect.get("msg_contains", []):
            assert text in result["msg"], result["msg"]
        for text in expect.get("warnings_contain", []):
            assert any(text in warning for warning in result["warnings"]), result["warnings"]
    after = cache_files(cache_dir, run)
    if "cached" in expect:
        assert sorted(after) == sorted(expect["cached"])
    if "written" in expect:
        assert sorted(name for name in after if before.get(name) != after[name]) == sorted(expect["written"])
    if cache_dir:
        assert not [name for name in os.listdir(cache_dir) if name.startswith(".tmp-")]
    if result is not None:
        for name, found in result["results"].items():
            assert (found["cache_file"] is not None) is (name in after), (name, found["cache_file"])


def test_a_crash_leaves_the_verdicts_cached_before_it_alone(tmp_path):
    """One argv cached, a new one makes the script crash: the check fails, the new verdict is not cached."""
    run = {"version": "0.5.23", "argvs": {"prefill0": ["--model-path", "/m"]}}
    check(run, FakeRunner(run), str(tmp_path))
    grown = dict(run, argvs=dict(run["argvs"], decode0=["--model-path", "/m", "--tp-size", "4"]))
    with pytest.raises(cc.CheckError, match="the parser script crashed"):
        check(grown, FakeRunner(grown, parser="crash"), str(tmp_path))
    assert sorted(cache_files(str(tmp_path), grown)) == ["prefill0"]
    assert len(os.listdir(tmp_path)) == 1


# --------------------------------------------------------------------------------------------------
# The Ansible module itself
# --------------------------------------------------------------------------------------------------


def run_module(args, run_command=None, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    out, err = io.StringIO(), io.StringIO()
    patched = (
        mock.patch.object(basic.AnsibleModule, "run_command", autospec=True, side_effect=run_command)
        if run_command
        else contextlib.nullcontext()
    )
    with (
        patch_module_args(args),
        patched,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exit_info,
    ):
        cli_check_module.main()
    result = json.loads(out.getvalue())
    # Ansible >= 2.19 returns warnings as structured events, or shows them at once when a controller
    # display is active in the process (other tests may have set one up): look in both places.
    result["_warnings_text"] = json.dumps(result.get("warnings", [])) + err.getvalue()
    return exit_info.value.code, result


def module_runner(results=None, version="0.5.23"):
    """AnsibleModule.run_command for the module: sys.executable stands for the venv's Python."""
    calls = []

    def run_command(_module, argv, environ_update=None, data=None, **_kwargs):
        calls.append((argv, environ_update))
        if argv[1:2] == ["-c"] and "--module" in argv:
            return PARSER_ANSWERS["answers"](json.loads(data), results or {})
        return 0, version + "\n", ""

    return run_command, calls


MODULE_ARGS = {
    "python": sys.executable,
    "module": MODULE,
    "version_command": [sys.executable, "-c", "print('0.5.23')"],
    "argvs": {"prefill0": ["--model-path", "/m", "--disable-cuda-graph"]},
}


def test_module_passes_warns_and_caches(tmp_path):
    args = dict(MODULE_ARGS, cache_dir=str(tmp_path))
    deprecated = {"prefill0": {"warnings": ["--disable-cuda-graph is deprecated and will be removed"]}}
    run_command, calls = module_runner(deprecated)
    code, result = run_module(args, run_command)
    assert code == 0
    assert result["changed"] is False
    assert (result["checked"], result["not_checked"], result["parser_runs"]) == (["prefill0"], None, 1)
    assert result["version"] == "0.5.23"
    assert "prefill0: --disable-cuda-graph is deprecated" in result["_warnings_text"]
    assert result["flag_warnings"][0]["kind"] == "deprecated"
    assert all(env == {"LC_ALL": "C", "LANG": "C"} for _argv, env in calls)
    assert os.path.isfile(result["verdicts"]["prefill0"]["cache_file"])

    run_command, calls = module_runner(deprecated)
    code, result = run_module(args, run_command)
    assert code == 0
    assert (result["parser_runs"], result["verdicts"]["prefill0"]["source"]) == (0, "cache")
    assert [argv for argv, _env in calls] == [MODULE_ARGS["version_command"]]


def test_module_fails_listing_problems():
    args = dict(MODULE_ARGS, argvs={"decode0": ["--model-path", "/m", "--tp", "4"]})
    run_command, _calls = module_runner({"decode0": {"abbreviations": [{"flag": "--tp", "full": "--tp-size"}]}})
    code, result = run_module(args, run_command)
    assert code == 1
    assert result["failed"] is True
    assert result["changed"] is False
    assert "decode0: --tp: --tp is an abbreviation of --tp-size: write the full flag name" in result["msg"]
    assert result["problems"]["decode0"][0]["kind"] == "abbreviation"


def test_module_check_mode_does_not_write_the_cache(tmp_path):
    args = dict(MODULE_ARGS, cache_dir=str(tmp_path / "cache"))
    run_command, _calls = module_runner()
    code, result = run_module(args, run_command, check_mode=True)
    assert code == 0
    assert result["parser_runs"] == 1
    assert not (tmp_path / "cache").exists()


def test_module_says_flags_not_checked_where_the_venv_is_not_made_yet(tmp_path):
    """A first install: the preflight play runs before the deps role makes the venv. Not a failure, not a pass."""
    python = tmp_path / "venv" / "bin" / "python"
    args = dict(MODULE_ARGS, python=str(python), version_command=[str(python), "-V"], cache_dir=str(tmp_path / "c"))
    run_command, calls = module_runner()
    code, result = run_module(args, run_command)
    assert code == 0
    assert calls == [], "nothing runs: not the version command, not the parser"
    assert (result["checked"], result["verdicts"], result["prog"]) == ([], {}, None)
    assert "results" not in result, "a mapping under Ansible's loop key: ansible-core 2.19 renames it with a warning"
    assert result["not_checked"].startswith(f"{python} does not exist on this host")
    assert f"flags not checked (prefill0): {python} does not exist" in result["_warnings_text"]
    assert result["msg"].startswith("flags not checked (prefill0): ")
    assert not (tmp_path / "c").exists()


def test_the_flags_not_checked_warning_says_what_this_run_does_and_claims_nothing_unsaid(tmp_path):
    """The preflight of site.yml says what this run will do (it checks them after its deps step); a caller that says
    nothing gets the reason alone, never a promise of a later run (issue 38: the warning said "a run after it is
    installed checks them" while this same run checked them)."""
    python = tmp_path / "venv" / "bin" / "python"
    args = dict(MODULE_ARGS, python=str(python), version_command=[str(python), "-V"])
    later = "this run checks them after its deps step has installed it, before it starts any unit"
    _code, result = run_module(dict(args, later=later), module_runner()[0])
    assert result["not_checked"].endswith(f"is not installed yet; {later}")
    assert later in result["_warnings_text"]
    _code, result = run_module(args, module_runner()[0])
    assert result["not_checked"].endswith("is not installed yet") and "a run after" not in result["_warnings_text"]


def test_module_says_flags_not_checked_where_the_program_is_not_installed(tmp_path):
    """This venv has no sglang: the real script exits 3 saying so; nothing is cached, the next run tries again."""
    args = dict(MODULE_ARGS, version_command=None, cache_dir=str(tmp_path))
    code, result = run_module(args)
    assert code == 0
    assert result["checked"] == []
    assert result["not_checked"] == (
        f"the parser of {MODULE} cannot be built with {sys.executable}: sglang is not installed in this "
        f"interpreter's environment ({sys.executable})"
    )
    assert (
        "flags not checked (prefill0): the parser of sglang.launch_server cannot be built" in result["_warnings_text"]
    )
    assert os.listdir(tmp_path) == []


def test_module_fails_with_the_stderr_of_a_crashing_parser_script(tmp_path):
    """A crash (here the program's parse function kills the interpreter, as a segfault would) fails the check
    with the script's standard error and caches nothing."""
    (tmp_path / "crashing_cli.py").write_text(
        "import os\n\n\ndef parse(argv):\n"
        "    os.write(2, b'Traceback (most recent call last):\\nMemoryError: the parser blew up\\n')\n"
        "    os._exit(1)\n"
    )
    args = dict(
        MODULE_ARGS,
        module="crashing_cli",
        parser_entry="crashing_cli:parse",
        version_command=[sys.executable, "-c", "print('crashing-cli 1.0')"],
        cache_dir=str(tmp_path / "cache"),
    )
    with mock.patch.dict(os.environ, {"PYTHONPATH": str(tmp_path)}):
        code, result = run_module(args)
    assert code == 1
    assert result["msg"] == (
        f"the parser script crashed, so the flags could not be checked: {sys.executable} -c <cli_parser_script> "
        "--module crashing_cli --entry crashing_cli:parse exited with status 1; its standard error ends:\n"
        "Traceback (most recent call last):\nMemoryError: the parser blew up"
    )
    assert not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------------------------------
# The programs' own parsers (cli_parser_script.py under each program's Python)
# --------------------------------------------------------------------------------------------------

PDSIM = REPO / "tests" / "sandbox" / "pdsim"
SIM_ENV = {"PYTHONPATH": str(PDSIM)}  # the simulator as the sandbox installs it, from its source


class RealRunner:
    """run_command for run_check: runs the command here; counts the parser script's runs."""

    def __init__(self, env=None):
        self.env, self.parser_runs, self.commands = env or {}, 0, []

    def __call__(self, argv, data=None):
        if "--module" in argv and argv[1:2] == ["-c"]:
            self.parser_runs += 1
            self.commands.append("parser")
        else:
            self.commands.append(" ".join(argv))
        proc = subprocess.run(
            argv, input=data, capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C", **self.env)
        )
        return proc.returncode, proc.stdout, proc.stderr


def program_commands(name, real_python=None, smg_python=None):
    """(python, module, version_command, runner env) of one program as the roles would call it."""
    if name == "sglang":
        python, module, dist = str(real_python), "sglang.launch_server", "sglang"
    elif name == "router":
        python, module, dist = sys.executable, "sglang_router.launch_router", "sglang-router"
    elif name == "smg":
        python, module, dist = str(smg_python), "smg.launch_router", "smg"
    else:
        python, module, dist = sys.executable, "sglang_pd_sim", None
    version = (
        [python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"]
        if dist
        else [python, "-c", "import sglang_pd_sim as s; print('sglang-pd-sim', s.__version__)"]
    )
    return python, module, version, SIM_ENV if name == "sim" else {}


PARSER_CASES = [
    pytest.param(case, program, id=f"{program}-{case['id']}")
    for case in CASES["parser_cases"]
    for program in case["programs"]
]


@pytest.fixture(scope="module")
def parser_verdicts(real_python, smg_python):
    """Each program's own parser, run once over a batch of its parser_cases."""
    verdicts, seconds = {}, []
    for program in ("sglang", "router", "smg", "sim"):
        python, module, _version_command, env = program_commands(program, real_python, smg_python)
        argvs = {c["id"]: case_argv(c) for c in CASES["parser_cases"] if program in c["programs"]}
        started = time.monotonic()
        out = ca.parse_argvs(RealRunner(env), python, module, argvs)
        seconds.append(f"{program} {time.monotonic() - started:.2f}s ({len(argvs)} argvs)")
        assert out["parser_runs"] == 1
        verdicts[program] = out
    print("parser batches: " + ", ".join(seconds))
    return verdicts


@pytest.mark.parametrize(("case", "program"), PARSER_CASES)
def test_parser_case(case, program, parser_verdicts):
    found = parser_verdicts[program]["results"][case["id"]]
    assert found["source"] == "parser"
    assert found["ok"] is case["ok"], found
    assert_matches(found["problems"], case["problems"], "problems")
    assert_matches(found["warnings"], case["warnings"], "warnings")
    if case["ok"]:
        assert found["error"] == ""
    elif found["error"]:
        assert found["error"] == found["problems"][0]["message"], "argparse's own words come first"


def test_parsers_are_the_programs_own(parser_verdicts):
    """prog and flag counts as each program's parser has them (not a copy: the router has 100, sglang 561)."""
    assert parser_verdicts["sglang"]["prog"] == "sglang serve"
    assert parser_verdicts["router"]["prog"] == "launch_router.py"  # argparse's default: python -m sets argv[0]
    assert parser_verdicts["sim"]["prog"] == "sglang-pd-sim"
    assert parser_verdicts["sglang"]["known_flags"] == parser_verdicts["sim"]["known_flags"] == 561
    assert parser_verdicts["router"]["known_flags"] == 100
    good = parser_verdicts["sglang"]["results"]["good-line"]["flags"]
    assert good == {
        "--model-path": "/m",
        "--tp-size": 4,
        "--page-size": 256,
        "--disaggregation-transfer-backend": "nixl",
    }


def test_every_shipped_profile_spells_its_flags_in_full(parser_verdicts):
    """No profile line is an abbreviation: the rules of rules.py and sglang_flags.py see full names only."""
    for name in ("shipped-profile-prefill-accepted", "shipped-profile-decode-accepted"):
        assert parser_verdicts["sglang"]["results"][name]["problems"] == []


def test_real_commands_cold_and_cached(real_python, tmp_path, capsys):
    """The shipped profile's lines against sglang's own parser (no torch), cold then cached."""
    profile = yaml.safe_load((PROFILES / "deepseek_v4_flash_sm120.yml").read_text())
    worker_argvs = {
        INSTANCES[role]["name"]: sf.argv(sf.render_lines(sf.worker_flags(profile, role, INSTANCES[role], SETTINGS)))
        for role in sf.WORKER_ROLES
    }
    python, module, version_command, _env = program_commands("sglang", real_python)
    seconds = []
    for expected_source in ("parser", "cache"):
        runner = RealRunner()
        started = time.monotonic()
        result = cc.run_check(
            runner, python, module, worker_argvs, version_command=version_command, cache_dir=str(tmp_path)
        )
        seconds.append(time.monotonic() - started)
        assert (result["not_checked"], result["version"]) == (None, "0.5.23")
        assert {r["source"] for r in result["results"].values()} == {expected_source}
        assert runner.parser_runs == result["parser_runs"] == (1 if expected_source == "parser" else 0)
        assert result["failed"] is False, result["msg"]
        assert result["flag_warnings"] == []
    with capsys.disabled():
        print(f"\n[cli_check, sglang 0.5.23 own parser] cold {seconds[0]:.2f}s, cached {seconds[1]:.2f}s")


def test_unknown_module_needs_a_parser_entry():
    with pytest.raises(ca.CheckError, match=r"no parse function is known for vllm\.entrypoints\.api_server"):
        ca.parser_command("/v/bin/python", "vllm.entrypoints.api_server")


def test_parser_entry_names_another_program():
    command = ca.parser_command("/v/bin/python", "tool", "tool.cli:parse")
    assert command[:2] == ["/v/bin/python", "-c"]
    assert command[3:] == ["--module", "tool", "--entry", "tool.cli:parse"]


def test_cache_per_version_and_argv(tmp_path):
    """A no-op run starts no parser; a changed argv re-parses only that argv; a new version all of them."""
    python, module, version_command, env = program_commands("sim")
    argvs = {
        "prefill0": ["--model-path", "/m", "--disaggregation-mode", "prefill"],
        "decode0": ["--model-path", "/m", "--disaggregation-mode", "decode"],
    }
    kwargs = {"version_command": version_command, "cache_dir": str(tmp_path)}

    runner = RealRunner(env)
    first = cc.run_check(runner, python, module, argvs, **kwargs)
    assert (first["not_checked"], first["parser_runs"], runner.parser_runs) == (None, 1, 1)
    assert first["version"] == "sglang-pd-sim 0.1.0"
    assert {r["source"] for r in first["results"].values()} == {"parser"}
    assert len(os.listdir(tmp_path)) == 2

    runner = RealRunner(env)
    again = cc.run_check(runner, python, module, argvs, **kwargs)
    assert (again["parser_runs"], runner.parser_runs) == (0, 0)
    assert runner.commands == [" ".join(version_command)]
    assert again["results"] == {name: dict(result, source="cache") for name, result in first["results"].items()}, (
        "a cached verdict is the verdict"
    )
    assert again["prog"] == "sglang-pd-sim"

    runner = RealRunner(env)
    changed = dict(argvs, decode0=[*argvs["decode0"], "--page-size", "x"])
    third = cc.run_check(runner, python, module, changed, **kwargs)
    assert (third["parser_runs"], runner.parser_runs) == (1, 1)
    assert third["results"]["prefill0"]["source"] == "cache"
    assert third["results"]["decode0"]["source"] == "parser"
    assert third["failed"] is True
    assert "decode0: --page-size: argument --page-size: invalid int value: 'x'" in third["msg"]
    assert len(os.listdir(tmp_path)) == 2, "the unit's older verdict is pruned"

    runner = RealRunner(env)
    other_kwargs = dict(kwargs)
    other_kwargs["version_command"] = [sys.executable, "-c", "print('sglang-pd-sim 0.1.1')"]
    fourth = cc.run_check(runner, python, module, argvs, **other_kwargs)
    assert (fourth["parser_runs"], runner.parser_runs) == (1, 1)

    before = {name: os.stat(tmp_path / name).st_mtime_ns for name in os.listdir(tmp_path)}
    checked = cc.run_check(RealRunner(env), python, module, argvs, **kwargs, write_cache=False)
    assert checked["parser_runs"] == 1, "the run of another version pruned this version's verdicts"
    assert {name: os.stat(tmp_path / name).st_mtime_ns for name in os.listdir(tmp_path)} == before, "check mode"


def test_module_with_the_real_router(tmp_path):
    """The module end to end, AnsibleModule.run_command included (the script goes as -c, argvs on stdin)."""
    python, module, version_command, _env = program_commands("router")
    args = {
        "python": python,
        "module": module,
        "version_command": version_command,
        "cache_dir": str(tmp_path),
        "argvs": {
            "router": ["--pd-disaggregation", "--prefill", "http://a:30000", "8998", "--decode", "http://c:30001"],
            "router_bad": ["--pd-disaggregation", "--prefill-policy", "fastest"],
            "router_abbreviated": ["--pd-disaggregation", "--prefill-pol", "cache_aware"],
        },
    }
    code, result = run_module(args)
    assert code == 1
    assert result["not_checked"] is None
    assert result["version"] == "0.3.2"
    assert result["verdicts"]["router"]["ok"] is True
    assert result["verdicts"]["router"]["flags"]["--prefill"] == [["http://a:30000", "8998"]]
    assert result["problems"]["router_bad"][0]["kind"] == "choice"
    assert "router_bad: --prefill-policy: argument --prefill-policy: invalid choice: 'fastest'" in result["msg"]
    assert "router_abbreviated: --prefill-pol: --prefill-pol is an abbreviation of --prefill-policy" in result["msg"]
    assert "(its own parser)" in result["msg"]
    assert len(os.listdir(tmp_path)) == 3


def test_a_refused_command_line_fails_the_host_it_belongs_to_not_the_host_that_checked(tmp_path):
    """The once-per-venv check (plan.cli_check_groups' group, its owners) runs on one host for every host; a refused
    line of clm-3 names clm-3 (and only it) in the module's refused, a check without problems names nobody, and
    roles/sglang/tasks/plan.yml merges the refusals of every check as it does (combine(list_merge='append'), then
    each host's messages joined by a space)."""
    python, module, version_command, _env = program_commands("router")
    line = ["--pd-disaggregation", "--prefill", "http://a:30000", "8998", "--decode", "http://c:30001"]
    spec = {"python": python, "module": module, "lines": [line], "unit": "sglang-router"}
    group = plan_rules.cli_check_groups({"clm-2": [dict(spec, name="r0")], "clm-3": [dict(spec, name="r0")],
                                         "clm-3x": [dict(spec, name="r0"), dict(spec, name="r1")]})[0]  # fmt: skip
    assert group["owners"] == {"clm-2 r0": "clm-2", "clm-3 r0": "clm-3", "clm-3x r0": "clm-3x", "clm-3x r1": "clm-3x"}
    bad = ["--pd-disaggregation", "--prefill-policy", "fastest"]
    args = {"python": python, "module": module, "version_command": version_command, "cache_dir": str(tmp_path),
            "owners": group["owners"]}  # fmt: skip
    code, refused = run_module(dict(args, argvs=dict(group["argvs"], **{"clm-3 r0": bad})))
    assert code == 1 and refused["refused"] == {"clm-3": [refused["msg"]]}
    assert "clm-3 r0: --prefill-policy" in refused["msg"]
    code, accepted = run_module(dict(args, argvs=group["argvs"]))
    assert code == 0 and accepted["refused"] == {}
    # a host whose name starts like another's is not it; one check that refused two lines of a host names it once
    code, twice = run_module(dict(args, argvs=dict(group["argvs"], **{"clm-3x r0": bad, "clm-3x r1": bad})))
    assert code == 1 and twice["refused"] == {"clm-3x": [twice["msg"]]}
    results = [refused, accepted, {"skipped": True}, twice, refused]
    merged = combine([r.get("refused", {}) for r in results], list_merge="append")
    assert {host: " ".join(messages) for host, messages in merged.items()} == {
        "clm-3": f"{refused['msg']} {refused['msg']}",
        "clm-3x": twice["msg"],
    }
