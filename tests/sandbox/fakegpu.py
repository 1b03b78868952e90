"""A simulated GPU box, rendered from a topology spec into a sandbox host's root.

What a guest gets (paths inside the guest):
  /opt/fakegpu/topology.json      the spec, expanded per host (GPU UUIDs, link matrix, CPU lists)
  /opt/fakegpu/sysroot/sys/...    a fake sysfs: NUMA nodes, CPUs, one PCI device per GPU and its root port
  /opt/fakegpu/sysroot/{proc,sys} the host's readiness (issue 41): kernel command line, IOMMU groups, nvidia module
                                  parameters, ASPM policy, each root port's config space with its ACS capability,
                                  numa balancing, THP, CPU governors (render_readiness; set_readiness re-renders one
                                  running host's with overrides)
  /opt/fakegpu/readiness.json     the readiness the fake nvidia-smi answers `-q` from (persistence, BAR1, ECC)
  /opt/fakegpu/bin/numactl        numactl shim checked against the fake NUMA nodes
  /usr/local/bin/nvidia-smi       fake nvidia-smi answering from topology.json
  /opt/models/DeepSeek-V4-Flash/  no weights; a tiny real tokenizer and config for the router
The collection's topology module runs unchanged with sysfs_root=/opt/fakegpu/sysroot, its readiness module with
root=/opt/fakegpu/sysroot.
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
        "spec_readiness": spec.get("readiness") or {},
    }


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def root_port(addr: str) -> str:
    """The PCIe root port above a GPU: device 01.0 of the bus just below the GPU's (host bridge pci0000:16 and root
    port 0000:16:01.0 for 0000:17:00.0), as on boards where every x16 slot has its own host bridge."""
    domain, bus = addr[:4], int(addr[5:7], 16)
    return f"{domain}:{bus - 1:02x}:01.0"


# The root ports' identity: the fake's choice (Intel's vendor id; the device id is not a claim about any part).
ROOT_PORT = {"vendor": "0x8086", "device": "0x352a"}


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
        port = root_port(addr)
        rel = f"devices/pci{port[:7]}/{port}/{addr}"
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
        # the GPU's root port: a device of its own (its config space is rendered with the readiness)
        bridge = dev.parent
        for name, value in {"vendor": ROOT_PORT["vendor"], "device": ROOT_PORT["device"], "class": "0x060400"}.items():
            _write(bridge / name, value)
        _link(sys_dir / "bus/pci/devices" / bridge.name, f"../../../{rel.rsplit('/', 1)[0]}")
    _write(sys_dir / "module/nvidia/version", topo["driver_version"])


# ---------------------------------------------------------------- readiness (issue 41)

# A clean host, as the RTX PRO 6000 community's setup notes want it (voipmonitor/rtx6kpro hardware/pcie-bandwidth.md,
# quoted in issue 41): IOMMU in passthrough, ASPM off, uvm_disable_hmm=1, persistence on, no ACS redirection on the
# root ports, NUMA balancing off, the performance governor. A topology spec's optional `readiness:` block overrides
# any key; set_readiness overrides them on one running host.
READINESS = {
    # /proc/cmdline
    "cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.8.0-60-generic root=/dev/mapper/vg0-root ro iommu=pt pcie_aspm=off",
    # every IOMMU group's type (drivers/iommu/iommu.c: identity, DMA, DMA-FQ, blocked); None: no groups (IOMMU off)
    "iommu_group_type": "identity",
    # GPU indexes whose root port has ACS request and completion redirection on, as drivers/pci/pci.c
    # pci_std_enable_acs sets it (SrcValid ReqRedir CmpltRedir UpstreamFwd); the others' ACS Control is all off
    "acs_redirect": [],
    # sys/module/pcie_aspm/parameters/policy's selection
    "aspm_policy": "performance",
    # sys/module/nvidia_uvm/parameters/uvm_disable_hmm as the kernel prints a bool parameter
    "uvm_disable_hmm": "Y",
    # nvidia-smi -q per GPU. BAR1 131072 MiB is the fake's choice, not a capture: the smallest power of two (BAR sizes
    # are) that maps the RTX PRO 6000's 96 GiB; the H200 capture shows 262144 MiB for its 141 GiB
    "bar1_mib": 131072,
    "persistence": "Enabled",
    "ecc": "Enabled",  # the fake's choice
    "max_sm_clock_mhz": 3090,  # the fake's choice
    "numa_balancing": 0,
    "thp": "madvise",
    "governor": "performance",
}
ASPM_POLICIES = ("default", "performance", "powersave", "powersupersave")
ACS_KERNEL = 0x001D  # PCI_ACS_SV | PCI_ACS_RR | PCI_ACS_CR | PCI_ACS_UF (include/uapi/linux/pci_regs.h)
# The driver's /proc/driver/nvidia/params, as 580.159.04 printed it on the lent H200 (tests/fixtures/host_readiness/
# h200-vm-2026-12-04/nvidia-modules.txt). The nvidia module's NVreg_* options have no sysfs file (open-gpu-kernel-
# modules nv-linux.h: NV_MODULE_PARAMETER(x) is module_param(x, int, 0)), so sys/module/nvidia/parameters stays absent.
NVIDIA_PARAMS = GUEST / "nvidia-params"
UVM_PARAMS = {"uvm_ats_mode": "1", "uvm_peer_copy": "phys", "uvm_perf_prefetch_enable": "1"}  # from the same capture


def readiness_of(block: dict, overrides: dict) -> dict:
    """READINESS with a topology spec's `readiness:` BLOCK and OVERRIDES on top; an unknown key is refused."""
    merged = dict(READINESS)
    for source in (block, overrides):
        unknown = set(source) - set(READINESS)
        if unknown:
            raise ValueError(f"unknown readiness keys {sorted(unknown)}; known: {', '.join(READINESS)}")
        merged.update(source)
    return merged


def acs_config(ctrl: int) -> bytes:
    """A root port's 4096-byte config space: a type-1 header with a PCI Express capability, then the extended
    capabilities AER (0x100) and ACS (0x148, every feature, ACS Control CTRL), as a root port lists them (PCIe Base
    Specification 7.6.3 extended capability headers; ACS Extended Capability: cap at +4, control at +6)."""
    data = bytearray(4096)
    data[0:4] = int(ROOT_PORT["vendor"], 16).to_bytes(2, "little") + int(ROOT_PORT["device"], 16).to_bytes(2, "little")
    data[0x06] = 0x10  # status: capabilities list
    data[0x0A:0x0C] = bytes((0x04, 0x06))  # PCI-to-PCI bridge
    data[0x0E] = 0x01  # header type 1
    data[0x34] = 0x40  # capabilities pointer
    data[0x40:0x44] = bytes((0x10, 0x00, 0x42, 0x00))  # PCI Express capability v2, root port
    data[0x100:0x104] = (0x0001 | 2 << 16 | 0x148 << 20).to_bytes(4, "little")  # AER v2, next 0x148
    data[0x148:0x14C] = (0x000D | 1 << 16).to_bytes(4, "little")  # ACS v1, last
    data[0x14C:0x14E] = (0x007F).to_bytes(2, "little")
    data[0x14E:0x150] = ctrl.to_bytes(2, "little")
    return bytes(data)


def render_readiness(root: Path, topo: dict, *, fake: Path | None = None, **overrides) -> dict:
    """Writes the readiness of the box TOPO (the expanded topology) into the guest root ROOT (its FAKE dir, by default
    ROOT/opt/fakegpu: FAKE/sysroot and FAKE/readiness.json); returns it. Overwrites what an earlier rendering left, so
    it can run on a running host (set_readiness)."""
    ready = readiness_of(topo.get("spec_readiness") or {}, overrides)
    indexes = {g["index"] for g in topo["gpus"]}
    if not set(ready["acs_redirect"]) <= indexes:
        raise ValueError(f"acs_redirect {ready['acs_redirect']}: this box's GPUs are {sorted(indexes)}")
    fake = fake or root / FAKEGPU
    sysroot = fake / "sysroot"
    _write(sysroot / "proc/cmdline", ready["cmdline"])
    groups = sysroot / "sys/kernel/iommu_groups"
    if groups.exists():
        shutil.rmtree(groups)
    devices = sorted({root_port(g["sysfs_bus_id"]) for g in topo["gpus"]} | {g["sysfs_bus_id"] for g in topo["gpus"]})
    if ready["iommu_group_type"] is not None:
        for group in range(len(devices)):
            _write(groups / str(group) / "type", ready["iommu_group_type"])
    uvm = sysroot / "sys/module/nvidia_uvm/parameters"
    for name, value in (UVM_PARAMS | {"uvm_disable_hmm": ready["uvm_disable_hmm"]}).items():
        _write(uvm / name, value)
    _write(sysroot / "proc/driver/nvidia/params", NVIDIA_PARAMS.read_text(encoding="utf-8"))
    policy = ready["aspm_policy"]
    _write(
        sysroot / "sys/module/pcie_aspm/parameters/policy",
        " ".join(f"[{p}]" if p == policy else p for p in ASPM_POLICIES),
    )
    for gpu in topo["gpus"]:
        port = root_port(gpu["sysfs_bus_id"])
        ctrl = ACS_KERNEL if gpu["index"] in ready["acs_redirect"] else 0
        config = sysroot / "sys/devices" / f"pci{port[:7]}" / port / "config"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_bytes(acs_config(ctrl))
    _write(sysroot / "proc/sys/kernel/numa_balancing", str(ready["numa_balancing"]))
    _write(
        sysroot / "sys/kernel/mm/transparent_hugepage/enabled",
        " ".join(f"[{m}]" if m == ready["thp"] else m for m in ("always", "madvise", "never")),
    )
    ncpus = max(max(cpu_list(n["cpulist"])) for n in topo["numa_nodes"]) + 1
    for cpu in range(ncpus):
        _write(sysroot / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", ready["governor"])
    _write(fake / "readiness.json", json.dumps(ready, indent=2))
    return ready


# Whole host roots with one blocking setting each, beside the clean one, so a test points sglang_topology_sysfs_root at
# one (/opt/fakegpu/variants/NAME/sysroot) and the preflight reads that host, without changing the running host:
# every GPU's root port redirecting peer-to-peer (ACS as drivers/pci/pci.c pci_std_enable_acs sets it), and the IOMMU
# translating DMA (intel_iommu=on iommu.passthrough=0, every group of type DMA).
VARIANTS = {
    "acs-redirect": lambda topo: {"acs_redirect": sorted(g["index"] for g in topo["gpus"])},
    "iommu-translated": lambda topo: {
        "cmdline": READINESS["cmdline"].replace("iommu=pt", "intel_iommu=on iommu.passthrough=0"),
        "iommu_group_type": "DMA",
    },
}


def render_variants(root: Path, topo: dict) -> list[str]:
    """Copies the rendered sysroot once per VARIANTS row to ROOT/opt/fakegpu/variants/NAME/sysroot and renders the
    row's readiness there (the sysfs links are relative, so the copy is a whole tree); none for a box without GPUs."""
    if not topo["gpus"]:
        return []
    fake = root / FAKEGPU
    for name, overrides in VARIANTS.items():
        target = fake / "variants" / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(fake / "sysroot", target / "sysroot", symlinks=True)
        render_readiness(root, topo, fake=target, **overrides(topo))
    return sorted(VARIANTS)


def set_readiness(sandbox: str, host: str, **overrides) -> dict:
    """Re-renders the readiness of HOST of the running sandbox SANDBOX with OVERRIDES (READINESS keys) over its
    topology's; no overrides puts back the topology's own. Written into the host's root as this machine sees it
    (nspawn.up's host record "root": the overlay mount that systemd-nspawn boots), so the guest sees it at once."""
    from . import nspawn  # noqa: PLC0415 (nspawn imports this module)

    record = next((h for h in nspawn.load_hosts(sandbox) if h["name"] == host), None)
    if record is None or not nspawn.host_running(record):
        raise ValueError(f"{host} is not a running host of sandbox {sandbox}")
    root = Path(record["root"])
    topo = json.loads((root / FAKEGPU / "topology.json").read_text(encoding="utf-8"))
    return render_readiness(root, topo, **overrides)


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
    # weights as sglang's loader finds them: the index's weight_map and every shard it names (two tiny safetensors
    # files, a tensor each; the simulator loads none of them, the preflight checks that they are there)
    shards = {f"model-0000{i}-of-00002.safetensors": f"layers.{i - 1}.weight" for i in (1, 2)}
    for shard, tensor in shards.items():
        (model / shard).write_bytes(safetensors_bytes(tensor))
    index = {"metadata": {"total_size": 8 * len(shards)}, "weight_map": {t: f for f, t in shards.items()}}
    _write(model / "model.safetensors.index.json", json.dumps(index))


def safetensors_bytes(tensor: str) -> bytes:
    """A safetensors file holding one F32 tensor of two zeros (the format: an 8-byte little-endian header length,
    the JSON header, the data)."""
    header = json.dumps({tensor: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    return len(header).to_bytes(8, "little") + header + bytes(8)


# A copy of the model directory whose index names a shard that is not there: what the preflight must refuse
# (tests/cases/bad_inventories.yml), as sglang's loader fails on the missing shard.
PARTIAL_MODEL_DIR = MODEL_DIR + "-partial"


def render_partial_model(root: Path) -> None:
    partial = root / PARTIAL_MODEL_DIR
    if partial.exists():
        shutil.rmtree(partial)
    shutil.copytree(root / MODEL_DIR, partial)
    (partial / "model-00002-of-00002.safetensors").unlink()


# The NVIDIA persistence daemon's unit, as the driver's nvidia-persistenced package installs one (not enabled), running
# the stand-in tests/sandbox/guest/nvidia-persistenced; while it runs the fake nvidia-smi reports Persistence Mode
# Enabled, as the real daemon keeps every GPU initialised (NVIDIA's nvidia-persistenced documentation).
PERSISTENCED_UNIT = f"""[Unit]
Description=NVIDIA Persistence Daemon (sandbox stand-in: tests/sandbox/guest/nvidia-persistenced)

[Service]
Type=simple
ExecStart=/{FAKEGPU}/bin/nvidia-persistenced
ExecStopPost=/bin/rm -f /run/nvidia-persistenced/nvidia-persistenced.pid

[Install]
WantedBy=multi-user.target
"""


def render(root: Path, hostname: str, topology: str = DEFAULT_TOPOLOGY) -> dict:
    """Writes the fake GPU box into a guest root (an overlay upper dir); returns the expanded topology."""
    topo = expand(load_spec(topology), hostname)
    fake = root / FAKEGPU
    if fake.exists():
        shutil.rmtree(fake)
    _write(fake / "topology.json", json.dumps(topo, indent=2))
    render_sysfs(topo, fake / "sysroot/sys")
    render_readiness(root, topo)
    _write(
        fake / "sysroot/proc/driver/nvidia/version",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {topo['driver_version']}",
    )
    for src, dest in (
        (GUEST / "numactl", fake / "bin/numactl"),
        (GUEST / "nvidia-smi", root / NVIDIA_SMI.lstrip("/")),
        (GUEST / "nvidia-persistenced", fake / "bin/nvidia-persistenced"),
    ):
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        dest.chmod(0o755)
    # installed, not enabled: the driver's package ships the unit; sglang_host_apply: [persistence] enables it
    _write(root / "etc/systemd/system/nvidia-persistenced.service", PERSISTENCED_UNIT)
    render_variants(root, topo)
    render_model(root / MODEL_DIR)
    render_partial_model(root)
    return topo
