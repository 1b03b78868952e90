# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Preflight rules for the KV cache path between prefill and decode. Pure functions that return messages; each
names the GPUs or the variable, what it means for the KV transfer, and the fix.

  p2p_problems(p2p_pairs, prefill_gpus, decode_gpus)  a prefill GPU that cannot write a decode GPU's
                                                      memory peer-to-peer (gpu_topology's p2p_pairs)
  transport_env_problems(flags, env, role)            worker settings that push NIXL off GPU peer-to-peer
                                                      or that NIXL ignores
  kv_mismatches(contracts, keys)                      the KV contract flags on which prefill and decode of the
                                                      deployment disagree (plan.pd_problems words them)

The numbers in the messages were measured on a lent 2x H200 (NV18), nixl 1.5.1 + nixl-cu13 1.5.1,
two processes, 1 GiB VRAM->VRAM WRITE: 270 GB/s over cuda_ipc; 0.48 GB/s over tcp/lo with
UCX_TLS=^cuda_ipc; 0.47 GB/s with expandable segments - and no error in either slow case. Re-measured
on one H200 (two processes on one GPU) on 2026-12-01: tests/fixtures/kv_transport/h200-1x.
"""

# nvidia-smi topo -p2p's legend (NVML's nvmlGpuP2PStatus_t values in gpu_topology_nvml.NVML_P2P).
P2P_MEANING = {
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by the driver's registry key",
    "U": "unknown",
}
P2P_POLICY_VAR = "sglang_kv_p2p_policy"
SLOW = (
    "UCX then falls back to a TCP or host-staged lane: measured 0.47 GB/s instead of 270 GB/s over cuda_ipc, "
    "575x slower, and nothing fails - decode just starves"
)


def _gpu_list(gpus):
    return ",".join(str(g) for g in gpus)


def p2p_problems(p2p_pairs, prefill_gpus, decode_gpus, host=None):
    """Messages for each prefill -> decode GPU pair whose peer-to-peer WRITE is not OK.

    p2p_pairs: gpu_topology's facts `p2p_pairs` ({'i-j': {read, write}}). The write status decides
    (sglang's NIXL path WRITEs KV from prefill into decode memory); when only the read status is known,
    it stands in. Pairs the facts do not know are not reported: the transport probe after deploy
    (disagg.sglang.kv_transport) is the proof there. A GPU that is in both lists (one GPU, two workers)
    is no pair. One message per status, listing its pairs.
    """
    by_code = {}
    for p in sorted(set(prefill_gpus or [])):
        for d in sorted(set(decode_gpus or [])):
            if p == d:
                continue
            status = (p2p_pairs or {}).get(f"{p}-{d}") or {}
            code, which = status.get("write"), "write"
            if code is None:
                code, which = status.get("read"), "read (write unknown)"
            if code is None or code in ("OK", "X"):
                continue
            by_code.setdefault((code, which), []).append(f"{p}->{d}")
    where = f"{host}: " if host else ""
    out = []
    for (code, which), pairs in sorted(by_code.items()):
        out.append(
            f"{where}prefill GPU -> decode GPU peer-to-peer {which} is {code} "
            f"({P2P_MEANING.get(code, 'not OK')}) for {len(pairs)} pair(s): {', '.join(pairs)}. "
            f"The KV cache cannot be written GPU to GPU by cuda_ipc; {SLOW}. Place prefill and decode on GPUs "
            "that reach each other (same PCIe switch or NUMA node, or NVLink: see ansible_facts.gpu_topology."
            f"p2p_pairs), give the KV transfer an RDMA NIC (UCX_NET_DEVICES in sglang_<role>_extra_env), or set "
            f"{P2P_POLICY_VAR}: warn to accept the slow path"
        )
    return out


def _flag(flags, full, shortest):
    """(key, value) of a flag as argparse would take it: the full name or an unambiguous prefix of it."""
    found = None
    for key, value in (flags or {}).items():
        name = str(key).lstrip("-").replace("_", "-")
        if name == full or (full.startswith(name) and name.startswith(shortest)):
            found = (key, value)  # argparse: the last occurrence wins
    return found


def _expandable(value):
    """True when a PyTorch allocator config turns expandable segments on (`expandable_segments:True`)."""
    for option in str(value or "").split(","):
        key, _sep, val = option.partition(":")
        if key.strip() == "expandable_segments" and val.strip().lower() in ("true", "1"):
            return True
    return False


def transport_env_problems(flags, env, role="<role>"):
    """Messages for worker settings that break or bypass NIXL's GPU peer-to-peer KV path.

    flags: the worker's merged flags (name -> value, as sglang_flags.merge_flags gives them);
    env: the worker's environment. Only the nixl transfer backend is checked (sglang's default is mooncake).
    """
    backend = _flag(flags, "disaggregation-transfer-backend", "disaggregation-t")
    if backend is None or str(backend[1]).strip().lower() != "nixl":
        return []
    out = []
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        value = (env or {}).get(name)
        if _expandable(value):
            out.append(
                f"sglang_{role}_extra_env sets {name}={value} with the nixl transfer backend: expandable segments "
                "make torch allocate the KV cache as virtual memory (cuMemCreate), which UCX's cuda_ipc in NIXL 1.5.1 "
                "cannot map (nixl PR #1755), so every KV transfer is emulated over TCP - measured 0.47 GB/s instead "
                f"of 270 GB/s, with no error. Remove expandable_segments from {name} for the {role} workers"
            )
    ib = _flag(flags, "disaggregation-ib-device", "disaggregation-i")
    if ib is not None and str(ib[1]).strip() not in ("", "None"):
        ucx_dev = (env or {}).get("UCX_NET_DEVICES", "")
        hint = (
            f" (UCX_NET_DEVICES={ucx_dev} in the environment is what NIXL uses)"
            if ucx_dev
            else "; transfers can go over another NIC or TCP, or hang until the 300 s bootstrap timeout"
        )
        out.append(
            f"sglang_{role}_extra_flags sets --{str(ib[0]).lstrip('-')}={ib[1]} with the nixl transfer backend, "
            f"which ignores it in sglang 0.5.23 (sglang PR #28737): NIXL's UCX chooses devices itself{hint}. "
            f"Remove the flag and set UCX_NET_DEVICES (e.g. {ib[1]}:1) in sglang_{role}_extra_env instead"
        )
    return out


def p2p_policy_problems(policy):
    """The policy variable itself: fail (default), warn or off."""
    if policy in ("fail", "warn", "off"):
        return []
    return [f"{P2P_POLICY_VAR} is {policy!r}; use fail (refuse), warn (print and go on) or off"]


__all__ = ["p2p_policy_problems", "p2p_problems", "transport_env_problems"]


def kv_mismatches(contracts, keys):
    """Messages for each KV contract flag on which the given worker contracts disagree (empty: all agree)."""
    messages = []
    for key in keys:
        seen = {}
        for contract in contracts:
            where = f"{contract['unit']}@{contract.get('host', '?')}"
            seen.setdefault(contract["values"].get(key), []).append(where)
        if len(seen) > 1:
            parts = "; ".join(
                f"{value if value is not None else 'unset'} on {', '.join(units)}" for value, units in seen.items()
            )
            messages.append(f"--{key} differs between PD workers: {parts}")
    return messages
