"""Every shipped profile's command lines parse under sglang 0.5.23's REAL argument parser.

The parser is sglang's own (``ServerArgs.add_cli_args`` on ``argparse.ArgumentParser(prog="sglang
serve")``, as ``prepare_server_args`` builds it), from the wheel installed without its multi-GB
dependencies (tests/sglang_parser/). Nothing here is skipped: if the parser's venv cannot be built,
the tests fail and say why.
"""

import csv
from pathlib import Path

import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf

REPO = Path(__file__).resolve().parents[3]
import real_parser_client as rpc  # noqa: E402

PROFILES = sorted((REPO / "profiles").glob("*.yml"))  # every file there is a shipped profile
SGLANG_VERSION = "0.5.23"

from samples import INSTANCES, SETTINGS  # noqa: E402

AMBIGUITY = "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"


def rendered_argv(profile, role):
    return sf.argv(sf.render_lines(sf.worker_flags(profile, role, INSTANCES[role], SETTINGS)))


def profile_cases():
    return [pytest.param(path, role, id=f"{path.stem}-{role}") for path in PROFILES for role in sf.WORKER_ROLES]


# Everything the tests below ask the real parser, sent in one batch (one parser build).
EXTRA_ARGVS = {
    "cuda-graph-max-bs": ["--model-path", "/m", "--cuda-graph-max-bs", "64"],
    "cuda-graph-max-bs-decode": ["--model-path", "/m", "--cuda-graph-max-bs-decode", "64"],
    "disable-cuda-graph": ["--model-path", "/m", "--disable-cuda-graph"],
    "kv-cache-dtype-fp9": ["--model-path", "/m", "--kv-cache-dtype", "fp9"],
    "tp-prefix": ["--model-path", "/m", "--tp", "4"],
    "tp-prefix-with-equals": ["--model-path", "/m", "--tp=4", "--page-size=256"],
    "tp-prefix-after-dashes": ["--model-path", "/m", "--", "--tp"],
}


@pytest.fixture(scope="module")
def parsed(real_python):
    argvs = dict(EXTRA_ARGVS)
    for path in PROFILES:
        profile = yaml.safe_load(path.read_text())
        for role in sf.WORKER_ROLES:
            argvs[f"{path.stem}-{role}"] = rendered_argv(profile, role)
    try:
        return rpc.parse_argvs(real_python, argvs)
    except rpc.ParserUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def test_real_parser_is_sglang_0_5_23(real_python):
    info = rpc.info(real_python)
    assert info["version"] == SGLANG_VERSION
    assert info["prog"] == "sglang serve"
    assert info["allow_abbrev"] is True, "sglang serve matches flag prefixes; the parser must too"
    assert info["actions"] == 532


def test_real_parser_matches_the_reference_flag_table(real_python):
    """The parser built here has exactly the actions of the reference table (read off the wheel)."""
    table = rpc.action_table(real_python)
    with rpc.REFERENCE_TABLE.open() as handle:
        reference = list(csv.DictReader(handle, delimiter="\t"))
    got = {tuple(row["flags"]): (row["dest"], row["action"], sorted(row["choices"] or [])) for row in table}
    want = {
        tuple(row["flags"].split(",")): (row["dest"], row["action"], sorted(filter(None, row["choices"].split(","))))
        for row in reference
    }
    assert got == want


def test_there_are_shipped_profiles():
    assert PROFILES, "profiles/ holds no profile"


@pytest.mark.parametrize(("path", "role"), profile_cases())
def test_shipped_profile_parses_under_the_real_parser(path, role, parsed, capsys):
    profile = yaml.safe_load(path.read_text())
    result = parsed[f"{path.stem}-{role}"]
    verdict = "ACCEPTED" if result["ok"] else f"REJECTED (exit {result['exit_status']}): {result['error']}"
    with capsys.disabled():
        print(f"\n[real sglang {SGLANG_VERSION} parser] profile {path.stem}, {role}: {verdict}")
    assert result["ok"], result["message"]
    assert result["warnings"] == [], "a shipped profile must not use deprecated flags"
    assert result["abbreviations"] == [], "a shipped profile must spell every flag in full"

    flags = result["flags"]
    instance = INSTANCES[role]
    assert flags["--model-path"] == SETTINGS["model_path"]
    assert flags["--served-model-name"] == SETTINGS["served_model_name"]
    assert flags["--disaggregation-mode"] == role
    assert flags["--tp-size"] == instance["tp"]
    assert flags["--host"] == SETTINGS["host"]
    assert flags["--port"] == instance["port"]
    assert flags["--disaggregation-bootstrap-port"] == instance["bootstrap_port"]
    assert flags["--dist-init-addr"] == f"{SETTINGS['dist_init_host']}:{instance['dist_init_port']}"
    wanted = sf.merge_flags(profile["flags"].get("common"), profile["flags"].get(role))
    for name, value in wanted.items():
        if value is None or value is False:
            assert f"--{name}" not in flags, f"--{name} is off in the profile but reached the command line"
        else:
            assert flags.get(f"--{name}") == value, (
                f"--{name}: profile says {value!r}, sglang parsed {flags.get(f'--{name}')!r}"
            )


def test_profile_values_the_pd_handoff_depends_on(parsed):
    """Prefill and decode agree on page size and KV dtype, as the real parser reads them."""
    for path in PROFILES:
        prefill, decode = parsed[f"{path.stem}-prefill"]["flags"], parsed[f"{path.stem}-decode"]["flags"]
        for flag in ("--page-size", "--kv-cache-dtype", "--disaggregation-transfer-backend"):
            assert prefill.get(flag) == decode.get(flag), f"{path.stem}: {flag} differs between prefill and decode"
    shipped = parsed["deepseek_v4_flash_sm120-decode"]["flags"]
    assert shipped["--page-size"] == 256
    assert shipped["--kv-cache-dtype"] == "fp8_e4m3"
    assert shipped["--cuda-graph-max-bs-decode"] == 64


def test_cuda_graph_max_bs_is_ambiguous_in_0_5_23(parsed, capsys):
    result = parsed["cuda-graph-max-bs"]
    with capsys.disabled():
        print(
            f"\n[real sglang {SGLANG_VERSION} parser] --cuda-graph-max-bs 64: exit {result['exit_status']}, "
            f"{result['error']}"
        )
    assert not result["ok"]
    assert result["exit_status"] == 2
    assert AMBIGUITY in result["message"]
    assert result["error"] == AMBIGUITY
    assert parsed["cuda-graph-max-bs-decode"]["ok"], "the full name is the fix"


def test_disable_cuda_graph_is_accepted_with_a_deprecation_warning(parsed):
    result = parsed["disable-cuda-graph"]
    assert result["ok"], result["message"]
    assert result["flags"]["--disable-cuda-graph"] is True
    assert any("'--disable-cuda-graph' is deprecated" in w for w in result["warnings"]), result["warnings"]
    assert any("--cuda-graph-backend-{decode,prefill}=disabled" in w for w in result["warnings"])


def test_bad_choice_and_unique_prefix(parsed):
    bad = parsed["kv-cache-dtype-fp9"]
    assert bad["exit_status"] == 2
    assert "argument --kv-cache-dtype: invalid choice: 'fp9'" in bad["error"]
    assert bad["abbreviations"] == []
    prefix = parsed["tp-prefix"]
    assert prefix["ok"], "--tp is a unique prefix of --tp-size in 0.5.23"
    assert prefix["flags"] == {"--model-path": "/m", "--tp-size": 4}
    assert prefix["abbreviations"] == [{"token": "--tp", "flag": "--tp", "full": "--tp-size"}]


def test_the_script_names_each_abbreviation_as_sglang_reads_it(parsed):
    """``--tp=4`` is the same abbreviation as ``--tp 4``; ``--page-size=256`` is a full name; after ``--`` a value."""
    equals = parsed["tp-prefix-with-equals"]
    assert equals["ok"], equals["message"]
    assert equals["flags"] == {"--model-path": "/m", "--tp-size": 4, "--page-size": 256}
    assert equals["abbreviations"] == [{"token": "--tp=4", "flag": "--tp", "full": "--tp-size"}]
    after = parsed["tp-prefix-after-dashes"]
    assert not after["ok"], "sglang serve takes no positional argument"
    assert after["abbreviations"] == []
