# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Parsers of nvidia-smi text (query csv, `topo -m`, `topo -p2p`) and of CPU lists and PCI bus ids.

Part of the GPU topology code (facade: gpu_topology.py). Pure functions over strings; this file is the
leaf the other gpu_topology_* files import, so the shared NoGpu exception lives here too.
"""

from __future__ import annotations

import re

# One cell of `nvidia-smi topo -m`'s matrix, the link between two devices (X: the device itself), and a row or
# column label (a GPU, a NIC, or an RDMA device that newer drivers name in the header). Where a copy of the matrix
# lost its column separators, cells and labels run together: the _RUN patterns take them apart.
LINKS = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC"
DEVICES = r"GPU\d+|NIC\d+|mlx\d+_\d+"
LINK_RE = re.compile(LINKS)
_LINKS_RUN_RE, _LINK_PREFIX_RE = re.compile(rf"(?:{LINKS})+"), re.compile(rf"^((?:{LINKS})+)(.+)$")
_DEVICE_RE, _DEVICES_RUN_RE = re.compile(DEVICES), re.compile(rf"(?:{DEVICES})+")
_GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
# ESC-introduced sequences, and the "[4m" / "[0m" that copy-paste leaves when ESC is lost.
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\[[0-9][0-9;]*m")
_CPULIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
_BUS_RE = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


class NoGpu(Exception):
    """A source answered, and it has no GPU to report (or it failed): the message says why."""


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
    """[0, 1, 2, 5] -> '0-2,5' (for messages, and the units' CPU sets)."""
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
    The steps: topo_rows (the header and the GPU rows), topo_columns (the device and affinity columns of the
    header), row_cells (a row's link and affinity cells), row_affinity (the affinity cells by column).
    """
    header, rows = topo_rows(text)
    columns, affinity_columns = topo_columns(header)
    warnings = []
    gpus, links, cpu_aff, numa_aff = [], {}, {}, {}
    for tokens in rows:
        idx = int(_GPU_LABEL_RE.match(tokens[0]).group(1))
        link_cells, aff_cells = row_cells(tokens[1:])
        aff, aff_warnings = row_affinity(idx, aff_cells, affinity_columns)
        warnings += aff_warnings
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
        for found, column, what in ((cpu_aff, "CPU Affinity", "CPU list"), (numa_aff, "NUMA Affinity", "node list")):
            try:
                found[idx] = parse_cpulist(aff.get(column)) or None
            except ValueError:
                warnings.append(f"topo -m row GPU{idx}: {column} {aff.get(column)!r} is not a {what}")
                found[idx] = None
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


def _is_row(line_tokens):
    """Whether the tokens of a line make a GPU row: a GPU label, then a link cell (or one merged with others)."""
    first = _split_merged([line_tokens[0]], _DEVICES_RUN_RE, _DEVICE_RE)
    second = line_tokens[1] if len(line_tokens) > 1 else ""
    return (
        bool(_GPU_LABEL_RE.match(first[0]))
        and len(first) == 1
        and len(line_tokens) > 1
        and (_is_link(second) or bool(_LINK_PREFIX_RE.match(second)) or bool(_LINKS_RUN_RE.fullmatch(second)))
    )


def topo_rows(text):
    """(header line, [tokens of each GPU row]) of the matrix, up to its legend; ValueError without a header."""
    header = None
    rows = []
    for line in (strip_ansi(raw).rstrip() for raw in (text or "").splitlines()):
        if line.strip().startswith("Legend") or line.strip().startswith("NIC Legend"):
            break
        tokens = line.split()
        if not tokens:
            continue
        is_row = _is_row(tokens)
        if header is None and not is_row and (_DEVICE_RE.match(tokens[0]) or "Affinity" in line):
            header = line
            continue
        if header is not None and is_row:
            rows.append(tokens)
    if header is None:
        raise ValueError("no matrix header (GPU0 ...) in nvidia-smi topo -m output")
    return header, rows


def topo_columns(header):
    """(device columns, affinity columns) of the header: the device columns, then the affinity columns that this
    driver prints."""
    positions = sorted((header.find(name), name) for name in _AFFINITY_COLUMNS if name in header)
    affinity_columns = [name for _column, name in positions]
    device_part = header[: positions[0][0]] if positions else header
    return _split_merged(device_part.split(), _DEVICES_RUN_RE, _DEVICE_RE), affinity_columns


def row_cells(tokens):
    """(link cells, affinity cells) of a row's tokens after its label: merged cells split, the trailing non-link
    cells the affinity cells."""
    cells = []
    for tok in tokens:
        prefix = _LINK_PREFIX_RE.match(tok)
        if _LINKS_RUN_RE.fullmatch(tok):
            cells.extend(LINK_RE.findall(tok))
        elif prefix and not _is_link(tok):
            # 'SYS0-55,112-167': a link cell merged into the affinity cell after it
            cells.extend(LINK_RE.findall(prefix.group(1)))
            cells.append(prefix.group(2))
        else:
            cells.append(tok)
    cut = len(cells)
    while cut > 0 and not _is_link(cells[cut - 1]):
        cut -= 1
    return cells[:cut], cells[cut:]


def row_affinity(idx, aff_cells, affinity_columns):
    """({column: cell}, warnings) of GPU IDX's affinity cells, read from the row's end; where cells are merged or
    missing, the CPU list is the first cell that looks like one, the NUMA nodes the next."""
    k = len(affinity_columns)
    warnings = []
    if len(aff_cells) != k:
        names = ", ".join(affinity_columns) or "none"
        warnings.append(
            f"topo -m row GPU{idx}: {len(aff_cells)} affinity cells for {k} columns ({names}); read from the row's end"
        )
    aff = dict(_pairs(affinity_columns, aff_cells))
    if k and len(aff_cells) != k and aff_cells:
        aff = {}
        rest = list(aff_cells)
        if "CPU Affinity" in affinity_columns and rest and (_CPULIST_RE.match(rest[0]) or rest[0] == "N/A"):
            aff["CPU Affinity"] = rest.pop(0)
        if "NUMA Affinity" in affinity_columns and rest:
            aff["NUMA Affinity"] = rest.pop(0)
    return aff, warnings


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
