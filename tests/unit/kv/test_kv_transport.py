"""The KV transport probe: UCX protocol tables, the verdict, the command, the pair classes (pure functions of
plugins/module_utils/kv/kv_transport.py) on the outputs captured on an H200 (tests/fixtures/kv_transport/h200-1x),
and the module disagg.sglang.kv_transport in-process with a fake venv Python and a fake nvidia-smi."""

import json
import re
import sys
from pathlib import Path

import pytest
import topology_fakes as tf
from ansible.module_utils import testing
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt
from ansible_collections.disagg.sglang.plugins.module_utils.kv import kv_probe_worker
from ansible_collections.disagg.sglang.plugins.module_utils.kv import kv_transport as kt
from ansible_collections.disagg.sglang.plugins.modules import kv_transport as module

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "kv_transport" / "h200-1x"
RECORDED = json.loads((H200 / "results.json").read_text())
ENV = {
    "default": {},
    "no-cuda-ipc": {"UCX_TLS": "^cuda_ipc"},
    "expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
}


def log(case):
    return (H200 / f"{case}.log").read_text()


# ------------------------------------------------------------------------------------------------
# The three cases of issue 13, as captured


def test_default_is_cuda_ipc_and_passes():
    v = kt.decide(log("default"), 200)
    assert v["ok"] is True
    assert (v["lane"], v["lane_kind"], v["protocol"]) == ("cuda_ipc/cuda", "cuda_ipc", "zero-copy")
    assert v["operation"] == "remote memory write by ucp_put*(multi) from cuda/GPU0 to cuda/dev[1]"
    assert v["gbps"] >= 200 and v["bytes_verified"] == v["bytes"] == 1024 * 2**20
    assert v["message"].startswith("KV transport probe GPU 0 -> GPU 0: 1024 MiB NIXL WRITE over cuda_ipc/cuda")


@pytest.mark.parametrize(("case", "cause"), [("no-cuda-ipc", "UCX_TLS=\\^cuda_ipc"), ("expandable", "nixl PR #1755")])
def test_slow_cases_fail_with_lane_speed_and_cause(case, cause):
    v = kt.decide(log(case), 200)
    assert v["ok"] is False
    assert (v["lane"], v["protocol"]) == ("tcp/lo", "software emulation")
    assert v["gbps"] < 1 and v["bytes_verified"] == v["bytes"]  # the bytes arrived: only slowly
    assert re.search(
        rf"over tcp/lo \(software emulation\) at 0\.5\d? GB/s; FAILED: the lane is tcp/lo.*{cause}", v["message"]
    )
    assert "below sglang_kv_min_gbps=200" in v["message"]


@pytest.mark.parametrize("case", sorted(ENV))
def test_same_verdict_as_on_the_device(case):
    """What the tests compute from the raw logs is what the probe decided on the H200."""
    assert kt.decide(log(case), 200, 0, 0, ENV[case]) == RECORDED["cases"][case]["decision"]


@pytest.mark.parametrize("case", sorted(ENV))
def test_the_cause_needs_no_env_from_the_caller(case):
    """The probe prints its environment in the result line: the cause is found from the log alone."""
    assert kt.decide(log(case), 200)["message"] == RECORDED["cases"][case]["decision"]["message"]


def test_tables_of_both_processes():
    tables = kt.parse_proto_tables(log("default"))
    processes = {t["context"].split()[0] for t in tables}
    assert processes == {"initiator", "target"}
    assert all(t["operation"] for t in tables)
    # the `self cfg#0` active-message tables print a header and no rows on this UCX
    assert {t["context"] for t in tables if not t["rows"]} == {"initiator self cfg#0", "target self cfg#0"}
    puts = [t for t in tables if "from cuda/GPU0 to cuda" in t["operation"]]
    assert [t["context"] for t in puts] == ["initiator intra-node cfg#2"]


# ------------------------------------------------------------------------------------------------
# Parser edge cases (written here, in the layouts UCX prints)

OLD_FORMAT = """\
[1.1] [h:7:0]   +---------------------------+---------------------------------------------------------+
[1.1] [h:7:0]   | perftest inter-node cfg#1 | remote memory write by ucp_put* from cuda/GPU3 to cuda  |
[1.1] [h:7:0]   +---------------------------+------------------------------------+--------------------+
[1.1] [h:7:0]   |                     0..2K | short                              | rc_mlx5/mlx5_0:1   |
[1.1] [h:7:0]   |                 2049..inf | zero-copy                          | rc_mlx5/mlx5_0:1   |
[1.1] [h:7:0]   |                           |                                    | 50% on path0       |
"""

INTERLEAVED = """\
[2.0] [vm:1 :0]   | initiator intra-node cfg#2 |
[2.0] [vm:2 :0]   | target intra-node cfg#2 |
[2.0] [vm:1 :0]   | remote memory write by ucp_put*(multi) from cuda/GPU1 to cuda/dev[0] |
[2.0] [vm:2 :0]   | remote memory write by ucp_put* from host memory to host |
[2.0] [vm:1 :0]   | Range  | Description | Config |
[2.0] [vm:2 :0]   | 0..inf | zero-copy   | tcp/lo |
[2.0] [vm:1 :0]   | 0..inf | zero-copy   | cuda_ipc/cuda |
"""


def test_old_format_two_cell_header_and_wrapped_row():
    lane = kt.put_lane(kt.parse_proto_tables(OLD_FORMAT))
    assert lane["range"] == "2049..inf" and lane["kind"] == "rdma"
    assert lane["lane"] == "rc_mlx5/mlx5_0:1 50% on path0"


def test_interleaved_processes_keep_their_rows():
    tables = kt.parse_proto_tables(INTERLEAVED)
    assert [(t["context"], t["rows"][0]["lane"]) for t in tables] == [
        ("initiator intra-node cfg#2", "cuda_ipc/cuda"),
        ("target intra-node cfg#2", "tcp/lo"),
    ]


# (lane, protocol) -> its kind
LANE_KINDS = {
    ("cuda_ipc/cuda", "zero-copy"): "cuda_ipc",
    ("tcp/lo", "software emulation"): "tcp",
    ("tcp/eth0", "multi-frag copy-in"): "tcp",
    ("rc_mlx5/mlx5_11:1 50% on path0 and 50% on path1", "zero-copy"): "rdma",
    ("cma/memory", "software emulation"): "emulated",
    ("cuda_copy/cuda", "copy-in"): "other",
}


@pytest.mark.parametrize(
    ("lane", "kind"), [pytest.param(*case, id="-".join([*case[0], case[1]])) for case in LANE_KINDS.items()]
)
def test_lane_kind(lane, kind):
    assert kt.lane_kind(*lane) == kind


@pytest.mark.parametrize(
    ("tls", "excluded"),
    [("", False), ("^cuda_ipc", True), ("^cuda", True), ("^tcp", False), ("tcp,cuda_copy", True),
     ("cuda_ipc,cuda_copy,tcp", False), ("all", False), ("cuda,tcp", False)],
)  # fmt: skip
def test_ucx_tls(tls, excluded):
    assert kt.tls_excludes_cuda_ipc(tls) is excluded


RESULT = {"src": 0, "dst": 1, "bytes": 1048576, "env": {}, "ok": True}
CUDA_TABLE = INTERLEAVED


@pytest.mark.parametrize(
    ("text", "min_gbps", "ok", "pattern"),
    [
        ("nothing\n", 10, False, "no result line from the probe \\(output tail: nothing\\)"),
        (f"{kt.RESULT_MARKER}{json.dumps({**RESULT, 'ok': False, 'error': 'target failed: boom'})}", 10, False,
         "GPU 0 -> GPU 1 failed: target failed: boom"),
        (kt.RESULT_MARKER + json.dumps({**RESULT, "initiator": {"seconds": [0.001]},
                                        "target": {"bytes_verified": 1048576}}),
         0.1, False, "UCX printed no protocol table for a GPU->GPU put"),
        (CUDA_TABLE + kt.RESULT_MARKER + json.dumps(
            {**RESULT, "initiator": {"seconds": [0.01]}, "target": {"bytes_verified": 1048576}}), 10, False,
         "at 0.1 GB/s; FAILED: 0.1 GB/s is below sglang_kv_min_gbps=10$"),
        (CUDA_TABLE + kt.RESULT_MARKER + json.dumps(
            {**RESULT, "initiator": {"seconds": [0.0001]}, "target": {"bytes_verified": 1000}}), 10, False,
         "FAILED: only 1000 of 1048576 bytes arrived as written"),
        (CUDA_TABLE + kt.RESULT_MARKER + json.dumps(
            {**RESULT, "initiator": {"seconds": [0.0001]}, "target": {"bytes_verified": 1048576, "notified": False}}),
         10, True, "1048576 bytes verified \\(the last write's NIXL notification did not arrive within 10 s\\)$"),
    ],
)  # fmt: skip
def test_decide_failures(text, min_gbps, ok, pattern):
    v = kt.decide(text, min_gbps)
    assert v["ok"] is ok and re.search(pattern, v["message"]), v["message"]


# ------------------------------------------------------------------------------------------------
# Command and pairs


def test_argv_plain_and_as_transient_unit():
    src = kt.worker_source()
    assert "def main(" in src and kv_probe_worker.MARKER == kt.RESULT_MARKER
    assert kt.probe_argv("/v/bin/python", src, ["--src", "0"]) == ["/v/bin/python", "-c", src, "--src", "0"]
    argv = kt.probe_argv(
        "/v/bin/python", src, ["--src", "0"], properties=["User=sglang", "ProtectSystem=strict"],
        env={"UCX_TLS": "^cuda_ipc"}, unit="disagg-kv-probe-0-1", systemd_run="/usr/bin/systemd-run",
    )  # fmt: skip
    assert argv[: argv.index("/v/bin/python")] == [
        "/usr/bin/systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec",
        "--unit=disagg-kv-probe-0-1", "-p", "User=sglang", "-p", "ProtectSystem=strict", "--setenv=UCX_TLS=^cuda_ipc",
    ]  # fmt: skip


def test_properties_checked():
    assert kt.check_properties(["User=sglang", "NoNewPrivileges=yes"]) == []
    assert len(kt.check_properties(["user sglang", "=x", 3])) == 3


def sandbox_facts(tmp_path):
    spec = tf.load_host("rtxpro6000-8x")
    root = tf.write_sysfs(tmp_path / "root", spec["sysfs"])
    smi = tf.FakeSmi(spec["outputs"], spec["dir"])
    return gt.gather(sysfs_root=root, nvidia_smi_path="/usr/bin/nvidia-smi", runner=smi, nvml_loader=tf.no_nvml)


def test_pair_classes(tmp_path):
    facts = sandbox_facts(tmp_path)
    assert kt.pair_classes(facts, [0, 1, 2, 3], [4, 5, 6, 7]) == [{"src": 0, "dst": 4, "link": "SYS", "numa": "across"}]
    assert kt.pair_classes(facts, [0, 1], [2, 3, 4]) == [
        {"src": 0, "dst": 2, "link": "NODE", "numa": "same"},
        {"src": 0, "dst": 4, "link": "SYS", "numa": "across"},
    ]
    assert kt.pair_classes({"gpus": [], "links": {}}, [0], [0]) == [
        {"src": 0, "dst": 0, "link": "X", "numa": "unknown"}
    ]


# ------------------------------------------------------------------------------------------------
# The module, with a fake venv Python that answers like the real probe did on the H200

FAKE_PYTHON = """#!{python}
import os, sys
if sys.argv[1:] == ["-c", "import nixl._api"]:
    if os.environ.get("KVFAKE_NO_NIXL"):
        sys.stderr.write("ModuleNotFoundError: No module named 'nixl'\\n")
        sys.exit(1)
    sys.exit(0)
if sys.argv[1] == "-c" and "find_spec('torch')" in sys.argv[2]:
    sys.exit(3 if os.environ.get("KVFAKE_NO_ARRAYLIB") else 0)
with open(os.environ["KVFAKE_ARGS"], "a") as f:
    f.write(" ".join(sys.argv[3:]) + "\\n")
sys.stdout.write(open(os.environ["KVFAKE_LOG"]).read())
"""

FAKE_SMI = """#!{python}
import sys
answers = {{" ".join({query!r}): {qfile!r}, "topo -m": {tfile!r}}}
args = " ".join(sys.argv[1:])
if args not in answers:
    sys.exit(2)
sys.stdout.write(open(answers[args]).read())
"""


@pytest.fixture
def host(tmp_path):
    spec = tf.load_host("rtxpro6000-8x")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON.format(python=sys.executable))
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        FAKE_SMI.format(
            python=sys.executable,
            query=gt.QUERY_ARGS,
            qfile=str(spec["dir"] / "query-gpu.csv"),
            tfile=str(spec["dir"] / "topo-m.txt"),
        )
    )
    for f in (py, smi):
        f.chmod(0o755)
    root = tf.write_sysfs(tmp_path / "root", spec["sysfs"])
    return {"venv": str(venv), "smi": str(smi), "root": root, "args": tmp_path / "args.txt"}


def run_module(args, capsys):
    with testing.patch_module_args(args), pytest.raises(SystemExit) as done:
        module.main()
    return done.value.code, json.loads(capsys.readouterr().out)


def _args(host, case, **extra):
    env = {"KVFAKE_LOG": str(H200 / f"{case}.log"), "KVFAKE_ARGS": str(host["args"]), **ENV[case]}
    return {"venv": host["venv"], "nvidia_smi_path": host["smi"], "sysfs_root": host["root"], "env": env, **extra}


def test_module_passes_on_cuda_ipc(host, capsys):
    rc, out = run_module(_args(host, "default", pairs=[{"src": 0, "dst": 1}], min_gbps=200), capsys)
    assert rc == 0 and out["changed"] is False and out["msg"].startswith("1 of 1 pair(s) passed; GPUs used for")
    assert out["pairs"][0]["lane"] == "cuda_ipc/cuda" and out["pairs"][0]["ok"] is True
    assert host["args"].read_text() == "--src 0 --dst 1 --mib 1024.0 --iters 3 --timeout 120\n"


@pytest.mark.parametrize("case", ["no-cuda-ipc", "expandable"])
def test_module_fails_on_tcp(host, capsys, case):
    rc, out = run_module(_args(host, case, prefill_gpus=[0, 1, 2, 3], decode_gpus=[4, 5, 6, 7]), capsys)
    assert rc == 1 and out["failed"] is True
    assert out["planned"] == [{"src": 0, "dst": 4, "link": "SYS", "numa": "across"}]
    assert "0 of 1 pair(s) passed" in out["msg"] and "FAILED: the lane is tcp/lo" in out["msg"]
    assert host["args"].read_text().startswith("--src 0 --dst 4 ")


def test_module_check_mode_runs_nothing(host, capsys):
    rc, out = run_module(_args(host, "default", _ansible_check_mode=True), capsys)
    assert rc == 0 and out["planned"] == [{"src": 0, "dst": 1}] and not host["args"].exists()


def test_module_skips_without_nixl(host, capsys):
    args = _args(host, "default")
    args["env"]["KVFAKE_NO_NIXL"] = "1"
    # the nixl check runs with the module's environment, not the probe's: put the switch there
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KVFAKE_NO_NIXL", "1")
        rc, out = run_module(args, capsys)
    assert rc == 0 and out["skipped"] is True
    assert out["skipped_reason"].startswith("KV transport probe skipped: NIXL does not import in")


def test_module_skips_without_gpu_when_vram_is_asked(host, capsys, tmp_path):
    rc, out = run_module(
        {
            "venv": host["venv"],
            "nvidia_smi_path": str(tmp_path / "no-smi"),
            "sysfs_root": host["root"],
            "memory": "vram",
        },
        capsys,
    )
    assert rc == 0 and out["skipped"] is True and "no GPU on this host" in out["skipped_reason"]


def test_module_skips_without_venv(capsys, tmp_path):
    rc, out = run_module({"venv": str(tmp_path / "none")}, capsys)
    assert rc == 0 and out["skipped"] is True and "does not exist" in out["skipped_reason"]


def test_module_refuses_bad_properties_and_unknown_gpu(host, capsys):
    rc, out = run_module(_args(host, "default", properties=["user=x"]), capsys)
    assert rc == 1 and "is not Key=Value" in out["msg"]
    rc, out = run_module(_args(host, "default", pairs=[{"src": 0, "dst": 9}]), capsys)
    assert rc == 1 and out["msg"] == "kv_transport: GPU(s) [9] not on this host (it has [0, 1, 2, 3, 4, 5, 6, 7])"


def test_module_skips_without_a_library_to_hold_vram(host, capsys, monkeypatch):
    monkeypatch.setenv("KVFAKE_NO_ARRAYLIB", "1")
    rc, out = run_module(_args(host, "default", pairs=[{"src": 0, "dst": 1}], memory="vram"), capsys)
    assert rc == 0 and out["skipped"] is True
    assert out["skipped_reason"].startswith("KV transport probe skipped: neither torch nor cupy in ")
    assert not host["args"].exists()


# ------------------------------------------------------------------------------------------------
# DRAM mode: host memory -> host memory, where there is no GPU or no CUDA array library (the sandbox).
# dram-local/: the probe on a 2-core machine without a GPU (nixl 1.5.1 + nixl-cu13 1.5.1, Python 3.11).

DRAM = H200.parent / "dram-local"


def dram_log(case):
    return (DRAM / f"{case}.log").read_text()


@pytest.mark.parametrize(("case", "lane", "kind"), [("default", "cma/memory", "shm"), ("tcp", "tcp/lo", "tcp")])
def test_dram_verdict_from_a_real_run(case, lane, kind):
    v = kt.decide(dram_log(case), 10)
    assert v["ok"] is True and v["memory"] == "DRAM" and v["lane"] == lane and v["lane_kind"] == kind
    assert v["bytes"] == v["bytes_verified"] == 268435456 and v["notified"] is True and v["min_gbps"] is None
    assert v["message"].startswith(
        f"KV transport probe DRAM (no GPU: host memory, not the GPU path): 256 MiB NIXL WRITE process to process "
        f"over {lane} ("
    )
    assert v["message"].endswith("268435456 bytes verified; sglang_kv_min_gbps=10 is the GPU gate, not applied to DRAM")


def test_dram_put_lane_leaves_out_the_self_tables():
    tables = kt.parse_proto_tables(dram_log("default"))
    assert any("self cfg#" in t["context"] for t in tables)
    lane = kt.put_lane(tables, mem="dram")
    assert "self cfg#" not in lane["context"] and lane["lane"] == "cma/memory" and lane["protocol"] == "zero-copy"
    assert kt.put_lane(tables) is None  # no GPU->GPU put in a DRAM run


def test_dram_is_never_gated_on_gbps():
    slow = kt.decide(dram_log("default"), 1e9)
    assert slow["ok"] is True and "not applied to DRAM" in slow["message"]


def test_dram_fails_on_missing_bytes_error_or_no_table():
    result = kt.parse_result(dram_log("default"))
    tables = "\n".join(line for line in dram_log("default").splitlines() if not line.startswith(kt.RESULT_MARKER))
    short = dict(result, target=dict(result["target"], bytes_verified=5))
    v = kt.decide(tables + "\n" + kt.RESULT_MARKER + json.dumps(short), 10)
    assert v["ok"] is False and v["message"].endswith("FAILED: only 5 of 268435456 bytes arrived as written")
    err = {"mem": "dram", "ok": False, "error": "initiator failed: nixlBackendError: NIXL_ERR_BACKEND"}
    v = kt.decide(kt.RESULT_MARKER + json.dumps(err), 10)
    assert v["ok"] is False and v["message"] == (
        "KV transport probe DRAM (no GPU: host memory, not the GPU path) failed: "
        "initiator failed: nixlBackendError: NIXL_ERR_BACKEND"
    )
    v = kt.decide(kt.RESULT_MARKER + json.dumps(result), 10)
    assert v["ok"] is False and "FAILED: UCX printed no protocol table for a host->host put" in v["message"]


def test_lane_kind_of_host_lanes():
    assert kt.lane_kind("cma/memory", "zero-copy") == "shm"
    assert kt.lane_kind("posix/memory", "copy-in") == "shm"
    assert kt.lane_kind("cma/memory", "software emulation") == "emulated"
    assert kt.lane_kind("50% on tcp/ve-a-1 and 50% on tcp/ve-a-2", "zero-copy") == "tcp"


@pytest.mark.parametrize(
    ("requested", "gpus", "lib", "expected"),
    [
        ("auto", [0, 1], True, "vram"),
        ("auto", [0, 1], False, "dram"),
        ("auto", [], False, "dram"),
        ("vram", [], False, None),
        ("vram", [0], False, None),
        ("dram", [0, 1], True, "dram"),
    ],
)
def test_choose_memory(requested, gpus, lib, expected):
    assert kt.choose_memory(requested, gpus, lib)[0] == expected


def test_probe_args_dram():
    assert kt.probe_args(0, 0, 256, 3, 60, mem="dram")[-2:] == ["--mem", "dram"]
    assert "--mem" not in kt.probe_args(0, 1)


def _dram_args(host, case, **extra):
    env = {"KVFAKE_LOG": str(DRAM / f"{case}.log"), "KVFAKE_ARGS": str(host["args"])}
    return {"venv": host["venv"], "nvidia_smi_path": host["smi"], "sysfs_root": host["root"], "env": env, **extra}


def test_module_probes_dram_without_a_library_to_hold_vram(host, capsys, monkeypatch):
    """The sandbox's case: fake GPUs, NIXL installed, no torch or cupy."""
    monkeypatch.setenv("KVFAKE_NO_ARRAYLIB", "1")
    rc, out = run_module(_dram_args(host, "default", prefill_gpus=[0], decode_gpus=[4]), capsys)
    assert rc == 0 and "skipped" not in out and out["memory"] == "DRAM" and out["planned"] == [{"memory": "DRAM"}]
    assert out["memory_reason"] == "neither torch nor cupy in the venv to hold VRAM buffers"
    assert out["msg"].startswith("DRAM probe passed in ") and out["msg"].endswith(
        " s (why DRAM: neither torch nor cupy in the venv to hold VRAM buffers)"
    )
    pair = out["pairs"][0]
    assert pair["ok"] is True and pair["memory"] == "DRAM" and pair["lane"] == "cma/memory"
    assert "DRAM (no GPU: host memory, not the GPU path)" in pair["message"]
    assert host["args"].read_text() == "--src 0 --dst 0 --mib 64.0 --iters 3 --timeout 120 --mem dram\n"


def test_module_probes_dram_without_gpu(host, capsys, tmp_path):
    args = _dram_args(host, "tcp", nvidia_smi_path=str(tmp_path / "no-smi"), dram_mib=64)
    rc, out = run_module(args, capsys)
    assert rc == 0 and out["memory"] == "DRAM" and out["pairs"][0]["lane"] == "tcp/lo"
    assert out["memory_reason"].startswith("no GPU on this host (")
    assert host["args"].read_text().startswith("--src 0 --dst 0 --mib 64.0 ")


def test_module_dram_failure_warns_on_auto_and_fails_on_dram(host, capsys, monkeypatch, tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text(kt.RESULT_MARKER + json.dumps({"mem": "dram", "ok": False, "error": "target failed: boom"}) + "\n")
    args = _dram_args(host, "default", nvidia_smi_path=str(tmp_path / "no-smi"))
    args["env"]["KVFAKE_LOG"] = str(bad)
    warned = []
    monkeypatch.setattr(module.AnsibleModule, "warn", lambda self, msg, **kw: warned.append(msg))
    rc, out = run_module(args, capsys)
    assert rc == 0 and out["pairs"][0]["ok"] is False and out["msg"].startswith("DRAM probe FAILED in ")
    assert len(warned) == 1 and "failed: target failed: boom (a warning: memory=auto fails only on" in warned[0]
    rc, out = run_module(dict(args, memory="dram"), capsys)
    assert rc == 1 and out["failed"] is True and "target failed: boom" in out["msg"]


def test_module_check_mode_dram(host, capsys, tmp_path):
    args = _dram_args(host, "default", nvidia_smi_path=str(tmp_path / "no-smi"), _ansible_check_mode=True)
    rc, out = run_module(args, capsys)
    assert (
        rc == 0
        and out["memory"] == "DRAM"
        and out["msg"] == ("would probe DRAM (no GPU: host memory, not the GPU path)")
    )
    assert not host["args"].exists()
