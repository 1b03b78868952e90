# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU and NUMA topology of one host, read from NVML, nvidia-smi and sysfs.

Plain functions over a sysfs root, an injected command runner and an injected NVML module, so
the module (plugins/modules/gpu_topology.py), the hardware probe (tests/hardware) and the unit
tests share one code path. Nothing of Ansible is imported: the parts import each other as
`ansible_collections.disagg.sglang.plugins.module_utils.*`, which a plain script gets by putting a
folder with `ansible_collections/disagg/sglang` -> the checkout on sys.path (tests/hardware does).

The code is split at its seams; this file gathers the facts and re-exports the parts, so existing
imports (`gpu_topology.format_cpulist`, `gpu_topology.parse_p2p`, ...) keep working:
  gpu_topology_parse.py  parsers of nvidia-smi text, CPU lists, bus ids (and NoGpu)
  gpu_topology_sysfs.py  sysfs readers
  gpu_topology_nvml.py   NVML collection
  gpu_topology_smi.py    nvidia-smi collection

Sources, best first (each optional):
  1. NVML through pynvml (package nvidia-ml-py), when it imports and initialises;
  2. `nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap
     --format=csv,noheader,nounits` and `nvidia-smi topo -m` (`topo -p2p r` and `-p2p w` are tried, not needed);
  3. sysfs, always: <root>/sys/devices/system/node/node*/cpulist and, per GPU,
     <root>/sys/bus/pci/devices/<0000:bb:dd.f>/numa_node and local_cpulist.

A GPU's NUMA node is sysfs's numa_node when that is >= 0, else the single node that NVML or
nvidia-smi report; when neither knows, it is None and placement uses the GPU's CPU affinity.
"""

from __future__ import annotations

import os

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_nvml import (
    NVML_LEVELS,
    NVML_LINK_SCAN,
    NVML_MAX_LINKS,
    NVML_P2P,
    NvmlUnavailable,
    _nvml_error,
    collect_nvml,
    library_first,
    load_pynvml,
    venv_pynvml_loader,
)
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import (
    LINK_RE,
    NoGpu,
    format_cpulist,
    normalize_bus_id,
    parse_cpulist,
    parse_p2p,
    parse_query_gpu,
    parse_topo_matrix,
    strip_ansi,
)
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_smi import (
    NVIDIA_SMI_DIRS,
    P2P_ARGS,
    P2P_WRITE_ARGS,
    QUERY_ARGS,
    QUERY_ARGS_NO_CC,
    QUERY_FIELDS,
    TOPO_ARGS,
    collect_nvidia_smi,
    find_nvidia_smi,
)
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_sysfs import (
    cpu_count,
    read_numa_nodes,
    read_pci_locality,
)

# The public names: this file's own and those it re-exports from its parts.
__all__ = [
    "LINK_RE",
    "NVIDIA_SMI_DIRS",
    "NVML_LEVELS",
    "NVML_LINK_SCAN",
    "NVML_MAX_LINKS",
    "NVML_P2P",
    "P2P_ARGS",
    "P2P_WRITE_ARGS",
    "QUERY_ARGS",
    "QUERY_ARGS_NO_CC",
    "QUERY_FIELDS",
    "TOPO_ARGS",
    "NoGpu",
    "collect_nvidia_smi",
    "collect_nvml",
    "empty_facts",
    "find_nvidia_smi",
    "format_cpulist",
    "gather",
    "load_pynvml",
    "normalize_bus_id",
    "pair_status",
    "parse_cpulist",
    "parse_p2p",
    "parse_query_gpu",
    "parse_topo_matrix",
    "read",
    "read_for",
    "strip_ansi",
    "venv_pynvml_loader",
]

# --------------------------------------------------------------------------------------------
# Putting it together


def _keyed(matrix, indices):
    """{int: {int: v}} -> {'i': {'j': v}} over known GPUs, X on the diagonal."""
    out = {}
    for i in indices:
        row = matrix.get(i) or {}
        if not row:
            continue
        out[str(i)] = {str(j): ("X" if i == j else row[j]) for j in indices if j in row or i == j}
    return out


def pair_status(read, write, indices):
    """{'i-j': {read, write}} for every ordered pair of distinct GPUs that either matrix knows.

    'i-j' is GPU i reaching GPU j's memory (NVML's nvmlDeviceGetP2PStatus(i, j, ...), row i of
    `nvidia-smi topo -p2p r|w`): for a KV WRITE from prefill GPU p to decode GPU d, read 'p-d'.
    A status the source did not give is null.
    """
    out = {}
    for i in indices:
        for j in indices:
            if i == j:
                continue
            r = (read.get(i) or {}).get(j)
            w = (write.get(i) or {}).get(j)
            if r is not None or w is not None:
                out[f"{i}-{j}"] = {"read": r, "write": w}
    return out


def empty_facts(reason, numa_nodes=None, skipped=None, warnings=None):
    return {
        "gpus": [],
        "numa_nodes": numa_nodes or [],
        "links": {},
        "p2p": {},
        "p2p_pairs": {},
        "sources": {
            "gpus": [],
            "links": [],
            "p2p": [],
            "p2p_pairs": [],
            "numa_node": [],
            "cpu_affinity": [],
            "numa_nodes": ["sysfs"] if numa_nodes else [],
            "skipped": skipped or [],
        },
        "warnings": warnings or [],
        "reason": reason,
    }


def gather(sysfs_root="/", nvidia_smi_path=None, runner=None, nvml_loader=load_pynvml, source="auto"):
    """The facts: {gpus, numa_nodes, links, p2p, p2p_pairs, sources, warnings, reason}. Never raises for a
    host without GPU or driver: zero GPUs and `reason` say so.

    source: 'auto' (NVML, else nvidia-smi), 'nvml' or 'nvidia-smi' (only that one).
    runner: argv -> (rc, stdout, stderr), with LC_ALL=C; needed when nvidia-smi is asked (the modules pass
    AnsibleModule.run_command, tests/hardware a subprocess runner).

    The steps: collect (the GPUs, links and P2P matrices from NVML or nvidia-smi), gpu_fact (each GPU's NUMA node,
    locate_numa, and CPU affinity, locate_cpus), derived_numa_nodes (where sysfs has none), facts_of (the result).
    """
    sysfs_root = sysfs_root or "/"
    numa_nodes = read_numa_nodes(sysfs_root)
    data, src, skipped = collect(sysfs_root, numa_nodes, nvidia_smi_path=nvidia_smi_path, runner=runner,
                                 nvml_loader=nvml_loader, source=source)  # fmt: skip
    if data is None:
        return empty_facts(
            "no GPU found: " + "; ".join(skipped) if skipped else "no GPU source asked", numa_nodes, skipped
        )
    warnings = list(data["warnings"])
    found = [gpu_fact(raw, sysfs_root, numa_nodes, src) for raw in sorted(data["gpus"], key=lambda g: g["index"])]
    gpus = [gpu for gpu, _numa_src, _cpu_src, _warnings in found]
    warnings += [w for _gpu, _numa_src, _cpu_src, gpu_warnings in found for w in gpu_warnings]
    nodes_src = ["sysfs"] if numa_nodes else []
    if not numa_nodes:
        numa_nodes, nodes_src, node_warnings = derived_numa_nodes(gpus, sysfs_root)
        warnings += node_warnings
    sources = {
        "numa_node": {s for _g, numa_src, _c, _w in found for s in numa_src},
        "cpu_affinity": {s for _g, _n, cpu_src, _w in found for s in cpu_src},
        "numa_nodes": nodes_src,
        "skipped": skipped,
    }
    return facts_of(data, src, gpus, numa_nodes, sources=sources, warnings=warnings)


def collect(sysfs_root, numa_nodes, *, nvidia_smi_path, runner, nvml_loader, source):
    """(data, src, skipped): what the first source that shows GPUs collected (collect_nvml or collect_nvidia_smi;
    None where none did), its name, and why each source tried before it gave nothing."""
    skipped = []
    if source in ("auto", "nvml"):
        try:
            nvml = nvml_loader()
        except NvmlUnavailable as exc:
            skipped.append(f"nvml: {exc}")
        except Exception as exc:  # ImportError, or anything a broken install raises
            skipped.append(f"nvml: pynvml not importable ({_nvml_error(exc)})")
        else:
            try:
                n_nodes = max([n["id"] for n in numa_nodes] + [63]) + 1
                return collect_nvml(nvml, n_cpus=cpu_count(sysfs_root), n_nodes=n_nodes), "nvml", skipped
            except NoGpu as exc:
                skipped.append(f"nvml: {exc}")
    if source in ("auto", "nvidia-smi"):
        path = nvidia_smi_path or find_nvidia_smi(dirs=NVIDIA_SMI_DIRS)
        if not path:
            skipped.append(f"nvidia-smi: not found on PATH or in {', '.join(NVIDIA_SMI_DIRS)}")
        elif runner is None:
            raise TypeError("gather(): runner= (argv -> (rc, stdout, stderr)) is needed to run nvidia-smi")
        else:
            try:
                return collect_nvidia_smi(runner, path), "nvidia-smi", skipped
            except NoGpu as exc:
                skipped.append(f"nvidia-smi: {exc}")
    return None, None, skipped


def _tool_names(src):
    """(the tool's words in a warning, its name as a source) of SRC (nvml or nvidia-smi)."""
    return ("NVML", "nvml") if src == "nvml" else ("nvidia-smi topo -m", "nvidia-smi")


def locate_numa(raw, pci, src, label):
    """(NUMA node, its sources, warnings) of one GPU: sysfs's numa_node, else the tool's single NUMA affinity, else
    unknown (None), each disagreement or gap said in a warning naming LABEL."""
    tool, tool_src = _tool_names(src)
    tool_numa = raw.get("_numa_affinity")
    tool_single = tool_numa[0] if tool_numa and len(tool_numa) == 1 else None
    if pci["numa_node"] is not None:
        numa = pci["numa_node"]
        if tool_single is not None and tool_single != numa:
            return numa, {"sysfs"}, [f"{label}: sysfs numa_node is {numa} but {tool} says {tool_single}; using sysfs"]
        return numa, {"sysfs"}, []
    if tool_single is not None:
        warnings = []
        if pci["raw_numa_node"] is not None:
            warnings.append(
                f"{label}: sysfs numa_node is {pci['raw_numa_node']}; using NUMA node {tool_single} reported by {tool}"
            )
        return tool_single, {tool_src}, warnings
    why = []
    if pci["raw_numa_node"] is not None:
        why.append("sysfs numa_node is {} (common in VMs)".format(pci["raw_numa_node"]))
    elif raw["pci_bus_id"]:
        why.append("no sysfs numa_node")
    why.append(f"{tool} gives nodes {format_cpulist(tool_numa)}" if tool_numa else f"{tool} gives no NUMA affinity")
    return None, set(), [f"{label}: NUMA node unknown ({', '.join(why)}); locality falls back to its CPU affinity"]


def locate_cpus(raw, pci, numa, numa_nodes, *, src, label):
    """(CPUs, their sources, warnings) of one GPU: the tool's CPU affinity, else sysfs's local_cpus, else its NUMA
    node's CPUs, else none (a warning naming LABEL); and a warning where its NUMA node is not one sysfs lists."""
    tool_src = _tool_names(src)[1]
    node_ids = {n["id"] for n in numa_nodes}
    node_cpus = {n["id"]: n["cpus"] for n in numa_nodes}
    warnings = []
    if raw.get("_cpu_affinity"):
        cpus, found = raw["_cpu_affinity"], {tool_src}
    elif pci["local_cpus"]:
        cpus, found = pci["local_cpus"], {"sysfs"}
    elif numa is not None and node_cpus.get(numa):
        cpus, found = node_cpus[numa], {"sysfs"}
    else:
        cpus, found = [], set()
        warnings.append(f"{label}: CPU affinity unknown")
    if numa is not None and node_ids and numa not in node_ids:
        warnings.append(f"{label}: NUMA node {numa} is not among sysfs nodes {format_cpulist(node_ids)}")
    return list(cpus), found, warnings


def gpu_fact(raw, sysfs_root, numa_nodes, src):
    """(the GPU's fact, the sources of its NUMA node, those of its CPU affinity, warnings) of one collected GPU RAW,
    its PCI locality read from sysfs."""
    pci = read_pci_locality(sysfs_root, raw["pci_bus_id"])
    label = f"GPU {raw['index']} ({raw['pci_bus_id'] or 'bus id unknown'})"
    numa, numa_src, numa_warnings = locate_numa(raw, pci, src, label)
    cpus, cpu_src, cpu_warnings = locate_cpus(raw, pci, numa, numa_nodes, src=src, label=label)
    keys = ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "compute_capability")
    gpu = {**{key: raw[key] for key in keys}, "numa_node": numa, "cpu_affinity": cpus}
    return gpu, numa_src, cpu_src, numa_warnings + cpu_warnings


def derived_numa_nodes(gpus, sysfs_root):
    """(nodes, their sources, warnings) where sysfs lists no NUMA node: the nodes the GPUs' NUMA nodes and CPU
    affinity make, said in a warning; none where no GPU knows its node."""
    derived = {}
    for gpu in gpus:
        if gpu["numa_node"] is not None:
            derived.setdefault(gpu["numa_node"], set()).update(gpu["cpu_affinity"])
    nodes = [{"id": n, "cpus": sorted(c)} for n, c in sorted(derived.items())]
    if not nodes:
        return [], [], []
    node_dir = os.path.join(sysfs_root, "sys/devices/system/node")
    return nodes, ["gpu affinity"], [f"no NUMA nodes in sysfs ({node_dir}): nodes derived from the GPUs' affinity"]


def facts_of(data, src, gpus, numa_nodes, *, sources, warnings):
    """The facts of the GPUs, their links and P2P matrices (keyed by GPU index) and where each came from. SOURCES:
    {numa_node, cpu_affinity: sets of sources, numa_nodes, skipped}."""
    indices = [g["index"] for g in gpus]
    links = _keyed(data["links"], indices)
    p2p = _keyed(data["p2p"], indices)
    p2p_pairs = pair_status(data["p2p"], data.get("p2p_write") or {}, indices)
    if len(indices) > 1 and not links:
        warnings = [*warnings, "GPU-to-GPU links unknown: placement cannot prefer tighter links"]
    order = ["sysfs", "nvml", "nvidia-smi"]
    return {
        "gpus": gpus,
        "numa_nodes": numa_nodes,
        "links": links,
        "p2p": p2p,
        "p2p_pairs": p2p_pairs,
        "sources": {
            "gpus": [src],
            "links": [src] if links else [],
            "p2p": [src] if p2p else [],
            "p2p_pairs": [src] if p2p_pairs else [],
            "numa_node": [s for s in order if s in sources["numa_node"]],
            "cpu_affinity": [s for s in order if s in sources["cpu_affinity"]],
            "numa_nodes": sources["numa_nodes"],
            "skipped": sources["skipped"],
        },
        "warnings": warnings,
        "reason": None,
    }


def read_for(module, options):
    """read() as a module calls it: OPTIONS holds sysfs_root, nvidia_smi_path, nvml_venv and optionally source (the
    gpu_topology module's options, or host_look's topology suboptions); MODULE is the AnsibleModule."""
    return read(
        options["sysfs_root"],
        options["nvidia_smi_path"],
        options["nvml_venv"],
        options.get("source") or "auto",
        run_command=module.run_command,
        get_bin_path=module.get_bin_path,
    )


def read(sysfs_root="/", nvidia_smi_path=None, nvml_venv=None, source="auto", *, run_command, get_bin_path):
    """The facts as a module reads them (the gpu_topology and host_look modules share this): nvidia-smi where
    NVIDIA_SMI_PATH says, else found on PATH or in NVIDIA_SMI_DIRS by GET_BIN_PATH (AnsibleModule.get_bin_path);
    NVML from the interpreter, else from the site-packages of NVML_VENV (the engine venv) when given; SOURCE as
    gather's. Returns (facts, error): error names a NVIDIA_SMI_PATH that is not an executable file (facts None).
    run_command: AnsibleModule.run_command (nvidia-smi runs with LC_ALL=C)."""
    if nvidia_smi_path is None:
        nvidia_smi_path = get_bin_path("nvidia-smi", opt_dirs=NVIDIA_SMI_DIRS)
    elif not (os.path.isfile(nvidia_smi_path) and os.access(nvidia_smi_path, os.X_OK)):
        return None, f"nvidia_smi_path {nvidia_smi_path} is not an executable file"

    def runner(argv):
        return run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    facts = gather(
        sysfs_root=sysfs_root,
        nvidia_smi_path=nvidia_smi_path,
        runner=runner,
        nvml_loader=library_first(venv_pynvml_loader(nvml_venv) if nvml_venv else load_pynvml),
        source=source,
    )
    return facts, None
