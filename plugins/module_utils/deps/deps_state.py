# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What the deps role finds on a host before it builds anything, in one call (a run that changes nothing
asks pip nothing). Pure functions over an injected command runner and file reader; tests/unit/deps/test_deps_state.py.

    venv_state(venv, run, read, exists, untouched)
                                    {python, whole, checked, problems}: a planned venv is whole when its Python
                                    runs, its stamp is this run's and every requirement of its lists is installed
                                    at a version the list allows - with the dependencies of the packages pip
                                    installs with dependencies, as pip's resolver would ask for them; or, without
                                    running it, when its stamp is this run's and its site-packages did not change
                                    since the stamp was written (untouched_since_stamp)
    os_missing(packages, run)       the OS packages not installed (dpkg, else rpm), None when neither can tell
    in_use(records)                 the pythons the deployed units run (their records' python; each names a venv)
    account_drift(account)          what differs between the service account and its state directory and what
                                    roles/sglang/tasks/user.yml makes ([]: user.yml has nothing to do)

A venv that is not whole is built again by pip (which decides), verified and stamped; one that is whole is left
alone: nothing in it changed since it was verified, or the distribution check would see it. A requirement that is
not a plain name and version (a path, a URL) makes the venv not whole: pip decides, as before this check existed.
"""

import grp
import json
import os
import pwd
import re
import stat

from ansible_collections.disagg.sglang.plugins.module_utils.deps.venvs import STAMP

# Run by the venv's own Python: argv[1] is [[requirement, with_dependencies], ...]. Prints {"problems": [...]}.
# It parses requirements with the packaging library pip itself uses (pip._vendor.packaging where packaging is not
# installed), and reads the installed distributions with importlib.metadata, as pip's "already satisfied" does.
SATISFIED_SCRIPT = r"""
import importlib.metadata as md, json, re, sys
try:
    from packaging.requirements import InvalidRequirement, Requirement
except ImportError:
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()

problems, seen = [], set()

def check(req, deps, extras, via):
    if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in [""] + sorted(extras)):
        return
    try:
        dist = md.distribution(req.name)
    except md.PackageNotFoundError:
        problems.append(f"{req.name} is not installed{via}")
        return
    if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
        problems.append(f"{req.name} {dist.version} is installed, {req}{via} wants {req.specifier}")
        return
    if not deps or (key(req.name), tuple(sorted(req.extras))) in seen:
        return
    seen.add((key(req.name), tuple(sorted(req.extras))))
    for text in dist.requires or []:
        try:
            sub = Requirement(text)
        except InvalidRequirement:
            continue
        check(sub, True, req.extras, f" (required by {dist.metadata['Name']} {dist.version})")

for text, deps in json.loads(sys.argv[1]):
    try:
        req = Requirement(text)
    except InvalidRequirement:
        problems.append(f"{text} is not a name and version: pip decides")
        continue
    if req.url:
        problems.append(f"{text} names a URL: pip decides")
        continue
    check(req, deps, req.extras, "")
print(json.dumps({"problems": problems}))
"""


def requirements(packages, nodeps):
    """[[requirement, with_dependencies]] of a venv's two lists, in pip's order."""
    return [[str(p), True] for p in packages or []] + [[str(p), False] for p in nodeps or []]


def stamp_of(venv, key):
    return (venv.get("stamp") or {}).get(key) or []


def untouched_since_stamp(path, *, stat=os.stat, realpath=os.path.realpath):
    """Whether nothing was installed into or removed from the venv at PATH since its stamp was written: the
    site-packages directory of the Python its bin/python resolves to (lib/pythonX.Y/site-packages) is older than
    the stamp file. pip adds and removes a distribution's directories there (an uninstall, an upgrade, a
    directory removed by hand all change its mtime); the stamp is written after pip and the verification. False
    whenever it cannot tell: no stamp, a Python whose file name has no version, the site-packages of another
    Python than the one the venv was made with (a distribution upgrade of python3), an mtime not older."""
    match = re.search(r"python(\d+\.\d+)$", realpath(f"{path}/bin/python"))
    if not match:
        return False
    try:
        site = stat(f"{path}/lib/python{match.group(1)}/site-packages").st_mtime_ns
        return site < stat(f"{path}/{STAMP}").st_mtime_ns
    except OSError:
        return False


def venv_state(venv, run, read, exists, untouched=None):
    """{python, whole, checked, problems} of a planned venv {path, stamp}; the stamp names its lists (packages,
    nodeps). run(argv) -> (rc, out, err); read(path) -> text, or None when the file cannot be read; exists(path)
    -> bool; untouched(path) -> bool (untouched_since_stamp): a venv stamped for this run's set whose site-packages
    did not change since is whole without its distribution check (checked False: no interpreter runs; on a venv
    of a few hundred distributions the check costs about a second per venv and run)."""
    path = str(venv["path"]).rstrip("/")
    python = f"{path}/bin/python"
    if not exists(python):
        return {"python": False, "whole": False, "checked": False, "problems": ["it does not exist"]}
    stamp = read(f"{path}/{STAMP}")
    try:
        stamped = json.loads(stamp) if stamp is not None else None
    except ValueError:
        stamped = None
    if stamped == venv.get("stamp") and untouched is not None and untouched(path):
        return {"python": True, "whole": True, "checked": False, "problems": []}
    wanted = requirements(stamp_of(venv, "packages"), stamp_of(venv, "nodeps"))
    rc, out, err = run([python, "-c", SATISFIED_SCRIPT, json.dumps(wanted)])
    try:
        problems = list(json.loads(out)["problems"]) if rc == 0 else None
    except (ValueError, KeyError, TypeError):
        problems = None
    if problems is None:
        last = ((err or out or "").strip().splitlines() or [f"rc {rc}"])[-1]
        problems = [f"its distribution check did not run ({last})"]
    if stamped != venv.get("stamp"):
        problems.append(f"it has no {STAMP} (never verified)" if stamp is None
                        else f"its {STAMP} names another package set (not verified as it is)")  # fmt: skip
    return {"python": True, "whole": not problems, "checked": True, "problems": problems}


def os_missing(packages, run):
    """The OS packages of the list that are not installed, in list order; None when neither dpkg nor rpm answers
    (the package task then decides)."""
    if not packages:
        return []
    rc, out, _err = run(["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *packages])
    if rc in (0, 1) and (out or rc == 1):
        installed = {line.split(" ", 1)[0] for line in out.splitlines() if line.endswith(" install ok installed")}
        return [p for p in packages if p not in installed]
    rc, out, _err = run(["rpm", "-q", "--qf", "%{NAME}\\n", *packages])
    if rc >= 0 and out:
        installed = {line.strip() for line in out.splitlines() if " " not in line.strip()}
        return [p for p in packages if p not in installed]
    return None


def in_use(records):
    """The pythons the deployed units run (records {unit: record}); each names its venv (venvs.venv_of)."""
    return sorted(
        {r["python"] for r in (records or {}).values() if isinstance(r, dict) and isinstance(r.get("python"), str)}
    )


def account_drift(account, *, getpwnam=pwd.getpwnam, getgrnam=grp.getgrnam, lstat=os.lstat):
    """What differs between the host and ACCOUNT {user, group, home, groups, shell, comment, mode} as user.yml makes
    it: the group, the user (its primary group, home, shell and comment), its membership of each group of `groups`
    that exists on the host (a missing one is user.yml's warning, not a difference), and the state directory (home:
    a directory of the user and group with that mode). [] when everything is in place."""

    def group(name):
        try:
            return getgrnam(name)
        except KeyError:
            return None

    problems = []
    primary = group(account["group"])
    if primary is None:
        problems.append(f"group {account['group']} does not exist")
    try:
        user = getpwnam(account["user"])
    except KeyError:
        return [*problems, f"user {account['user']} does not exist"]
    wanted = {"home": (user.pw_dir, account["home"]), "shell": (user.pw_shell, account["shell"]),
              "comment": (user.pw_gecos, account.get("comment", user.pw_gecos))}  # fmt: skip
    problems += [f"user {account['user']} has {key} {have!r}, not {want!r}" for key, (have, want) in wanted.items()
                 if have != want]  # fmt: skip
    if primary is not None and user.pw_gid != primary.gr_gid:
        problems.append(f"user {account['user']} has another primary group than {account['group']}")
    for name in account.get("groups") or []:
        member = group(name)
        if member is not None and account["user"] not in member.gr_mem and member.gr_gid != user.pw_gid:
            problems.append(f"user {account['user']} is not in group {name}")
    try:
        st = lstat(account["home"])
    except OSError:
        return [*problems, f"{account['home']} does not exist"]
    if not stat.S_ISDIR(st.st_mode):
        problems.append(f"{account['home']} is not a directory")
    if st.st_uid != user.pw_uid or (primary is not None and st.st_gid != primary.gr_gid):
        problems.append(f"{account['home']} is not owned by {account['user']}:{account['group']}")
    if stat.S_IMODE(st.st_mode) != int(str(account["mode"]), 8):
        problems.append(f"{account['home']} has mode {stat.S_IMODE(st.st_mode):04o}, not {account['mode']}")
    return problems
