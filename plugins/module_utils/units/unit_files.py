# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The files of a host's units written in one call (issue 24: one module run instead of a template, a copy and two
directories per unit): each unit's environment file (secrets), unit file and record. Tested with a temp dir in
tests/unit/test_unit_files.py.

    write(files, dirs, check, fs, absent)
    remove(paths, check)            the paths of PATHS that existed, removed
                                    {files: [{path, kind, unit, changed, backup_file?}], diff, removed, changed}

A file is changed when its content, mode or owner differ; a changed file that existed keeps a backup (the name
ansible's own backup gives: PATH.PID.DATE@TIME~, which systemd ignores) for the rollback; a file is written whole
in its directory and renamed over the old one. In check mode nothing is written and the same answer comes back.
Files marked secret are never put in a diff.
"""

import grp
import os
import pwd
import stat


def _owner_differs(st, owner, group):
    if owner is not None and st.st_uid != pwd.getpwnam(owner).pw_uid:
        return True
    return group is not None and st.st_gid != grp.getgrnam(group).gr_gid


def _set_attrs(path, mode, owner, group):
    if mode is not None:
        os.chmod(path, int(str(mode), 8))
    if owner is not None or group is not None:
        uid = pwd.getpwnam(owner).pw_uid if owner is not None else -1
        gid = grp.getgrnam(group).gr_gid if group is not None else -1
        os.chown(path, uid, gid)


def ensure_dir(spec, check):
    """Creates the directory (and its parents) with its mode and owner; True when something changed."""
    path, mode = spec["path"], spec.get("mode")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not check:
            os.makedirs(path, exist_ok=True)
            _set_attrs(path, mode, spec.get("owner"), spec.get("group"))
        return True
    differs = (mode is not None and stat.S_IMODE(st.st_mode) != int(str(mode), 8)) or _owner_differs(
        st, spec.get("owner"), spec.get("group")
    )
    if differs and not check:
        _set_attrs(path, mode, spec.get("owner"), spec.get("group"))
    return differs


def remove(paths, check=False):
    """Removes each of PATHS that exists (nothing in check mode); returns those it found."""
    found = [p for p in paths or [] if p and os.path.lexists(p)]
    if not check:
        for path in found:
            os.remove(path)
    return found


def write(files, dirs, check, fs, absent=()):
    """Writes each file {path, content, mode, owner, group, kind, unit, secret} whose content or attributes differ,
    and removes the paths of absent that exist (the previous files a run no longer needs).
    fs: {backup(path) -> backup path, replace(tmp, path)} (the module's backup_local and atomic_move)."""
    changed = False
    for spec in dirs or []:  # every directory, not only up to the first that changed
        changed = ensure_dir(spec, check) or changed
    removed = remove(absent, check)
    changed = changed or bool(removed)
    out, diffs = [], []
    for spec in files:
        path, content = spec["path"], spec["content"].encode()
        mode, owner, group = spec.get("mode"), spec.get("owner"), spec.get("group")
        try:
            with open(path, "rb") as handle:
                before = handle.read()
            st = os.stat(path)
        except FileNotFoundError:
            before, st = None, None
        content_differs = before != content
        attrs_differ = st is not None and (
            (mode is not None and stat.S_IMODE(st.st_mode) != int(str(mode), 8)) or _owner_differs(st, owner, group)
        )
        result = {"path": path, "kind": spec.get("kind"), "item": {"unit": spec.get("unit")},
                  "changed": content_differs or attrs_differ}  # fmt: skip
        if content_differs and not spec.get("secret"):
            diff = {"before": (before or b"").decode("utf-8", "replace"), "after": spec["content"],
                    "after_header": path}  # fmt: skip
            if before is not None:
                diff["before_header"] = path
            diffs.append(diff)
        if result["changed"] and not check:
            if content_differs:
                if before is not None and spec.get("backup"):
                    result["backup_file"] = fs["backup"](path)
                tmp = f"{path}.disagg-tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
                fs["replace"](tmp, path)  # keeps the old file's mode and owner: set ours after it
            _set_attrs(path, mode, owner, group)
        changed = changed or result["changed"]
        out.append(result)
    return {"changed": changed, "files": out, "diff": diffs, "removed": removed}


def file_specs(units, texts, unit_dir, record_dir):
    """What unit_files writes for each unit but its environment file: the unit file and the record, from the texts
    rendered on the controller ({unit: {unit_file, env_file, record}}); root's, 0644, a backup kept. A record is
    JSON and ends with one newline."""
    specs = []
    for unit in units:
        common = {"mode": "0644", "owner": "root", "group": "root", "backup": True, "unit": unit}
        specs.append({**common, "path": f"{unit_dir}/{unit}.service", "content": texts[unit]["unit_file"],
                      "kind": "unit_file"})  # fmt: skip
        record = texts[unit]["record"].rstrip("\n") + "\n"
        specs.append({**common, "path": f"{record_dir}/{unit}.json", "content": record, "kind": "record"})
    return specs


def env_file_specs(units, texts):
    """The environment file of each unit spec (its environment_file), root's, 0600, a backup kept."""
    return [
        {"path": spec["environment_file"], "content": texts[spec["unit"]]["env_file"], "mode": "0600", "owner": "root",
         "group": "root", "backup": True, "kind": "env_file", "unit": spec["unit"]}
        for spec in units
    ]  # fmt: skip


def of_kind(result, kind):
    """unit_files' answer for one kind of file, shaped as a registered loop: {changed, results: [{item: {unit},
    changed, backup_file?}]} (units_changed.yml reads the previous files and the changed units from it)."""
    files = [f for f in (result or {}).get("files", []) if f.get("kind") == kind]
    return {"changed": any(f["changed"] for f in files), "results": files}
