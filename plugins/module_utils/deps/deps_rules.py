# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The rules on the dependency lists (sglang_deps_packages, sglang_deps_packages_nodeps, sglang_deps_router_packages,
sglang_deps_wheelhouse): pure functions that return messages, each naming the variable and the fix.

The engine's own pin is venvs.engine_problems; which router the router venv must hold is plan/router_rules.py's
router_packages_problems. tests/unit/test_deps_rules.py holds their table, tests/cases/bad_inventories.yml a row each.
"""

import re


def requirement_name(requirement):
    """The distribution a pip requirement names, normalized (PEP 503): 'SGLang_Router==0.3.2' -> 'sglang-router'."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ ;\[@]", requirement.strip(), maxsplit=1)[0]).lower()


def _requirement_key(requirement):
    """A requirement as pip reads it: the normalized name and the rest without blanks ('SGLang == 0.5.23' is
    'sglang==0.5.23')."""
    rest = re.split(r"(?=[<>=!~ ;\[@])", requirement.strip(), maxsplit=1)[1:]
    return requirement_name(requirement) + re.sub(r"\s+", "", "".join(rest)).lower()


def package_twice_problems(lists):
    """A distribution named more than once among the lists of one venv (LISTS: [(variable, requirements)]): pip cannot
    install two versions into one venv (sglang==0.5.23 beside sglang==0.5.22 fails the deps step, after the preflight),
    and the same requirement twice says nothing the list does not say once."""
    seen = {}
    for var, requirements in lists:
        for requirement in requirements:
            seen.setdefault(requirement_name(requirement), []).append((var, requirement.strip()))
    problems = []
    for dist, found in seen.items():
        if len(found) < 2:
            continue
        where = list(dict.fromkeys(var for var, _r in found))
        times = "twice" if len(found) == 2 else f"{len(found)} times"
        named = f"{where[0]} names {dist} {times}" if len(where) == 1 else (
            f"{' and '.join(where)} both name {dist}")  # fmt: skip
        given = ", ".join(r for _v, r in found)
        if len({_requirement_key(r) for _v, r in found}) > 1:
            problems.append(f"{named} with different requirements ({given}): one venv holds one version of it, and "
                            "pip refuses the pair or takes one of them. Keep the one requirement you mean")  # fmt: skip
        else:
            problems.append(f"{named} ({given}): one venv installs it once. Keep one of them, in one list")
    return problems


def engine_list_problems(packages, packages_nodeps):
    """What the engine venv's lists (sglang_deps_packages, then sglang_deps_packages_nodeps) may not hold: sgl-kernel
    beside sglang-kernel, NIXL with its dependencies, a package twice."""
    problems = []
    if any(re.match(r"^sgl[-_]kernel([<>=!~ \[]|$)", p) for p in packages + packages_nodeps):
        problems.append(
            "sglang_deps_packages or sglang_deps_packages_nodeps lists sgl-kernel: sglang 0.5.23 brings "
            "sglang-kernel, which ships the same import name (sgl_kernel). Remove sgl-kernel from the list"
        )
    nixl = [p for p in packages if p.startswith("nixl")]
    if nixl:
        problems.append(
            f"sglang_deps_packages names {', '.join(nixl)}: with its dependencies the nixl meta package pulls both "
            "nixl-cu12 and nixl-cu13 and torch. Move the NIXL packages to sglang_deps_packages_nodeps (nixl==1.5.1 "
            "and nixl-cu13==1.5.1 for sglang 0.5.23's CUDA 13 stack)"
        )
    # the engine venv gets both lists
    return problems + package_twice_problems(
        [("sglang_deps_packages", packages), ("sglang_deps_packages_nodeps", packages_nodeps)]
    )


def deps_problems(packages, packages_nodeps, wheelhouse, router_packages=None, *, engine=True, router=True):
    """The venvs' package lists: shapes, sgl-kernel beside sglang-kernel, NIXL without its dependencies, a package
    twice in one venv. What a list holds is judged only where its venv is built: the engine lists' where ENGINE (a
    worker host), the router list's where ROUTER (a router host); their shapes everywhere (every host names both
    venvs, deps/venvs.py)."""
    problems = []
    lists = [("sglang_deps_packages", packages), ("sglang_deps_packages_nodeps", packages_nodeps)]
    if router_packages is not None:
        lists.append(("sglang_deps_router_packages", router_packages))
    for var, value in lists:
        if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
            problems.append(f"{var} must be a list of pip requirement strings, got {value!r}")
    if problems:
        return problems
    if engine:
        problems += engine_list_problems(packages, packages_nodeps)
    if router and router_packages is not None:  # the router's venv gets its own list
        problems += package_twice_problems([("sglang_deps_router_packages", router_packages)])
    if wheelhouse and (not isinstance(wheelhouse, str) or not wheelhouse.startswith("/")):
        problems.append(f'sglang_deps_wheelhouse ({wheelhouse!r}) must be an absolute path on the host, or ""')
    return problems
