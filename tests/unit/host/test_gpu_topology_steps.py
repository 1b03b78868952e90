"""The steps of gpu_topology.gather, each on its own, as tables: collect (which source answers), locate_numa and
locate_cpus (one GPU's locality from sysfs and the tool), derived_numa_nodes, facts_of. gather end to end on the
fixtures of real hosts: tests/unit/host/test_gpu_topology_sources.py, test_gpu_topology_hosts.py."""

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_nvml import NoGpu, NvmlUnavailable

RAW = {"index": 0, "pci_bus_id": "0000:01:00.0", "_numa_affinity": None, "_cpu_affinity": None}
LABEL = "GPU 0 (0000:01:00.0)"


def pci(numa=None, raw=None, cpus=()):
    return {"numa_node": numa, "raw_numa_node": raw, "local_cpus": list(cpus)}


@pytest.mark.parametrize(
    ("raw", "found", "src", "expect"),
    [
        pytest.param({}, pci(numa=1), "nvml", (1, {"sysfs"}, []), id="sysfs's node"),
        pytest.param({"_numa_affinity": [0]}, pci(numa=1), "nvml",
                     (1, {"sysfs"}, [f"{LABEL}: sysfs numa_node is 1 but NVML says 0; using sysfs"]),
                     id="sysfs and the tool disagree: sysfs, said"),
        pytest.param({"_numa_affinity": [1]}, pci(raw=-1), "nvidia-smi",
                     (1, {"nvidia-smi"}, [f"{LABEL}: sysfs numa_node is -1; using NUMA node 1 reported by "
                                          "nvidia-smi topo -m"]), id="sysfs says -1: the tool's node"),
        pytest.param({"_numa_affinity": [1]}, pci(), "nvml", (1, {"nvml"}, []), id="no sysfs node: the tool's"),
        pytest.param({"_numa_affinity": [0, 1]}, pci(raw=-1), "nvml",
                     (None, set(), [f"{LABEL}: NUMA node unknown (sysfs numa_node is -1 (common in VMs), NVML gives "
                                    "nodes 0-1); locality falls back to its CPU affinity"]),
                     id="a VM: two nodes from the tool, none from sysfs"),
        pytest.param({"pci_bus_id": None}, pci(), "nvidia-smi",
                     (None, set(), ["GPU 0 (0000:01:00.0): NUMA node unknown (nvidia-smi topo -m gives no NUMA "
                                    "affinity); locality falls back to its CPU affinity"]),
                     id="no bus id, no tool affinity"),
    ],
)  # fmt: skip
def test_locate_numa(raw, found, src, expect):
    assert gt.locate_numa({**RAW, **raw}, found, src, LABEL) == expect


NODES = [{"id": 0, "cpus": [0, 1]}, {"id": 1, "cpus": [2, 3]}]


@pytest.mark.parametrize(
    ("raw", "found", "numa", "expect"),
    [
        pytest.param({"_cpu_affinity": [4, 5]}, pci(cpus=[2]), 1, ([4, 5], {"nvml"}, []), id="the tool's CPUs first"),
        pytest.param({}, pci(cpus=[2]), 1, ([2], {"sysfs"}, []), id="sysfs's local_cpus"),
        pytest.param({}, pci(), 1, ([2, 3], {"sysfs"}, []), id="its NUMA node's CPUs"),
        pytest.param({}, pci(), None, ([], set(), [f"{LABEL}: CPU affinity unknown"]), id="nothing known"),
        pytest.param({}, pci(), 5, ([], set(), [f"{LABEL}: CPU affinity unknown",
                                                f"{LABEL}: NUMA node 5 is not among sysfs nodes 0-1"]),
                     id="a node sysfs does not list"),
    ],
)  # fmt: skip
def test_locate_cpus(raw, found, numa, expect):
    assert gt.locate_cpus({**RAW, **raw}, found, numa, NODES, src="nvml", label=LABEL) == expect


@pytest.mark.parametrize(
    ("gpus", "expect"),
    [
        pytest.param([{"numa_node": 1, "cpu_affinity": [3, 2]}, {"numa_node": 1, "cpu_affinity": [4]},
                      {"numa_node": None, "cpu_affinity": [9]}],
                     ([{"id": 1, "cpus": [2, 3, 4]}], ["gpu affinity"],
                      ["no NUMA nodes in sysfs (/r/sys/devices/system/node): nodes derived from the GPUs' affinity"]),
                     id="the nodes the GPUs know"),
        pytest.param([{"numa_node": None, "cpu_affinity": [9]}], ([], [], []), id="no GPU knows its node"),
    ],
)  # fmt: skip
def test_derived_numa_nodes(gpus, expect):
    assert gt.derived_numa_nodes(gpus, "/r") == expect


class Nvml:
    """An NVML stand-in: GPU_COUNT GPUs (0: NVML reports none), or INIT raising."""

    def __init__(self, gpu_count=0, init=None):
        self.gpu_count, self.init = gpu_count, init

    def nvmlInit(self):
        if self.init:
            raise self.init

    def nvmlDeviceGetCount(self):
        return self.gpu_count

    def nvmlShutdown(self):
        pass


def no_nvml():
    raise NvmlUnavailable("libnvidia-ml.so.1 not found")


def broken_nvml():
    raise ImportError("pynvml broke")


SMI_DATA = {"gpus": [], "links": {}, "p2p": {}, "warnings": []}


@pytest.mark.parametrize(
    ("loader", "source", "smi", "expect_src", "skipped"),
    [
        pytest.param(no_nvml, "auto", "found", "nvidia-smi", ["nvml: libnvidia-ml.so.1 not found"],
                     id="no NVML: nvidia-smi"),
        pytest.param(broken_nvml, "auto", "found", "nvidia-smi",
                     ["nvml: pynvml not importable (ImportError: pynvml broke)"], id="a broken pynvml: nvidia-smi"),
        pytest.param(lambda: Nvml(0), "auto", "none", None,
                     ["nvml: NVML reports no GPU", "nvidia-smi: no GPU listed"], id="neither shows a GPU"),
        pytest.param(no_nvml, "nvml", "found", None, ["nvml: libnvidia-ml.so.1 not found"],
                     id="NVML only, not there"),
        pytest.param(no_nvml, "nvidia-smi", "found", "nvidia-smi", [], id="nvidia-smi only"),
    ],
)  # fmt: skip
def test_collect(monkeypatch, loader, source, smi, expect_src, skipped):  # noqa: PLR0917
    def collect_nvidia_smi(runner, path):
        if smi == "none":
            raise NoGpu("no GPU listed")
        return SMI_DATA

    monkeypatch.setattr(gt, "collect_nvidia_smi", collect_nvidia_smi)
    data, src, found = gt.collect("/", [], nvidia_smi_path="/bin/nvidia-smi", runner=lambda argv: (0, "", ""),
                                  nvml_loader=loader, source=source)  # fmt: skip
    assert src == expect_src and found == skipped
    assert data == (SMI_DATA if expect_src else None)


def test_collect_needs_a_runner_for_nvidia_smi():
    with pytest.raises(TypeError, match="runner="):
        gt.collect("/", [], nvidia_smi_path="/bin/nvidia-smi", runner=None, nvml_loader=no_nvml, source="auto")


def test_facts_of_keys_the_matrices_and_names_the_sources():
    data = {"links": {0: {0: "X", 1: "NV4"}, 1: {0: "NV4", 1: "X"}}, "p2p": {0: {1: "OK"}, 1: {0: "OK"}},
            "p2p_write": {0: {1: "OK"}, 1: {0: "CNS"}}}  # fmt: skip
    gpus = [{"index": 0}, {"index": 1}]
    sources = {"numa_node": {"nvml", "sysfs"}, "cpu_affinity": {"nvml"}, "numa_nodes": ["sysfs"], "skipped": []}
    facts = gt.facts_of(data, "nvml", gpus, [], sources=sources, warnings=["w"])
    assert facts["p2p_pairs"] == {"0-1": {"read": "OK", "write": "OK"}, "1-0": {"read": "OK", "write": "CNS"}}
    assert facts["sources"] == {"gpus": ["nvml"], "links": ["nvml"], "p2p": ["nvml"], "p2p_pairs": ["nvml"],
                                "numa_node": ["sysfs", "nvml"], "cpu_affinity": ["nvml"], "numa_nodes": ["sysfs"],
                                "skipped": []}  # fmt: skip
    assert facts["warnings"] == ["w"] and facts["reason"] is None
    unlinked = gt.facts_of({"links": {}, "p2p": {}}, "nvidia-smi", gpus, [], sources=sources, warnings=[])
    assert unlinked["warnings"] == ["GPU-to-GPU links unknown: placement cannot prefer tighter links"]
