"""Which source answers, and what a host without GPU or driver gets: zero GPUs and a reason."""

import importlib
import sys

import pytest
import topology_fakes as tf
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology_nvml as nv

SANDBOX = tf.load_host("rtxpro6000-8x")


def sysfs(tmp_path, mapping=None):
    return tf.write_sysfs(tmp_path / "root", SANDBOX["sysfs"] if mapping is None else mapping)


def smi():
    return tf.FakeSmi(SANDBOX["outputs"], SANDBOX["dir"])


def nvml(**changes):
    loader = tf.nvml_loader(SANDBOX["dir"], SANDBOX["nvml"])

    def load():
        fake = loader()
        fake.data = {**fake.data, **changes}
        return fake

    return load


def test_no_nvidia_smi_no_pynvml(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gt, "NVIDIA_SMI_DIRS", [str(tmp_path / "nothing-here")])
    facts = gt.gather(sysfs_root=sysfs(tmp_path), nvml_loader=tf.no_nvml)
    assert facts["gpus"] == [] and facts["links"] == {} and facts["p2p"] == {}
    assert facts["reason"].startswith("no GPU found: nvml: pynvml not importable (ModuleNotFoundError")
    assert "nvidia-smi: not found on PATH" in facts["reason"]
    assert facts["numa_nodes"] == [{"id": 0, "cpus": list(range(32))}, {"id": 1, "cpus": list(range(32, 64))}]


def test_no_driver(tmp_path):
    """pynvml there but no libnvidia-ml; nvidia-smi there but it cannot reach the driver."""

    def broken(argv):
        return 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""

    facts = gt.gather(
        sysfs_root=sysfs(tmp_path),
        nvidia_smi_path="/usr/bin/nvidia-smi",
        runner=broken,
        nvml_loader=nvml(init="error: NVMLError_LibraryNotFound: NVML Shared Library Not Found"),
    )
    assert facts["gpus"] == []
    assert "NVML did not initialise (FakeNVMLError: error: NVMLError_LibraryNotFound" in facts["reason"]
    assert (
        "nvidia-smi --query-gpu failed (rc 9): NVIDIA-SMI has failed because it couldn't communicate" in facts["reason"]
    )


def test_no_gpu_on_a_host_with_a_driver(tmp_path):
    facts = gt.gather(
        sysfs_root=sysfs(tmp_path),
        nvidia_smi_path="/usr/bin/nvidia-smi",
        runner=tf.FakeSmi(texts={"query": ""}),
        nvml_loader=nvml(count=0),
    )
    assert facts["gpus"] == []
    assert facts["reason"] == "no GPU found: nvml: NVML reports no GPU; nvidia-smi: nvidia-smi lists no GPU"


def test_nvml_init_fails_falls_back_to_nvidia_smi(tmp_path):
    runner = smi()
    facts = gt.gather(
        sysfs_root=sysfs(tmp_path),
        nvidia_smi_path="/usr/bin/nvidia-smi",
        runner=runner,
        nvml_loader=nvml(init="error: NVMLError_DriverNotLoaded: Driver Not Loaded"),
    )
    assert facts["sources"]["gpus"] == ["nvidia-smi"] and len(facts["gpus"]) == 8
    assert facts["sources"]["skipped"] == [
        "nvml: NVML did not initialise (FakeNVMLError: error: NVMLError_DriverNotLoaded: Driver Not Loaded)"
    ]
    assert facts["reason"] is None and facts["warnings"] == []


def test_nvml_preferred_and_nvidia_smi_not_run(tmp_path):
    runner = smi()
    facts = gt.gather(
        sysfs_root=sysfs(tmp_path), nvidia_smi_path="/usr/bin/nvidia-smi", runner=runner, nvml_loader=nvml()
    )
    assert facts["sources"]["gpus"] == ["nvml"] and runner.calls == []
    assert facts["p2p"]["0"]["4"] == "TNS" and facts["p2p"]["0"]["1"] == "OK"


def test_nvml_shut_down_after_use(tmp_path):
    made = []
    loader = nvml()

    def load():
        made.append(loader())
        return made[-1]

    gt.gather(sysfs_root=sysfs(tmp_path), nvml_loader=load, source="nvml")
    assert made[0].inited and made[0].shutdowns == 1


def test_only_query_and_topo_succeed(tmp_path):
    """The sandbox's fake nvidia-smi: every invocation but the two documented ones fails."""
    runner = smi()
    facts = gt.gather(
        sysfs_root=sysfs(tmp_path), nvidia_smi_path="/usr/bin/nvidia-smi", runner=runner, nvml_loader=tf.no_nvml
    )
    assert [c[1:] for c in runner.calls] == [gt.QUERY_ARGS, gt.TOPO_ARGS, gt.P2P_ARGS, gt.P2P_WRITE_ARGS]
    assert gt.QUERY_ARGS == [
        "--query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap",
        "--format=csv,noheader,nounits",
    ]
    assert len(facts["gpus"]) == 8 and facts["links"]["0"]["4"] == "SYS"
    assert facts["p2p"] == {} and facts["sources"]["p2p"] == [] and facts["warnings"] == []
    assert facts["p2p_pairs"] == {} and facts["sources"]["p2p_pairs"] == []


def test_topo_fails_query_works(tmp_path):
    runner = tf.FakeSmi(SANDBOX["outputs"], SANDBOX["dir"], fail={"topo"})
    facts = gt.gather(
        sysfs_root=sysfs(tmp_path), nvidia_smi_path="/usr/bin/nvidia-smi", runner=runner, nvml_loader=tf.no_nvml
    )
    assert len(facts["gpus"]) == 8 and facts["links"] == {}
    # locality still known from sysfs
    assert [g["numa_node"] for g in facts["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert facts["gpus"][0]["cpu_affinity"] == list(range(32))
    assert facts["sources"]["cpu_affinity"] == ["sysfs"]
    assert any(w.startswith("nvidia-smi topo -m failed (rc 2") for w in facts["warnings"])
    assert "GPU-to-GPU links unknown: placement cannot prefer tighter links" in facts["warnings"]


def test_source_nvml_only_without_pynvml(tmp_path):
    facts = gt.gather(
        sysfs_root=sysfs(tmp_path),
        nvidia_smi_path="/usr/bin/nvidia-smi",
        runner=smi(),
        nvml_loader=tf.no_nvml,
        source="nvml",
    )
    assert facts["gpus"] == [] and "pynvml not importable" in facts["reason"]


def test_numa_affinity_range_and_sysfs_minus_one(tmp_path):
    """VM: sysfs says -1 and topo -m gives a range: node unknown, locality by CPU affinity."""
    topo = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tPHB\t0-15\t0-1\t\tN/A\n"
        "GPU1\tPHB\t X \t0-15\t0-1\t\tN/A\n"
    )
    query = "0, GPU-a, NVIDIA L40S, 00000000:00:05.0, 46068, 8.9\n1, GPU-b, NVIDIA L40S, 00000000:00:06.0, 46068, 8.9\n"
    root = sysfs(
        tmp_path,
        {
            "sys/devices/system/node/node0/cpulist": "0-15",
            "sys/bus/pci/devices/0000:00:05.0/numa_node": "-1",
            "sys/bus/pci/devices/0000:00:06.0/numa_node": "-1",
        },
    )
    facts = gt.gather(
        sysfs_root=root,
        nvidia_smi_path="/x",
        runner=tf.FakeSmi(texts={"query": query, "topo": topo}),
        nvml_loader=tf.no_nvml,
    )
    assert [g["numa_node"] for g in facts["gpus"]] == [None, None]
    assert facts["gpus"][1]["cpu_affinity"] == list(range(16))
    assert facts["warnings"] == [
        f"GPU {i} (0000:00:0{5 + i}.0): NUMA node unknown (sysfs numa_node is -1 (common in VMs), "
        "nvidia-smi topo -m gives nodes 0-1); locality falls back to its CPU affinity"
        for i in (0, 1)
    ]


def test_sysfs_and_tool_disagree(tmp_path):
    mapping = dict(SANDBOX["sysfs"])
    mapping["sys/bus/pci/devices/0000:17:00.0/numa_node"] = "1"
    facts = gt.gather(sysfs_root=sysfs(tmp_path, mapping), nvidia_smi_path="/x", runner=smi(), nvml_loader=tf.no_nvml)
    assert facts["gpus"][0]["numa_node"] == 1
    assert facts["warnings"] == [
        "GPU 0 (0000:17:00.0): sysfs numa_node is 1 but nvidia-smi topo -m says 0; using sysfs"
    ]


def test_nvml_link_count_direct_and_through_switches():
    """Direct NVLinks count per peer; switch links give NV<min> when NVML reports NVLink P2P."""
    gpu = {
        "uuid": "u",
        "name": "n",
        "memory_total": 1 << 30,
        "cuda_cc": [8, 0],
        "cpu_affinity": [255],
        "memory_affinity": [1],
    }
    data = {
        "gpus": [
            {
                **gpu,
                "busId": "00000000:01:00.0",
                "nvlinks": [
                    {"link": 0, "state": 1, "remote_bus": "00000000:02:00.0", "remote_type": 0},
                    {"link": 1, "state": 1, "remote_bus": "00000000:02:00.0", "remote_type": 0},
                    {"link": 2, "state": 0},
                    {"link": 3, "state": "error: Not Supported"},
                ],
            },
            {
                **gpu,
                "busId": "00000000:02:00.0",
                "nvlinks": [
                    {"link": 0, "state": 1, "remote_bus": "00000000:01:00.0", "remote_type": 0},
                    {"link": 1, "state": 1, "remote_bus": "00000000:01:00.0", "remote_type": 0},
                ],
            },
            {
                **gpu,
                "busId": "00000000:03:00.0",
                "nvlinks": [
                    {"link": n, "state": 1, "remote_bus": "error: Unknown Error", "remote_type": 2} for n in range(4)
                ],
            },
            {
                **gpu,
                "busId": "00000000:04:00.0",
                "nvlinks": [
                    {"link": n, "state": 1, "remote_bus": "FFFFFFFF:FF:FF.0", "remote_type": 2} for n in range(6)
                ],
            },
        ],
        "pairs": {},
    }
    for i in range(4):
        for j in range(4):
            nvlink_p2p = 0 if {i, j} == {2, 3} else 5
            data["pairs"][f"{i},{j}"] = {"common_ancestor": 30, "p2p_read": 0, "p2p_nvlink": nvlink_p2p}
    got = gt.collect_nvml(tf.FakeNVML(data))
    assert got["links"][0][1] == "NV2" and got["links"][2][3] == got["links"][3][2] == "NV4"
    assert got["links"][0][2] == "PHB" and got["links"][1][3] == "PHB"
    assert got["gpus"][0]["_cpu_affinity"] == list(range(8)) and got["gpus"][0]["_numa_affinity"] == [0]


def _venv_with(tmp_path, module_name, pyver="python3.11"):
    site = tmp_path / "venv" / "lib" / pyver / "site-packages"
    site.mkdir(parents=True)
    (site / "pynvml.py").write_text("")  # the file the loader looks for (nvidia-ml-py's one module)
    (site / f"{module_name}.py").write_text("FROM_VENV = True\n")
    return tmp_path / "venv"


def test_pynvml_is_taken_from_the_engine_venv_when_the_interpreter_has_none(tmp_path):
    """gpu_topology's nvml_venv: the interpreter lacks the binding, the engine venv has it (any python3* dir)."""

    name = "fake_pynvml_from_venv"
    venv = _venv_with(tmp_path, name)
    loaded = nv.venv_pynvml_loader(str(venv), load=lambda: importlib.import_module(name))()
    try:
        assert loaded.FROM_VENV and str(venv) not in " ".join(sys.path)  # the path is put back
    finally:
        sys.modules.pop(name, None)


def test_without_the_venv_the_interpreters_import_error_stands(tmp_path):

    with pytest.raises(ImportError):
        nv.venv_pynvml_loader(str(tmp_path / "none"), load=lambda: importlib.import_module("fake_pynvml_nowhere"))()
    own = object()
    assert nv.venv_pynvml_loader(str(tmp_path / "none"), load=lambda: own)() is own  # the interpreter's own first


def test_nvml_library_first_skips_pynvml_where_the_library_does_not_load(tmp_path):
    """library_first (what the modules use): the NVML library is loaded first as pynvml's nvmlInit loads it, and
    pynvml is imported only where it loads; where it does not, nvidia-smi answers and the skip names the library."""
    imported = []

    def loader():
        imported.append(True)
        return tf.no_nvml()

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    facts = gt.gather(sysfs_root=sysfs(tmp_path), nvidia_smi_path="/usr/bin/nvidia-smi", runner=smi(),
                      nvml_loader=nv.library_first(loader, no_library))  # fmt: skip
    assert imported == [] and len(facts["gpus"]) > 0 and facts["sources"]["gpus"] == ["nvidia-smi"]
    assert facts["sources"]["skipped"] == [
        "nvml: NVML did not initialise (libnvidia-ml.so.1 does not load: "
        "libnvidia-ml.so.1: cannot open shared object file: No such file or directory)"
    ]
    loaded = []
    with pytest.raises(ModuleNotFoundError):  # the library loads: the loader runs (here one without pynvml)
        nv.library_first(loader, loaded.append)()
    assert loaded == ["libnvidia-ml.so.1"] and imported == [True]
