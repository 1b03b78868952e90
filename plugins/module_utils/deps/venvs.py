# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Versioned venvs: each distinct package set gets its own venv, named by a digest of what
makes it, built and verified beside the running one. Pure functions; the deps role applies them.

    venvs(inputs)                      {engine, router, ...}: the paths of this run's venvs
    engine_of(module, packages)        {dist, version}: the engine a worker runs, from its pin
    to_remove(found, in_use, current)  the venvs a host no longer needs (the last two of a kind are kept)

A unit names the venv it runs (units.py: python = VENV/bin/python), so a version change is a unit change: it
rolls where the role has redundancy and is rolled back to the previous unit file, which names the previous venv,
when the new one does not become healthy. The engine (sglang, NIXL) and the router live in separate venvs: an
engine upgrade does not restart the router, and a router change does not touch the workers.
"""

import hashlib
import json
import re

# What a venv's directory holds beside the venv itself: written by the deps role once the venv is verified.
STAMP = "disagg-venv.json"
KINDS = ("engine", "router")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def normalize(name):
    """PEP 503's normalized distribution name: 'SGLang_PD.sim' -> 'sglang-pd-sim'."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def digest(kind, packages, nodeps, python, wheelhouse):
    """A short digest of what makes a venv: its kind, both package lists (order kept: pip reads them in order),
    the Python that makes it and the wheelhouse it installs from."""
    made_of = {"kind": kind, "packages": list(packages or []), "nodeps": list(nodeps or []),
               "python": str(python), "wheelhouse": str(wheelhouse or "")}  # fmt: skip
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()[:12]


def venvs(inputs):
    """This run's venvs of a host. inputs: {dir (sglang_venvs_dir), packages, nodeps (the engine's lists),
    router_packages, python (sglang_deps_python), wheelhouse, module (sglang_server_module)}.
    Returns {engine, router: paths; engine_stamp, router_stamp: what each venv's stamp file holds;
    engine_pin: "dist version" of the engine, None where it is not pinned}."""
    engine = engine_of(inputs.get("module"), inputs.get("packages"))
    out = {"engine_pin": f"{engine['dist']} {engine['version']}" if engine["version"] else None}
    lists = {
        "engine": (inputs.get("packages"), inputs.get("nodeps")),
        "router": (inputs.get("router_packages"), []),
    }
    for kind, (packages, nodeps) in lists.items():
        name = f"{kind}-{digest(kind, packages, nodeps, inputs.get('python'), inputs.get('wheelhouse'))}"
        out[kind] = f"{str(inputs.get('dir') or '').rstrip('/')}/{name}"
        out[f"{kind}_stamp"] = {"kind": kind, "name": name, "packages": list(packages or []),
                                "nodeps": list(nodeps or []), "python": str(inputs.get("python")),
                                "wheelhouse": str(inputs.get("wheelhouse") or "")}  # fmt: skip
    return out


def engine_of(module, packages):
    """The engine a unit running `python -m MODULE` runs, from the package lists: {dist, version}; version is
    None unless the distribution whose name is MODULE's top package is pinned with ==."""
    dist = normalize(str(module or "").split(".", maxsplit=1)[0])
    version = None
    for requirement in packages or []:
        match = _NAME.match(str(requirement))
        if not match or normalize(match.group(1)) != dist:
            continue
        pin = re.match(r"^===?\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*(;.*)?$", match.group(3).strip())
        version = pin.group(1) if pin else None
    return {"dist": dist, "version": version}


def engine_problems(module, packages):
    """The engine must be pinned: the plan compares the versions of prefill and decode, and names the venv."""
    engine = engine_of(module, packages)
    if engine["version"]:
        return []
    return [
        f"sglang_deps_packages does not pin the engine {engine['dist']} (the package of sglang_server_module "
        f"{module}) with ==: the plan compares the engine versions of prefill and decode and a venv is named by "
        f"its pins. Pin it, e.g. {engine['dist']}==<version>"
    ]


def to_remove(found, in_use, current):
    """The venvs to remove on a host: found: [{path, kind, mtime}] (each venv with a stamp under sglang_venvs_dir);
    in_use: the venv paths a deployed unit runs (its record's python); current: this run's venv paths.
    Kept: those in use, this run's, and the newest other one of each kind (the previous venv, for a rollback by
    inventory). Every other venv goes, oldest first."""
    keep = set(in_use or []) | set(current or [])
    remove = []
    for kind in KINDS:  # a stamped directory of another name is not one of ours: never removed
        others = sorted(
            (v for v in found if v.get("kind") == kind and v["path"] not in keep),
            key=lambda v: (float(v.get("mtime") or 0), v["path"]),
            reverse=True,
        )
        previous_kept = any(
            v.get("kind") == kind and v["path"] in set(in_use or []) - set(current or []) for v in found
        )
        remove += [v["path"] for v in others[0 if previous_kept else 1 :]]
    return sorted(remove)


def found(stamp_path, mtime):
    """A venv as to_remove takes it, from the path of its stamp file: {path, kind, mtime}."""
    path = str(stamp_path or "").rsplit("/", 1)[0]
    name = path.rsplit("/", 1)[-1]
    return {"path": path, "kind": name.split("-", 1)[0] if "-" in name else None, "mtime": mtime}


def venv_of(python):
    """'/opt/sglang/venvs/engine-abc/bin/python' -> '/opt/sglang/venvs/engine-abc'."""
    text = str(python or "")
    return text[: -len("/bin/python")] if text.endswith("/bin/python") else text
