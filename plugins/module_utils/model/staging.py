# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Staging one model revision on a host: fetched into a temporary directory, verified file by file against the
manifest, renamed into its versioned directory; a unit never points at a partial copy. The steps are pure
functions over an injected `ops` (the module model_stage gives the real one; tests give theirs).

    stage(request, ops)      the staging of one revision, in check mode only what it would fetch
    stamp(...)               what a staged directory records of itself (STAMP): revision, source, manifest and each
                             file's size and mtime when verified, so a rerun hashes nothing and asks the source
                             nothing (a commit never changes: its manifest is the one recorded)
    to_remove(found, in_use, current)
                             the staged directories a host no longer needs: the last two revisions are kept
    whole_model(files, read_json)
                             why a directory is not a whole model (config.json and every shard its index names)
    gbps(nbytes, seconds)    the rate, in GB/s (10^9 bytes)

ops: model_info() -> manifest; read_stamp(dir) -> dict or None; walk(dir) -> {path: {size, mtime_ns}} (the stamp,
the client's .cache and *.incomplete left out); digest(path, kind) -> hex; exists(dir); remove_files(dir, paths);
fetch(dir, paths) (into dir, resuming what it finds there); finish(temp, final, stamp) (writes the stamp, drops the
client's .cache, renames); replace_files(temp, final, paths) (a repair: each file renamed over its corrupt copy);
write_stamp(dir, stamp); remove_tree(dir); clock().
"""

import json
import os

from . import manifest as mf

STAMP = ".disagg-model.json"


class StageError(Exception):
    pass


def stamp(source, revision, manifest, present, verified_at):
    return {
        "revision": revision,
        "source": source,
        "manifest": manifest,
        "record": {p: {"size": present[p]["size"], "mtime_ns": present[p]["mtime_ns"]} for p in manifest},
        "verified_at": verified_at,
    }


def gbps(nbytes, seconds):
    return round(nbytes / seconds / 1e9, 3) if seconds and seconds > 0 else None


def _bad(report):
    return report["missing"] + [w["path"] for w in report["wrong"]]


def stage(request, ops):
    """request: {final, temp, revision, source (public), full (hash every file, ignore the record), check_mode}.
    Returns {changed, path, fetched, bytes_fetched, seconds, gbps, found_wrong, found_missing, repaired, manifest,
    total_bytes, resumed}; raises StageError when the files fetched do not match the manifest."""
    final, temp = request["final"], request["temp"]
    out = {"path": final, "fetched": [], "bytes_fetched": 0, "seconds": 0.0, "gbps": None, "found_wrong": [],
           "found_missing": [], "repaired": False, "resumed": [], "changed": False}  # fmt: skip
    recorded = ops.read_stamp(final) if ops.exists(final) else None
    if recorded is not None and recorded.get("revision") == request["revision"]:
        # A staged revision: its recorded manifest is the source's (a commit does not change), so nothing is asked
        # of the source unless a file is wrong.
        manifest = recorded["manifest"]
        report = mf.verify(manifest, ops.walk(final), lambda p, k: ops.digest(os.path.join(final, p), k),
                           None if request.get("full") else recorded.get("record"))  # fmt: skip
        out.update(manifest=manifest, total_bytes=mf.total_bytes(manifest), found_missing=report["missing"],
                   found_wrong=report["wrong"])  # fmt: skip
        bad = _bad(report)
        if not bad:
            return out
        out.update(repaired=True, changed=True, fetched=bad, bytes_fetched=mf.total_bytes(manifest, bad))
        if request.get("check_mode"):
            return out
        return _fetch_verify(request, ops, manifest, bad, out, repair=True)
    if ops.exists(final):
        raise StageError(
            f"{final} exists and is no staged revision {request['revision']} (its {STAMP} is missing or names "
            "another): move it away; the stage does not overwrite a directory it did not make"
        )
    manifest = ops.model_info()
    found = mf.problems(manifest)
    if found:
        raise StageError("the source's manifest is not usable: " + "; ".join(found))
    out.update(manifest=manifest, total_bytes=mf.total_bytes(manifest))
    if ops.exists(temp):
        # What an interrupted run left: every file there is hashed (it has no record), the wrong ones dropped.
        report = mf.verify(manifest, ops.walk(temp), lambda p, k: ops.digest(os.path.join(temp, p), k))
        out.update(found_wrong=report["wrong"], resumed=report["ok"])
        bad = _bad(report)
    else:
        bad = sorted(manifest)
    out.update(changed=True, fetched=bad, bytes_fetched=mf.total_bytes(manifest, bad))
    if request.get("check_mode"):
        return out
    return _fetch_verify(request, ops, manifest, bad, out, repair=False)


def _fetch_verify(request, ops, manifest, bad, out, *, repair):
    final, temp = request["final"], request["temp"]
    # The client keeps a file it has metadata for (huggingface_hub file_download.py _hf_hub_download_to_local_dir
    # returns a local file of the same commit unchecked): a wrong one, or any left by an earlier repair, goes first.
    drop = bad if repair else [w["path"] for w in out["found_wrong"]]
    if drop:
        ops.remove_files(temp, drop)
    started = ops.clock()
    if bad:
        ops.fetch(temp, bad)
    out["seconds"] = round(ops.clock() - started, 3)
    out["gbps"] = gbps(out["bytes_fetched"], out["seconds"])
    present = ops.walk(temp)
    part = {p: manifest[p] for p in bad}
    # Files verified before this fetch (resumed) are not hashed again: their record is what was just seen.
    report = mf.verify(part, present, lambda p, k: ops.digest(os.path.join(temp, p), k))
    if report["missing"] or report["wrong"]:
        whys = report["missing"] + [f"{w['path']} ({w['why']})" for w in report["wrong"]]
        raise StageError(f"after the fetch into {temp}, files do not match the manifest: {', '.join(whys)}; the "
                         "files that do are kept there for the next run")  # fmt: skip
    verified_at = ops.clock()
    if repair:
        ops.replace_files(temp, final, bad)
        ops.write_stamp(final, stamp(request["source"], request["revision"], manifest, ops.walk(final), verified_at))
        ops.remove_tree(temp)
    else:
        missing_resumed = [p for p in manifest if p not in present]
        if missing_resumed:
            raise StageError(f"{temp} lacks {', '.join(missing_resumed)} after the fetch")
        ops.finish(temp, final, stamp(request["source"], request["revision"], manifest, present, verified_at))
    return out


def to_remove(found, in_use, current):
    """found: [{path, mtime}] of the staged directories (each with a stamp) under the models dir; in_use: the
    directories a deployed unit serves; current: this run's. Kept: those in use, this run's and the newest other one
    (the previous revision, for a rollback). Every other one goes, oldest first."""
    keep = set(in_use or []) | set(current or [])
    others = sorted((d for d in found if d["path"] not in keep), key=lambda d: (d.get("mtime") or 0, d["path"]),
                    reverse=True)  # fmt: skip
    previous_kept = bool(set(in_use or []) - set(current or []))
    return sorted((d for d in others[0 if previous_kept else 1 :]), key=lambda d: (d.get("mtime") or 0, d["path"]))


def whole_model(files, read_json):
    """Why a directory is not a model sglang can load: files is the set of its file names (relative paths);
    read_json(name) the parsed file or None. sglang's loader reads config.json, then the shards of
    model.safetensors.index.json's weight_map (a missing shard fails the load), else every *.safetensors."""
    out = []
    if "config.json" not in files:
        out.append("config.json is missing")
    elif not isinstance(read_json("config.json"), dict):
        out.append("config.json is not a JSON object")
    index_name = "model.safetensors.index.json"
    if index_name in files:
        index = read_json(index_name)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            out.append(f"{index_name} has no weight_map")
        else:
            for shard in sorted(set(weight_map.values())):
                if shard not in files:
                    out.append(f"{shard}, named by {index_name}, is missing")
    elif not any(f.endswith((".safetensors", ".bin")) for f in files):
        out.append("no weight file (*.safetensors) and no model.safetensors.index.json")
    return out


def directory_files(directory):
    """The relative paths of the files under DIRECTORY, hidden directories (a hub client's .cache) left out."""
    out = set()
    for top, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out.update(os.path.relpath(os.path.join(top, n), directory) for n in names)
    return out


def json_reader(directory):
    """read_json for whole_model: a file of DIRECTORY parsed, or None where it is missing or not JSON."""

    def read(name):
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    return read


def whole_model_dir(directory):
    """whole_model over a directory on this host: only the file names, config.json and the index are read."""
    return whole_model(directory_files(directory), json_reader(directory))
