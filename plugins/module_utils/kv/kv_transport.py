# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The KV transport probe: which UCX lane a prefill GPU -> decode GPU NIXL WRITE takes, how fast, and
whether the bytes arrived.

Pure functions (the module plugins/modules/kv_transport.py and tests/hardware use them; unit tests run
them on the tables captured on real GPUs, tests/fixtures/kv_transport/):
  parse_proto_tables(text)   the tables that UCX_PROTO_INFO=y prints -> [{context, operation, rows}]
  put_lane(tables, mem)      the protocol and lane of the GPU->GPU put (the KV write) for large sizes;
                             with mem="dram" the host->host put between the two processes
  parse_result(text)         the probe's `KVPROBE_RESULT {json}` line
  decide(...)                ok or failed, with a message naming lane, GB/s and the likely cause
  probe_argv(...)            the command: the venv's Python running kv_probe_worker.py's source,
                             under `systemd-run --wait --pipe --collect -p ...` when properties are given
  pair_classes(...)          one (prefill GPU, decode GPU) pair per class of link (same NUMA node, across)
The probe process itself is plugins/module_utils/kv/kv_probe_worker.py.

DRAM mode (hosts without a GPU or a CUDA array library, such as the sandbox): the same two processes write
host memory into host memory through NIXL/UCX. It proves NIXL, UCX and the units' hardening let the bytes
through and names UCX's host lane (cma/memory, posix/memory, tcp/...), labelled DRAM_LABEL; its GB/s says
nothing about the GPU path, so sglang_kv_min_gbps (the GPU gate) is not applied to it.
"""

from __future__ import annotations

import inspect
import json
import re
import statistics

from ansible_collections.disagg.sglang.plugins.module_utils.kv import kv_probe_worker

RESULT_MARKER = "KVPROBE_RESULT "
DRAM_LABEL = "DRAM (no GPU: host memory, not the GPU path)"
# UCX prefixes log lines with "[time] [host:pid:thread]"; the table starts at its first '|' or '+'.
_TABLE_LINE_RE = re.compile(r"^[^|+]*?(?=[|+])")
_RANGE_RE = re.compile(r"^\d+(?:\.\d+)?[KMGT]?(?:\.\.(?:\d+(?:\.\d+)?[KMGT]?|inf))?$")
_GPU_PUT_RE = re.compile(r"remote memory write by ucp_put\*.*\bfrom cuda\S*.*\bto cuda", re.IGNORECASE)
# UCX 1.2x writes "from host memory to host" (the header is cut at the table's width).
_HOST_PUT_RE = re.compile(r"remote memory write by ucp_put\*.*\bfrom host\b.*\bto host", re.IGNORECASE)
_SHM_LANES = ("cma", "knem", "xpmem", "posix", "sysv")

CAUSES = {
    "ucx_tls": (
        "UCX_TLS={value} leaves cuda_ipc out, so UCX cannot map the peer GPU's memory and emulates the "
        "put over TCP (measured on 2x H200: 0.48 GB/s instead of 270); drop UCX_TLS or include cuda_ipc"
    ),
    "expandable": (
        "{name}={value} makes torch allocate virtual-memory (cuMemCreate) buffers, which UCX's cuda_ipc "
        "in NIXL 1.5.1 cannot map (nixl PR #1755), so the put is emulated over TCP (measured on 2x H200: "
        "0.47 GB/s instead of 270); remove expandable_segments from the workers' environment"
    ),
    "p2p": (
        "GPU {src} -> GPU {dst} has no usable CUDA peer-to-peer path (see ansible_facts.gpu_topology.p2p_pairs; "
        "PCIe peer-to-peer across CPU sockets is often unsupported: nixl #1097, ucx #11046), so UCX "
        "falls back to a TCP or host-staged lane; place prefill and decode where peer-to-peer works, "
        "or use an RDMA NIC lane"
    ),
}


_PREFIX_KEY_RE = re.compile(r"\[([^\]\[]*:\s*\d+\s*:\s*\d+)\]")


def _cells(line):
    """(key of the printing process, cells) of a table line; cells is 'sep' for a +---+ line; None if no table."""
    m = _TABLE_LINE_RE.match(line)
    if m is None:
        return None, None
    prefix = line[: m.end()]
    key_match = _PREFIX_KEY_RE.search(prefix)
    key = re.sub(r"\s+", "", key_match.group(1)) if key_match else prefix.strip()
    body = line[m.end() :].rstrip()
    if body.startswith("+"):
        return key, "sep"
    if not body.startswith("|"):
        return key, None
    return key, [c.strip() for c in body.strip("|").split("|")]


def parse_proto_tables(text):
    """Every UCX_PROTO_INFO table in text: [{context, operation, process, rows: [{range, protocol, lane}]}].

    UCX 1.2x (in nixl 1.5.1) prints a table as `| <context> cfg#N |`, `| <operation> |`, a
    `| Range | Description | Config |` header, then `| <range> | <protocol> | <lane> |` rows; older UCX puts
    context and operation in one row. A row with an empty range continues the one before (long lines wrap).
    Lines carry UCX's `[time] [host:pid:thread]` prefix; two processes printing at once interleave, so a
    table is followed per printing process.
    """
    tables = []
    current = {}
    for line in (text or "").splitlines():
        key, cells = _cells(line)
        if cells is None or cells == "sep":
            continue
        table = current.get(key)
        if len(cells) == 1:
            cell = cells[0]
            if "cfg#" in cell:
                table = {"context": cell, "operation": None, "process": key, "rows": []}
                current[key] = table
                tables.append(table)
            elif table is not None and table["operation"] is None and " by " in cell:
                table["operation"] = cell
            continue
        if len(cells) == 2 and "cfg#" in cells[0] and " by " in cells[1]:
            table = {"context": cells[0], "operation": cells[1], "process": key, "rows": []}
            current[key] = table
            tables.append(table)
            continue
        if table is None or len(cells) < 3:
            continue
        rng, lane, protocol = cells[0], cells[-1], " | ".join(cells[1:-1])
        if _RANGE_RE.match(rng):
            table["rows"].append({"range": rng, "protocol": protocol, "lane": lane})
        elif not rng and table["rows"]:
            last = table["rows"][-1]
            last["protocol"] = " ".join(p for p in (last["protocol"], protocol) if p)
            last["lane"] = " ".join(p for p in (last["lane"], lane) if p)
    return [t for t in tables if t["operation"]]


def put_lane(tables, mem="vram"):
    """The GPU->GPU put (KV write) for the largest sizes: {operation, context, range, protocol, lane, kind}
    from the last such table printed, or None when UCX printed none.

    mem="dram": the host->host put instead, leaving out UCX's loopback tables (context `... self cfg#N`,
    a process writing into itself), which are printed before the two processes connect."""
    found = None
    wanted = _HOST_PUT_RE if mem == "dram" else _GPU_PUT_RE
    for table in tables:
        if mem == "dram" and re.search(r"\bself cfg#", table["context"]):
            continue
        if wanted.search(table["operation"]) and table["rows"]:
            row = table["rows"][-1]
            found = {"operation": table["operation"], "context": table["context"], **row}
    if found:
        found["kind"] = lane_kind(found["lane"], found["protocol"])
    return found


def lane_kind(lane, protocol=""):
    """cuda_ipc (GPU peer-to-peer), rdma (an InfiniBand/RoCE NIC), tcp, shm (host shared memory or
    cross-memory attach: cma, knem, xpmem, posix, sysv), or other."""
    lane = lane or ""
    if "cuda_ipc" in lane:
        return "cuda_ipc"
    if re.search(r"(^|\s)tcp/|/tcp", lane):  # also UCX's multi-lane "50% on tcp/eth0 and 50% on tcp/eth1"
        return "tcp"
    if re.match(r"^(rc|dc|ud|rc_mlx5|dc_mlx5|ud_mlx5|rc_verbs|ud_verbs)[_/]", lane):
        return "rdma"
    if "software emulation" in (protocol or ""):
        return "emulated"
    if lane.split("/")[0] in _SHM_LANES:
        return "shm"
    return "other"


def parse_result(text):
    """The dict from the probe's `KVPROBE_RESULT {json}` line, or None."""
    for line in reversed((text or "").splitlines()):
        if line.startswith(RESULT_MARKER):
            try:
                return json.loads(line[len(RESULT_MARKER) :])
            except ValueError:
                return None
    return None


def gbps(nbytes, seconds):
    """GB/s (10^9 bytes) from the median of the timed writes; None without timings."""
    times = [t for t in (seconds or []) if t and t > 0]
    if not times or not nbytes:
        return None
    return nbytes / statistics.median(times) / 1e9


def tls_excludes_cuda_ipc(tls):
    """True when a UCX_TLS value leaves cuda_ipc out (`^cuda_ipc`, or a list naming neither it nor cuda/all)."""
    tls = (tls or "").strip()
    if not tls:
        return False
    if tls.startswith("^"):
        return any(t.strip() in ("cuda_ipc", "cuda") for t in tls[1:].split(","))
    return not any(t.strip() in ("all", "cuda", "cuda_ipc") for t in tls.split(","))


def likely_cause(env, src, dst):
    """The most likely reason a GPU->GPU put left cuda_ipc, read from the probe's environment."""
    env = env or {}
    if tls_excludes_cuda_ipc(env.get("UCX_TLS")):
        return CAUSES["ucx_tls"].format(value=env["UCX_TLS"])
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        value = env.get(name, "")
        if re.search(r"expandable_segments\s*:\s*true", value, re.IGNORECASE):
            return CAUSES["expandable"].format(name=name, value=value)
    return CAUSES["p2p"].format(src=src, dst=dst)


def _verdict_fields(result, lane, src, dst, min_gbps):
    """(fields, speed): the fields every verdict reports, from the probe's result line and the lane UCX chose, and
    the raw GB/s (None without timing) that the caller judges."""
    init = result.get("initiator") or {}
    target = result.get("target") or {}
    nbytes = result.get("bytes")
    speed = gbps(nbytes, init.get("seconds"))
    return {
        "ok": False,
        "src": src,
        "dst": dst,
        "lane": lane["lane"] if lane else None,
        "lane_kind": lane["kind"] if lane else None,
        "protocol": lane["protocol"] if lane else None,
        "operation": lane["operation"] if lane else None,
        "gbps": round(speed, 2) if speed is not None else None,
        "min_gbps": min_gbps,
        "bytes": nbytes,
        "bytes_verified": target.get("bytes_verified"),
        "seconds": init.get("seconds"),
        "allocator": init.get("allocator"),
        "notified": target.get("notified"),
        "message": "",
    }, speed


def _ended_early(out, result, text, what, seen=""):
    """Sets out["message"] and says True when the probe gave no result line or reported a failure."""
    if not result:
        out["message"] = f"{what}: no result line from the probe (output tail: {_tail(text)})"
    elif not result.get("ok"):
        out["message"] = f"{what} failed{seen}: {result.get('error', 'unknown error')}"
    return not result or not result.get("ok")


def decide(text, min_gbps, src=None, dst=None, env=None, *, mem=None):
    """The verdict on one probe's output (stdout and stderr together).

    Returns {ok, lane, lane_kind, protocol, operation, gbps, bytes, bytes_verified, seconds, allocator,
    message, memory}. Fails when the probe failed, UCX printed no GPU->GPU put table, the lane is tcp (or
    another emulation), GB/s is below min_gbps, or fewer bytes arrived than were written.
    A DRAM probe (mem="dram", or the result says so) fails only on the first two and the last: see decide_dram.
    """
    result = parse_result(text) or {}
    if (mem or result.get("mem")) == "dram":
        return decide_dram(text, result, min_gbps)
    src = result.get("src", src)
    dst = result.get("dst", dst)
    env = dict(env or {}, **(result.get("env") or {}))
    lane = put_lane(parse_proto_tables(text))
    out, speed = _verdict_fields(result, lane, src, dst, min_gbps)
    nbytes, target = out["bytes"], result.get("target") or {}
    pair = f"GPU {src} -> GPU {dst}"
    seen = f" (lane {lane['lane']}, {out['gbps']} GB/s)" if lane and speed is not None else ""
    if _ended_early(out, result, text, f"KV transport probe {pair}", seen):
        return out
    size = f"{nbytes / 2**20:g} MiB"
    speed_text = f"{out['gbps']} GB/s" if speed is not None else "no timing"
    if lane is None:
        out["message"] = (
            f"KV transport probe {pair}: {size} written at {speed_text}, but UCX printed no protocol table for a "
            "GPU->GPU put (UCX_PROTO_INFO=y), so the lane is unproven"
        )
        return out
    said = f"KV transport probe {pair}: {size} NIXL WRITE over {lane['lane']} ({lane['protocol']}) at {speed_text}"
    problems = []
    if lane["kind"] in ("tcp", "emulated"):
        problems.append(f"the lane is {lane['lane']}, not GPU peer-to-peer: {likely_cause(env, src, dst)}")
    if speed is None or speed < min_gbps:
        why = "" if problems else f"; {likely_cause(env, src, dst)}" if lane["kind"] != "cuda_ipc" else ""
        problems.append(f"{speed_text} is below sglang_kv_min_gbps={min_gbps}{why}")
    if out["bytes_verified"] != nbytes:
        problems.append(f"only {out['bytes_verified']} of {nbytes} bytes arrived as written")
    return _conclude(out, said, problems, target)


def decide_dram(text, result, min_gbps=None):
    """The verdict on a DRAM probe (host memory -> host memory, two processes): ok when it ended well, UCX
    printed the host->host put table and every byte arrived as written. The GB/s is reported, labelled
    DRAM_LABEL, and never compared with min_gbps (the floor for the GPU path)."""
    lane = put_lane(parse_proto_tables(text), mem="dram")
    fields, speed = _verdict_fields(result, lane, None, None, None)
    out = {"memory": "DRAM", **fields}
    nbytes, target = out["bytes"], result.get("target") or {}
    what = f"KV transport probe {DRAM_LABEL}"
    if _ended_early(out, result, text, what):
        return out
    speed_text = f"{out['gbps']} GB/s" if speed is not None else "no timing"
    lane_text = f"{lane['lane']} ({lane['protocol']})" if lane else "an unknown lane"
    said = f"{what}: {nbytes / 2**20:g} MiB NIXL WRITE process to process over {lane_text} at {speed_text}"
    gate = "" if min_gbps is None else f"; sglang_kv_min_gbps={min_gbps} is the GPU gate, not applied to DRAM"
    problems = []
    if lane is None:
        problems.append("UCX printed no protocol table for a host->host put (UCX_PROTO_INFO=y)")
    if out["bytes_verified"] != nbytes:
        problems.append(f"only {out['bytes_verified']} of {nbytes} bytes arrived as written")
    return _conclude(out, said, problems, target, gate)


def _conclude(out, said, problems, target, suffix=""):
    """The verdict's message: what was measured, then FAILED and why, or the bytes verified (and SUFFIX)."""
    if problems:
        out["message"] = said + "; FAILED: " + "; ".join(problems)
        return out
    out["ok"] = True
    out["message"] = f"{said}, {out['bytes']} bytes verified{suffix}"
    if target.get("notified") is False:
        out["message"] += " (the last write's NIXL notification did not arrive within 10 s)"
    return out


def _tail(text, n=400):
    text = (text or "").strip()
    return text[-n:] if text else "empty"


def worker_source():
    """The probe program's source (kv_probe_worker.py), passed to the venv's Python with -c."""
    return inspect.getsource(kv_probe_worker)


def probe_args(src, dst, mib=1024, iters=3, timeout=60, *, mem="vram"):
    args = ["--src", str(src), "--dst", str(dst), "--mib", str(mib), "--iters", str(iters), "--timeout", str(timeout)]
    return [*args, "--mem", "dram"] if mem == "dram" else args


def choose_memory(requested, gpu_indices, array_library):
    """("vram" | "dram" | None, why) for the memory option: auto probes VRAM where the host has a GPU and the
    venv a CUDA array library (torch or cupy), DRAM otherwise; vram where that is missing is None (skip)."""
    if requested == "dram":
        return "dram", "memory=dram requested"
    missing = None
    if not gpu_indices:
        missing = "no GPU on this host"
    elif not array_library:
        missing = "neither torch nor cupy in the venv to hold VRAM buffers"
    if missing is None:
        return "vram", "GPU and CUDA array library present"
    if requested == "vram":
        return None, missing
    return "dram", missing


def check_properties(properties):
    """Messages for systemd properties that are not `Key=Value`."""
    return [
        f"kv_transport properties: {p!r} is not Key=Value (a systemd unit setting such as ProtectSystem=strict)"
        for p in properties or []
        if not isinstance(p, str) or not re.match(r"^[A-Z][A-Za-z0-9]*=", p)
    ]


def probe_argv(python, source, args, *, properties=None, env=None, unit=None, systemd_run="systemd-run"):
    """The command that runs the probe. With properties: a transient unit that waits, pipes its output
    back and is collected afterwards, with the environment set in the unit (not inherited)."""
    cmd = [python, "-c", source, *args]
    if properties is None:
        return cmd
    argv = [systemd_run, "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec"]
    if unit:
        argv.append(f"--unit={unit}")
    for prop in properties:
        argv += ["-p", prop]
    for key, value in sorted((env or {}).items()):
        argv.append(f"--setenv={key}={value}")
    return argv + cmd


# The published peer-to-peer WRITE ceilings of a GPU class, one direction, GB/s (10^9 bytes/s), by whether the two
# GPUs share a NUMA node: what a probe's GB/s is compared with. match: a substring of the GPU's name.
CEILINGS = [
    {
        "match": "RTX PRO 6000",
        "same": (53, 56),
        "across": (39, 51),
        "source": "voipmonitor/rtx6kpro hardware/pcie-bandwidth.md, PCIe P2P write, one direction",
    },
]
# Findings of the host readiness rules (plan/readiness_rules.py) that take a pair's peer-to-peer lane away: the ones
# naming no pair or GPU hold for every pair of the host.
HOST_WIDE = ("iommu", "uvm_hmm", "aspm")


def ceiling_text(gpu_name, numa, gbps_value):
    """'; the published ceiling ...' for a probe's GB/s where the GPU's class has one (CEILINGS), else ''."""
    row = next((c for c in CEILINGS if c["match"].lower() in str(gpu_name or "").lower()), None)
    if row is None or numa not in ("same", "across") or gbps_value is None:
        return ""
    low, high = row[numa]
    where = "on one NUMA node" if numa == "same" else "across NUMA nodes"
    share = round(100 * gbps_value / high)
    return (
        f"; the published P2P write ceiling of {row['match']} {where} is {low}-{high} GB/s ({row['source']}): "
        f"{share}% of it"
    )


def explaining_findings(findings, src, dst):
    """The messages of the host readiness findings (plan/readiness_rules.judge) that explain why GPU SRC -> GPU DST
    is not on the peer-to-peer lane: the host-wide ones, the ACS bridges on this pair's path, a small BAR1 of either
    GPU."""
    out = []
    for found in findings or []:
        if (
            found.get("id") in HOST_WIDE
            or f"{src}->{dst}" in (found.get("pairs") or [])
            or {src, dst} & set(found.get("gpus") or [])
        ):
            out.append(found.get("message") or found.get("subject"))
    return out


def explain(verdict, findings, gpu_name=None, numa=None):
    """VERDICT (decide's) with what explains it added to its message: on a lane other than cuda_ipc the host findings
    that take the peer-to-peer lane away (or that the host readiness found none), and on any GPU lane the class's
    published ceiling. Returns the verdict (changed in place) with `explained_by`."""
    if verdict.get("memory") == "DRAM" or verdict.get("src") is None:
        return verdict
    why = explaining_findings(findings, verdict.get("src"), verdict.get("dst"))
    verdict["explained_by"] = why
    if verdict.get("lane_kind") and verdict.get("lane_kind") != "cuda_ipc":
        verdict["message"] += (
            "; host readiness: " + " | ".join(why)
            if why
            else "; host readiness found no setting that explains it (IOMMU, ACS, BAR1, nvidia_uvm all read clean "
            "or not read)"
        )
    verdict["message"] += ceiling_text(gpu_name, numa, verdict.get("gbps"))
    return verdict


def pair_classes(facts, prefill_gpus, decode_gpus):
    """One (prefill GPU, decode GPU) pair for each class of path between them, in a stable order.

    The class is the link code from the topology facts (NV18, PIX, NODE, SYS, ...) and whether the two
    GPUs share a NUMA node; the first pair found (lowest indices) stands for its class.
    Returns [{src, dst, link, numa: same|across|unknown}].
    """
    gpus = {g["index"]: g for g in (facts or {}).get("gpus", [])}
    links = (facts or {}).get("links", {})
    seen, out = set(), []
    for p in sorted(prefill_gpus or []):
        for d in sorted(decode_gpus or []):
            link = (links.get(str(p)) or {}).get(str(d)) or ("X" if p == d else "unknown")
            np_, nd = (gpus.get(p) or {}).get("numa_node"), (gpus.get(d) or {}).get("numa_node")
            numa = "unknown" if np_ is None or nd is None else ("same" if np_ == nd else "across")
            key = (link, numa)
            if key in seen:
                continue
            seen.add(key)
            out.append({"src": p, "dst": d, "link": link, "numa": numa})
    return out
