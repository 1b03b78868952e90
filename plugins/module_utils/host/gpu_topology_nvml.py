# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""NVML collection of the GPU topology code (facade: gpu_topology.py), through an injected pynvml module."""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
import sys
import warnings as pywarnings

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import NoGpu, normalize_bus_id

# NVML topology levels -> the codes nvidia-smi prints.
NVML_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVML_P2P = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
NVML_MAX_LINKS = 36
NVML_LINK_SCAN = 18  # links asked for when pynvml has no NVML_NVLINK_MAX_LINKS


def load_pynvml():
    """Import pynvml (nvidia-ml-py) quietly; ImportError when it is not installed."""
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore")
        return importlib.import_module("pynvml")


# The library pynvml (nvidia-ml-py 13.615.71) loads in nvmlInit on Linux: pynvml._LoadNvmlLibrary, CDLL of this name.
NVML_LIBRARY = "libnvidia-ml.so.1"


class NvmlUnavailable(Exception):
    """The NVML library does not load here: nvmlInit would fail, so pynvml is not imported."""


def library_first(loader, load_library=None):
    """A loader that first loads the NVML library as pynvml's nvmlInit would, then runs LOADER: on a host without the
    driver's library (no GPU, a container without it) the import of pynvml (one large module, about 50 ms) is not
    paid for an nvmlInit that must fail. Raises NvmlUnavailable naming the library and the loader's error."""

    def loader_checked():
        try:
            (load_library or ctypes.CDLL)(NVML_LIBRARY)
        except OSError as exc:
            raise NvmlUnavailable(f"NVML did not initialise ({NVML_LIBRARY} does not load: {exc})") from exc
        return loader()

    return loader_checked


def venv_pynvml_loader(venv, load=load_pynvml):
    """A loader that imports pynvml from this interpreter, else from the site-packages of VENV (a venv that installs
    nvidia-ml-py: the engine venv) where it is there. nvidia-ml-py is one pure-Python file over ctypes, so any
    Python 3 imports it; a missing venv (a first install) leaves only the interpreter's own, as before."""

    def loader():
        try:
            return load()
        except ImportError:
            found = sorted(glob.glob(os.path.join(glob.escape(venv or ""), "lib", "python3*", "site-packages")))
            found = [d for d in found if os.path.isfile(os.path.join(d, "pynvml.py"))]
            if not venv or not found:
                raise
        sys.path.insert(0, found[-1])
        try:
            return load()
        finally:
            sys.path.remove(found[-1])

    return loader


def _s(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return value


def _bits(words):
    """NVML affinity masks (64-bit words, lowest first) -> sorted bit numbers."""
    out = []
    for w, word in enumerate(list(words)):
        value = int(word)
        bit = 0
        while value:
            if value & 1:
                out.append(w * 64 + bit)
            value >>= 1
            bit += 1
    return out


def _nvml_error(exc):
    return "{}: {}".format(type(exc).__name__, str(exc) or "no message")


def collect_nvml(nvml, n_cpus=64, n_nodes=64):
    """Ask NVML. Returns a partial topology (gpus with affinity, links, p2p) or raises NoGpu.

    The steps: nvml_gpu (each GPU and its affinity), nvlink_counts (NVLinks to a peer and to a switch), and
    nvml_matrices (the link, P2P read and P2P write matrices)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NoGpu(f"NVML did not initialise ({_nvml_error(exc)})") from exc
    try:
        count = nvml.nvmlDeviceGetCount()
        if not count:
            raise NoGpu("NVML reports no GPU")
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        words = (max(1, (n_cpus + 63) // 64), max(1, (n_nodes + 63) // 64))
        gpus = [nvml_gpu(nvml, i, h, *words) for i, h in enumerate(handles)]
        direct, switch = nvlink_counts(nvml, handles, gpus)
        links, p2p, p2p_write = nvml_matrices(nvml, handles, direct, switch)
        return {"gpus": gpus, "links": links, "p2p": p2p, "p2p_write": p2p_write, "warnings": []}
    except NoGpu:
        raise
    except Exception as exc:
        raise NoGpu(f"NVML failed while reading devices ({_nvml_error(exc)})") from exc
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _optional(call):
    """CALL's value, or None where NVML cannot answer it (an older driver, a GPU without the feature)."""
    try:
        return call()
    except Exception:
        return None


def nvml_gpu(nvml, index, handle, cpu_words, node_words):
    """One GPU as NVML describes it: identity, memory, compute capability and its CPU and NUMA affinity (None where
    NVML cannot say)."""
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    gpu = {
        "index": index,
        "uuid": _s(nvml.nvmlDeviceGetUUID(handle)),
        "name": _s(nvml.nvmlDeviceGetName(handle)),
        "pci_bus_id": normalize_bus_id(_s(pci.busId)),
        "memory_total_mib": int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
    }
    gpu["compute_capability"] = _optional(lambda: "{}.{}".format(*nvml.nvmlDeviceGetCudaComputeCapability(handle)))
    gpu["_cpu_affinity"] = _optional(lambda: _bits(nvml.nvmlDeviceGetCpuAffinity(handle, cpu_words)) or None)
    gpu["_numa_affinity"] = _optional(lambda: _bits(nvml.nvmlDeviceGetMemoryAffinity(handle, node_words, 0)) or None)
    return gpu


def nvlink_counts(nvml, handles, gpus):
    """({GPU: {peer GPU: NVLinks}}, {GPU: NVLinks to a switch}) of the active NVLinks. Links to a peer GPU count
    directly; links to an NVSwitch (or to a device this host cannot see) are switch links, shared by every GPU that
    reaches the fabric."""
    bus_to_index = {g["pci_bus_id"]: g["index"] for g in gpus}
    direct = {g["index"]: {} for g in gpus}
    switch = {g["index"]: 0 for g in gpus}
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", NVML_LINK_SCAN)
    for i, h in enumerate(handles):
        for link in range(min(int(max_links), NVML_MAX_LINKS)):
            try:
                if not nvml.nvmlDeviceGetNvLinkState(h, link):
                    continue
            except Exception:  # no such link on this GPU
                continue
            try:
                remote = normalize_bus_id(_s(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId))
            except Exception:  # an active link whose far end this host cannot name
                remote = None
            peer = bus_to_index.get(remote)
            rtype = _optional(lambda h=h, link=link: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link))
            if peer is not None and peer != i and rtype in (None, 0):
                direct[i][peer] = direct[i].get(peer, 0) + 1
            else:
                switch[i] += 1
    return direct, switch


def _link(nvml, hi, hj, nv_links):
    """The link of GPUs HI -> HJ as nvidia-smi topo -m writes it: NV<n> over NVLink, else the PCIe level of their
    common ancestor (None where NVML cannot say)."""
    if nv_links:
        return f"NV{nv_links}"
    return _optional(lambda: NVML_LEVELS.get(int(nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj)), "SYS"))


def _p2p(nvml, hi, hj, index):
    """NVML's P2P status of HI -> HJ for capability INDEX (0 read, 1 write) in nvidia-smi's words, None unknown."""
    return _optional(lambda: NVML_P2P.get(int(nvml.nvmlDeviceGetP2PStatus(hi, hj, index)), "U"))


def nvml_matrices(nvml, handles, direct, switch):
    """(links, p2p read, p2p write) matrices {i: {j: value}} of the GPUs. Two GPUs on the NVLink fabric (both with
    switch links) count the fewer of their switch links where NVML says P2P runs over NVLink. A link matrix with an
    unknown cell drops those cells; a P2P matrix with one is dropped whole."""
    links, p2p, p2p_write = {}, {}, {}
    for i, hi in enumerate(handles):
        links[i], p2p[i], p2p_write[i] = {}, {}, {}
        for j, hj in enumerate(handles):
            if i == j:
                links[i][j] = p2p[i][j] = p2p_write[i][j] = "X"
                continue
            nv = direct[i].get(j) or direct[j].get(i) or 0
            if not nv and switch[i] and switch[j]:
                try:
                    if nvml.nvmlDeviceGetP2PStatus(hi, hj, 2) == 0:  # NVML_P2P_CAPS_INDEX_NVLINK
                        nv = min(switch[i], switch[j])
                except Exception:
                    nv = min(switch[i], switch[j])
            links[i][j] = _link(nvml, hi, hj, nv)
            p2p[i][j] = _p2p(nvml, hi, hj, 0)  # READ
            p2p_write[i][j] = _p2p(nvml, hi, hj, 1)  # WRITE
    if any(v is None for row in links.values() for v in row.values()):
        links = {i: {j: v for j, v in row.items() if v is not None} for i, row in links.items()}
    if any(v is None for row in p2p.values() for v in row.values()):
        p2p = {}
    if any(v is None for row in p2p_write.values() for v in row.values()):
        p2p_write = {}
    return links, p2p, p2p_write
