# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Parsers of a GPU host's readiness facts: /proc/cmdline (IOMMU parameters), /sys/kernel/iommu_groups/*/type, the
nvidia kernel modules' parameters (/sys/module/*/parameters, /proc/driver/nvidia/params), `nvidia-smi -q`, the ACS
Control register in a bridge's PCI config space, and sysctl-like readings (numa balancing, THP, CPU governor).

Pure functions of text or bytes: no I/O here and nothing here changes the host; readiness_look.py reads the files
and passes their contents in. Real captures: tests/fixtures/host_readiness/.
"""

import re

IOMMU_PARAMS = (
    "intel_iommu",
    "amd_iommu",
    "iommu",
    "iommu.passthrough",
    "iommu.strict",
    "pcie_aspm",
    "pcie_acs_override",
)


def kernel_cmdline(text):
    """/proc/cmdline -> {param: value (None for a bare flag)} for IOMMU_PARAMS present, plus iommu_mode.

    iommu_mode from the cmdline alone (the kernel's Documentation/admin-guide/kernel-parameters.txt): "off" where
    intel_iommu=off, amd_iommu=off or iommu=off; "passthrough" where iommu=pt or iommu.passthrough=1 (DMA identity
    mapped: devices bypass translation); "translated" where iommu.passthrough=0 or iommu=nopt; "unknown" otherwise
    (the build default CONFIG_IOMMU_DEFAULT_* decides, read it from the groups' type instead). The last occurrence
    of a parameter wins, as in the kernel's parser.
    """
    found = {}
    for word in (text or "").split():
        key, sep, value = word.partition("=")
        if key in IOMMU_PARAMS:
            found[key] = value if sep else None
    values = {
        found.get("intel_iommu"),
        found.get("amd_iommu"),
        found.get("iommu"),
    }
    if "off" in values:
        mode = "off"
    elif found.get("iommu") == "pt" or found.get("iommu.passthrough") in ("1", "on", "y", "Y"):
        mode = "passthrough"
    elif found.get("iommu") == "nopt" or found.get("iommu.passthrough") in ("0", "off", "n", "N"):
        mode = "translated"
    else:
        mode = "unknown"
    return {"params": found, "iommu_mode": mode}


# /sys/kernel/iommu_groups/<n>/type (drivers/iommu/iommu.c iommu_group_show_type): "DMA" and "DMA-FQ" translate,
# "identity" passes through, "blocked" allows no DMA.
TRANSLATING_TYPES = ("DMA", "DMA-FQ")


def iommu_group_types(mapping):
    """{group: type text} -> {groups, types (sorted), translated (any group translating)}."""
    types = sorted({(v or "").strip() for v in (mapping or {}).values()} - {""})
    return {
        "groups": len(mapping or {}),
        "types": types,
        "translated": any(t in TRANSLATING_TYPES for t in types),
    }


def module_params(text):
    """`== module` headers followed by `param=value` lines, and `== /proc/driver/nvidia/params` followed by
    `Key: value` lines -> {module or path: {param: raw value string}}."""
    out = {}
    current = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("== "):
            current = line[3:].strip()
            out.setdefault(current, {})
        elif current is not None and line:
            sep = "=" if "=" in line and not re.match(r"^\w+:\s", line) else ":"
            key, _sep, value = line.partition(sep)
            out[current][key.strip()] = value.strip()
    return out


def _smi_int(value):
    m = re.match(r"(\d+)", value or "")
    return int(m.group(1)) if m else None


def nvidia_smi_q(text):
    """`nvidia-smi -q` -> {bus id: {persistence_mode, bar1_total_mib, ecc_mode_current, max_sm_clock_mhz,
    pcie_gen_current, pcie_width_current}}; a value missing from the text stays None."""
    gpus = {}
    gpu = None
    path = []
    for line in (text or "").splitlines():
        m = re.match(r"^GPU (\S+)", line)
        if m:
            gpu = gpus.setdefault(m.group(1), dict.fromkeys(_SMI_FIELDS.values()))
            path = []
            continue
        if gpu is None or not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 4
        key, sep, value = line.strip().partition(" : ")
        key = key.strip()
        del path[depth - 1 :]
        path.append(key)
        field = _SMI_FIELDS.get(tuple(path[-3:])) or _SMI_FIELDS.get(tuple(path[-2:]))
        if sep and field:
            gpu[field] = value.strip()
    for gpu in gpus.values():
        for field in ("bar1_total_mib", "max_sm_clock_mhz", "pcie_gen_current", "pcie_width_current"):
            gpu[field] = _smi_int(gpu[field])
    return gpus


# section path (as indented in `nvidia-smi -q`) -> field
_SMI_FIELDS = {
    ("Persistence Mode",): "persistence_mode",
    ("BAR1 Memory Usage", "Total"): "bar1_total_mib",
    ("ECC Mode", "Current"): "ecc_mode_current",
    ("Max Clocks", "SM"): "max_sm_clock_mhz",
    ("PCIe Generation", "Current"): "pcie_gen_current",
    ("Link Width", "Current"): "pcie_width_current",
}


def numa_balancing(text):
    """`sysctl kernel.numa_balancing` output (or the bare /proc/sys value) -> int, None where absent."""
    m = re.search(r"^kernel\.numa_balancing\s*=\s*(\d+)", text or "", re.M) or re.fullmatch(r"\s*(\d+)\s*", text or "")
    return int(m.group(1)) if m else None


def thp_selected(text):
    """/sys/kernel/mm/transparent_hugepage/enabled (`always [madvise] never`) -> the bracketed choice, or None."""
    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else None


def cpu_governor(text):
    """scaling_governor text -> its name; None where the file is absent (empty text or a `No such file` error)."""
    value = (text or "").strip()
    if not value or "No such file" in value:
        return None
    return value.rpartition("=")[2].strip() or None


# ACS Control register bits, lowest first, named as `lspci -vvv` prints them in ACSCtl (linux
# include/uapi/linux/pci_regs.h: PCI_ACS_SV 0x01, PCI_ACS_TB 0x02, PCI_ACS_RR 0x04, PCI_ACS_CR 0x08, PCI_ACS_UF 0x10,
# PCI_ACS_EC 0x20, PCI_ACS_DT 0x40).
ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
PCI_CFG_SPACE_SIZE = 0x100  # where the extended capabilities begin (pci_regs.h)
PCI_CFG_SPACE_EXP_SIZE = 0x1000
PCI_EXT_CAP_ID_ACS = 0x0D
PCI_ACS_CTRL = 0x06


def pci_config_acs(data):
    """A PCI device's config space (the bytes of sysfs `config`) -> its ACS Control flags {flag: bool} (ACS_FLAGS),
    or None where it has no ACS capability or the bytes stop before the extended space (0x100 + a header).

    PCI Express Base Specification, section 7.7.8 "ACS Extended Capability" (7.16 in 3.x): extended capabilities
    form a list from offset 0x100 (section 7.6.3), each with a 32-bit little-endian header - capability id bits 0-15,
    version 16-19, next offset 20-31; the ACS capability (id 0x000D) holds the 16-bit ACS Control register at +6.
    Linux include/uapi/linux/pci_regs.h: PCI_EXT_CAP_ID_ACS 0x0d, PCI_ACS_CTRL 0x06, PCI_EXT_CAP_NEXT (header >> 20)
    & 0xffc; the walk mirrors drivers/pci/pci.c pci_find_next_ext_capability (a header of 0 ends it, a next offset
    below 0x100 ends it, at most (0x1000 - 0x100) / 8 steps, so a looping list ends too). An unprivileged read of
    sysfs `config` gets only the first 64 bytes (drivers/pci/pci-sysfs.c pci_read_config): None then, too.
    """
    data = bytes(data or b"")
    if len(data) < PCI_CFG_SPACE_SIZE + 4:
        return None
    pos = PCI_CFG_SPACE_SIZE
    for _step in range((PCI_CFG_SPACE_EXP_SIZE - PCI_CFG_SPACE_SIZE) // 8):
        if pos + 4 > len(data):
            return None
        header = int.from_bytes(data[pos : pos + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            at = pos + PCI_ACS_CTRL
            if at + 2 > len(data):
                return None
            ctrl = int.from_bytes(data[at : at + 2], "little")
            return {name: bool(ctrl & (1 << bit)) for bit, name in enumerate(ACS_FLAGS)}
        pos = (header >> 20) & 0xFFC
        if pos < PCI_CFG_SPACE_SIZE:
            return None
    return None
