#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)

DOCUMENTATION = r"""
---
module: kv_transport
short_description: Prove the KV cache path between a prefill GPU and a decode GPU (NIXL over UCX)
version_added: "0.2.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.topology]
description:
  - Runs two short processes with the serving venv's Python, one holding a buffer on a prefill GPU and one
    on a decode GPU, and WRITEs O(mib) MiB from the first into the second with NIXL's UCX backend, as
    sglang's NIXL transfer backend pushes the KV cache. C(UCX_PROTO_INFO=y) makes UCX print the protocol it
    chose; the module reads the lane of the GPU-to-GPU put from that table (C(cuda_ipc/cuda) is zero-copy
    peer-to-peer, C(tcp/lo) is software emulation over TCP), the GB/s (median of O(iters) timed writes after
    one warm-up) and counts the bytes that arrived.
  - Fails, with the lane, the GB/s and the likely cause, when the lane is TCP, the speed is below
    O(min_gbps), fewer bytes arrived than were written, or UCX printed no table for the put. Nothing fails
    by itself on that slow path otherwise (measured on 2x H200 with nixl 1.5.1 - 270 GB/s over cuda_ipc,
    0.47-0.48 GB/s over tcp/lo with C(UCX_TLS=^cuda_ipc) or C(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)).
  - The GPUs are used briefly (about a second per pair over cuda_ipc; about 10 s per pair at 1024 MiB over
    TCP), beside workers that may be serving. Changes nothing on the host. In check mode it only reports
    the pairs it would probe.
  - With O(properties), the processes run in a transient systemd unit (C(systemd-run --wait --pipe --collect))
    with those settings, so the probe runs as the service user under the same hardening as the workers.
  - "Where the host has no GPU, or the venv neither C(torch) nor C(cupy) (O(memory=auto)), the probe runs in DRAM
    mode instead - the same two processes, the same NIXL/UCX, the same unit settings, writing O(dram_mib) MiB of
    host memory into host memory - and reports UCX's host lane (C(cma/memory), C(posix/memory), C(tcp/...)) and
    the GB/s labelled C(DRAM (no GPU: host memory, not the GPU path)). O(min_gbps) is the floor for the GPU
    path and is not applied to DRAM. A DRAM probe that fails (error, no UCX table, bytes missing) is a warning
    with O(memory=auto), a failure with O(memory=dram)."
  - Skips, with the reason, when the venv has no NIXL, or with O(memory=vram) when the host has no GPU or
    the venv no CUDA array library.
options:
  venv:
    description: The serving venv; its C(bin/python) runs the probe and must import C(nixl) and C(torch) (or C(cupy)).
    type: path
    default: /opt/sglang/venv
  pairs:
    description:
      - The GPU pairs to probe, C(src) writing into C(dst) (GPU indices in PCI bus order, as
        M(disagg.sglang.gpu_topology) reports them).
      - When not given, one pair for each class of path between O(prefill_gpus) and O(decode_gpus) (link code and
        same or different NUMA node, from the topology facts); when those are not given either, GPU 0 -> GPU 1
        (GPU 0 -> GPU 0 on a host with one GPU).
    type: list
    elements: dict
    suboptions:
      src:
        description: The prefill GPU (the writer).
        type: int
        required: true
      dst:
        description: The decode GPU (the target).
        type: int
        required: true
  prefill_gpus:
    description: GPUs of the host's prefill workers (to choose O(pairs)).
    type: list
    elements: int
    default: []
  decode_gpus:
    description: GPUs of the host's decode workers (to choose O(pairs)).
    type: list
    elements: int
    default: []
  mib:
    description: MiB written per transfer.
    type: float
    default: 1024
  iters:
    description: Timed writes after the warm-up write.
    type: int
    default: 3
  min_gbps:
    description:
      - The floor in GB/s (10^9 bytes per second) of the GPU path. The TCP fallback measured 0.47-0.5 GB/s; NV18
        between two H200s measured 270 GB/s. Not applied to a DRAM probe.
    type: float
    default: 10
  memory:
    description:
      - V(auto) probes VRAM where the host has a GPU and the venv C(torch) or C(cupy), DRAM otherwise.
      - V(vram) probes VRAM only and skips where that cannot run; V(dram) probes host memory only.
    type: str
    choices: [auto, vram, dram]
    default: auto
  dram_mib:
    description: MiB written per transfer by a DRAM probe (each process holds it twice, buffer and pattern).
    type: float
    default: 64
  env:
    description:
      - Environment of the probe processes; give the workers' environment (their C(UCX_*) and
        C(PYTORCH_CUDA_ALLOC_CONF) settings decide the lane). C(UCX_PROTO_INFO=y) is always set;
        C(CUDA_VISIBLE_DEVICES) is dropped in the probe (GPUs are named by host index, C(CUDA_DEVICE_ORDER=PCI_BUS_ID)).
    type: dict
    default: {}
  properties:
    description:
      - systemd unit settings (C(Key=Value)) for a transient unit that runs the probe, such as the worker
        template's C(User=), C(ProtectSystem=), C(PrivateTmp=), C(DeviceAllow=) lines. Not given, the probe runs
        as the module's user without a unit.
    type: list
    elements: str
  host_findings:
    description:
      - The host readiness findings of the plan (the fact C(sglang_host_findings), each C({id, class, subject,
        message})). When a pair's lane is not cuda_ipc, its message names those that explain it (the IOMMU, PCIe ACS
        on the pair's path, a small BAR1, nvidia_uvm's HMM), or says that none was found; on a GPU lane it also
        compares the GB/s with the GPU class's published ceiling.
    type: list
    elements: dict
    default: []
  timeout:
    description: Seconds one pair's probe may take before it counts as failed.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    details: Reads the topology and checks the venv, then returns the pairs it would probe; probes nothing.
  diff_mode:
    support: none
    details: Changes nothing on the host, so there is nothing to show.
notes:
  - The probe program is C(plugins/module_utils/kv/kv_probe_worker.py), passed to Python with C(-c); parsing and
    verdict are in C(plugins/module_utils/kv/kv_transport.py), unit-tested on tables captured on an H200
    (C(tests/fixtures/kv_transport)).
  - Pairs across hosts are not probed by this module.
requirements:
  - NIXL (C(nixl) and C(nixl-cu13)) in O(venv); for the GPU path C(torch) or C(cupy) and an NVIDIA GPU.
"""

EXAMPLES = r"""
- name: Prove the KV path GPU 0 -> GPU 1 with the defaults
  disagg.sglang.kv_transport:
    venv: /opt/sglang/venv
    pairs: [{src: 0, dst: 1}]
    min_gbps: 200

- name: One pair per path class between the placed workers, as the service user under the units' hardening
  disagg.sglang.kv_transport:
    venv: "{{ sglang_deps_venv_paths.engine }}"
    prefill_gpus: [0, 1, 2, 3]
    decode_gpus: [4, 5, 6, 7]
    min_gbps: "{{ sglang_kv_min_gbps }}"
    env: {UCX_TLS: "cuda_ipc,cuda_copy,tcp"}
    properties:
      - User=sglang
      - ProtectSystem=strict
      - PrivateTmp=yes

- name: Prove NIXL/UCX moves host memory between two processes (no GPU needed; no GB/s floor)
  disagg.sglang.kv_transport:
    venv: /opt/sglang/venv
    memory: dram
    dram_mib: 64
"""

RETURN = r"""
pairs:
  description: One verdict per probed pair.
  returned: when the probe ran
  type: list
  elements: dict
  contains:
    src: {description: The writer GPU (null for DRAM)., type: int, returned: always}
    dst: {description: The target GPU (null for DRAM)., type: int, returned: always}
    memory: {description: "V(VRAM), or V(DRAM) for the host-memory probe.", type: str, returned: always}
    ok: {description: Whether the pair passed., type: bool, returned: always}
    lane:
      description:
        - "UCX's lane for the GPU->GPU put (C(cuda_ipc/cuda), C(tcp/lo), ...)."
        - "For DRAM the host->host put's (C(cma/memory), C(posix/memory), C(tcp/lo), ...)."
      type: str
      returned: always
    lane_kind:
      description: "V(cuda_ipc), V(rdma), V(tcp), V(shm), V(emulated) or V(other)."
      type: str
      returned: always
    protocol:
      description: "UCX's protocol description (V(zero-copy), V(software emulation), ...)."
      type: str
      returned: always
    gbps: {description: GB/s (10^9 bytes/s) of the median timed write., type: float, returned: always}
    bytes: {description: Bytes written per transfer., type: int, returned: always}
    bytes_verified: {description: Bytes that held the written pattern on the target., type: int, returned: always}
    seconds: {description: The timed writes., type: list, elements: float, returned: always}
    allocator:
      description: What allocated the buffers (torch and its allocator settings, cupy, or mmap for DRAM).
      type: str
      returned: always
    message: {description: "The verdict in words (lane, GB/s, likely cause).", type: str, returned: always}
  sample:
    - src: 0
      dst: 1
      ok: true
      lane: cuda_ipc/cuda
      lane_kind: cuda_ipc
      protocol: zero-copy
      gbps: 270.1
      bytes: 1073741824
      bytes_verified: 1073741824
memory:
  description: "What was probed: V(VRAM) or V(DRAM)."
  returned: when the probe ran or would run
  type: str
memory_reason:
  description: Why that memory (for DRAM, what the GPU path lacks here).
  returned: when the probe ran or would run
  type: str
skipped_reason:
  description: Why the probe did not run (no venv, no NIXL; with O(memory=vram) no GPU or CUDA array library).
  returned: when skipped
  type: str
planned:
  description: The pairs that would be probed (check mode) or were.
  returned: always
  type: list
  elements: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology import NVIDIA_SMI_DIRS, gather
from ansible_collections.disagg.sglang.plugins.module_utils.kv import kv_transport as kt

ARGUMENT_SPEC = {
    "venv": {"type": "path", "default": "/opt/sglang/venv"},
    "pairs": {
        "type": "list",
        "elements": "dict",
        "options": {"src": {"type": "int", "required": True}, "dst": {"type": "int", "required": True}},
    },
    "prefill_gpus": {"type": "list", "elements": "int", "default": []},
    "decode_gpus": {"type": "list", "elements": "int", "default": []},
    "mib": {"type": "float", "default": 1024},
    "iters": {"type": "int", "default": 3},
    "min_gbps": {"type": "float", "default": 10},
    "memory": {"type": "str", "default": "auto", "choices": ["auto", "vram", "dram"]},
    "dram_mib": {"type": "float", "default": 64},
    "env": {"type": "dict", "default": {}},
    "properties": {"type": "list", "elements": "str"},
    "timeout": {"type": "int", "default": 120},
    "sysfs_root": {"type": "path", "default": "/"},
    "nvidia_smi_path": {"type": "path"},
    "host_findings": {"type": "list", "elements": "dict", "default": []},
}
# Whether torch or cupy can hold VRAM in the venv (exit 0), run with its python.
ARRAY_LIBRARY_CHECK = (
    "import importlib.util as u; raise SystemExit(0 if u.find_spec('torch') or u.find_spec('cupy') else 3)"
)


def skip(module, reason, planned=None):
    module.exit_json(changed=False, skipped=True, skipped_reason=reason, msg=reason, planned=planned or [])


def read_topology(module, params):
    """The host's gpu_topology facts, read by the topology code with the module's command runner."""
    smi = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi", opt_dirs=NVIDIA_SMI_DIRS)

    def runner(argv):
        try:
            return module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"}, handle_exceptions=False)
        except OSError as exc:  # nvidia-smi missing or not executable: the topology code says "no GPU"
            return 127, "", str(exc)

    return gather(sysfs_root=params["sysfs_root"], nvidia_smi_path=smi, runner=runner)


def memory_to_probe(module, params, python, facts):
    """(memory, why): VRAM or DRAM as kt.choose_memory picks from what the host has; skips (exits) the module where
    nothing can be probed: no GPU for memory=vram, NIXL that does not import, no memory to hold the buffers."""
    indices = [g["index"] for g in facts["gpus"]]
    if not indices and params["memory"] == "vram":
        skip(module, f"KV transport probe skipped: no GPU on this host ({facts['reason']})")
    rc, out, err = module.run_command([python, "-c", "import nixl._api"])
    if rc != 0:
        why = (err or out).strip().splitlines()[-1:] or ["no output"]
        skip(module, f"KV transport probe skipped: NIXL does not import in {params['venv']} ({why[0]})")
    array_library = False
    if indices and params["memory"] != "dram":
        array_library = module.run_command([python, "-c", ARRAY_LIBRARY_CHECK])[0] == 0
    mem, mem_reason = kt.choose_memory(params["memory"], indices, array_library)
    if mem is None:
        skip(module, f"KV transport probe skipped: {mem_reason}" + ("" if indices else f" ({facts['reason']})"))
    return mem, mem_reason + ("" if indices else f" ({facts['reason']})")


def planned_pairs(mem, params, facts):
    """What to probe: DRAM once; else the given pairs, the pair classes of the prefill and decode GPUs
    (kt.pair_classes), or the first two GPUs (the first with itself on a one-GPU host)."""
    indices = [g["index"] for g in facts["gpus"]]
    if mem == "dram":
        return [{"memory": "DRAM"}]
    if params["pairs"]:
        return [{"src": x["src"], "dst": x["dst"]} for x in params["pairs"]]
    if params["prefill_gpus"] and params["decode_gpus"]:
        return kt.pair_classes(facts, params["prefill_gpus"], params["decode_gpus"])
    return [{"src": indices[0], "dst": indices[1] if len(indices) > 1 else indices[0]}]


def unknown_gpus(mem, planned, facts):
    """The GPUs of the planned VRAM pairs that the host does not have (sorted; none for DRAM)."""
    if mem != "vram":
        return []
    return sorted({g for x in planned for g in (x["src"], x["dst"])} - {g["index"] for g in facts["gpus"]})


def probe_command(mem, pair, params, *, python, source, systemd_run):
    """(argv, environment update) of one probe: as a transient unit with the given properties where SYSTEMD_RUN, else
    a plain child with the environment."""
    if mem == "dram":
        args = kt.probe_args(0, 0, params["dram_mib"], params["iters"], params["timeout"], mem="dram")
        unit = f"disagg-kv-probe-dram-{os.getpid()}"
    else:
        args = kt.probe_args(pair["src"], pair["dst"], params["mib"], params["iters"], params["timeout"])
        unit = f"disagg-kv-probe-{pair['src']}-{pair['dst']}-{os.getpid()}"
    if systemd_run:
        argv = kt.probe_argv(python, source, args, properties=params["properties"], env=params["env"], unit=unit,
                             systemd_run=systemd_run)  # fmt: skip
        return argv, {}
    return kt.probe_argv(python, source, args), dict(params["env"])


def probe(module, mem, pair, params, run):
    """The verdict of one probe (kt.decide on its output), with the pair's link and NUMA, the host findings that
    explain a slow VRAM lane, the memory, the exit status and the wall time. RUN: {python, source, systemd_run,
    names: {GPU index: name}}."""
    argv, env_update = probe_command(
        mem, pair, params, python=run["python"], source=run["source"], systemd_run=run["systemd_run"]
    )
    t0 = time.monotonic()
    rc, out, err = module.run_command(argv, environ_update=env_update)
    verdict = kt.decide(out + "\n" + err, params["min_gbps"], pair.get("src"), pair.get("dst"), params["env"], mem=mem)
    verdict.update({k: v for k, v in pair.items() if k in ("link", "numa")})
    if mem == "vram":
        kt.explain(verdict, params["host_findings"], run["names"].get(pair.get("src")), pair.get("numa"))
    verdict.update(memory="VRAM" if mem == "vram" else "DRAM", rc=rc, wall_s=round(time.monotonic() - t0, 2))
    return verdict


def outcome(mem, results, mem_reason, requested):
    """{failed, msg, warning} of the probes: a failed DRAM probe fails only where DRAM was asked for (REQUESTED
    memory=dram; with auto it warns), a failed VRAM pair always."""
    if mem == "dram":
        verdict = results[0]
        state = "passed" if verdict["ok"] else "FAILED"
        msg = f"DRAM probe {state} in {verdict['wall_s']:.1f} s (why DRAM: {mem_reason})"
        if verdict["ok"]:
            return {"failed": False, "msg": msg, "warning": None}
        if requested == "dram":
            return {"failed": True, "msg": msg + ": " + verdict["message"], "warning": None}
        return {"failed": False, "msg": msg,
                "warning": verdict["message"] + " (a warning: memory=auto fails only on the GPU path)"}  # fmt: skip
    failed = [r for r in results if not r["ok"]]
    used = sum(r["wall_s"] for r in results)
    summary = f"{len(results) - len(failed)} of {len(results)} pair(s) passed; GPUs used for {used:.1f} s"
    if failed:
        return {"failed": True, "msg": summary + ": " + " | ".join(r["message"] for r in failed), "warning": None}
    return {"failed": False, "msg": summary, "warning": None}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    problems = kt.check_properties(p["properties"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    python = os.path.join(p["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        skip(module, f"KV transport probe skipped: {python} does not exist (venv {p['venv']} not installed)")
    facts = read_topology(module, p)
    mem, mem_reason = memory_to_probe(module, p, python, facts)
    planned = planned_pairs(mem, p, facts)
    unknown = unknown_gpus(mem, planned, facts)
    if unknown:
        indices = [g["index"] for g in facts["gpus"]]
        module.fail_json(msg=f"kv_transport: GPU(s) {unknown} not on this host (it has {indices})", planned=planned)
    label = "VRAM" if mem == "vram" else "DRAM"
    if module.check_mode:
        what = f"{len(planned)} pair(s)" if mem == "vram" else kt.DRAM_LABEL
        module.exit_json(
            changed=False, planned=planned, memory=label, memory_reason=mem_reason, msg=f"would probe {what}"
        )
    run = {
        "python": python,
        "source": kt.worker_source(),
        "systemd_run": module.get_bin_path("systemd-run", required=True) if p["properties"] is not None else None,
        "names": {g["index"]: g.get("name") for g in facts["gpus"]},
    }
    results = [probe(module, mem, pair, p, run) for pair in planned]
    found = outcome(mem, results, mem_reason, p["memory"])
    if found["failed"]:
        module.fail_json(msg=found["msg"], pairs=results, planned=planned, memory=label)
    if found["warning"]:
        module.warn(found["warning"])
    module.exit_json(changed=False, pairs=results, planned=planned, memory=label, memory_reason=mem_reason,
                     msg=found["msg"])  # fmt: skip


if __name__ == "__main__":
    main()
