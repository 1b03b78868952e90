# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The model source of an inventory and the directories it is staged into. Pure functions.

    problems(source)                  messages naming sglang_model_source's key and the fix; [] when it is good
    kind(source)                      'hub', 'mirror' or None (the directory is managed outside)
    name(source)                      the model's name: the last part of the hub repository or of the mirror
    staged_dir(models_dir, source)    <models dir>/<name>-<revision>: what a unit's --model-path names
    temp_dir(models_dir, source)      <models dir>/.staging-<name>-<revision>: where it is fetched and verified,
                                      renamed to staged_dir only once every file matches the manifest
    public(source)                    the source without what must not be shown (it holds no token: the token is
                                      sglang_hub_token, passed apart)

A revision is a commit: 40 lowercase hex digits. A branch or tag moves, so two hosts staging 'main' an hour apart
may hold two revisions while their KV handoff still "works"; it is refused, and the message says how to pin it.
"""

import re
from urllib.parse import urlsplit

COMMIT = re.compile(r"^[0-9a-f]{40}$")
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
VAR = "sglang_model_source"
KEYS = {"hub": ("hub", "revision", "endpoint"), "mirror": ("mirror", "revision", "manifest", "name")}
TEMP_PREFIX = ".staging-"


def kind(source):
    if not source:
        return None
    if "hub" in source:
        return "hub"
    if "mirror" in source:
        return "mirror"
    return "unknown"


def _is_url(text):
    parts = urlsplit(str(text))
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def problems(source):
    """What is wrong with a source, each message naming the key and what to write instead."""
    if source is None or source == {}:
        return []
    if not isinstance(source, dict):
        return [f"{VAR} must be a mapping ({{hub: org/repo, revision: <commit>}} or {{mirror: <url or path>, "
                f"revision: <commit>}}), not {type(source).__name__}"]  # fmt: skip
    out = []
    which = kind(source)
    if "hub" in source and "mirror" in source:
        out.append(f"{VAR} names both hub and mirror: keep one")
    if which == "unknown":
        return [f"{VAR} needs hub (an org/repo of the hub) or mirror (an http(s) base URL or an absolute path)"]
    extra = sorted(set(source) - set(KEYS[which]))
    if extra and not ("hub" in source and "mirror" in source):
        out.append(f"{VAR} has keys {', '.join(extra)} that a {which} source does not take "
                   f"(it takes {', '.join(KEYS[which])})")  # fmt: skip
    if which == "hub" and not REPO.match(str(source.get("hub") or "")):
        out.append(f"{VAR}.hub is {source.get('hub')!r}: write the repository as org/name")
    if which == "hub" and source.get("endpoint") is not None and not _is_url(source["endpoint"]):
        out.append(f"{VAR}.endpoint is {source['endpoint']!r}: write an http(s) base URL, or leave it out for the "
                   "public hub")  # fmt: skip
    if which == "mirror":
        mirror = str(source.get("mirror") or "")
        if not (_is_url(mirror) or mirror.startswith("/")):
            out.append(f"{VAR}.mirror is {mirror!r}: write an http(s) base URL or an absolute path")
        if source.get("name") is not None and not NAME.match(str(source["name"])):
            out.append(f"{VAR}.name is {source['name']!r}: letters, digits, '.', '_' and '-' only")
        elif not NAME.match(name(source) or ""):
            out.append(f"{VAR}.mirror {mirror!r} ends in no usable name: set {VAR}.name")
    revision = source.get("revision")
    if revision is None or revision == "":
        out.append(f"{VAR}.revision is missing: pin the commit (40 hex digits) the hosts must serve")
    elif not COMMIT.match(str(revision)):
        out.append(f"{VAR}.revision is {revision!r}, not a commit: a branch or tag moves, so hosts staging it at "
                   "different times could serve different weights. Resolve it once (the hub's model info for that "
                   "revision gives its commit as `sha`) and pin those 40 hex digits")  # fmt: skip
    return out


def name(source):
    """The model's name: the last part of hub's org/repo; for a mirror its `name`, else the last part of its path
    with a trailing -<revision> removed (a peer serves its staged directory, named <name>-<revision>)."""
    which = kind(source)
    if which == "hub":
        return str(source["hub"]).rstrip("/").rsplit("/", 1)[-1]
    if which == "mirror":
        if source.get("name"):
            return str(source["name"])
        mirror = str(source.get("mirror") or "")
        path = urlsplit(mirror).path if _is_url(mirror) else mirror
        last = path.rstrip("/").rsplit("/", 1)[-1]
        suffix = "-" + str(source.get("revision") or "")
        return last[: -len(suffix)] if suffix != "-" and last.endswith(suffix) else last
    return None


def staged_dir(models_dir, source):
    return f"{str(models_dir).rstrip('/')}/{name(source)}-{source['revision']}"


def temp_dir(models_dir, source):
    return f"{str(models_dir).rstrip('/')}/{TEMP_PREFIX}{name(source)}-{source['revision']}"


PUBLIC = ("hub", "mirror", "revision", "endpoint", "manifest", "name")


def public(source):
    return {key: value for key, value in (source or {}).items() if key in PUBLIC}
