# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""nvidia-smi collection of the GPU topology code (facade: gpu_topology.py), through an injected runner.

The runner runs commands: the modules pass AnsibleModule.run_command (wrapped), the plain scripts of
tests/hardware pass collection_path.subprocess_runner.
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import (
    NoGpu,
    parse_p2p,
    parse_query_gpu,
    parse_topo_matrix,
)

QUERY_FIELDS = "index,uuid,name,pci.bus_id,memory.total,compute_cap"
QUERY_ARGS = ["--query-gpu=" + QUERY_FIELDS, "--format=csv,noheader,nounits"]
# Drivers older than compute_cap (R510) reject the whole query: asked again without it.
QUERY_ARGS_NO_CC = ["--query-gpu=" + QUERY_FIELDS.rsplit(",", 1)[0], "--format=csv,noheader,nounits"]
TOPO_ARGS = ["topo", "-m"]
P2P_ARGS = ["topo", "-p2p", "r"]
P2P_WRITE_ARGS = ["topo", "-p2p", "w"]

# Where drivers put nvidia-smi when it is not on PATH (containers mount /usr/local/nvidia).
NVIDIA_SMI_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin", "/usr/lib/wsl/lib"]


def find_nvidia_smi(extra_dirs=None, dirs=None):
    """nvidia-smi on PATH, else in extra_dirs, then dirs (default NVIDIA_SMI_DIRS); None when absent."""
    found = shutil.which("nvidia-smi")
    if found:
        return found
    for directory in list(extra_dirs or []) + list(NVIDIA_SMI_DIRS if dirs is None else dirs):
        candidate = os.path.join(directory, "nvidia-smi")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def collect_nvidia_smi(runner, nvidia_smi):
    """Ask nvidia-smi (query csv + topo -m; topo -p2p r and w when they answer) or raise NoGpu."""
    warnings = []
    rc, out, err = runner([nvidia_smi, *QUERY_ARGS])
    if rc != 0 and "compute_cap" in (out + err):
        rc, out, err = runner([nvidia_smi, *QUERY_ARGS_NO_CC])
        if rc == 0:
            warnings.append("nvidia-smi does not know compute_cap (driver older than R510): compute capability unknown")
    if rc != 0:
        raise NoGpu(f"nvidia-smi --query-gpu failed (rc {rc}): {_first_line(out, err)}")
    try:
        gpus = parse_query_gpu(out)
    except ValueError as exc:
        raise NoGpu(f"nvidia-smi --query-gpu printed something unexpected: {exc}") from exc
    if not gpus:
        raise NoGpu("nvidia-smi lists no GPU")
    for gpu in gpus:
        gpu["_cpu_affinity"] = None
        gpu["_numa_affinity"] = None

    links, matrix_ok = {}, False
    rc, out, err = runner([nvidia_smi, *TOPO_ARGS])
    if rc == 0:
        try:
            matrix = parse_topo_matrix(out)
        except ValueError as exc:
            warnings.append(f"nvidia-smi topo -m not understood ({exc}): GPU links unknown")
        else:
            matrix_ok = True
            warnings.extend(matrix["warnings"])
            links = matrix["links"]
            for gpu in gpus:
                gpu["_cpu_affinity"] = matrix["cpu_affinity"].get(gpu["index"])
                gpu["_numa_affinity"] = matrix["numa_affinity"].get(gpu["index"])
    else:
        warnings.append(f"nvidia-smi topo -m failed (rc {rc}: {_first_line(out, err)}): GPU links unknown")

    p2p, p2p_write = {}, {}
    rc, out, err = runner([nvidia_smi, *P2P_ARGS])
    if rc == 0:
        p2p = parse_p2p(out)
    rc, out, err = runner([nvidia_smi, *P2P_WRITE_ARGS])
    if rc == 0:
        p2p_write = parse_p2p(out)
    return {
        "gpus": gpus,
        "links": links,
        "p2p": p2p,
        "p2p_write": p2p_write,
        "warnings": warnings,
        "matrix": matrix_ok,
    }
