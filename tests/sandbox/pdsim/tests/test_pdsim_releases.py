"""The simulator's releases (sglang_pd_sim/releases.py) and the wheelhouse's one wheel per release.

0.1.0 refuses 0.2.x's `--sim-v2-feature` as argparse refuses any unknown flag (exit 2, "unrecognized
arguments": an older sglang refusing a newer flag); 0.2.1 comes up alive and never healthy, as sglang after a
failed upgrade (sglang/srt/entrypoints/http_server.py health_generate: 503 when the scheduler does not answer).
The releases run from tmp copies of the source tree rewritten by the wheelhouse's own function; no pip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sglang_pd_sim
from ansible_collections.disagg.sglang.plugins.module_utils.cli import cli_argparse as ca
from sglang_pd_sim import releases
from sglang_pd_sim.cli import build_parser, load_knobs, parse_args

from tests.http_client import http
from tests.sandbox import wheelhouse

PDSIM = wheelhouse.PDSIM
ARGV = ["--model-path", "/m"]


@pytest.fixture(scope="module")
def release_trees(tmp_path_factory):
    """A copy of the simulator's tree per release, rewritten as the wheelhouse rewrites it before `pip wheel`."""
    trees = {}
    for version in wheelhouse.pdsim_versions():
        tree = tmp_path_factory.mktemp("pdsim") / f"pdsim-{version}"
        shutil.copytree(PDSIM, tree, ignore=shutil.ignore_patterns(*wheelhouse.BUILD_LEFTOVERS))
        wheelhouse.set_version(tree, version)
        trees[version] = tree
    return trees


def run_sim(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-m", "sglang_pd_sim", *args], capture_output=True, text=True, env=env,
                          timeout=30, check=False)  # fmt: skip


# --- the table ----------------------------------------------------------------------------------------------


def test_the_table():
    assert list(releases.RELEASES) == ["0.1.0", "0.2.0", "0.2.1"]
    assert releases.RELEASES["0.1.0"].flags == () and releases.RELEASES["0.1.0"].fail == ()
    assert [flag for flag, _kwargs in releases.RELEASES["0.2.0"].flags] == ["--sim-v2-feature"]
    assert releases.RELEASES["0.2.0"].fail == ()
    assert releases.RELEASES["0.2.1"].flags == releases.RELEASES["0.2.0"].flags
    assert releases.RELEASES["0.2.1"].fail == () and releases.RELEASES["0.2.1"].stall_after == 0.0
    assert sglang_pd_sim.__version__ == releases.BASE_VERSION == "0.1.0"  # the source tree is 0.1.0
    assert wheelhouse.pdsim_versions() == list(releases.RELEASES)


def test_an_unknown_version_behaves_as_0_1_0_and_says_so():
    rel, problem = releases.release("9.9.9")
    assert rel is releases.RELEASES["0.1.0"]
    assert problem == "sglang-pd-sim 9.9.9 is not in the release table; behaving as 0.1.0"
    knobs = load_knobs({}, version="9.9.9")
    assert knobs.problems == [problem] and knobs.fail_health is None
    with pytest.raises(SystemExit):
        build_parser(version="9.9.9").parse_args([*ARGV, "--sim-v2-feature"])


# --- flags --------------------------------------------------------------------------------------------------


def test_0_1_0_refuses_the_v2_flag_as_an_unknown_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args([*ARGV, "--sim-v2-feature"])  # the source tree: 0.1.0
    assert exc.value.code == 2
    assert "error: unrecognized arguments: --sim-v2-feature" in capsys.readouterr().err
    assert not hasattr(parse_args(ARGV), "sim_v2_feature")


@pytest.mark.parametrize("version", ["0.2.0", "0.2.1"])
def test_0_2_x_accept_the_v2_flag(version, monkeypatch):
    monkeypatch.setattr(sglang_pd_sim, "__version__", version)  # parse_args: the running release's own flags
    assert parse_args([*ARGV, "--sim-v2-feature"]).sim_v2_feature is True
    assert parse_args(ARGV).sim_v2_feature is False
    assert "only in the simulator's 0.2.x releases" in " ".join(build_parser().format_help().split())


def test_the_rewritten_releases_as_processes(release_trees):
    old = run_sim(release_trees["0.1.0"], "serve", *ARGV, "--sim-v2-feature")
    assert old.returncode == 2 and "unrecognized arguments: --sim-v2-feature" in old.stderr
    for version in ("0.2.0", "0.2.1"):
        assert "--sim-v2-feature" in run_sim(release_trees[version], "--help").stdout


def test_the_flag_checker_sees_each_releases_own_parser(release_trees):
    """plugins/module_utils/cli/cli_parser_script.py runs sglang_pd_sim.cli:parse_args under the release installed."""

    def runner(tree):
        def run(argv, data=None):
            proc = subprocess.run(argv, input=data, capture_output=True, text=True, check=False,
                                  env=dict(os.environ, LC_ALL="C", PYTHONPATH=str(tree)))  # fmt: skip
            return proc.returncode, proc.stdout, proc.stderr

        return run

    argvs = {"v2": [*ARGV, "--sim-v2-feature"]}
    old = ca.parse_argvs(runner(release_trees["0.1.0"]), sys.executable, "sglang_pd_sim", argvs)
    new = ca.parse_argvs(runner(release_trees["0.2.0"]), sys.executable, "sglang_pd_sim", argvs)
    assert old["results"]["v2"]["ok"] is False and "unrecognized arguments" in old["results"]["v2"]["error"]
    assert new["results"]["v2"]["ok"] is True, new["results"]["v2"]
    assert new["known_flags"] == old["known_flags"] + 1


# --- failures -----------------------------------------------------------------------------------------------


def test_default_failures_and_the_environments_added_after():
    assert load_knobs({}, version="0.2.0").fail_health is None
    broken = load_knobs({}, version="0.2.1")
    assert broken.stall_after == 0.0 and broken.fail_health is None and not broken.problems
    assert load_knobs({}, version="0.2.0").stall_after is None
    assert load_knobs({"SGLANG_SIM_STALL_AFTER": "inf"}, version="0.2.1").stall_after is None  # the env overrides
    assert load_knobs({"SGLANG_SIM_STALL_AFTER": "3"}, version="0.2.1").stall_after == 3.0
    both = load_knobs({"SGLANG_SIM_FAIL": "generate:500"}, version="0.2.1")
    assert both.raw_fail == "generate:500" and both.fail_generate == 500 and both.stall_after == 0.0


def test_0_2_1_comes_up_and_stalls_as_sglang_s_scheduler_does(sims, release_trees):
    """Up (its /ready answers), then its scheduler answers nothing: /health only a 503 after its own health check
    timeout (1 s here), a generation not at all; the process keeps running (sglang 0.5.23 http_server.py)."""
    sim = sims.start("null", src=release_trees["0.2.1"], env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"}, healthy=False)
    sim.wait_healthy()  # /ready: 200 until a health check fails
    started = time.monotonic()
    assert http("GET", sim.url("/health"), timeout=10)[0] == 503
    assert time.monotonic() - started >= 1.0, "a 503 at once is a warm-up's, not a stalled scheduler's"
    with pytest.raises(OSError):  # a timeout: the generation hangs
        http("POST", sim.url("/generate"), {"text": "hi", "sampling_params": {"max_new_tokens": 2}}, timeout=2)
    assert sim.popen.poll() is None  # the process keeps running


def test_0_2_0_is_healthy(sims, release_trees):
    sim = sims.start("null", "--sim-v2-feature", src=release_trees["0.2.0"])
    assert http("GET", sim.url("/health"))[0] == 200
    assert http("GET", sim.url("/server_info"))[1]["sim_v2_feature"] is True


# --- the wheelhouse's rewrite -------------------------------------------------------------------------------


def test_set_version_rewrites_both_version_lines(tmp_path):
    tree = tmp_path / "pdsim"
    shutil.copytree(PDSIM, tree, ignore=shutil.ignore_patterns(*wheelhouse.BUILD_LEFTOVERS))
    wheelhouse.set_version(tree, "0.2.1")
    assert '\nversion = "0.2.1"\n' in (tree / "pyproject.toml").read_text()
    assert '\n__version__ = "0.2.1"\n' in (tree / "sglang_pd_sim" / "__init__.py").read_text()
    out = run_sim(tree, "--help")
    assert out.returncode == 0 and "simulator 0.2.1" in out.stdout
    assert '\nversion = "0.1.0"\n' in (PDSIM / "pyproject.toml").read_text()  # the source tree is left alone
    (tree / "pyproject.toml").write_text("[project]\n")
    with pytest.raises(wheelhouse.SandboxError, match="0 version lines"):
        wheelhouse.set_version(tree, "0.2.0")
