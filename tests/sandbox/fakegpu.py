"""A simulated GPU box, rendered from a topology spec into a sandbox host's root.

What a guest gets (paths inside the guest):
  /opt/fakegpu/topology.json      the spec, expanded per host (GPU UUIDs, link matrix, CPU lists)
  /opt/fakegpu/sysroot/sys/...    a fake sysfs: NUMA nodes, CPUs, one PCI device per GPU
  /opt/fakegpu/bin/numactl        numactl shim checked against the fake NUMA nodes
  /usr/local/bin/nvidia-smi       fake nvidia-smi answering from topology.json
  /opt/models/DeepSeek-V4-Flash/  no weights; a tiny real tokenizer and config for the router
The collection's topology module runs unchanged with sysfs_root=/opt/fakegpu/sysroot.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import yaml  # PyYAML: comes with ansible-core in the project venv that runs this

HERE = Path(__file__).resolve().parent
TOPOLOGIES = HERE / "topologies"
GUEST = HERE / "guest"
DEFAULT_TOPOLOGY = "rtxpro6000-8x"
FAKEGPU = "opt/fakegpu"
SYSFS_ROOT = "/" + FAKEGPU + "/sysroot"
NUMACTL = "/" + FAKEGPU + "/bin/numactl"
NVIDIA_SMI = "/usr/local/bin/nvidia-smi"


def topology_names() -> list[str]:
    return sorted(p.stem for p in TOPOLOGIES.glob("*.yml"))


def load_spec(name: str) -> dict:
    """The YAML spec as data."""
    path = TOPOLOGIES / f"{name}.yml"
    if not path.is_file():
        raise SystemExit(f"unknown topology {name!r}; known: {', '.join(topology_names())}")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        lo, _sep, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_mask(cpus: list[int], ncpus: int) -> str:
    """sysfs cpumask format: 32-bit hex words, most significant first, comma separated."""
    bits = sum(1 << c for c in cpus)
    words = [(bits >> (32 * i)) & 0xFFFFFFFF for i in range((ncpus + 31) // 32)]
    return ",".join(f"{w:08x}" for w in reversed(words))


def expand(spec: dict, hostname: str) -> dict:
    """The per-host JSON the guest scripts read: every GPU fully described, links precomputed."""
    nodes = {n["id"]: n for n in spec["numa_nodes"]}
    model = spec["gpu"]
    gpus = []
    for gpu in spec["gpus"]:
        node = nodes[gpu["numa_node"]]
        ident = uuid.uuid5(uuid.NAMESPACE_URL, f"disagg-sandbox:{hostname}:gpu{gpu['index']}")
        gpus.append(
            {
                "index": gpu["index"],
                "uuid": f"GPU-{ident}",
                "serial": str(1650125000000 + ident.int % 100000),
                "name": model["name"],
                "pci_bus_id": gpu["pci_bus_id"].upper(),
                "sysfs_bus_id": gpu["pci_bus_id"][4:].lower(),
                "pci_device_id": "0x" + (model["pci_device_id"][2:] + model["pci_vendor_id"][2:]).upper(),
                "pci_sub_device_id": "0x204E10DE",
                "numa_node": gpu["numa_node"],
                "cpulist": node["cpulist"],
                "compute_cap": model["compute_cap"],
                "memory_total_mib": model["memory_total_mib"],
                "memory_reserved_mib": 633,
                "power_limit_w": model["power_limit_w"],
                "vbios_version": "98.02.52.00.02",
            }
        )
    links = [["X" if a is b else ("NODE" if a["numa_node"] == b["numa_node"] else "SYS") for b in gpus] for a in gpus]
    p2p = spec.get("p2p_read", "OK")
    p2p_read = [["X" if a is b else p2p for b in gpus] for a in gpus]
    return {
        "topology": spec["name"],
        "hostname": hostname,
        "driver_version": spec["driver_version"],
        "cuda_version": spec["cuda_version"],
        "numa_nodes": spec["numa_nodes"],
        "gpus": gpus,
        "links": links,
        "p2p_read": p2p_read,
        "pcie_link": model["pcie_link"],
        "pci_vendor_id": model["pci_vendor_id"],
        "pci_device_id": model["pci_device_id"],
    }


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def render_sysfs(topo: dict, sys_dir: Path) -> None:
    """NUMA nodes, CPUs and a PCI device per GPU, laid out like the kernel's sysfs."""
    nodes = topo["numa_nodes"]
    ncpus = max(max(cpu_list(n["cpulist"])) for n in nodes) + 1
    node_ids = f"0-{len(nodes) - 1}" if len(nodes) > 1 else "0"
    system = sys_dir / "devices/system"
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        _write(system / "node" / name, node_ids)
    for name in ("online", "possible", "present"):
        _write(system / "cpu" / name, f"0-{ncpus - 1}")
    for node in nodes:
        base = system / "node" / f"node{node['id']}"
        _write(base / "cpulist", node["cpulist"])
        _write(base / "cpumap", cpu_mask(cpu_list(node["cpulist"]), ncpus))
        _write(base / "distance", " ".join("10" if n is node else "21" for n in nodes))
        kib = node["memory_mib"] * 1024
        _write(
            base / "meminfo",
            f"Node {node['id']} MemTotal:       {kib} kB\n"
            f"Node {node['id']} MemFree:        {kib * 9 // 10} kB\n"
            f"Node {node['id']} MemUsed:        {kib // 10} kB",
        )
    for gpu in topo["gpus"]:
        addr = gpu["sysfs_bus_id"]
        domain, bus = addr[:4], int(addr[5:7], 16)
        host_bus = f"{bus - 1:02x}"
        rel = f"devices/pci{domain}:{host_bus}/{domain}:{host_bus}:01.0/{addr}"
        dev = sys_dir / rel
        link = topo["pcie_link"]
        for name, value in {
            "vendor": topo["pci_vendor_id"],
            "device": topo["pci_device_id"],
            "class": "0x030200",
            "numa_node": str(gpu["numa_node"]),
            "local_cpulist": gpu["cpulist"],
            "local_cpus": cpu_mask(cpu_list(gpu["cpulist"]), ncpus),
            "current_link_speed": link["speed"],
            "max_link_speed": link["speed"],
            "current_link_width": str(link["width"]),
            "max_link_width": str(link["width"]),
        }.items():
            _write(dev / name, value)
        _link(sys_dir / "bus/pci/devices" / addr, f"../../../{rel}")
        _link(sys_dir / "bus/pci/drivers/nvidia" / addr, f"../../../../{rel}")
        _link(dev / "driver", "../../../../bus/pci/drivers/nvidia")
    _write(sys_dir / "module/nvidia/version", topo["driver_version"])


# The model directory the sandbox inventory names: no weights (the simulator needs none), but a real
# tokenizer (a tiny word-level one) and config, so the real router loads a local tokenizer as on a GPU host.
MODEL_DIR = "opt/models/DeepSeek-V4-Flash"
_WORDS = "the capital of france is paris hello world verify tok a b c".split()


def render_model(model: Path) -> None:
    special = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, t in ((1, "<s>"), (2, "</s>"))
    ]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {w: i + 3 for i, w in enumerate(_WORDS)}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    chat = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    _write(model / "tokenizer.json", json.dumps(tokenizer))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": chat}
    _write(model / "tokenizer_config.json", json.dumps(config))
    _write(model / "config.json", json.dumps({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}))


def render(root: Path, hostname: str, topology: str = DEFAULT_TOPOLOGY) -> dict:
    """Writes the fake GPU box into a guest root (an overlay upper dir); returns the expanded topology."""
    topo = expand(load_spec(topology), hostname)
    fake = root / FAKEGPU
    if fake.exists():
        shutil.rmtree(fake)
    _write(fake / "topology.json", json.dumps(topo, indent=2))
    render_sysfs(topo, fake / "sysroot/sys")
    _write(
        fake / "sysroot/proc/driver/nvidia/version",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {topo['driver_version']}",
    )
    for src, dest in ((GUEST / "numactl", fake / "bin/numactl"), (GUEST / "nvidia-smi", root / NVIDIA_SMI.lstrip("/"))):
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        dest.chmod(0o755)
    render_model(root / MODEL_DIR)
    return topo
