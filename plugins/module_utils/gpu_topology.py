# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU and NUMA topology of one host, read from NVML, nvidia-smi and sysfs.

Plain functions over a sysfs root, an injected command runner and an injected NVML module, so
the module (plugins/modules/gpu_topology.py), the hardware probe (tests/hardware) and the unit
tests share one code path. No Ansible import here: this file also runs as a plain script.

Sources, best first (each optional):
  1. NVML through pynvml (package nvidia-ml-py), when it imports and initialises;
  2. `nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap
     --format=csv,noheader,nounits` and `nvidia-smi topo -m` (`topo -p2p r` is tried, not needed);
  3. sysfs, always: <root>/sys/devices/system/node/node*/cpulist and, per GPU,
     <root>/sys/bus/pci/devices/<0000:bb:dd.f>/numa_node and local_cpulist.

A GPU's NUMA node is sysfs's numa_node when that is >= 0, else the single node that NVML or
nvidia-smi report; when neither knows, it is None and placement uses the GPU's CPU affinity.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
import shutil
import subprocess
import warnings as pywarnings

QUERY_FIELDS = "index,uuid,name,pci.bus_id,memory.total,compute_cap"
QUERY_ARGS = ["--query-gpu=" + QUERY_FIELDS, "--format=csv,noheader,nounits"]
# Drivers older than compute_cap (R510) reject the whole query: asked again without it.
QUERY_ARGS_NO_CC = ["--query-gpu=" + QUERY_FIELDS.rsplit(",", 1)[0], "--format=csv,noheader,nounits"]
TOPO_ARGS = ["topo", "-m"]
P2P_ARGS = ["topo", "-p2p", "r"]

# Where drivers put nvidia-smi when it is not on PATH (containers mount /usr/local/nvidia).
NVIDIA_SMI_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin", "/usr/lib/wsl/lib"]

LINK_RE = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_LINKS_RUN_RE = re.compile(r"(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)+")
_LINK_PREFIX_RE = re.compile(r"^((?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)+)(.+)$")
_DEVICE_RE = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+")
_DEVICES_RUN_RE = re.compile(r"(?:GPU\d+|NIC\d+|mlx\d+_\d+)+")
_GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
# ESC-introduced sequences, and the "[4m" / "[0m" that copy-paste leaves when ESC is lost.
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\[[0-9][0-9;]*m")
_CPULIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
_BUS_RE = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

# NVML topology levels -> the codes nvidia-smi prints.
NVML_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVML_P2P = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
NVML_MAX_LINKS = 36
NVML_LINK_SCAN = 18  # links asked for when pynvml has no NVML_NVLINK_MAX_LINKS


class NoGpu(Exception):
    """A source answered, and it has no GPU to report (or it failed): the message says why."""


# --------------------------------------------------------------------------------------------
# Small parsers


def strip_ansi(text):
    """Remove terminal colour/underline codes (nvidia-smi underlines the matrix header)."""
    return _ANSI_RE.sub("", text or "")


def parse_cpulist(text):
    """'0-13,28-41' or '0,2,4' -> sorted list of ints; '', 'N/A' -> []; garbage -> ValueError."""
    text = (text or "").strip()
    if not text or text.upper() in ("N/A", "[N/A]"):
        return []
    cpus = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        lo = int(lo)
        hi = int(hi) if sep else lo
        if hi < lo:
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpulist(cpus):
    """[0, 1, 2, 5] -> '0-2,5' (for messages)."""
    cpus = sorted(set(cpus or []))
    if not cpus:
        return ""
    runs = []
    start = prev = cpus[0]
    for cpu in cpus[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        runs.append((start, prev))
        start = prev = cpu
    runs.append((start, prev))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def normalize_bus_id(bus_id):
    """'00000000:17:00.0' (nvidia-smi, NVML) -> '0000:17:00.0' (sysfs); None if not a bus id."""
    if bus_id is None:
        return None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    match = _BUS_RE.match(bus_id.strip().rstrip("\x00"))
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def _na(value):
    value = (value or "").strip()
    if not value or value.upper() == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def parse_query_gpu(text):
    """Lines of `--query-gpu=index,uuid,name,pci.bus_id,memory.total[,compute_cap]` csv.

    Returns a list of GPU dicts (keys as in the facts, no locality yet). A name with commas
    survives: the fixed fields are taken from both ends of the line.
    """
    gpus = []
    for raw_line in (text or "").splitlines():
        line = raw_line.strip()
        if not line:
            continue
        raw = line.split(",")
        cells = [c.strip() for c in raw]
        if len(cells) < 5 or not cells[0].isdigit():
            raise ValueError(f"unexpected --query-gpu line: {line!r}")
        has_cc = len(cells) >= 6 and (_na(cells[-1]) is None or re.match(r"^\d+\.\d+$", cells[-1]))
        tail = 3 if has_cc else 2
        index, uuid = int(cells[0]), _na(cells[1])
        name = _na(",".join(raw[2 : len(raw) - tail]))
        bus = cells[len(cells) - tail]
        mem = _na(cells[len(cells) - tail + 1])
        ccap = _na(cells[-1]) if has_cc else None
        gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "name": name,
                "pci_bus_id": normalize_bus_id(bus),
                "memory_total_mib": int(float(mem)) if mem and re.match(r"^\d+(\.\d+)?$", mem) else None,
                "compute_capability": ccap,
            }
        )
    return gpus


def _split_merged(tokens, run_re, part_re):
    """Copy-paste damage: 'NODENODE' -> 'NODE', 'NODE'; 'NIC8NIC9' -> 'NIC8', 'NIC9'."""
    out = []
    for tok in tokens:
        if run_re.fullmatch(tok) and not part_re.fullmatch(tok):
            out.extend(part_re.findall(tok))
        else:
            out.append(tok)
    return out


def _pairs(left, right):
    """zip() to the shorter side (no zip(strict=) here: targets may run Python < 3.10)."""
    return [(left[i], right[i]) for i in range(min(len(left), len(right)))]


def _is_link(tok):
    return bool(LINK_RE.fullmatch(tok))


def _norm_link(tok):
    return "SYS" if tok == "SOC" else tok  # drivers before R384 printed SOC for SYS


def parse_topo_matrix(text):
    """Parse `nvidia-smi topo -m`.

    Returns {gpus: [int], links: {i: {j: code}}, cpu_affinity: {i: [cpu] or None},
    numa_affinity: {i: [node] or None}, columns: [names], affinity_columns: [names], warnings}.
    Survives tabs or spaces, NIC rows, the old format without NUMA columns, N/A, ranges,
    colour codes and cells merged by copy-paste (affinity cells are taken from the row's end).
    """
    lines = [strip_ansi(line).rstrip() for line in (text or "").splitlines()]
    header = None
    rows = []
    for line in lines:
        if line.strip().startswith("Legend") or line.strip().startswith("NIC Legend"):
            break
        tokens = line.split()
        if not tokens:
            continue
        first = _split_merged([tokens[0]], _DEVICES_RUN_RE, _DEVICE_RE)
        is_row = (
            bool(_GPU_LABEL_RE.match(first[0]))
            and len(first) == 1
            and len(tokens) > 1
            and (_is_link(tokens[1]) or bool(_LINK_PREFIX_RE.match(tokens[1])) or _LINKS_RUN_RE.fullmatch(tokens[1]))
        )
        if header is None and not is_row and (_DEVICE_RE.match(tokens[0]) or "Affinity" in line):
            header = line
            continue
        if header is not None and is_row:
            rows.append(tokens)
    if header is None:
        raise ValueError("no matrix header (GPU0 ...) in nvidia-smi topo -m output")

    # Header: device columns, then the affinity columns that this driver prints.
    positions = sorted((header.find(name), name) for name in _AFFINITY_COLUMNS if name in header)
    affinity_columns = [name for _, name in positions]
    device_part = header[: positions[0][0]] if positions else header
    columns = _split_merged(device_part.split(), _DEVICES_RUN_RE, _DEVICE_RE)

    warnings = []
    gpus, links, cpu_aff, numa_aff = [], {}, {}, {}
    k = len(affinity_columns)
    for tokens in rows:
        idx = int(_GPU_LABEL_RE.match(tokens[0]).group(1))
        cells = []
        for tok in tokens[1:]:
            prefix = _LINK_PREFIX_RE.match(tok)
            if _LINKS_RUN_RE.fullmatch(tok):
                cells.extend(LINK_RE.findall(tok))
            elif prefix and not _is_link(tok):
                # 'SYS0-55,112-167': a link cell merged into the affinity cell after it
                cells.extend(LINK_RE.findall(prefix.group(1)))
                cells.append(prefix.group(2))
            else:
                cells.append(tok)
        # trailing non-link cells are the affinity cells
        cut = len(cells)
        while cut > 0 and not _is_link(cells[cut - 1]):
            cut -= 1
        link_cells, aff_cells = cells[:cut], cells[cut:]
        if len(aff_cells) != k:
            names = ", ".join(affinity_columns) or "none"
            warnings.append(
                f"topo -m row GPU{idx}: {len(aff_cells)} affinity cells for {k} columns ({names});"
                " read from the row's end"
            )
        aff = dict(_pairs(affinity_columns, aff_cells))
        if k and len(aff_cells) != k and aff_cells:
            # merged or missing cells: the CPU list is the first cell that looks like one
            aff = {}
            rest = list(aff_cells)
            if "CPU Affinity" in affinity_columns and rest and (_CPULIST_RE.match(rest[0]) or rest[0] == "N/A"):
                aff["CPU Affinity"] = rest.pop(0)
            if "NUMA Affinity" in affinity_columns and rest:
                aff["NUMA Affinity"] = rest.pop(0)
        if len(link_cells) != len(columns):
            warnings.append(
                f"topo -m row GPU{idx}: {len(link_cells)} link cells for {len(columns)} columns;"
                " GPU columns read in order"
            )
        row_links = {}
        for col, cell in _pairs(columns, link_cells):
            m = _GPU_LABEL_RE.match(col)
            if m:
                row_links[int(m.group(1))] = _norm_link(cell)
        gpus.append(idx)
        links[idx] = row_links
        try:
            cpu_aff[idx] = parse_cpulist(aff.get("CPU Affinity")) or None
        except ValueError:
            warnings.append(f"topo -m row GPU{idx}: CPU Affinity {aff.get('CPU Affinity')!r} is not a CPU list")
            cpu_aff[idx] = None
        try:
            numa_aff[idx] = parse_cpulist(aff.get("NUMA Affinity")) or None
        except ValueError:
            warnings.append(f"topo -m row GPU{idx}: NUMA Affinity {aff.get('NUMA Affinity')!r} is not a node list")
            numa_aff[idx] = None
    if not gpus:
        raise ValueError("no GPU rows in nvidia-smi topo -m output")
    return {
        "gpus": gpus,
        "links": links,
        "cpu_affinity": cpu_aff,
        "numa_affinity": numa_aff,
        "columns": columns,
        "affinity_columns": affinity_columns,
        "warnings": warnings,
    }


def parse_p2p(text):
    """Parse `nvidia-smi topo -p2p r` (OK, NS, CNS, GNS, TNS, DR, U; X for self)."""
    header = None
    result = {}
    for raw_line in (text or "").splitlines():
        line = strip_ansi(raw_line)
        if line.strip().startswith("Legend"):
            break
        tokens = line.split()
        if not tokens:
            continue
        if header is None:
            if all(_GPU_LABEL_RE.match(t) for t in tokens):
                header = [int(_GPU_LABEL_RE.match(t).group(1)) for t in tokens]
            continue
        m = _GPU_LABEL_RE.match(tokens[0])
        if m:
            result[int(m.group(1))] = dict(_pairs(header, tokens[1:]))
    return result


# --------------------------------------------------------------------------------------------
# sysfs


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


# --------------------------------------------------------------------------------------------
# Sources


def load_pynvml():
    """Import pynvml (nvidia-ml-py) quietly; ImportError when it is not installed."""
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore")
        return importlib.import_module("pynvml")


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
    """Ask NVML. Returns a partial topology (gpus with affinity, links, p2p) or raises NoGpu."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NoGpu(f"NVML did not initialise ({_nvml_error(exc)})") from exc
    try:
        count = nvml.nvmlDeviceGetCount()
        if not count:
            raise NoGpu("NVML reports no GPU")
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        cpu_words = max(1, (n_cpus + 63) // 64)
        node_words = max(1, (n_nodes + 63) // 64)
        for i, h in enumerate(handles):
            pci = nvml.nvmlDeviceGetPciInfo(h)
            gpu = {
                "index": i,
                "uuid": _s(nvml.nvmlDeviceGetUUID(h)),
                "name": _s(nvml.nvmlDeviceGetName(h)),
                "pci_bus_id": normalize_bus_id(_s(pci.busId)),
                "memory_total_mib": int(nvml.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024),
                "compute_capability": None,
                "_cpu_affinity": None,
                "_numa_affinity": None,
            }
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
                gpu["compute_capability"] = f"{major}.{minor}"
            except Exception:
                pass
            try:
                gpu["_cpu_affinity"] = _bits(nvml.nvmlDeviceGetCpuAffinity(h, cpu_words)) or None
            except Exception:
                pass
            try:
                gpu["_numa_affinity"] = _bits(nvml.nvmlDeviceGetMemoryAffinity(h, node_words, 0)) or None
            except Exception:
                pass
            gpus.append(gpu)

        # NVLink: links to a peer GPU count directly; links to an NVSwitch (or to a device this
        # host cannot see) are switch links, shared by every GPU that reaches the fabric.
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
                rtype = None
                try:
                    rtype = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
                except Exception:
                    pass
                if peer is not None and peer != i and rtype in (None, 0):
                    direct[i][peer] = direct[i].get(peer, 0) + 1
                else:
                    switch[i] += 1

        links, p2p = {}, {}
        for i, hi in enumerate(handles):
            links[i], p2p[i] = {}, {}
            for j, hj in enumerate(handles):
                if i == j:
                    links[i][j] = "X"
                    p2p[i][j] = "X"
                    continue
                nv = direct[i].get(j) or direct[j].get(i) or 0
                if not nv and switch[i] and switch[j]:
                    try:
                        if nvml.nvmlDeviceGetP2PStatus(hi, hj, 2) == 0:  # NVML_P2P_CAPS_INDEX_NVLINK
                            nv = min(switch[i], switch[j])
                    except Exception:
                        nv = min(switch[i], switch[j])
                if nv:
                    links[i][j] = f"NV{nv}"
                else:
                    try:
                        level = nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj)
                        links[i][j] = NVML_LEVELS.get(int(level), "SYS")
                    except Exception:
                        links[i][j] = None
                try:
                    p2p[i][j] = NVML_P2P.get(int(nvml.nvmlDeviceGetP2PStatus(hi, hj, 0)), "U")  # READ
                except Exception:
                    p2p[i][j] = None
        if any(v is None for row in links.values() for v in row.values()):
            links = {i: {j: v for j, v in row.items() if v is not None} for i, row in links.items()}
        if any(v is None for row in p2p.values() for v in row.values()):
            p2p = {}
        return {"gpus": gpus, "links": links, "p2p": p2p, "warnings": []}
    except NoGpu:
        raise
    except Exception as exc:
        raise NoGpu(f"NVML failed while reading devices ({_nvml_error(exc)})") from exc
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def find_nvidia_smi(extra_dirs=None):
    found = shutil.which("nvidia-smi")
    if found:
        return found
    for directory in list(extra_dirs or []) + NVIDIA_SMI_DIRS:
        candidate = os.path.join(directory, "nvidia-smi")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def subprocess_runner(argv, timeout=60):
    """Default runner: (rc, stdout, stderr) with LC_ALL=C; rc 127 when it cannot run."""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run(argv, capture_output=True, env=env, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def collect_nvidia_smi(runner, nvidia_smi):
    """Ask nvidia-smi (query csv + topo -m, topo -p2p r if it answers) or raise NoGpu."""
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

    p2p = {}
    rc, out, err = runner([nvidia_smi, *P2P_ARGS])
    if rc == 0:
        p2p = parse_p2p(out)
    return {"gpus": gpus, "links": links, "p2p": p2p, "warnings": warnings, "matrix": matrix_ok}


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


def empty_facts(reason, numa_nodes=None, skipped=None, warnings=None):
    return {
        "gpus": [],
        "numa_nodes": numa_nodes or [],
        "links": {},
        "p2p": {},
        "sources": {
            "gpus": [],
            "links": [],
            "p2p": [],
            "numa_node": [],
            "cpu_affinity": [],
            "numa_nodes": ["sysfs"] if numa_nodes else [],
            "skipped": skipped or [],
        },
        "warnings": warnings or [],
        "reason": reason,
    }


def gather(sysfs_root="/", nvidia_smi_path=None, runner=None, nvml_loader=load_pynvml, source="auto"):
    """The facts: {gpus, numa_nodes, links, p2p, sources, warnings, reason}. Never raises for a
    host without GPU or driver: zero GPUs and `reason` say so.

    source: 'auto' (NVML, else nvidia-smi), 'nvml' or 'nvidia-smi' (only that one).
    """
    runner = runner or subprocess_runner
    sysfs_root = sysfs_root or "/"
    numa_nodes = read_numa_nodes(sysfs_root)
    skipped = []
    data, src = None, None

    if source in ("auto", "nvml"):
        try:
            nvml = nvml_loader()
        except Exception as exc:  # ImportError, or anything a broken install raises
            skipped.append(f"nvml: pynvml not importable ({_nvml_error(exc)})")
        else:
            try:
                data = collect_nvml(
                    nvml, n_cpus=cpu_count(sysfs_root), n_nodes=max([n["id"] for n in numa_nodes] + [63]) + 1
                )
                src = "nvml"
            except NoGpu as exc:
                skipped.append(f"nvml: {exc}")

    if data is None and source in ("auto", "nvidia-smi"):
        path = nvidia_smi_path or find_nvidia_smi()
        if not path:
            skipped.append(f"nvidia-smi: not found on PATH or in {', '.join(NVIDIA_SMI_DIRS)}")
        else:
            try:
                data = collect_nvidia_smi(runner, path)
                src = "nvidia-smi"
            except NoGpu as exc:
                skipped.append(f"nvidia-smi: {exc}")

    if data is None:
        return empty_facts(
            "no GPU found: " + "; ".join(skipped) if skipped else "no GPU source asked", numa_nodes, skipped
        )

    warnings = list(data["warnings"])
    numa_src, cpu_src = set(), set()
    gpus = []
    node_ids = {n["id"] for n in numa_nodes}
    node_cpus = {n["id"]: n["cpus"] for n in numa_nodes}
    tool = "NVML" if src == "nvml" else "nvidia-smi topo -m"
    tool_src = "nvml" if src == "nvml" else "nvidia-smi"
    for raw in sorted(data["gpus"], key=lambda g: g["index"]):
        pci = read_pci_locality(sysfs_root, raw["pci_bus_id"])
        tool_numa = raw.get("_numa_affinity")
        tool_single = tool_numa[0] if tool_numa and len(tool_numa) == 1 else None
        label = f"GPU {raw['index']} ({raw['pci_bus_id'] or 'bus id unknown'})"
        numa = None
        if pci["numa_node"] is not None:
            numa = pci["numa_node"]
            numa_src.add("sysfs")
            if tool_single is not None and tool_single != numa:
                warnings.append(f"{label}: sysfs numa_node is {numa} but {tool} says {tool_single}; using sysfs")
        elif tool_single is not None:
            numa = tool_single
            numa_src.add(tool_src)
            if pci["raw_numa_node"] is not None:
                warnings.append(
                    f"{label}: sysfs numa_node is {pci['raw_numa_node']}; using NUMA node {numa} reported by {tool}"
                )
        else:
            why = []
            if pci["raw_numa_node"] is not None:
                why.append("sysfs numa_node is {} (common in VMs)".format(pci["raw_numa_node"]))
            elif raw["pci_bus_id"]:
                why.append("no sysfs numa_node")
            if tool_numa:
                why.append(f"{tool} gives nodes {format_cpulist(tool_numa)}")
            else:
                why.append(f"{tool} gives no NUMA affinity")
            warnings.append(f"{label}: NUMA node unknown ({', '.join(why)}); locality falls back to its CPU affinity")

        cpus = raw.get("_cpu_affinity")
        if cpus:
            cpu_src.add(tool_src)
        elif pci["local_cpus"]:
            cpus = pci["local_cpus"]
            cpu_src.add("sysfs")
        elif numa is not None and node_cpus.get(numa):
            cpus = node_cpus[numa]
            cpu_src.add("sysfs")
        else:
            cpus = []
            warnings.append(f"{label}: CPU affinity unknown")
        if numa is not None and node_ids and numa not in node_ids:
            warnings.append(f"{label}: NUMA node {numa} is not among sysfs nodes {format_cpulist(node_ids)}")
        gpus.append(
            {
                "index": raw["index"],
                "uuid": raw["uuid"],
                "name": raw["name"],
                "pci_bus_id": raw["pci_bus_id"],
                "memory_total_mib": raw["memory_total_mib"],
                "compute_capability": raw["compute_capability"],
                "numa_node": numa,
                "cpu_affinity": list(cpus),
            }
        )

    nodes_src = ["sysfs"] if numa_nodes else []
    if not numa_nodes:
        derived = {}
        for gpu in gpus:
            if gpu["numa_node"] is not None:
                derived.setdefault(gpu["numa_node"], set()).update(gpu["cpu_affinity"])
        numa_nodes = [{"id": n, "cpus": sorted(c)} for n, c in sorted(derived.items())]
        if numa_nodes:
            nodes_src = ["gpu affinity"]
            node_dir = os.path.join(sysfs_root, "sys/devices/system/node")
            warnings.append(f"no NUMA nodes in sysfs ({node_dir}): nodes derived from the GPUs' affinity")

    indices = [g["index"] for g in gpus]
    links = _keyed(data["links"], indices)
    p2p = _keyed(data["p2p"], indices)
    if len(indices) > 1 and not links:
        warnings.append("GPU-to-GPU links unknown: placement cannot prefer tighter links")
    order = ["sysfs", "nvml", "nvidia-smi"]
    return {
        "gpus": gpus,
        "numa_nodes": numa_nodes,
        "links": links,
        "p2p": p2p,
        "sources": {
            "gpus": [src],
            "links": [src] if links else [],
            "p2p": [src] if p2p else [],
            "numa_node": [s for s in order if s in numa_src],
            "cpu_affinity": [s for s in order if s in cpu_src],
            "numa_nodes": nodes_src,
            "skipped": skipped,
        },
        "warnings": warnings,
        "reason": None,
    }
