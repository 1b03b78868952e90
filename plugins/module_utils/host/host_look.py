# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What the preflight reads on one host, in one module run (plugins/modules/host_look.py): the paths the units rely
on, the records of the units deployed there, the programs that listen on TCP ports, and whether the workers'
addresses can be bound there. Read-only; every root is injectable so tests/unit/host/test_host_look.py runs on a temp
tree.
"""

import glob
import json
import os
import re

from ansible_collections.disagg.sglang.plugins.module_utils.host import address_probes
from ansible_collections.disagg.sglang.plugins.module_utils.model import staging


def paths(found_paths):
    """{variable: path} -> {variable: {path, exists, isdir}} (isdir None where the path does not exist)."""
    out = {}
    for var, path in (found_paths or {}).items():
        exists = os.path.exists(path)
        out[var] = {"path": path, "exists": exists, "isdir": os.path.isdir(path) if exists else None}
    return out


def records(record_dir):
    """{unit: record} of the <unit>.json files in RECORD_DIR ({} where it does not exist); a record that cannot be
    read as JSON is {"unreadable": reason}, so it is named and never taken for another unit."""
    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(record_dir), "*.json"))):
        unit = os.path.basename(path)[: -len(".json")]
        try:
            with open(path, encoding="utf-8") as handle:
                found[unit] = json.load(handle)
        except (OSError, ValueError) as exc:
            found[unit] = {"unreadable": str(exc)}
    return found


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def listeners(proc="/proc"):
    """{port: owner} of the TCP listeners (IPv4 and IPv6) of this host, read from PROC: the owner is the systemd
    unit of the listening process (the last .service of its cgroup), else its command name. A socket whose process
    cannot be seen (another user's, without privileges) is left out."""
    inodes = {}
    for table in ("net/tcp", "net/tcp6"):
        text = _read(os.path.join(proc, table))
        for line in (text or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":  # 0A: LISTEN
                inodes[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    owners = {}
    if not inodes:
        return owners
    for fd in glob.glob(os.path.join(proc, "[0-9]*", "fd", "*")):
        try:
            match = re.match(r"socket:\[(\d+)\]$", os.readlink(fd))
        except OSError:
            continue
        if not match or match.group(1) not in inodes:
            continue
        pid_dir = os.path.dirname(os.path.dirname(fd))
        cgroup = _read(os.path.join(pid_dir, "cgroup"))
        units = re.findall(r"/([^/\n]+\.service)", cgroup or "")
        owner = units[-1] if units else (_read(os.path.join(pid_dir, "comm")) or "").strip()
        if cgroup is None or not owner:
            continue
        owners.setdefault(str(inodes[match.group(1)]), owner)
    return owners


def model(directory):
    """Why DIRECTORY is not a model sglang can load (module_utils/model/staging.whole_model: config.json, and every
    shard model.safetensors.index.json names, else a weight file), [] when it is one; None where it is no directory
    (the paths rule names that). The file names are relative paths; only config.json and the index are read."""
    if not directory or not os.path.isdir(directory):
        return None
    return staging.whole_model_dir(directory)


def look(
    found_paths=None,
    record_dir=None,
    scan_listeners=True,
    bind=(),
    exists=(),
    *,
    model_dir=None,
    proc="/proc",
    bind_outcome=None,
):
    """Everything the preflight reads on this host: {paths, records, listeners, bind, exists, model}. FOUND_PATHS
    {variable: path}; RECORD_DIR the records' directory (None: not read); BIND addresses -> {address: 'ok' or why
    not}; EXISTS paths -> {path: whether it exists} (no rule reads these: the venv's python, to pick where flags are
    checked, and the guard's files, to remove them only where they are); MODEL_DIR the model directory whose files to
    check (model(); None: not read)."""
    outcome = bind_outcome or address_probes.bind_outcome
    return {
        "exists": {path: os.path.exists(path) for path in exists or ()},
        "paths": paths(found_paths),
        "records": records(record_dir) if record_dir else {},
        "listeners": listeners(proc) if scan_listeners else {},
        "bind": {address: outcome(address) for address in bind or ()},
        "model": model(model_dir) if model_dir else None,
    }
