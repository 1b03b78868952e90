# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Reads a GPU host's readiness facts: the files under a host root and `nvidia-smi -q`, parsed by
readiness.py. Reads only: nothing here writes or changes anything on the host.

The root is the host's `/` (the same root as gpu_topology's sysfs_root: the sandbox keeps a fake one under
/opt/fakegpu/sysroot); the command runner is injected (AnsibleModule.run_command in the modules host_readiness and
host_look, a fake in tests/unit/host/test_host_readiness_look.py).

The facts, which plan/readiness_rules.py reads (keep the keys):
  root            the root read
  cmdline         readiness.kernel_cmdline of proc/cmdline ({params, iommu_mode}), None when unread
  iommu_groups    readiness.iommu_group_types of sys/kernel/iommu_groups/*/type ({groups: 0, types: [], translated:
                  False} without the directory: no IOMMU)
  modules         {"nvidia": {param: raw}, "nvidia_uvm": {...}, "/proc/driver/nvidia/params": {...}} from
                  sys/module/<m>/parameters/* and proc/driver/nvidia/params; a module not loaded (no sys/module/<m>):
                  its key absent. The nvidia module declares its NVreg_* options without a sysfs file (open-gpu-kernel-
                  modules nv-linux.h NV_MODULE_PARAMETER: module_param(x, int, 0)), so "nvidia" is {} on a real host
                  and its options are read from /proc/driver/nvidia/params
  aspm_policy     the bracketed choice of sys/module/pcie_aspm/parameters/policy, None when absent
  gpus            {bus id: {persistence_mode, bar1_total_mib, ecc_mode_current, max_sm_clock_mhz, pcie_gen_current,
                  pcie_width_current, bridges}} for every NVIDIA display/3D-class PCI function in sysfs and every GPU
                  of `nvidia-smi -q`; bridges: the PCI bridges above the GPU in its resolved sysfs path, root port
                  first, nearest last; smi fields None where nvidia-smi did not give them
  acs             {bridge bus id: {flag: bool}} (readiness.ACS_FLAGS) for the bridges above a GPU that have the ACS
                  capability in their config space
  numa_balancing  int of proc/sys/kernel/numa_balancing, None when absent
  thp             the bracketed choice of sys/kernel/mm/transparent_hugepage/enabled, None when absent
  governors       {governor: CPU count} of sys/devices/system/cpu/cpu*/cpufreq/scaling_governor ({} without cpufreq)
  unread          {what: why} for what should have been read and was not (a file, a bridge's config space
                  cut short by an unprivileged read, nvidia-smi)
"""

import glob
import os
import re

from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import normalize_bus_id
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_smi import (
    NVIDIA_SMI_DIRS,
    find_nvidia_smi,
)

SMI_FIELDS = (
    "persistence_mode",
    "bar1_total_mib",
    "ecc_mode_current",
    "max_sm_clock_mhz",
    "pcie_gen_current",
    "pcie_width_current",
)
NVIDIA_VENDOR = "0x10de"
MODULES = ("nvidia", "nvidia_uvm")
PROC_PARAMS = "/proc/driver/nvidia/params"
_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _read_text(root, rel, unread=None):
    """The text of <root>/<rel>, None when it cannot be read (noted in UNREAD under REL when UNREAD is given)."""
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        if unread is not None:
            unread[rel] = exc.strerror or str(exc)
        return None


def _params_dir(directory):
    """{file name: stripped text} of the readable files of DIRECTORY (a module's parameters/); unreadable -> left out
    and returned as the second value {name: why}."""
    found, failed = {}, {}
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), "*"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                found[os.path.basename(path)] = handle.read().strip()
        except OSError as exc:
            failed[os.path.basename(path)] = exc.strerror or str(exc)
    return found, failed


def modules(root, unread):
    """The "modules" fact: loaded modules' sysfs parameters and /proc/driver/nvidia/params."""
    out = {}
    for name in MODULES:
        base = os.path.join(root, "sys/module", name)
        if not os.path.isdir(base):
            continue
        params, failed = _params_dir(os.path.join(base, "parameters"))
        out[name] = params
        for param, why in failed.items():
            unread[f"sys/module/{name}/parameters/{param}"] = why
    text = _read_text(root, PROC_PARAMS.lstrip("/"), unread if "nvidia" in out else None)
    if text is not None:
        out[PROC_PARAMS] = readiness.module_params(f"== {PROC_PARAMS}\n{text}").get(PROC_PARAMS, {})
    return out


def iommu_groups(root):
    """{group: type text} of <root>/sys/kernel/iommu_groups/*/type, through readiness.iommu_group_types."""
    mapping = {}
    for path in glob.glob(os.path.join(glob.escape(os.path.join(root, "sys/kernel/iommu_groups")), "*", "type")):
        mapping[os.path.basename(os.path.dirname(path))] = _read_text(os.path.dirname(path), "type")
    return readiness.iommu_group_types(mapping)


def bridges_above(device_path):
    """The PCI bridges above a device, root port first, nearest last, from its resolved sysfs path
    (.../devices/pci0000:16/0000:16:01.0/0000:17:00.0 -> ["0000:16:01.0"])."""
    parts = os.path.normpath(device_path).split(os.sep)
    return [part for part in parts[:-1] if _BDF_RE.match(part)]


def sysfs_gpus(root):
    """{bus id: bridges above it} of the NVIDIA display/3D-class functions (vendor 0x10de, class 0x03xxxx) under
    <root>/sys/bus/pci/devices."""
    found = {}
    devices = os.path.join(root, "sys/bus/pci/devices")
    for link in sorted(glob.glob(os.path.join(glob.escape(devices), "*"))):
        vendor = (_read_text(link, "vendor") or "").strip().lower()
        klass = (_read_text(link, "class") or "").strip().lower()
        if vendor != NVIDIA_VENDOR or not klass.startswith("0x03"):
            continue
        bus_id = normalize_bus_id(os.path.basename(link))
        if bus_id:
            found[bus_id] = bridges_above(os.path.realpath(link))
    return found


def bridge_acs(root, bridge, unread):
    """ACS control flags of BRIDGE from its config space, None without the capability or when unread (noted)."""
    rel = f"sys/bus/pci/devices/{bridge}/config"
    try:
        with open(os.path.join(root, rel), "rb") as handle:
            data = handle.read()
    except OSError as exc:
        unread[rel] = exc.strerror or str(exc)
        return None
    if len(data) < readiness.PCI_CFG_SPACE_SIZE + 4:
        unread[rel] = (
            f"{len(data)} bytes, without the extended config space where ACS is (read as root: an unprivileged read "
            "gets the first 64 bytes)"
        )
        return None
    return readiness.pci_config_acs(data)


def smi(run, nvidia_smi, unread):
    """readiness.nvidia_smi_q of `nvidia-smi -q` keyed by normalized bus id; {} (noted) when it cannot be run."""
    path = nvidia_smi or find_nvidia_smi()
    if not path:
        unread["nvidia-smi -q"] = "nvidia-smi not found on PATH nor in " + ", ".join(NVIDIA_SMI_DIRS)
        return {}
    try:
        rc, out, err = run([path, "-q"])
    except OSError as exc:
        unread["nvidia-smi -q"] = f"{path}: {exc}"
        return {}
    if rc != 0:
        first = next((line.strip() for line in (out or err or "").splitlines() if line.strip()), "no output")
        unread["nvidia-smi -q"] = f"{path} -q exited {rc}: {first}"
        return {}
    return {normalize_bus_id(bus) or bus: fields for bus, fields in readiness.nvidia_smi_q(out).items()}


def governors(root):
    """{governor: CPU count} of the CPUs' cpufreq scaling_governor files."""
    counts = {}
    pattern = os.path.join(glob.escape(os.path.join(root, "sys/devices/system/cpu")), "cpu*", "cpufreq")
    for directory in glob.glob(pattern):
        name = readiness.cpu_governor(_read_text(directory, "scaling_governor"))
        if name:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def look(root="/", run=None, nvidia_smi=None):
    """The readiness facts of the host under ROOT (the module docstring lists them). RUN(argv) -> (rc, stdout,
    stderr) runs nvidia-smi (None: not run, noted in unread); NVIDIA_SMI its path (None: found on PATH or in
    NVIDIA_SMI_DIRS)."""
    unread = {}
    cmdline = _read_text(root, "proc/cmdline", unread)
    in_sysfs = sysfs_gpus(root)
    if run is None:
        unread["nvidia-smi -q"] = "no command runner"
        from_smi = {}
    else:
        from_smi = smi(run, nvidia_smi, unread)
    gpus = {}
    for bus_id in sorted(set(in_sysfs) | set(from_smi)):
        fields = from_smi.get(bus_id) or {}
        gpus[bus_id] = {name: fields.get(name) for name in SMI_FIELDS}
        gpus[bus_id]["bridges"] = in_sysfs.get(bus_id, [])
        if bus_id not in in_sysfs:
            unread[f"sys/bus/pci/devices/{bus_id}"] = "nvidia-smi reports this GPU; sysfs shows no such NVIDIA function"
    acs = {}
    for bridge in sorted({b for g in gpus.values() for b in g["bridges"]}):
        flags = bridge_acs(root, bridge, unread)
        if flags is not None:
            acs[bridge] = flags
    numa = _read_text(root, "proc/sys/kernel/numa_balancing")
    thp = _read_text(root, "sys/kernel/mm/transparent_hugepage/enabled")
    aspm = _read_text(root, "sys/module/pcie_aspm/parameters/policy")
    return {
        "root": root,
        "cmdline": readiness.kernel_cmdline(cmdline) if cmdline is not None else None,
        "iommu_groups": iommu_groups(root),
        "modules": modules(root, unread),
        "aspm_policy": readiness.thp_selected(aspm) if aspm is not None else None,
        "gpus": gpus,
        "acs": acs,
        "numa_balancing": readiness.numa_balancing(numa) if numa is not None else None,
        "thp": readiness.thp_selected(thp) if thp is not None else None,
        "governors": governors(root),
        "unread": unread,
    }


def read_for(module, options):
    """look() as a module calls it (the modules host_readiness and host_look share this): OPTIONS holds root and
    nvidia_smi_path; MODULE is the AnsibleModule (run_command with LC_ALL=C, get_bin_path for nvidia-smi).
    Returns (facts, error): error names an nvidia_smi_path that is not an executable file (facts None)."""
    path = options.get("nvidia_smi_path")
    if path is None:
        path = module.get_bin_path("nvidia-smi", opt_dirs=NVIDIA_SMI_DIRS)
    elif not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None, f"nvidia_smi_path {path} is not an executable file"

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    return look(options.get("root") or "/", run=run, nvidia_smi=path), None
