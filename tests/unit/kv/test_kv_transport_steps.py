"""The steps of the kv_transport module's main, each on its own, as tables: memory_to_probe (what can be probed, or
why the module skips), planned_pairs, unknown_gpus, probe_command and outcome. The module end to end, on a fake venv
and nvidia-smi: tests/unit/kv/test_kv_transport.py."""

import pytest
from ansible_collections.disagg.sglang.plugins.modules import kv_transport as module

TWO_GPUS = {"gpus": [{"index": 0, "name": "A"}, {"index": 1, "name": "B"}], "links": {}, "reason": None}
NO_GPU = {"gpus": [], "links": {}, "reason": "nvidia-smi: not found"}
PARAMS = {"memory": "auto", "venv": "/v", "pairs": None, "prefill_gpus": [], "decode_gpus": [], "mib": 1024,
          "iters": 3, "timeout": 120, "dram_mib": 64, "env": {"UCX_TLS": "cuda_ipc"}, "properties": None,
          "min_gbps": 10, "host_findings": []}  # fmt: skip


class Skipped(Exception):
    pass


class FakeModule:
    """What memory_to_probe asks of AnsibleModule: run_command answers by the code run (ANSWERS {code: rc}), and
    exit_json (a skip) raises with its arguments."""

    def __init__(self, answers):
        self.answers = answers
        self.ran = []

    def run_command(self, argv):
        self.ran.append(argv[2])
        return self.answers.get(argv[2], 0), "", "ModuleNotFoundError: No module named 'nixl'"

    def exit_json(self, **result):
        raise Skipped(result)


@pytest.mark.parametrize(
    ("memory", "facts", "answers", "expect"),
    [
        pytest.param("auto", TWO_GPUS, {}, ("vram", "GPU"), id="auto on GPUs with torch: VRAM"),
        pytest.param("auto", TWO_GPUS, {module.ARRAY_LIBRARY_CHECK: 3}, ("dram", "neither torch nor cupy in the venv"),
                     id="auto on GPUs without torch or cupy: DRAM"),
        pytest.param("auto", NO_GPU, {}, ("dram", "(nvidia-smi: not found)"), id="auto without GPU: DRAM, and why"),
        pytest.param("dram", TWO_GPUS, {}, ("dram", "memory=dram requested"), id="DRAM asked for"),
        pytest.param("vram", NO_GPU, {}, "no GPU on this host (nvidia-smi: not found)", id="VRAM without GPU: skip"),
        pytest.param("vram", TWO_GPUS, {module.ARRAY_LIBRARY_CHECK: 3}, "KV transport probe skipped: ",
                     id="VRAM without an array library: skip"),
        pytest.param("auto", TWO_GPUS, {"import nixl._api": 1}, "NIXL does not import in /v (ModuleNotFoundError",
                     id="no NIXL: skip"),
    ],
)  # fmt: skip
def test_memory_to_probe(memory, facts, answers, expect):
    fake = FakeModule(answers)
    params = dict(PARAMS, memory=memory)
    if isinstance(expect, str):
        with pytest.raises(Skipped) as skipped:
            module.memory_to_probe(fake, params, "/v/bin/python", facts)
        assert skipped.value.args[0]["skipped"] is True and expect in skipped.value.args[0]["skipped_reason"]
        return
    mem, why = module.memory_to_probe(fake, params, "/v/bin/python", facts)
    assert mem == expect[0] and expect[1] in why, why


@pytest.mark.parametrize(
    ("mem", "params", "expect"),
    [
        pytest.param("dram", {}, [{"memory": "DRAM"}], id="DRAM: one probe"),
        pytest.param("vram", {"pairs": [{"src": 1, "dst": 0}]}, [{"src": 1, "dst": 0}], id="the pairs given"),
        pytest.param("vram", {}, [{"src": 0, "dst": 1}], id="the first two GPUs"),
        pytest.param("vram", {"prefill_gpus": [0], "decode_gpus": [1]},
                     [{"src": 0, "dst": 1, "link": "unknown", "numa": "unknown"}],
                     id="the pair classes of prefill and decode"),
    ],
)  # fmt: skip
def test_planned_pairs(mem, params, expect):
    assert module.planned_pairs(mem, dict(PARAMS, **params), TWO_GPUS) == expect


def test_planned_pairs_on_one_gpu_probe_it_with_itself():
    assert module.planned_pairs("vram", PARAMS, {"gpus": [{"index": 3}]}) == [{"src": 3, "dst": 3}]


@pytest.mark.parametrize(
    ("mem", "planned", "expect"),
    [
        ("vram", [{"src": 0, "dst": 1}], []),
        ("vram", [{"src": 0, "dst": 7}, {"src": 5, "dst": 1}], [5, 7]),
        ("dram", [{"memory": "DRAM"}], []),
    ],
)
def test_unknown_gpus(mem, planned, expect):
    assert module.unknown_gpus(mem, planned, TWO_GPUS) == expect


@pytest.mark.parametrize(
    ("mem", "systemd_run", "argv_has", "env"),
    [
        pytest.param("vram", None, ["--src", "0", "--dst", "1", "--mib", "1024"], {"UCX_TLS": "cuda_ipc"},
                     id="VRAM as a child, the environment its own"),
        pytest.param("dram", None, ["--mem", "dram", "--mib", "64"], {"UCX_TLS": "cuda_ipc"}, id="DRAM as a child"),
        pytest.param("vram", "/bin/systemd-run", ["/bin/systemd-run", "--wait", "--setenv=UCX_TLS=cuda_ipc"], {},
                     id="VRAM as a transient unit, the environment set in the unit"),
    ],
)  # fmt: skip
def test_probe_command(mem, systemd_run, argv_has, env):
    params = dict(PARAMS, properties=[] if systemd_run else None)
    argv, env_update = module.probe_command(mem, {"src": 0, "dst": 1}, params, python="/v/bin/python", source="S",
                                            systemd_run=systemd_run)  # fmt: skip
    text = " ".join(argv)
    assert all(part in argv or part in text for part in argv_has), argv
    assert env_update == env


def verdict(ok, wall=1.0, message="m"):
    return {"ok": ok, "wall_s": wall, "message": message}


@pytest.mark.parametrize(
    ("mem", "results", "requested", "expect"),
    [
        pytest.param("vram", [verdict(True), verdict(True, 2.0)], "auto",
                     {"failed": False, "msg": "2 of 2 pair(s) passed; GPUs used for 3.0 s", "warning": None},
                     id="every pair passed"),
        pytest.param("vram", [verdict(True), verdict(False, message="tcp 0.47 GB/s")], "auto",
                     {"failed": True, "msg": "1 of 2 pair(s) passed; GPUs used for 2.0 s: tcp 0.47 GB/s",
                      "warning": None}, id="a pair failed"),
        pytest.param("dram", [verdict(True, 0.5)], "auto",
                     {"failed": False, "msg": "DRAM probe passed in 0.5 s (why DRAM: no GPU)", "warning": None},
                     id="DRAM passed"),
        pytest.param("dram", [verdict(False, 0.5, "no table")], "auto",
                     {"failed": False, "msg": "DRAM probe FAILED in 0.5 s (why DRAM: no GPU)",
                      "warning": "no table (a warning: memory=auto fails only on the GPU path)"},
                     id="DRAM failed with memory=auto: a warning"),
        pytest.param("dram", [verdict(False, 0.5, "no table")], "dram",
                     {"failed": True, "msg": "DRAM probe FAILED in 0.5 s (why DRAM: no GPU): no table",
                      "warning": None}, id="DRAM failed with memory=dram: the module fails"),
    ],
)  # fmt: skip
def test_outcome(mem, results, requested, expect):
    assert module.outcome(mem, results, "no GPU", requested) == expect
