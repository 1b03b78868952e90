# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""sysfs readers of the GPU topology code (facade: gpu_topology.py): NUMA nodes and their CPUs, a PCI
device's NUMA node and local CPUs, the CPU count. Every path is under an injected sysfs root.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import parse_cpulist


def _read(path):
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def read_numa_nodes(sysfs_root="/"):
    """[{id, cpus}] from <root>/sys/devices/system/node/node*/cpulist, lowest id first."""
    nodes = []
    pattern = os.path.join(sysfs_root, "sys/devices/system/node/node*/cpulist")
    for path in glob.glob(pattern):
        name = os.path.basename(os.path.dirname(path))
        if not name[4:].isdigit():
            continue
        try:
            cpus = parse_cpulist(_read(path))
        except ValueError:
            cpus = []
        nodes.append({"id": int(name[4:]), "cpus": cpus})
    return sorted(nodes, key=lambda n: n["id"])


def read_pci_locality(sysfs_root, bus_id):
    """{'numa_node': int or None, 'raw_numa_node': str or None, 'local_cpus': [..] or None}."""
    out = {"numa_node": None, "raw_numa_node": None, "local_cpus": None}
    if not bus_id:
        return out
    base = os.path.join(sysfs_root, "sys/bus/pci/devices", bus_id)
    raw = _read(os.path.join(base, "numa_node"))
    out["raw_numa_node"] = raw
    if raw is not None and re.match(r"^-?\d+$", raw) and int(raw) >= 0:
        out["numa_node"] = int(raw)
    local = _read(os.path.join(base, "local_cpulist"))
    if local is not None:
        try:
            out["local_cpus"] = parse_cpulist(local) or None
        except ValueError:
            out["local_cpus"] = None
    return out


def cpu_count(sysfs_root="/"):
    """Highest possible CPU id + 1 (sizes NVML's affinity masks)."""
    for name in ("possible", "present", "online"):
        text = _read(os.path.join(sysfs_root, "sys/devices/system/cpu", name))
        if text:
            try:
                cpus = parse_cpulist(text)
            except ValueError:
                continue
            if cpus:
                return cpus[-1] + 1
    return os.cpu_count() or 64
