# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Place prefill/decode instances on GPUs from gpu_topology facts (plugins/filter/pd_placement.py).

place(topology, instances, strict=False) -> [{name, gpus, numa_node, cpus, warnings}], in the
order of `instances`. Rules:
  * GPU sets are disjoint. {name, gpus} instances are taken as given after checks (each GPU
    exists, none asked twice; a set that spans NUMA nodes gets a warning, strict or not).
  * {name, tp} instances each go inside one locality set when the host allows it. A locality set
    is a NUMA node; GPUs whose node is unknown are grouped by their CPU-affinity set instead.
    The search is exhaustive (small hosts), so an arrangement that keeps every instance inside
    one set is found whenever one exists, trying instances in the given order.
  * Among equal choices: the set that the instance fills best, then the tighter worst link
    (NV# with more links > NV# > PIX > PXB > PHB > NODE > SYS), then the lowest node, then the
    lowest GPU indices.
  * An instance that fits in no single set gets the tightest-linked free GPUs across sets and a
    warning; with strict=True that raises PlacementError instead.
  * Asking for more GPUs than are free raises PlacementError naming the GPUs and nodes.
cpus: the node's CPU list when the instance's GPUs share a known node; the union of the nodes'
CPUs when they span known nodes; when a GPU's node is unknown, the intersection of the GPUs'
cpu_affinity (the CPUs close to all of them; the union, with a warning, if that is empty).
"""

from __future__ import annotations

import itertools

from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology_parse import format_cpulist

LINK_ORDER = ["PIX", "PXB", "PHB", "NODE", "SYS"]
SEARCH_LIMIT = 20000  # DFS steps before settling for the best arrangement found so far
EXACT_SUBSETS = 3000  # above this many candidate subsets, grow a subset greedily instead


class PlacementError(ValueError):
    """The request cannot be met (or, with strict, not inside NUMA nodes)."""


def link_rank(code):
    """Sort key, smaller is tighter: NV18 < NV4 < PIX < PXB < PHB < NODE < SYS < unknown."""
    code = (code or "").strip()
    if code.startswith("NV") and code[2:].isdigit():
        return (0, -int(code[2:]))
    if code in LINK_ORDER:
        return (1 + LINK_ORDER.index(code), 0)
    return (len(LINK_ORDER) + 2, 0)


def _fmt(nums):
    """GPU or CPU numbers as runs for messages: [0, 1, 2, 5] -> '0-2,5'; 'none' for none."""
    return format_cpulist(nums) or "none"


class _Host:
    def __init__(self, topology):
        if not isinstance(topology, dict) or "gpus" not in topology:
            raise PlacementError("pd_placement needs the gpu_topology facts (a dict with 'gpus')")
        self.reason = topology.get("reason")
        self.gpus = {}
        for gpu in topology.get("gpus") or []:
            self.gpus[int(gpu["index"])] = gpu
        self.node_cpus = {int(n["id"]): list(n.get("cpus") or []) for n in topology.get("numa_nodes") or []}
        links = topology.get("links") or {}
        self.links = {}
        for i, row in links.items():
            for j, code in (row or {}).items():
                self.links[(int(i), int(j))] = code
        # locality sets: NUMA node, else the CPU-affinity set, else one set of the unknown
        self.group_of = {}
        keys = {}
        for idx, gpu in sorted(self.gpus.items()):
            if gpu.get("numa_node") is not None:
                key = (0, int(gpu["numa_node"]), ())
            elif gpu.get("cpu_affinity"):
                cpus = tuple(sorted(gpu["cpu_affinity"]))
                key = (1, cpus[0], cpus)
            else:
                key = (2, 0, ())
            keys.setdefault(key, []).append(idx)
            self.group_of[idx] = key
        self.groups = sorted(keys)  # nodes first (by id), then affinity sets, then unknown
        self.members = keys

    def label(self, key):
        kind, num, cpus = key
        if kind == 0:
            return f"node {num}"
        if kind == 1:
            return f"CPU set {_fmt(cpus)}"
        return "unknown locality"

    def link(self, a, b):
        return self.links.get((a, b)) or self.links.get((b, a))

    def quality(self, subset):
        """(worst link, sets spanned, sum of link ranks, indices): smaller is better."""
        ranks = [link_rank(self.link(a, b)) for a, b in itertools.combinations(subset, 2)]
        worst = max(ranks) if ranks else (0, 0)
        total = tuple(map(sum, zip(*ranks, strict=True))) if ranks else (0, 0)
        spanned = len({self.group_of[g] for g in subset})
        return (worst, spanned, total, tuple(sorted(subset)))

    def best_subset(self, free, n):
        free = sorted(free)
        if len(free) < n:
            return None
        if n == len(free):
            return tuple(free)
        if _n_choose_k(len(free), n) <= EXACT_SUBSETS:
            return min(itertools.combinations(free, n), key=self.quality)
        # large sets: start from each GPU, add the GPU that keeps the set tightest
        best = None
        for seed in free:
            chosen = [seed]
            while len(chosen) < n:
                rest = [g for g in free if g not in chosen]
                chosen.append(min(rest, key=lambda g, c=chosen: self.quality([*c, g])))
            cand = tuple(sorted(chosen))
            if best is None or self.quality(cand) < self.quality(best):
                best = cand
        return best

    def describe_free(self, free):
        parts = []
        for key in self.groups:
            have = [g for g in self.members[key] if g in free]
            parts.append(f"{self.label(key)}: {len(have)} free (GPUs {_fmt(have)})")
        return "; ".join(parts)

    def describe_all(self):
        return "; ".join(f"{self.label(k)}: GPUs {_fmt(self.members[k])}" for k in self.groups)


def _n_choose_k(n, k):
    k = min(k, n - k)
    out = 1
    for i in range(k):
        out = out * (n - i) // (i + 1)
    return out


def _as_int(value, what):
    if isinstance(value, bool):
        raise PlacementError(f"{what}: {value!r} is not a number")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise PlacementError(f"{what}: {value!r} is not a number") from None


def _requests(host, instances):
    if not isinstance(instances, list | tuple) or not instances:
        raise PlacementError("pd_placement needs a non-empty list of instances ({name, tp} or {name, gpus})")
    seen, out = set(), []
    for pos, inst in enumerate(instances):
        if not isinstance(inst, dict) or not inst.get("name"):
            raise PlacementError(f"instance #{pos + 1} needs a name: {inst!r}")
        name = str(inst["name"])
        if name in seen:
            raise PlacementError(f"instance name {name} is used twice")
        seen.add(name)
        gpus = inst.get("gpus")
        tp = inst.get("tp")
        if gpus is not None:
            if isinstance(gpus, str | int):
                gpus = [g for g in str(gpus).replace(" ", "").split(",") if g != ""]
            gpus = [_as_int(g, f"{name}: GPU") for g in gpus]
            if not gpus:
                raise PlacementError(f"{name}: gpus is empty")
            if len(set(gpus)) != len(gpus):
                raise PlacementError(f"{name}: GPU list {gpus} names a GPU twice")
            if tp is not None and _as_int(tp, f"{name}: tp") != len(gpus):
                raise PlacementError(f"{name}: tp {tp} but {len(gpus)} GPUs listed ({_fmt(gpus)})")
            out.append({"pos": pos, "name": name, "gpus": sorted(gpus), "n": len(gpus)})
        elif tp is not None:
            n = _as_int(tp, f"{name}: tp")
            if n < 1:
                raise PlacementError(f"{name}: tp must be at least 1, not {n}")
            out.append({"pos": pos, "name": name, "gpus": None, "n": n})
        else:
            raise PlacementError(f"{name}: give either tp (a GPU count) or gpus (a list of GPU indices)")
    return out


def _search(host, todo, free):
    """Assign each request a locality set or 'spill' (None), fewest spills; DFS in request order."""
    best = {"spills": None, "plan": None}
    steps = [0]

    def dfs(k, free_now, plan, spills):
        steps[0] += 1
        if best["spills"] is not None and (spills >= best["spills"] or steps[0] > SEARCH_LIMIT):
            return
        if k == len(todo):
            best["spills"], best["plan"] = spills, list(plan)
            return
        req = todo[k]
        options = []
        for key in host.groups:
            have = [g for g in host.members[key] if g in free_now]
            if len(have) >= req["n"]:
                subset = host.best_subset(have, req["n"])
                options.append(((len(have) - req["n"], host.quality(subset)[0], host.groups.index(key)), subset))
        for _key, subset in sorted(options, key=lambda o: o[0]):
            plan.append(subset)
            dfs(k + 1, free_now - set(subset), plan, spills)
            plan.pop()
            if best["spills"] == 0:
                return
        plan.append(None)
        dfs(k + 1, free_now, plan, spills + 1)
        plan.pop()

    dfs(0, frozenset(free), [], 0)
    return best["plan"]


def place(topology, instances, strict=False):
    host = _Host(topology)
    reqs = _requests(host, instances)
    if not host.gpus:
        raise PlacementError(
            f"the host has no GPU to place {', '.join(r['name'] for r in reqs)} on"
            + (f" ({host.reason})" if host.reason else "")
        )

    results = {}
    taken = {}
    # explicit GPU lists first: checked, then reserved
    for req in reqs:
        if req["gpus"] is None:
            continue
        missing = [g for g in req["gpus"] if g not in host.gpus]
        if missing:
            raise PlacementError(
                f"{req['name']} asks for GPU {_fmt(missing)}, but the host has GPUs "
                f"{_fmt(host.gpus)} ({host.describe_all()})"
            )
        for g in req["gpus"]:
            if g in taken:
                raise PlacementError(f"GPU {g} is asked for by both {taken[g]} and {req['name']}")
            taken[g] = req["name"]
        results[req["pos"]] = (req, tuple(req["gpus"]), [])

    todo = [r for r in reqs if r["gpus"] is None]
    free = {g for g in host.gpus if g not in taken}
    want = sum(r["n"] for r in todo)
    if want > len(free):
        asked = ", ".join(f"{r['name']} tp {r['n']}" for r in todo)
        held = f"; GPUs {_fmt(taken)} are taken by explicit lists" if taken else ""
        raise PlacementError(
            f"cannot place {asked}: {want} GPUs asked, {len(free)} free of {len(host.gpus)} "
            f"({host.describe_free(free)}){held}"
        )

    plan = _search(host, todo, free) if todo else []
    # in-set placements first, then the spilled ones on what is left
    for req, subset in zip(todo, plan, strict=True):
        if subset is not None:
            free -= set(subset)
            results[req["pos"]] = (req, subset, [])
    for req, subset in zip(todo, plan, strict=True):
        if subset is not None:
            continue
        free_before = set(free)
        chosen = host.best_subset(free, req["n"])
        worst = host.quality(chosen)[0]
        worst_code = next(
            (host.link(a, b) for a, b in itertools.combinations(chosen, 2) if link_rank(host.link(a, b)) == worst), None
        )
        sets = sorted({host.group_of[g] for g in chosen})
        msg = (
            f"{req['name']}: no single locality set has {req['n']} free GPUs "
            f"({host.describe_free(free_before | set(chosen))}); placed on GPUs {_fmt(chosen)} "
            f"across {', '.join(host.label(k) for k in sets)} (worst link {worst_code or 'unknown'})"
        )
        if strict:
            raise PlacementError(f"strict placement: {msg}")
        free -= set(chosen)
        results[req["pos"]] = (req, chosen, [msg])

    out = []
    for pos in sorted(results):
        req, gpus, warns = results[pos]
        out.append(_describe(host, req, list(gpus), list(warns)))
    return out


def _describe(host, req, gpus, warns):
    nodes = [host.gpus[g].get("numa_node") for g in gpus]
    known = sorted({n for n in nodes if n is not None})
    numa = known[0] if len(known) == 1 and None not in nodes else None
    if req["gpus"] is not None and len({host.group_of[g] for g in gpus}) > 1:
        warns.append(
            f"{req['name']}: GPUs {_fmt(gpus)} span "
            f"{', '.join(host.label(k) for k in sorted({host.group_of[g] for g in gpus}))}"
        )
    if numa is not None and host.node_cpus.get(numa):
        cpus = host.node_cpus[numa]
    elif None not in nodes and known and all(host.node_cpus.get(n) for n in known):
        cpus = sorted(set().union(*(host.node_cpus[n] for n in known)))
    else:
        sets = [set(host.gpus[g].get("cpu_affinity") or []) for g in gpus]
        common = set.intersection(*sets) if sets else set()
        if common:
            cpus = sorted(common)
            if None in nodes:
                warns.append(f"{req['name']}: NUMA node unknown; cpus are the GPUs' common CPU affinity ({_fmt(cpus)})")
        else:
            cpus = sorted(set().union(*sets)) if sets else []
            warns.append(
                f"{req['name']}: the GPUs share no CPU affinity; cpus are their union "
                f"({_fmt(cpus) if cpus else 'unknown'})"
            )
    return {"name": req["name"], "gpus": sorted(gpus), "numa_node": numa, "cpus": list(cpus), "warnings": warns}
