"""disagg.sglang.cli_check: command lines checked by a program's own argparse parser, or its --help.

Data-driven: the cases are in cli_check_cases.yml.
- parser_cases run through the programs' REAL parsers, built by the collection's parser script under
  each program's own Python: sglang 0.5.23 (the parser venv of tests/sglang_parser), sglang-router
  0.3.2 (this venv), the sandbox simulator sglang_pd_sim (tests/sandbox/pdsim on PYTHONPATH).
- verdicts turn argparse's error texts into the problems the module shows (pure, no parser).
- argv_cases check the --help emulation (the fallback) against recorded help texts in
  tests/fixtures/cli_help/; the cross-check runs them through the real parsers too and asserts both
  say accept or reject alike, except the known gaps of reading a help.
- runs: the whole check with a fake runner and a cache (fallback, remembered "no parser", help cache).
"""

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
from ansible_collections.disagg.sglang.plugins.module_utils import cli_argparse as ca
from ansible_collections.disagg.sglang.plugins.module_utils import cli_check as cc
from ansible_collections.disagg.sglang.plugins.module_utils import cli_help as ch
from ansible_collections.disagg.sglang.plugins.module_utils import sglang_flags as sf
from ansible_collections.disagg.sglang.plugins.modules import cli_check as cli_check_module

REPO = Path(__file__).resolve().parents[2]

FIXTURES = REPO / "tests" / "fixtures" / "cli_help"
CASES = yaml.safe_load((Path(__file__).parent / "cli_check_cases.yml").read_text())
HELP = {key: (FIXTURES / name).read_text() for key, name in CASES["help_fixtures"].items()}
PROFILES = REPO / "profiles"

from samples import INSTANCES, SETTINGS  # noqa: E402

HELP_COMMAND = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--help"]
VERSION_COMMAND = ["/opt/sglang/venv/bin/python", "-c", "import importlib.metadata as m; print(m.version('sglang'))"]


@pytest.fixture(scope="module")
def specs():
    return {key: ch.parse_help(text) for key, text in HELP.items()}


def case_argv(case):
    if "argv" in case:
        return [str(token) for token in case["argv"]]
    if "render" in case:
        spec = case["render"]
        profile = yaml.safe_load((PROFILES / f"{spec['profile']}.yml").read_text())
        lines = sf.render_lines(sf.worker_flags(profile, spec["role"], INSTANCES[spec["role"]], SETTINGS))
        return sf.argv(lines) + [str(token) for token in spec.get("extra", [])]
    spec = case["render_router"]
    return sf.argv(sf.router_lines(spec["prefills"], spec["decodes"], spec["settings"]))


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


# --------------------------------------------------------------------------------------------------
# Reading the help
# --------------------------------------------------------------------------------------------------


def test_sglang_help_yields_every_listed_flag_of_the_reference_table(specs):
    """The help-derived spec has every flag of sglang 0.5.23 that --help shows, with its choices."""
    reference = {}
    for row in (FIXTURES / "sglang-0.5.23-serve-flags.tsv").read_text().splitlines()[1:]:
        flags, _dest, _type, _default, choices, _action = row.split("\t")
        reference[tuple(flags.split(","))] = sorted(filter(None, choices.split(",")))
    parsed = {tuple(o["strings"]): sorted(o["choices"] or []) for o in specs["sglang"]["options"]}
    hidden = {("--forward-pass-metrics-worker-id",), ("--forward-pass-metrics-ipc-name",)}  # help=SUPPRESS
    assert set(parsed) == set(reference) - hidden
    for flags, choices in parsed.items():
        assert choices == reference[flags], flags
    assert specs["sglang"]["prog"] == "sglang serve"
    required = [o["strings"][0] for o in specs["sglang"]["options"] if o["required"]]
    assert required == ["--model-path"]
    deprecated = sorted(o["strings"][0] for o in specs["sglang"]["options"] if o["deprecated"])
    assert deprecated == sorted(
        [
            "--disable-cuda-graph",
            "--enable-dp-attention",
            "--monokernel-backend",
            "--enable-flashinfer-allreduce-fusion",
            "--grpc-mode",
            "--disable-fast-image-processor",
        ]
    )


def test_router_help_skips_the_examples_in_its_description(specs):
    options = {o["strings"][0]: o for o in specs["router"]["options"]}
    assert len(options) == 99
    assert (options["--prefill"]["min_args"], options["--prefill"]["max_args"]) == (1, None)
    assert (options["--decode"]["min_args"], options["--decode"]["max_args"]) == (1, 1)
    assert (options["--worker-urls"]["min_args"], options["--worker-urls"]["max_args"]) == (0, None)
    assert options["--pd-disaggregation"]["max_args"] == 0
    assert options["--prefill-policy"]["choices"][-1] == "bucket"
    assert not any(o["required"] or o["deprecated"] for o in options.values())


def test_router_fixture_is_the_installed_router_help(specs):
    """The recorded router help is what the controller's sglang-router (pinned 0.3.2) prints."""
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_router.launch_router", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, COLUMNS="80"),
    )
    live = ch.parse_help(proc.stdout)

    def comparable(spec):  # choices built from sets: their order follows the hash seed
        return [dict(o, args=None, choices=sorted(o["choices"] or [])) for o in spec["options"]]

    assert comparable(live) == comparable(specs["router"])


@pytest.mark.parametrize(
    ("args", "arity"),
    [
        ("", (0, 0)),
        ("X", (1, 1)),
        ("X Y", (2, 2)),
        ("[X]", (0, 1)),
        ("[X ...]", (0, None)),
        ("[X [X ...]]", (0, None)),
        ("X [X ...]", (1, None)),
        ("{a,b} [{a,b} ...]", (1, None)),
        ("...", (0, None)),
        ("A ...", (1, None)),
    ],
)
def test_argparse_args_strings(args, arity):
    assert ch._arity(args) == arity


def test_python_3_13_invocation_style():
    """Python 3.13 prints ``-m, --model-path MODEL_PATH`` instead of repeating the metavar."""
    text = (
        "usage: prog [-h] -m MODEL_PATH [--mode {a,b}]\n\n"
        "options:\n"
        "  -h, --help            show this help message and exit\n"
        "  -m, --model-path MODEL_PATH\n"
        "                        The model.\n"
        "  --mode {a,b}          Deprecated. Use --other.\n"
    )
    spec = ch.parse_help(text)
    model = spec["options"][1]
    assert model["strings"] == ["-m", "--model-path"]
    assert model["required"]
    assert spec["options"][2]["deprecated"]
    result = ch.check_argv(spec, ["-m", "x", "--mode", "c"])
    assert [p["kind"] for p in result["problems"]] == ["choice"]
    assert ch.check_argv(spec, ["-mx"])["problems"] == []  # a short option with its value attached


def test_not_argparse_help_is_an_error():
    with pytest.raises(cc.CheckError, match="no 'usage:' line"):
        ch.parse_help("hello\n")


# --------------------------------------------------------------------------------------------------
# Checking command lines (data-driven)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES["argv_cases"], ids=[case["id"] for case in CASES["argv_cases"]])
def test_argv_case(case, specs):
    result = ch.check_argv(specs[case["help"]], case_argv(case))
    assert_matches(result["problems"], case["problems"], "problems")
    assert_matches(result["warnings"], case["warnings"], "warnings")


def test_every_shipped_profile_passes_the_help_check(specs):
    paths = sorted(PROFILES.glob("*.yml"))
    assert paths
    for path in paths:
        profile = yaml.safe_load(path.read_text())
        for role in sf.WORKER_ROLES:
            argv = sf.argv(sf.render_lines(sf.worker_flags(profile, role, INSTANCES[role], SETTINGS)))
            result = ch.check_argv(specs["sglang"], argv)
            assert result == {"problems": [], "warnings": []}, (path.stem, role)


# --------------------------------------------------------------------------------------------------
# The whole check with a fake runner and a cache (data-driven)
# --------------------------------------------------------------------------------------------------


class FakeRunner:
    def __init__(self, run):
        self.run, self.ran = run, []

    def __call__(self, argv, data=None):
        if argv[1:2] == ["-c"] and "--module" in argv:  # the parser script
            self.ran.append("parser")
            assert json.loads(data) == self.run["argvs"]
            if self.run["parser"] == "no_parser":
                return 3, "", "cli_parser_script: cannot import sglang.srt.server_args:prepare_server_args: ..."
            return 0, "not JSON\n", ""
        if argv == VERSION_COMMAND:
            self.ran.append("version")
            return self.run.get("version_rc", 0), f"{self.run['version']}\n", ""
        assert argv == HELP_COMMAND, argv
        self.ran.append("help")
        text = self.run.get("help_text", HELP[self.run["help"]])
        rc = self.run.get("help_rc", 0)
        return (rc, "", text) if self.run.get("help_stream") == "stderr" else (rc, text, "")


def prepare_cache(run, cache_dir):
    if run["cache"] == "none":
        return None
    version = run["version"]
    if run["cache"] == "warm":
        cc.load_spec(FakeRunner(dict(run, version_rc=0)), HELP_COMMAND, VERSION_COMMAND, str(cache_dir))
    elif run["cache"] == "stale":
        cc.load_spec(FakeRunner(dict(run, version="0.5.22")), HELP_COMMAND, VERSION_COMMAND, str(cache_dir))
    elif run["cache"] == "warm_no_parser":
        warm = dict(run, version_rc=0, parser="no_parser")
        kwargs = {"version_command": VERSION_COMMAND, "cache_dir": str(cache_dir)}
        cc.run_check(FakeRunner(warm), HELP_COMMAND, run["argvs"], **kwargs)
    elif run["cache"] == "corrupt":
        cache_dir.mkdir()
        Path(cc.cache_path(str(cache_dir), HELP_COMMAND, version)).write_text("{not json")
    return str(cache_dir)


@pytest.mark.parametrize("run", CASES["runs"], ids=[run["id"] for run in CASES["runs"]])
def test_run(run, tmp_path):
    cache_dir = prepare_cache(run, tmp_path / "cache")
    before = sorted(os.listdir(cache_dir)) if cache_dir and os.path.isdir(cache_dir) else []
    before_stat = {name: os.stat(os.path.join(cache_dir, name)).st_mtime_ns for name in before}
    runner = FakeRunner(run)
    expect = run["expect"]
    kwargs = {
        "version_command": VERSION_COMMAND if run["version"] is not None else None,
        "cache_dir": cache_dir,
        "write_cache": not run.get("check_mode", False),
        "method": run.get("method", "help"),
    }
    if "error_contains" in expect:
        with pytest.raises(cc.CheckError) as error:
            cc.run_check(runner, HELP_COMMAND, run["argvs"], **kwargs)
        for text in expect["error_contains"]:
            assert text in str(error.value)
        return
    result = cc.run_check(runner, HELP_COMMAND, run["argvs"], **kwargs)
    assert result["method"] == expect.get("method", "help")
    assert result["spec_source"] == expect["spec_source"]
    assert runner.ran == expect["ran"]
    assert result["failed"] is expect["failed"]
    assert result["checked"] == list(run["argvs"])
    for text in expect.get("msg_contains", []):
        assert text in result["msg"], result["msg"]
    for text in expect.get("warnings_contain", []):
        assert any(text in warning for warning in result["warnings"]), result["warnings"]
    after = sorted(os.listdir(cache_dir)) if cache_dir and os.path.isdir(cache_dir) else []
    written = [
        name
        for name in after
        if name not in before_stat or os.stat(os.path.join(cache_dir, name)).st_mtime_ns != before_stat[name]
    ]
    if "cache_files" in expect:
        assert len(written) == expect["cache_files"], written
    elif expect.get("cache_written"):
        assert written == [os.path.basename(result["cache_file"])]
        assert not [name for name in after if name.startswith(".tmp-")]
    else:
        assert written == []
    if run["version"] is None or cache_dir is None:
        assert result["cache_file"] is None


# --------------------------------------------------------------------------------------------------
# The Ansible module itself
# --------------------------------------------------------------------------------------------------


def run_module(args, run_command, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    out, err = io.StringIO(), io.StringIO()
    with (
        patch_module_args(args),
        mock.patch.object(basic.AnsibleModule, "run_command", autospec=True, side_effect=run_command),
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


def module_runner(version="0.5.23", help_key="sglang"):
    calls = []

    def run_command(_module, argv, environ_update=None, **_kwargs):
        calls.append((argv, environ_update))
        if argv == VERSION_COMMAND:
            return 0, version + "\n", ""
        return 0, HELP[help_key], ""

    return run_command, calls


def test_module_passes_and_caches(tmp_path):
    args = {
        "help_command": HELP_COMMAND,
        "version_command": VERSION_COMMAND,
        "cache_dir": str(tmp_path),
        "argvs": {"prefill0": ["--model-path", "/m", "--disable-cuda-graph"]},
        "method": "help",
    }
    run_command, calls = module_runner()
    code, result = run_module(args, run_command)
    assert code == 0
    assert result["changed"] is False
    assert result["spec_source"] == "help"
    assert result["version"] == "0.5.23"
    assert result["checked"] == ["prefill0"]
    assert "prefill0: --disable-cuda-graph is deprecated" in result["_warnings_text"]
    assert result["flag_warnings"][0]["kind"] == "deprecated"
    assert all(env == {"LC_ALL": "C", "LANG": "C"} for _argv, env in calls)
    assert os.path.isfile(result["cache_file"])

    run_command, calls = module_runner()
    code, result = run_module(args, run_command)
    assert code == 0
    assert result["spec_source"] == "cache"
    assert [argv for argv, _env in calls] == [VERSION_COMMAND]


def test_module_fails_listing_problems(tmp_path):
    args = {
        "help_command": HELP_COMMAND,
        "argvs": {"decode0": ["--model-path", "/m", "--cuda-graph-max-bs", "64"]},
        "method": "help",
    }
    run_command, _calls = module_runner()
    code, result = run_module(args, run_command)
    assert code == 1
    assert result["failed"] is True
    assert result["changed"] is False
    assert "decode0: --cuda-graph-max-bs: ambiguous option" in result["msg"]
    assert result["problems"]["decode0"][0]["kind"] == "ambiguous"


def test_module_check_mode_does_not_write_the_cache(tmp_path):
    args = {
        "help_command": HELP_COMMAND,
        "version_command": VERSION_COMMAND,
        "cache_dir": str(tmp_path / "cache"),
        "argvs": {"prefill0": ["--model-path", "/m"]},
        "method": "help",
    }
    run_command, _calls = module_runner()
    code, result = run_module(args, run_command, check_mode=True)
    assert code == 0
    assert result["spec_source"] == "help"
    assert not (tmp_path / "cache").exists()


def test_module_reports_a_broken_help_command(tmp_path):
    def run_command(_module, argv, **_kwargs):
        return 1, "", "Traceback ...\nImportError: libcuda.so.1: cannot open shared object file\n"

    code, result = run_module({"help_command": HELP_COMMAND, "argvs": {"p": []}}, run_command)
    assert code == 1
    assert "the help command" in result["msg"]
    assert "the program's own parser could not be used either" in result["msg"]
    assert result["msg"].count("libcuda.so.1") == 2


# --------------------------------------------------------------------------------------------------
# Cross-check: the help check and the programs' REAL parsers agree on accept/reject
# --------------------------------------------------------------------------------------------------


def test_cross_check_with_the_real_parsers(specs, parser_verdicts, capsys):
    real = {}
    for program in ("sglang", "router"):
        for name, found in parser_verdicts[program]["results"].items():
            if name.startswith("argv:"):
                real[name[len("argv:") :]] = (found["ok"], found["error"])

    cases = {case["id"]: case for case in CASES["argv_cases"]}
    assert set(real) == set(cases)
    report = []
    for name, (real_ok, real_error) in real.items():
        case = cases[name]
        problems = ch.check_argv(specs[case["help"]], case_argv(case))["problems"]
        help_ok = not problems
        agree = help_ok == real_ok
        report.append(
            f"  {name}: real {'accept' if real_ok else 'reject'}, help check {'accept' if help_ok else 'reject'}"
        )
        if case.get("cross_check", "agree") == "known_gap":
            assert not agree, f"{name}: the known gap is closed ({case['reason']}): mark it agree"
        else:
            assert agree, f"{name}: real parser says {real_ok} ({real_error}), the help check says {help_ok}"
            if len(problems) == 1:  # one problem: the user reads argparse's own words
                assert problems[0]["message"] == real_error.partition(" error: ")[2] or (
                    problems[0]["message"] == real_error
                ), (name, real_error)
    with capsys.disabled():
        print("\n[cli_check vs real parsers]\n" + "\n".join(report))


def test_real_commands_cold_and_cached(real_python, tmp_path, capsys):
    """The shipped profile's lines against sglang's own parser (no torch; its ``--help`` could not even run
    here), cold then cached. The router's: test_module_with_the_real_router; its help: the fixture test."""
    profile = yaml.safe_load((PROFILES / "deepseek_v4_flash_sm120.yml").read_text())
    worker_argvs = {
        INSTANCES[role]["name"]: sf.argv(sf.render_lines(sf.worker_flags(profile, role, INSTANCES[role], SETTINGS)))
        for role in sf.WORKER_ROLES
    }
    help_command, version_command, _env = program_commands("sglang", real_python)
    seconds = []
    for expected_source in ("parser", "cache"):
        runner = RealRunner()
        started = time.monotonic()
        kwargs = {"version_command": version_command, "cache_dir": str(tmp_path)}
        result = cc.run_check(runner, help_command, worker_argvs, **kwargs)
        seconds.append(time.monotonic() - started)
        assert (result["method"], result["spec_source"], result["version"]) == ("argparse", expected_source, "0.5.23")
        assert runner.parser_runs == (1 if expected_source == "parser" else 0)
        assert result["failed"] is False, result["msg"]
        assert result["flag_warnings"] == []
    with capsys.disabled():
        print(f"\n[cli_check, sglang 0.5.23 own parser] cold {seconds[0]:.2f}s, cached {seconds[1]:.2f}s")


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


def program_commands(name, real_python=None):
    """(help_command, version_command, runner env) of one program as the roles would call it."""
    if name == "sglang":
        python, module, dist = str(real_python), "sglang.launch_server", "sglang"
    elif name == "router":
        python, module, dist = sys.executable, "sglang_router.launch_router", "sglang-router"
    else:
        python, module, dist = sys.executable, "sglang_pd_sim", None
    version = (
        [python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"]
        if dist
        else [python, "-c", "import sglang_pd_sim as s; print('sglang-pd-sim', s.__version__)"]
    )
    return [python, "-m", module, "--help"], version, SIM_ENV if name == "sim" else {}


PARSER_CASES = [
    pytest.param(case, program, id=f"{program}-{case['id']}")
    for case in CASES["parser_cases"]
    for program in case["programs"]
]


@pytest.fixture(scope="module")
def parser_verdicts(real_python):
    """Each program's own parser, run once over a batch: its parser_cases, and the argv_cases of its help
    (as ``argv:ID``, for the cross-check of the help emulation)."""
    verdicts, seconds = {}, []
    for program in ("sglang", "router", "sim"):
        help_command, _version_command, env = program_commands(program, real_python)
        argvs = {c["id"]: c["argv"] for c in CASES["parser_cases"] if program in c["programs"]}
        argvs.update({f"argv:{c['id']}": case_argv(c) for c in CASES["argv_cases"] if c["help"] == program})
        started = time.monotonic()
        out = ca.parse_argvs(RealRunner(env), help_command, argvs)
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
    else:
        assert found["error"] == found["problems"][0]["message"] or found["problems"][0]["kind"] == "exits"


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


@pytest.mark.parametrize("case", CASES["verdicts"], ids=[case["id"] for case in CASES["verdicts"]])
def test_verdict(case):
    result = dict({"ok": False, "exit_status": 2, "error": "", "warnings": [], "flags": {}}, **case["result"])
    found = ca.verdict(result, CASES["verdict_info"], case["argv"])
    assert found["ok"] is (not case["problems"])
    assert_matches(found["problems"], case["problems"], "problems")
    assert_matches(found["warnings"], case["warnings"], "warnings")
    for got, want in zip(found["problems"] + found["warnings"], case["problems"] + case["warnings"], strict=True):
        if "hint" in want:
            assert got["hint"] == want["hint"]


@pytest.mark.parametrize(
    ("help_command", "entry", "reason"),
    [
        (["/usr/bin/sglang-router", "--help"], None, "does not run a Python module"),
        (["/v/bin/python", "-m", "vllm.entrypoints.api_server", "--help"], None, "no parse function is known"),
    ],
)
def test_no_parser_command(help_command, entry, reason):
    with pytest.raises(ca.NoParser, match=reason):
        ca.parser_command(help_command, entry)


def test_parser_entry_names_another_program():
    command = ca.parser_command(["/v/bin/python", "-m", "tool", "--help"], "tool.cli:parse")
    assert command[:2] == ["/v/bin/python", "-c"]
    assert command[3:] == ["--module", "tool", "--entry", "tool.cli:parse"]


def test_cache_per_version_and_argv(tmp_path):
    """A no-op run starts no parser; a changed argv re-parses only that argv; a new version all of them."""
    help_command, version_command, env = program_commands("sim")
    argvs = {
        "prefill0": ["--model-path", "/m", "--disaggregation-mode", "prefill"],
        "decode0": ["--model-path", "/m", "--disaggregation-mode", "decode"],
    }
    kwargs = {"version_command": version_command, "cache_dir": str(tmp_path)}

    runner = RealRunner(env)
    first = cc.run_check(runner, help_command, argvs, **kwargs)
    assert (first["method"], first["parser_runs"], runner.parser_runs) == ("argparse", 1, 1)
    assert first["version"] == "sglang-pd-sim 0.1.0"
    assert {r["source"] for r in first["results"].values()} == {"parser"}
    assert len(os.listdir(tmp_path)) == 2

    runner = RealRunner(env)
    again = cc.run_check(runner, help_command, argvs, **kwargs)
    assert (again["parser_runs"], runner.parser_runs, again["spec_source"]) == (0, 0, "cache")
    assert runner.commands == [" ".join(version_command)]
    assert again["results"] == {name: dict(result, source="cache") for name, result in first["results"].items()}, (
        "a cached verdict is the verdict"
    )
    assert again["prog"] == "sglang-pd-sim"

    runner = RealRunner(env)
    changed = dict(argvs, decode0=[*argvs["decode0"], "--page-size", "x"])
    third = cc.run_check(runner, help_command, changed, **kwargs)
    assert (third["parser_runs"], runner.parser_runs) == (1, 1)
    assert third["results"]["prefill0"]["source"] == "cache"
    assert third["results"]["decode0"]["source"] == "parser"
    assert third["failed"] is True
    assert "decode0: --page-size: argument --page-size: invalid int value: 'x'" in third["msg"]
    assert len(os.listdir(tmp_path)) == 2, "the unit's older verdict is pruned"

    runner = RealRunner(env)
    other_kwargs = dict(kwargs)
    other_kwargs["version_command"] = [sys.executable, "-c", "print('sglang-pd-sim 0.1.1')"]
    fourth = cc.run_check(runner, help_command, argvs, **other_kwargs)
    assert (fourth["parser_runs"], runner.parser_runs) == (1, 1)

    before = {name: os.stat(tmp_path / name).st_mtime_ns for name in os.listdir(tmp_path)}
    checked = cc.run_check(RealRunner(env), help_command, argvs, **kwargs, write_cache=False)
    assert checked["parser_runs"] == 1, "the run of another version pruned this version's verdicts"
    assert {name: os.stat(tmp_path / name).st_mtime_ns for name in os.listdir(tmp_path)} == before, "check mode"


def test_module_with_the_real_router(tmp_path):
    """The module end to end, AnsibleModule.run_command included (the script goes as -c, argvs on stdin)."""
    help_command, version_command, _env = program_commands("router")
    args = {
        "help_command": help_command,
        "version_command": version_command,
        "cache_dir": str(tmp_path),
        "method": "argparse",
        "argvs": {
            "router": ["--pd-disaggregation", "--prefill", "http://a:30000", "8998", "--decode", "http://c:30001"],
            "router_bad": ["--pd-disaggregation", "--prefill-policy", "fastest"],
        },
    }
    out, err = io.StringIO(), io.StringIO()
    with (
        patch_module_args(args),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exit_info,
    ):
        cli_check_module.main()
    result = json.loads(out.getvalue())
    assert exit_info.value.code == 1
    assert result["method"] == "argparse"
    assert result["version"] == "0.3.2"
    assert result["results"]["router"]["ok"] is True
    assert result["results"]["router"]["flags"]["--prefill"] == [["http://a:30000", "8998"]]
    assert result["problems"]["router_bad"][0]["kind"] == "choice"
    assert "router_bad: --prefill-policy: argument --prefill-policy: invalid choice: 'fastest'" in result["msg"]
    assert "(its own parser)" in result["msg"]
    assert len(os.listdir(tmp_path)) == 2
