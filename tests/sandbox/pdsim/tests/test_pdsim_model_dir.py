"""The double checks its model directory at start-up as sglang 0.5.23 does
(tests/sandbox/pdsim/sglang_pd_sim/model_dir.py): no config.json ends the launching process at once (exit 1, before
any listener); no weights, a shard the index names missing and a shard whose safetensors header is not valid end it
from the weight load (SIGKILL, as sglang's kill_process_tree does to itself), the last one after the shards before it
were read; never does /health answer.

The safetensors messages are those safetensors 0.8.0's safe_open gave on the same bytes (run once by hand, recorded
here: the library is not a dependency of the test bed).
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "sandbox" / "pdsim"))

from pdsim_testing import tiny_model  # noqa: E402
from sglang_pd_sim import model_dir  # noqa: E402

from tests.http_client import http  # noqa: E402
from tests.sandbox.hubsim import repo as hubrepo  # noqa: E402

SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
MISSING_SHARD = (
    "model.safetensors.index.json references 1 shard file(s) missing from {model} (incomplete download?): "
    "['model-00002-of-00002.safetensors']"
)


def st_bytes(header: str | bytes, data: bytes = b"") -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return len(raw).to_bytes(8, "little") + raw + data


GOOD = hubrepo.safetensors_file({"w": b"\x01\x02\x03\x04"})
# bytes -> what safetensors 0.8.0 said after "Error while deserializing header: " (the double says the same, or the
# same part before the first ':' where serde's wording of a JSON or UTF-8 error follows)
MISSING_JSON = "invalid JSON in header: EOF while parsing a value at line 1 column 0"
DTYPE_Q9 = '{"w":{"dtype":"Q9","shape":[4],"data_offsets":[0,4]}}'
# fmt: off
HEADER_CASES = [
    pytest.param(GOOD, None, id="valid"),
    pytest.param(st_bytes("{}"), None, id="no-tensors"),
    pytest.param(b"", "header too small", id="empty"),
    pytest.param(b"\x01\x02", "header too small", id="two-bytes"),
    pytest.param(b"<!DOCTYPE html><html>Access denied</html>", "header too large", id="an-html-page"),
    pytest.param((10**12).to_bytes(8, "little") + GOOD[8:], "header too large", id="huge-length"),
    pytest.param(GOOD[:20], "invalid header length", id="cut-in-the-header"),
    pytest.param(b"\0" * 8, MISSING_JSON, id="zero-length"),
    pytest.param(st_bytes("{x}"), "invalid JSON in header: key must be a string at line 1 column 2", id="not-json"),
    pytest.param(st_bytes("{}\0\0"), "invalid JSON in header: trailing characters at line 1 column 3",
                 id="nul-padding"),
    pytest.param(st_bytes("[]"), "invalid JSON in header: invalid type: sequence, expected struct HashMetadata at "
                 "line 1 column 0", id="a-list"),
    pytest.param(st_bytes(DTYPE_Q9, b"x" * 4), "invalid JSON in header: unknown variant `Q9`, expected one of "
                 "`BOOL`, ...", id="unknown-dtype"),
    pytest.param(st_bytes(b'{"\xff":1}'), "invalid UTF-8 in header: invalid utf-8 sequence of 1 bytes from index 2",
                 id="not-utf8"),
    pytest.param(GOOD[:-1], "incomplete metadata, file not fully covered", id="data-cut"),
    pytest.param(GOOD + b"\0", "incomplete metadata, file not fully covered", id="data-extra"),
    pytest.param(st_bytes('{"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}', b"x" * 8),
                 "invalid offset for tensor `w`", id="gap"),
    pytest.param(st_bytes('{"w":{"dtype":"U8","shape":[5],"data_offsets":[0,4]}}', b"x" * 4),
                 "invalid shape, data type, or offset for tensor", id="shape-vs-offsets"),
]
# fmt: on


@pytest.mark.parametrize(("data", "said"), HEADER_CASES)
def test_a_shard_header_is_judged_as_safetensors_safe_open_judges_it(tmp_path, data, said):
    path = tmp_path / "x.safetensors"
    path.write_bytes(data)
    reason = model_dir.safetensors_header_problem(str(path))
    if said is None or ":" not in said:
        assert reason == said
    else:  # the same kind; serde's wording of the JSON or UTF-8 error stands in for Python's
        assert reason is not None and reason.split(":")[0] == said.split(":")[0]


def test_every_shard_the_test_beds_write_is_one_safetensors_opens(tmp_path):
    model = tiny_model(tmp_path / "m")
    hub = tmp_path / "hub"
    hub.mkdir()
    for name, data in hubrepo.generate(seed=3, shards=3, shard_bytes=4096, layers=2).files.items():
        (hub / name).write_bytes(data)
    shards = [*model.glob("*.safetensors"), *hub.glob("*.safetensors")]
    assert len(shards) == 5
    for path in shards:
        assert model_dir.safetensors_header_problem(str(path)) is None, path
    assert model_dir.plan_load(str(hub)).failure is None and len(model_dir.plan_load(str(hub)).shards) == 3
    assert model_dir.config_failure(str(model)) is None
    assert model_dir.plan_load(str(model)).failure is None


# --- the load plan: what fails, and after which share of the load ---------------------------------------------------


def broken(tmp_path: Path, how: str) -> Path:
    model = tiny_model(tmp_path / "broken")  # not the pool's own tmp_path/model, which start() would render again
    if how == "no-config":
        (model / "config.json").unlink()
    elif how == "config-without-model-type":
        (model / "config.json").write_text(json.dumps({"architectures": ["DeepseekV4ForCausalLM"]}))
    elif how == "no-weights":
        for path in model.glob("model*.safetensors*"):
            path.unlink()
    elif how == "index-without-shards":
        for path in model.glob("*.safetensors"):
            path.unlink()
    elif how == "missing-shard":
        (model / SHARD2).unlink()
    elif how == "corrupt-first":
        (model / SHARD1).write_bytes(b"<!DOCTYPE html><html>Access denied</html>")
    elif how == "corrupt-second":
        (model / SHARD2).write_bytes(b"\0" * (model / SHARD2).stat().st_size)
    else:
        raise AssertionError(how)
    return model


def test_a_missing_config_is_refused_as_transformers_refuses_it(tmp_path):
    model = broken(tmp_path, "no-config")
    failure = model_dir.config_failure(str(model))
    assert (failure.exc_type, failure.message) == (
        "ValueError", f"Unrecognized model in {model}. Should have a `model_type` key in its config.json.")  # fmt: skip
    other = broken(tmp_path / "b", "config-without-model-type")
    assert model_dir.config_failure(str(other)).message.startswith(f"Unrecognized model in {other}.")
    nowhere = model_dir.config_failure(str(tmp_path / "absent"))
    assert nowhere.exc_type == "OSError" and nowhere.message.startswith(f"Can't load the configuration of '{tmp_path}")


@pytest.mark.parametrize(
    ("how", "exc_type", "message", "after"),
    [
        ("no-weights", "RuntimeError", "Cannot find any model weights with `{model}`", 0.0),
        # every shard gone: sglang's glob finds no weight file, so the index is never read (loader.py _prepare_weights)
        ("index-without-shards", "RuntimeError", "Cannot find any model weights with `{model}`", 0.0),
        ("missing-shard", "RuntimeError", MISSING_SHARD, 0.0),
        ("corrupt-first", model_dir.SAFETENSOR_ERROR, "Error while deserializing header: header too large", 0.0),
        ("corrupt-second", model_dir.SAFETENSOR_ERROR, "Error while deserializing header: invalid JSON in", 0.5),
    ],
)
def test_the_weight_load_fails_where_sglangs_loader_fails(tmp_path, how, exc_type, message, after):
    model = broken(tmp_path, how)
    plan = model_dir.plan_load(str(model))
    assert plan.failure.exc_type == exc_type
    assert plan.failure.message.startswith(message.format(model=model))
    assert plan.fails_after == pytest.approx(after)  # the two shards are of one size
    assert model_dir.plan_load(str(model), "dummy").failure is None  # --load-format dummy reads no weights


def test_shards_the_index_does_not_name_are_left_alone(tmp_path):
    model = tiny_model(tmp_path / "m")
    (model / "consolidated.safetensors").write_bytes(b"junk")  # weight_utils.py: only the indexed shards are loaded
    plan = model_dir.plan_load(str(model))
    assert plan.failure is None and [Path(p).name for p, _size in plan.shards] == [SHARD1, SHARD2]


# --- the process ---------------------------------------------------------------------------------------------------


def run_to_exit(sims, model: Path, role: str, env: dict, timeout: float = 20.0):
    """Start a simulator on MODEL and probe its HTTP port until the process ends: (returncode, log, lifecycle record,
    how many probes were made, how many got any answer)."""
    sim = sims.start(role, "--model-path", str(model), env=env, healthy=False)
    probes = answered = 0
    deadline = time.monotonic() + timeout
    while sim.popen.poll() is None and time.monotonic() < deadline:
        probes += 1
        try:
            http("GET", sim.url("/health"), timeout=0.5)
            answered += 1
        except OSError:
            pass
        time.sleep(0.05)
    assert sim.popen.poll() is not None, f"still running after {timeout}s:\n{sim.log()[-2000:]}"
    log = sim.log()
    exit_line = next(line for line in log.splitlines() if "sim_lifecycle=" in line)
    record = json.loads(exit_line.split("sim_lifecycle=", 1)[1])
    return sim.popen.returncode, log, record, probes, answered


def test_no_config_ends_the_process_with_status_1_before_anything_listens(sims, tmp_path):
    model = broken(tmp_path, "no-config")
    rc, log, record, _probes, answered = run_to_exit(sims, model, "prefill", {"SGLANG_SIM_STARTUP_DELAY": "5"})
    assert rc == 1, log
    assert f"ValueError: Unrecognized model in {model}. Should have a `model_type` key in its config.json." in log
    assert "bootstrap server on" not in log and "Loading weights" not in log  # before the load and any listener
    assert record["exit"]["reason"] == "config-error" and record["exit"]["time"] - record["started"] < 2.0
    assert answered == 0


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("no-weights", "RuntimeError: Cannot find any model weights with `{model}`"),
        ("missing-shard", "RuntimeError: " + MISSING_SHARD),
    ],
)
def test_missing_weights_end_the_process_when_the_load_starts(sims, tmp_path, how, said):
    model = broken(tmp_path, how)
    rc, log, record, probes, answered = run_to_exit(sims, model, "prefill", {"SGLANG_SIM_STARTUP_DELAY": "4"})
    assert rc == -signal.SIGKILL, log  # kill_process_tree(os.getpid()) SIGKILLs the server itself
    assert "Scheduler hit an exception: Traceback" in log and said.format(model=model) in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    # the prefill's bootstrap server was up (sglang starts it before it waits for the schedulers); the load had just
    # begun: far less than its 4 s
    assert log.index("bootstrap server on") < log.index("Scheduler hit an exception")
    assert record["exit"]["reason"] == "scheduler-exception" and record["exit"]["time"] - record["started"] < 2.0
    assert record["listening_at"] is None and answered == 0 and probes > 0


def test_a_corrupt_shard_ends_the_process_after_the_shards_before_it_were_read(sims, tmp_path):
    model = broken(tmp_path, "corrupt-second")  # the second of two shards of one size: half the load
    rc, log, record, _probes, answered = run_to_exit(sims, model, "decode", {"SGLANG_SIM_STARTUP_DELAY": "4"})
    assert rc == -signal.SIGKILL, log
    assert f"{model_dir.SAFETENSOR_ERROR}: Error while deserializing header: invalid JSON in header" in log
    assert 2.0 <= record["exit"]["time"] - record["started"] < 3.5  # 0.5 x 4 s, not the whole load
    assert record["listening_at"] is None and answered == 0


def test_a_whole_model_loads_and_serves(sims, tmp_path):
    sim = sims.start("null", env={"SGLANG_SIM_STARTUP_DELAY": "0.5"})  # the pool's own tiny model
    assert http("GET", sim.url("/ready"))[0] == 200
    shutil.rmtree(tmp_path / "model")  # removed once loaded: sglang reads its files at start-up only
    assert http("GET", sim.url("/v1/models"))[0] == 200


# --- hubsim's broken revisions (tests/sandbox/hubsim/repo.py BROKEN): staged whole, refused by the engine --------


@pytest.mark.parametrize(
    ("broken", "said", "after"),
    [
        ("header", "Error while deserializing header: header too large", 2 / 3),
        ("missing-shard", "model.safetensors.index.json references 1 shard file(s) missing from", 0.0),
    ],
)
def test_a_broken_hub_revision_verifies_but_the_engine_cannot_load_it(tmp_path, broken, said, after):
    good = hubrepo.generate(seed=5, shards=3, shard_bytes=4096, layers=2)
    bad = hubrepo.generate(seed=5, shards=3, shard_bytes=4096, layers=2, broken=broken)
    assert bad.commit != good.commit
    for name, data in bad.files.items():  # every file the hub lists is what a stage fetches and verifies
        (tmp_path / name).write_bytes(data)
        assert bad.entry(name)["size"] == len(data)
    plan = model_dir.plan_load(str(tmp_path))
    assert plan.failure is not None and said in plan.failure.message
    assert plan.fails_after == pytest.approx(after, abs=0.01)
    assert model_dir.config_failure(str(tmp_path)) is None
