# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Host readiness rules: the settings of a PCIe GPU host that decide the KV lane between its prefill and
decode GPUs and its stability, read by module_utils/host/readiness_look.py (the fact `host_readiness`), judged here.

What belongs in this file: the table RULES (one row per setting: its class, what it costs, the exact remedy, whether
the remedy needs a reboot) and the checks that find each row's subjects in the readings. Nothing here reads or
changes a host. A reading the host did not give (the fact's `unread`, a module not loaded, a value None) is never a
finding: it is reported once as not read.

Classes, each with its policy variable (fail | warn | off, as sglang_kv_p2p_policy; the variable table checks it):
  p2p        sglang_host_p2p_policy (fail)        settings that take the peer-to-peer KV lane away from a prefill
                                                  GPU -> decode GPU pair of the host, or make it hang
  stability  sglang_host_stability_policy (fail)  settings with a known lock-up risk on PCIe P2P hosts
  tuning     sglang_host_tuning_policy (warn)     settings that cost steadiness or start time, which a run can
                                                  change itself when asked (sglang_host_apply)

Sources: voipmonitor/rtx6kpro hardware/pcie-bandwidth.md (the RTX PRO 6000 community's P2P measurements and the
settings it calls required: uvm_disable_hmm=1, the IOMMU off or in passthrough, pcie_aspm=off pcie_port_pm=off, a
large BAR1); the NCCL user guide, troubleshooting.html (PCI Access Control Services, IOMMU); the kernel's
Documentation/admin-guide/kernel-parameters.txt.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import normalize_bus_id

POLICY_VARS = {
    "p2p": "sglang_host_p2p_policy",
    "stability": "sglang_host_stability_policy",
    "tuning": "sglang_host_tuning_policy",
}
DEFAULT_POLICIES = {"p2p": "fail", "stability": "fail", "tuning": "warn"}
APPLY_VAR = "sglang_host_apply"
REBOOT = "needs a reboot: the run never applies it"

# One row per setting. cost: what the finding means; remedy: the exact fix; reboot: whether the fix needs one
# (a run then only says so); apply: the item of sglang_host_apply that lets a run change it itself.
RULES = {
    "iommu": {
        "class": "p2p",
        "setting": "the IOMMU translates DMA",
        "cost": (
            "every peer-to-peer write between the prefill and decode GPUs goes through IOMMU translation: NCCL and "
            "UCX cuda_ipc peer-to-peer hang or crawl (NCCL troubleshooting: IOMMU; voipmonitor/rtx6kpro)"
        ),
        "remedy": (
            "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub; "
            "with intel_iommu=on or amd_iommu=on keep iommu=pt beside it), or turn VT-d / AMD-Vi off in the BIOS"
        ),
        "reboot": True,
    },
    "acs": {
        "class": "p2p",
        "setting": "PCIe ACS redirects peer-to-peer requests",
        "cost": (
            "ACS request/completion redirect sends every peer-to-peer request up to the root complex instead of "
            "across the bridge: the pair has no direct P2P lane, NCCL and UCX cuda_ipc may hang or be slow (NCCL "
            "troubleshooting: PCI Access Control Services)"
        ),
        "remedy": (
            "disable ACS on each bridge named: the BIOS setting (PCIe ACS / ACS Control: Disabled), or "
            "`setpci -s <bridge> ECAP_ACS+0x6.w=0000` from a oneshot unit at every boot before the workers start"
        ),
        "reboot": True,
    },
    "bar1": {
        "class": "p2p",
        "setting": "BAR1 smaller than the GPU's memory",
        "cost": (
            "a peer reaches this GPU's memory through its BAR1 window, which maps only part of it: peer-to-peer "
            "writes of the KV cache fall back to a staged lane (voipmonitor/rtx6kpro: BAR1 at 96 GB, not 256 MB)"
        ),
        "remedy": "turn on Above 4G Decoding and Resizable BAR in the BIOS (then nvidia-smi -q shows BAR1 Total >= FB)",
        "reboot": True,
    },
    "uvm_hmm": {
        "class": "stability",
        "setting": "nvidia_uvm runs with HMM (uvm_disable_hmm=N)",
        "cost": "lock-up risk: NCCL/CUDA peer-to-peer operations lock up with HMM on (voipmonitor/rtx6kpro)",
        "remedy": (
            "add `options nvidia_uvm uvm_disable_hmm=1` to /etc/modprobe.d/nvidia-uvm.conf, then reboot (or reload "
            "nvidia_uvm with no GPU process running)"
        ),
        "reboot": True,
    },
    "aspm": {
        "class": "stability",
        "setting": "PCIe ASPM can power links down",
        "cost": "lock-up risk: GPUs behind a link that went into a low-power state lock up (voipmonitor/rtx6kpro)",
        "remedy": "add pcie_aspm=off pcie_port_pm=off to the kernel command line (GRUB_CMDLINE_LINUX)",
        "reboot": True,
    },
    "persistence": {
        "class": "tuning",
        "setting": "persistence mode off",
        "cost": (
            "the driver tears the GPU down when its last process exits: every worker start pays the initialisation "
            "again, and a restart can find the GPU's settings reset"
        ),
        "remedy": "systemctl enable --now nvidia-persistenced, or add persistence to sglang_host_apply",
        "reboot": False,
        "apply": "persistence",
    },
    "numa_balancing": {
        "class": "tuning",
        "setting": "automatic NUMA balancing on",
        "cost": (
            "the kernel migrates the pages of workers already pinned to their GPU's NUMA node (numactl): page "
            "faults and stalls under load"
        ),
        "remedy": "kernel.numa_balancing = 0 in /etc/sysctl.d/, or add numa_balancing to sglang_host_apply",
        "reboot": False,
        "apply": "numa_balancing",
    },
    "governor": {
        "class": "tuning",
        "setting": "CPU frequency governor other than performance",
        "cost": "CPU clocks drop between bursts: the scheduler, tokenizer and router threads answer later",
        "remedy": "cpupower frequency-set -g performance (and at boot), or add governor to sglang_host_apply",
        "reboot": False,
        "apply": "governor",
    },
}
APPLY_ITEMS = sorted(row["apply"] for row in RULES.values() if "apply" in row)


def _gpu_bus(topology):
    """{GPU index: bus id as sysfs writes it} from the gpu_topology facts ('00000000:17:00.0' -> '0000:17:00.0')."""
    gpus = (topology or {}).get("gpus") or []
    return {g.get("index"): normalize_bus_id(g.get("pci_bus_id")) for g in gpus if g.get("pci_bus_id")}


def _pairs(prefill, decode):
    return [(p, d) for p in sorted(set(prefill)) for d in sorted(set(decode)) if p != d]


def check_iommu(r, ctx):
    cmdline = r.get("cmdline") or {}
    groups = r.get("iommu_groups") or {}
    mode = cmdline.get("iommu_mode")
    if not ctx["pairs"]:
        return []
    if mode == "translated" or (mode in (None, "unknown") and groups.get("translated")):
        params = " ".join(k if v is None else f"{k}={v}" for k, v in sorted((cmdline.get("params") or {}).items()))
        return [f"iommu mode {mode or 'not on the command line'}, group types {groups.get('types')}"
                + (f", kernel parameters: {params}" if params else "")]  # fmt: skip
    return []


def check_acs(r, ctx):
    """One finding for the redirecting bridges on the paths of the prefill -> decode pairs: the bridges of both GPUs
    below their lowest common bridge (with a switch, its downstream ports; without, every port up to the root). Its
    pairs: every pair whose path crosses one."""
    gpus = r.get("gpus") or {}
    acs = r.get("acs") or {}
    bus = ctx["bus"]
    above, pairs = {}, []
    for p, d in ctx["pairs"]:
        up = {g: (gpus.get(bus.get(g)) or {}).get("bridges") or [] for g in (p, d)}
        common = 0
        while common < min(len(up[p]), len(up[d])) and up[p][common] == up[d][common]:
            common += 1
        hit = False
        for gpu in (p, d):
            for bridge in up[gpu][common:]:
                ctl = acs.get(bridge) or {}
                if ctl.get("ReqRedir") or ctl.get("CmpltRedir"):
                    above.setdefault(bridge, set()).add(gpu)
                    hit = True
        if hit:
            pairs.append(f"{p}->{d}")
    if not above:
        return []
    listed = ", ".join(
        f"{bridge} ({'+'.join(k for k in ('ReqRedir', 'CmpltRedir') if acs[bridge].get(k))}, above GPU "
        f"{','.join(str(g) for g in sorted(gpus_above))})"
        for bridge, gpus_above in sorted(above.items())
    )
    return [{"subject": f"{len(above)} bridge(s) on the prefill->decode paths: {listed}; {len(pairs)} pair(s) "
                        "without a direct peer-to-peer lane", "pairs": pairs}]  # fmt: skip


def check_bar1(r, ctx):
    gpus = r.get("gpus") or {}
    out = []
    for index in sorted(set(ctx["prefill"]) | set(ctx["decode"])) if ctx["pairs"] else []:
        bar1 = (gpus.get(ctx["bus"].get(index)) or {}).get("bar1_total_mib")
        memory = ctx["memory"].get(index)
        if isinstance(bar1, int) and isinstance(memory, int) and bar1 < memory:
            out.append({"subject": f"GPU {index} BAR1 {bar1} MiB < its memory {memory} MiB", "gpus": [index]})
    return out


def check_uvm_hmm(r, ctx):
    value = ((r.get("modules") or {}).get("nvidia_uvm") or {}).get("uvm_disable_hmm")
    if ctx["pairs"] and str(value).strip().upper() in ("N", "0"):
        return [f"nvidia_uvm uvm_disable_hmm={value}"]
    return []


def check_aspm(r, ctx):
    params = (r.get("cmdline") or {}).get("params") or {}
    policy = r.get("aspm_policy")
    if not ctx["pairs"] or params.get("pcie_aspm") == "off" or policy in (None, "performance"):
        return []
    return [f"pcie_aspm policy {policy}, pcie_aspm={params.get('pcie_aspm', 'not set')} on the kernel command line"]


def check_persistence(r, ctx):
    gpus = r.get("gpus") or {}
    off = [
        i
        for i in sorted(set(ctx["prefill"]) | set(ctx["decode"]))
        if str((gpus.get(ctx["bus"].get(i)) or {}).get("persistence_mode") or "").lower() == "disabled"
    ]
    return [f"GPU(s) {','.join(str(i) for i in off)} persistence mode Disabled"] if off else []


def check_numa_balancing(r, ctx):
    value = r.get("numa_balancing")
    return [f"kernel.numa_balancing = {value}"] if isinstance(value, int) and value != 0 else []


def check_governor(r, ctx):
    other = {g: n for g, n in (r.get("governors") or {}).items() if g != "performance"}
    return [", ".join(f"{n} CPU(s) {g}" for g, n in sorted(other.items()))] if other else []


CHECKS = {
    "iommu": check_iommu,
    "acs": check_acs,
    "bar1": check_bar1,
    "uvm_hmm": check_uvm_hmm,
    "aspm": check_aspm,
    "persistence": check_persistence,
    "numa_balancing": check_numa_balancing,
    "governor": check_governor,
}


def message(host, key, subject):
    row = RULES[key]
    var = POLICY_VARS[row["class"]]
    when = f" ({REBOOT})" if row["reboot"] else ""
    return (
        f"{host}: {row['setting']}: {subject}. Costs: {row['cost']}. Fix: {row['remedy']}{when}. Or set {var}: warn "
        "(or off) to accept it"
    )


def findings(readiness, specs, topology=None):
    """[{id, class, subject, and pairs ("P->D") or gpus where the finding is about those}] of a host's readiness
    readings: every row of RULES whose check finds a subject. The p2p and stability rows look only where the host holds
    a prefill and a decode GPU (an on-host KV lane)."""
    if not isinstance(readiness, dict):
        return []
    prefill = [g for s in specs or [] if s.get("role") == "prefill" for g in s.get("gpus") or []]
    decode = [g for s in specs or [] if s.get("role") == "decode" for g in s.get("gpus") or []]
    ctx = {
        "prefill": prefill,
        "decode": decode,
        "pairs": _pairs(prefill, decode),
        "bus": _gpu_bus(topology),
        "memory": {g.get("index"): g.get("memory_total_mib") for g in (topology or {}).get("gpus") or []},
    }
    return [
        {"id": key, "class": RULES[key]["class"], **(found if isinstance(found, dict) else {"subject": found})}
        for key, check in CHECKS.items()
        for found in check(readiness, ctx)
    ]


def judge(host, readiness, specs, topology=None, *, policies=None, apply=()):
    """(warnings, problems, findings) of one host as the policies say: a finding of a class whose policy is fail is a
    problem, warn a warning, off nothing; one that APPLY (sglang_host_apply) lets the run change is a line saying
    that this run sets it. FINDINGS: the ones not switched off, with their message (the KV probe
    names the p2p ones when its lane is not peer-to-peer)."""
    warnings, problems, kept = [], [], []
    for found in findings(readiness, specs, topology):
        policy = (policies or {}).get(found["class"]) or DEFAULT_POLICIES[found["class"]]
        if policy == "off":
            continue
        item = RULES[found["id"]].get("apply")
        if item in (apply or ()):
            warnings.append(f"{host}: {RULES[found['id']]['setting']}: {found['subject']}: this run sets it "
                            f"({APPLY_VAR}: {item})")  # fmt: skip
            continue
        text = message(host, found["id"], found["subject"])
        kept.append({**found, "message": text})
        (problems if policy == "fail" else warnings).append(text)
    unread = (readiness or {}).get("unread") if isinstance(readiness, dict) else None
    if unread and specs:
        warnings.append(
            f"{host}: host readiness not read: "
            + "; ".join(f"{what} ({why})" for what, why in sorted(unread.items()))
            + ". The rules that need these readings were not applied"
        )
    return warnings, problems, kept


__all__ = ["APPLY_ITEMS", "DEFAULT_POLICIES", "POLICY_VARS", "RULES", "findings", "judge"]
