"""Test doubles for the topology code: fixture hosts, a fake nvidia-smi runner, a fake pynvml.

A fixture host is a folder under tests/fixtures/topology/ with host.yml (see the README there):
the outputs nvidia-smi printed, NVML's answers (nvml.json, the format tests/hardware records),
sysfs files, and what the facts and placements must be.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"


def host_dirs():
    return sorted(p for p in FIXTURES.iterdir() if (p / "host.yml").is_file())


def load_host(name):
    folder = FIXTURES / name
    spec = yaml.safe_load((folder / "host.yml").read_text())
    spec["dir"] = folder
    return spec


def write_sysfs(root, mapping, folder=None):
    """Render {relative path: content} (or the JSON file of one, in folder) under root; return root."""
    if isinstance(mapping, str):
        mapping = json.loads((Path(folder) / mapping).read_text())
    Path(root).mkdir(parents=True, exist_ok=True)
    for rel, content in (mapping or {}).items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")
    return str(root)


def gather(spec, root, via, **options):
    """The gpu_topology facts of fixture host SPEC (load_host), its sysfs written under ROOT, read through VIA:
    "nvml" (its recorded NVML answers; no nvidia-smi) or "nvidia-smi" (its recorded outputs; pynvml not
    importable, source auto). OPTIONS override gather()'s arguments: runner= a FakeSmi whose calls the test
    reads, source=, nvidia_smi_path=."""
    if via == "nvml":
        args = {"nvidia_smi_path": "/nonexistent", "runner": FakeSmi(), "source": "nvml",
                "nvml_loader": nvml_loader(spec["dir"], spec["nvml"])}  # fmt: skip
    else:
        args = {"nvidia_smi_path": "/usr/bin/nvidia-smi", "runner": FakeSmi(spec["outputs"], spec["dir"]),
                "nvml_loader": no_nvml}  # fmt: skip
    return gt.gather(sysfs_root=write_sysfs(root, spec.get("sysfs"), spec["dir"]), **{**args, **options})


def cpus(value):
    """Expected CPU lists are written as cpulist strings ('0-31'); lists pass through."""
    if isinstance(value, str):
        return gt.parse_cpulist(value)
    return value


def link_matrix(text):
    """The expected links, written as rows of codes, -> the facts' dict of dicts."""
    rows = [line.split() for line in text.strip().splitlines()]
    return {str(i): {str(j): code for j, code in enumerate(row)} for i, row in enumerate(rows)}


class FakeSmi:
    """nvidia-smi that answers only the query and `topo -m` (and `topo -p2p r|w` if the host has them).

    Every other invocation fails with rc 2, as the sandbox's fake does; `calls` records them all.
    """

    def __init__(self, outputs=None, folder=None, texts=None, fail=()):
        """outputs: {query|query_no_cc|topo|p2p|p2p_write: file name, or {file, rc}} read from folder."""
        self.answers = {key: (0, text) for key, text in (texts or {}).items()}
        for key, given in (outputs or {}).items():
            entry = given if isinstance(given, dict) else {"file": given, "rc": 0}
            self.answers[key] = (entry.get("rc", 0), (Path(folder) / entry["file"]).read_text())
        self.fail = set(fail)
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        args = list(argv[1:])
        key = {
            tuple(gt.QUERY_ARGS): "query",
            tuple(gt.TOPO_ARGS): "topo",
            tuple(gt.P2P_ARGS): "p2p",
            tuple(gt.P2P_WRITE_ARGS): "p2p_write",
        }.get(tuple(args))
        if key is None and args == gt.QUERY_ARGS_NO_CC:
            key = "query_no_cc"
        if key is None or key in self.fail or key not in self.answers:
            return 2, f"nvidia-smi(fake): {' '.join(args)} is not simulated\n", ""
        rc, text = self.answers[key]
        return rc, text, ""


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """pynvml stand-in answering from a recording (nvml.json): values, or 'error: ...' strings."""

    NVML_NVLINK_MAX_LINKS = 36

    def __init__(self, data):
        self.data = data
        self.inited = False
        self.shutdowns = 0

    @staticmethod
    def _v(value):
        if isinstance(value, str) and value.startswith("error"):
            raise FakeNVMLError(value)
        if value is None:
            raise FakeNVMLError("error: Not Supported")
        return value

    def _gpu(self, h):
        return self.data["gpus"][h]

    def nvmlInit(self):
        self._v(self.data.get("init", "ok"))
        self.inited = True

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self._v(self.data.get("count", len(self.data["gpus"])))

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return self._v(self._gpu(h)["uuid"])

    def nvmlDeviceGetName(self, h):
        return self._v(self._gpu(h)["name"])

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._v(self._gpu(h)["busId"]).encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self._v(self._gpu(h)["memory_total"]))

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self._v(self._gpu(h).get("cuda_cc")))

    def nvmlDeviceGetCpuAffinity(self, h, n):
        words = list(self._v(self._gpu(h).get("cpu_affinity")))
        return (words + [0] * n)[:n]

    def nvmlDeviceGetMemoryAffinity(self, h, n, scope):
        words = list(self._v(self._gpu(h).get("memory_affinity")))
        return (words + [0] * n)[:n]

    def _link(self, h, link):
        for entry in self._gpu(h).get("nvlinks") or []:
            if entry["link"] == link:
                return entry
        raise FakeNVMLError("error: Invalid Argument")

    def nvmlDeviceGetNvLinkState(self, h, link):
        return self._v(self._link(h, link).get("state"))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self._v(self._link(h, link).get("remote_bus")))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self._v(self._link(h, link).get("remote_type"))

    def _pair(self, a, b):
        return self.data["pairs"].get(f"{a},{b}") or {}

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self._v(self._pair(a, b).get("common_ancestor"))

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        key = {0: "p2p_read", 1: "p2p_write", 2: "p2p_nvlink"}.get(index)
        return self._v(self._pair(a, b).get(key))


def nvml_loader(folder, fname):
    data = json.loads((Path(folder) / fname).read_text())
    return lambda: FakeNVML(data)


def no_nvml():
    raise ModuleNotFoundError("No module named 'pynvml'")


def match_all(patterns, texts):
    """Each regex in patterns matches some text, and every text is matched by some pattern."""
    missing = [p for p in patterns if not any(re.search(p, t) for t in texts)]
    extra = [t for t in texts if not any(re.search(p, t) for p in patterns)]
    return missing, extra
