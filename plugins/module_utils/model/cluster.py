# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Once per cluster from outside: which worker host fetches a revision from its source, which copy it
from that host, and the run's report of the bytes. Pure functions over what each host's preflight found
(roles/sglang/tasks/model_preflight.yml: model_stage in check mode, {fetched, bytes_fetched}).

    staging_plan(needs, order)   {holder, peers, serve}: the holder fetches from the source - the first host (in the
                                 play's order) that already holds the revision verified, else the first host; the
                                 peers are the other hosts that lack a file; serve: whether the holder serves them
    report(results, holder, source_kind)
                                 {line, outside_bytes, peer_bytes, ...}: the bytes from outside and from the peers,
                                 and their GB/s (10^9 bytes per second)
"""

from . import staging


def staging_plan(needs, order):
    """needs: {host: {fetched: [path], bytes_fetched}} of the worker hosts that stage (a host without `fetched`, one
    whose preflight step was skipped, stages nothing); order: the play's hosts."""
    needs = {h: n for h, n in (needs or {}).items() if isinstance(n, dict) and "fetched" in n}
    hosts = [h for h in order if h in needs]
    if not hosts:
        return {"holder": None, "peers": [], "serve": False}
    holding = [h for h in hosts if not (needs[h] or {}).get("fetched")]
    holder = (holding or hosts)[0]
    peers = [h for h in hosts if h != holder and (needs[h] or {}).get("fetched")]
    return {"holder": holder, "peers": peers, "serve": bool(peers)}


def _sum(results, key):
    return sum(int((r or {}).get(key) or 0) for r in results)


def report(results, holder, source_kind):
    """results: {host: model_stage's result} of this run's staging (skipped hosts left out); holder: the host that
    staged from the source. The peers' copies ran one after another's start, in parallel: their rate is their bytes
    over the longest copy."""
    results = {h: r for h, r in (results or {}).items() if isinstance(r, dict) and "path" in r}
    outside = results.get(holder) or {}
    peers = {h: r for h, r in results.items() if h != holder}
    peer_bytes = _sum(peers.values(), "bytes_fetched")
    peer_seconds = max([float(r.get("seconds") or 0) for r in peers.values()] or [0.0])
    outside_bytes = int(outside.get("bytes_fetched") or 0)
    name = (outside or next(iter(peers.values()), {})).get("path", "").rstrip("/").rsplit("/", 1)[-1]
    parts = [f"model {name}: {outside_bytes} bytes from the {source_kind or 'source'} onto {holder}"]
    if outside_bytes:
        seconds = float(outside.get("seconds") or 0)
        parts[-1] += f" in {seconds:.1f} s ({staging.gbps(outside_bytes, seconds)} GB/s)"
    copied = sorted(h for h, r in peers.items() if r.get("bytes_fetched"))
    parts.append(f"{peer_bytes} bytes from {holder} to {len(copied)} host(s)")
    if peer_bytes:
        parts[-1] += f" ({', '.join(copied)}) in {peer_seconds:.1f} s ({staging.gbps(peer_bytes, peer_seconds)} GB/s)"
    repaired = sorted(h for h, r in results.items() if r.get("repaired"))
    if repaired:
        parts.append(f"files found wrong and fetched again on {', '.join(repaired)}")
    return {
        "line": "; ".join(parts),
        "outside_bytes": outside_bytes,
        "outside_gbps": staging.gbps(outside_bytes, outside.get("seconds")),
        "peer_bytes": peer_bytes,
        "peer_gbps": staging.gbps(peer_bytes, peer_seconds),
        "repaired": repaired,
    }
