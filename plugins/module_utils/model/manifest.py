# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What every file of a model revision must be, and which files of a directory are not that. Pure functions.

from_model_info(siblings)            {path: {size, sha256 | blob}} from the hub's model info with blobs=true
                                      (huggingface_hub hf_api.py ModelInfo.siblings: rfilename, size, blobId,
                                      lfs {sha256, size}): an LFS file by its sha256, a plain git file by its git
                                      blob id (sha1 of 'blob <size>\\0' + bytes), both by size
from_document(doc)                    a mirror's manifest: the same mapping, or a staged directory's stamp
problems(manifest)                    what makes a manifest unusable
verify(manifest, present, digest, record)
                                      {ok, missing, wrong: [{path, why}], extra}: present is {path: {size,
                                      mtime_ns}} of the directory's files; digest(path, kind) hashes one file
                                      ('sha256' or 'blob'); a file whose size and mtime_ns equal its record
                                      (written when it was last verified) is not hashed again
total_bytes(manifest, paths)          bytes of those files
"""

import re

SHA256 = re.compile(r"^[0-9a-f]{64}$")
SHA1 = re.compile(r"^[0-9a-f]{40}$")


def from_model_info(siblings):
    out = {}
    for sibling in siblings or []:
        path = sibling.get("rfilename")
        lfs = sibling.get("lfs") or None
        if lfs:
            out[path] = {"size": int(lfs.get("size") if lfs.get("size") is not None else sibling.get("size")),
                         "sha256": str(lfs.get("sha256") or "")}  # fmt: skip
        else:
            entry = {"size": sibling.get("size")}
            if sibling.get("blobId"):
                entry["blob"] = str(sibling["blobId"])
            out[path] = entry
    return out


def from_document(doc):
    """A manifest from a mirror's JSON document: {path: {size, sha256|blob}} itself, or a stamp (a staged
    directory's `.disagg-model.json`, which holds it under `manifest`)."""
    if isinstance(doc, dict) and isinstance(doc.get("manifest"), dict):
        return doc["manifest"]
    return doc


def problems(manifest):
    if not isinstance(manifest, dict) or not manifest:
        return ["the manifest names no file"]
    out = []
    for path, entry in sorted(manifest.items()):
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or entry["size"] < 0:
            out.append(f"{path}: the manifest gives no size")
            continue
        if path.startswith("/") or ".." in path.split("/") or path.startswith(".cache/"):
            out.append(f"{path}: not a path inside the model directory")
        if "sha256" in entry and not SHA256.match(str(entry["sha256"])):
            out.append(f"{path}: sha256 {entry['sha256']!r} is not 64 hex digits")
        if "blob" in entry and not SHA1.match(str(entry["blob"])):
            out.append(f"{path}: blob id {entry['blob']!r} is not 40 hex digits")
    return out


def checks_of(entry):
    """The digest that proves a file: ('sha256', hex), ('blob', hex) or None (size only)."""
    if entry.get("sha256"):
        return "sha256", entry["sha256"]
    if entry.get("blob"):
        return "blob", entry["blob"]
    return None


def verify(manifest, present, digest, record=None):
    record = record or {}
    ok, missing, wrong = [], [], []
    for path in sorted(manifest):
        entry = manifest[path]
        seen = present.get(path)
        if seen is None:
            missing.append(path)
            continue
        if seen["size"] != entry["size"]:
            wrong.append({"path": path, "why": f"size {seen['size']}, the manifest's {entry['size']}"})
            continue
        known = record.get(path)
        if known is not None and known.get("size") == seen["size"] and known.get("mtime_ns") == seen["mtime_ns"]:
            ok.append(path)
            continue
        check = checks_of(entry)
        if check is not None:
            got = digest(path, check[0])
            if got != check[1]:
                wrong.append({"path": path, "why": f"{check[0]} {got}, the manifest's {check[1]}"})
                continue
        ok.append(path)
    extra = sorted(set(present) - set(manifest))
    return {"ok": ok, "missing": missing, "wrong": wrong, "extra": extra}


def total_bytes(manifest, paths=None):
    return sum(int(manifest[p]["size"]) for p in (manifest if paths is None else paths))
