# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The files of a host's units written in one call (one module run instead of a template, a copy and two
directories per unit): each unit's environment file (secrets), unit file and record. Tested with a temp dir in
tests/unit/units/test_unit_files.py.

    write(files, dirs, check, fs, absent)
                                    {files: [{path, kind, unit, changed, backup_file?}], diff, removed, changed}
    remove(paths, check)            the paths of PATHS that existed, removed
    deploy_files(deploy, unit_dir, record_dir)
                                    the three files of each unit {spec, unit_file, env_file} as write takes them
    backup_sets(files)              {unit: {unit_file, env_file, record}}: each unit's one backup set
    deployed(deploy, result, rule)  what the units step needs from a write: the changed kinds, the backup sets, the
                                    restart rule's answer, the units to wait for and those the rolling step restarts
    restore(entries, unit_dir, record_dir, fs)
                                    each unit's backup set put back where it came from (the rollback)
    rolled_back(entries, records)   each restored unit's spec as the rollback waits for it (its previous health URL)
    reload_systemd(run, restored)   systemctl daemon-reload where a restore put a unit file back
    drop(sets, check)               the backups of the sets removed

One backup set per unit: the previous unit file, environment file and record a write kept ("" for each it kept
none), carried as one dict from the write to the rollback (roles/sglang/tasks/wait.yml, rollback.yml) or the rolling
step (the deferred units), put back by restore and dropped by drop.

A file is changed when its content, mode or owner differ; a changed file that existed keeps a backup (the name
ansible's own backup gives: PATH.PID.DATE@TIME~, which systemd ignores) for the rollback; a file is written whole
in its directory and renamed over the old one. In check mode nothing is written and the same answer comes back.
Files marked secret are never put in a diff.
"""

import grp
import json
import os
import pwd
import stat

from ansible_collections.disagg.sglang.plugins.module_utils.units import rolling, units

# the kinds of a unit's files, in the order a write lists them, with their mode (root's)
KINDS = {"unit_file": "0644", "record": "0644", "env_file": "0600"}
NO_BACKUP = dict.fromkeys(("unit_file", "env_file", "record"), "")


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


def record_text(spec, unit_dir):
    """The record of SPEC as the units step writes it: units.record as Ansible's to_nice_json(sort_keys=true) puts
    it, with one newline at the end."""
    return json.dumps(units.record(spec, unit_dir), indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def deploy_files(deploy, unit_dir, record_dir):
    """The files of each unit of DEPLOY ({spec, unit_file, env_file}: the texts rendered on the controller) as write
    takes them: its unit file and record (file_specs), then every unit's environment file (env_file_specs), secret."""
    texts = {d["spec"]["unit"]: {"unit_file": d["unit_file"], "env_file": d["env_file"],
                                 "record": record_text(d["spec"], unit_dir)} for d in deploy}  # fmt: skip
    specs = [d["spec"] for d in deploy]
    return file_specs([s["unit"] for s in specs], texts, unit_dir, record_dir) + [
        {**f, "secret": True} for f in env_file_specs(specs, texts)
    ]


def backup_sets(files):
    """{unit: {unit_file, env_file, record}} of the units a write changed a file of: the backup each changed file kept
    ("" where it kept none: a new file, or an unchanged one)."""
    sets = {}
    for f in files:
        if f["changed"] and f.get("kind") in KINDS:
            unit = f["item"]["unit"]
            sets.setdefault(unit, dict(NO_BACKUP))[f["kind"]] = f.get("backup_file") or ""
    return sets


def deployed(deploy, result, rule=None):
    """What the units step needs from a write of DEPLOY (result: write's answer), in one answer:
    kinds_changed: the kinds of file that changed; backups: {unit: backup set} of the units restarted now (not
    deferred); restart: rolling.restart_decision's {now, deferred, synced} (RULE: {totals, router_serving, batch,
    records}; none without a rule, as in check mode); started: the specs to wait for (not deferred), each with its
    backup set; deferred: the specs the rolling step restarts, each with its backup set."""
    files = result["files"]
    specs = [d["spec"] for d in deploy]
    changed = [f["item"]["unit"] for kind in ("unit_file", "env_file") for f in files
               if f["changed"] and f["kind"] == kind]  # fmt: skip
    new = [f["item"]["unit"] for f in files if f["changed"] and f["kind"] == "unit_file" and "backup_file" not in f]
    env_changed = [f["item"]["unit"] for f in files if f["changed"] and f["kind"] == "env_file"]
    if rule is None:
        restart = {"now": [], "deferred": [], "synced": []}
    else:
        restart = rolling.restart_decision(specs, changed, new, {**rule, "env_changed": env_changed})
    sets = backup_sets(files)
    deferred = set(restart["deferred"])
    return {
        "kinds_changed": [kind for kind in KINDS if any(f["changed"] and f["kind"] == kind for f in files)],
        "backups": {unit: backup for unit, backup in sets.items() if unit not in deferred},
        "restart": restart,
        "started": [{**s, "backup": sets.get(s["unit"], dict(NO_BACKUP))} for s in specs if s["unit"] not in deferred],
        "deferred": [{**s, "backup": sets.get(s["unit"], dict(NO_BACKUP))} for s in specs if s["unit"] in deferred],
    }


def restore(entries, unit_dir, record_dir, fs, owner="root"):
    """Puts each entry's backup set back ({unit, environment_file, backup: {unit_file, env_file, record}}): each
    backup kept is copied back over the file it came from, root's, with its kind's mode. Returns {restored: [path],
    records: {unit: the previous record, {} where none was kept}} (the rollback waits at the previous record's health
    URL). fs: as write's (replace(tmp, path)); owner: the files' owner and group (None: left as written)."""
    restored, records = [], {}
    for entry in entries:
        backup = entry.get("backup") or {}
        dest = {"unit_file": f"{unit_dir}/{entry['unit']}.service", "env_file": entry.get("environment_file"),
                "record": f"{record_dir}/{entry['unit']}.json"}  # fmt: skip
        records[entry["unit"]] = {}
        for kind, mode in KINDS.items():
            source = backup.get(kind)
            if not source or not dest[kind]:
                continue
            with open(source, "rb") as handle:
                content = handle.read()
            if kind == "record":
                try:
                    records[entry["unit"]] = json.loads(content)
                except ValueError:
                    records[entry["unit"]] = {}
            tmp = f"{dest[kind]}.disagg-tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            fs["replace"](tmp, dest[kind])
            _set_attrs(dest[kind], mode, owner, owner)
            restored.append(dest[kind])
    return {"restored": restored, "records": records}


def rolled_back(entries, records):
    """Each entry of a restore as the rollback waits for it: the health URL (and a router's expected workers) of its
    previous record, the configuration it runs again; the planned ones where it kept no record."""
    specs = []
    for entry in entries:
        previous = records.get(entry["unit"]) or {}
        spec = {**entry, "health_url": previous.get("health_url", entry.get("health_url"))}
        if "expected_workers" in entry:
            spec["expected_workers"] = previous.get("expected_workers", entry["expected_workers"])
        specs.append(spec)
    return specs


def reload_systemd(run, restored):
    """Reloads systemd when RESTORED (restore's paths) holds a unit file: systemd reads a unit file only on a
    reload, so a unit put back and restarted without one would start its refused configuration again. An environment
    file or a record alone needs none (systemd reads the environment file at each start). run(argv) -> (rc, out,
    err). Returns (reloaded, error): error is systemctl's message when the reload failed, else ""."""
    if not any(path.endswith(".service") for path in restored):
        return False, ""
    rc, out, err = run(["systemctl", "daemon-reload"])
    return True, "" if rc == 0 else f"systemctl daemon-reload failed (rc {rc}): {(err or out).strip()}"


def drop(sets, check=False):
    """Removes the backups of SETS (backup sets, or entries carrying one as `backup`) that exist; returns those."""
    paths = []
    for item in sets or []:
        backup = item.get("backup", item) if isinstance(item, dict) else {}
        paths += [backup.get(kind) for kind in NO_BACKUP if backup.get(kind)]
    return remove(paths, check)
