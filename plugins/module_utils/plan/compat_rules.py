# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The tested (router, engine, NIXL) combinations, as data in one place, and the rule that refuses a plan
outside them.

Router and engine versions are coupled (field-2026-12.md, "PD operational pain points" 7: SMG's servicer broke on
sglang 0.5.13, 0.5.16 and 0.5.18; metric and field names drift between versions), and NIXL is the KV path between
prefill and decode. A deployment runs the router of sglang_router_impl at the version sglang_deps_router_packages pins,
the engine each worker spec names (its "engine": the package of sglang_server_module at its == pin,
deps/venvs.engine_of) and the NIXL that sglang_deps_packages_nodeps (or sglang_deps_packages) pins. Each is judged
where it runs: the router's version as its router host's lists pin it, each worker's engine and NIXL as its worker
host's lists pin them (the worker spec's "engine" and "nixl"), so a router host that installs no engine and no NIXL
names neither. A combination no row of TESTED holds is refused, naming it and
sglang_router_allow_untested_combination, which runs it knowingly.

Each row: every router of `routers` with every engine of `engines` and every NIXL of `nixl` is tested, with the
evidence. tests/unit/plan/test_compat_rules.py checks that every inventory this repository ships, and the sandbox's
simulator releases, plan inside the table.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.deps import venvs

# The variable that runs an untested combination knowingly
ALLOW_VAR = "sglang_router_allow_untested_combination"
# How a version that is not pinned stands in a combination (it is in no row)
UNPINNED = "(not pinned with ==)"

TESTED = (
    {
        "routers": ("sglang-router 0.3.2",),
        "engines": ("sglang 0.5.23",),
        "nixl": ("1.5.1",),
        "evidence": "shared/notes/sglang-pd-facts.md (sglang 0.5.23, sglang-router 0.3.2 and nixl 1.5.1 read and run "
        "together, 2026-11); the NIXL transfer measured on a lent 2x H200 with nixl 1.5.1 + nixl-cu13 1.5.1",
        # A prefill answering 5xx: the router waits for the decode leg (its KV wait) on each of its attempts
        # (tests/integration/test_pd_router.py test_a_prefill_5xx_and_the_decode_leg, the double as sglang 0.5.23)
        "prefill_5xx_ends_decode_leg": False,
    },
    {
        "routers": ("smg 1.13.0",),
        "engines": ("sglang 0.5.23",),
        "nixl": ("1.5.1",),
        "evidence": "the real smg 1.13.0 in the sandbox in front of the simulator answering as sglang 0.5.23 "
        "(tests/integration/test_faults.py, test_multihost.py); its HTTP PD syntax is sglang-router 0.3.2's "
        "(field-2026-12.md). Not run with sglang 0.5.23 itself on GPUs",
        # A prefill answering 5xx: SMG answers the client at once and closes the decode leg (same test)
        "prefill_5xx_ends_decode_leg": True,
    },
    {
        "routers": ("sglang-router 0.3.2", "smg 1.13.0"),
        # tests/sandbox/pdsim: 0.1.0, 0.2.0 (a flag only it knows) and 0.2.1 (never becomes healthy: the rollback
        # tests need the plan to accept it)
        "engines": ("sglang-pd-sim 0.1.0", "sglang-pd-sim 0.2.0", "sglang-pd-sim 0.2.1"),
        "nixl": ("1.5.1",),
        "evidence": "the sandbox: the PD simulator's releases (tests/sandbox/pdsim) with both routers and nixl 1.5.1 "
        "from the offline wheelhouse (tests/sandbox/wheelhouse.py)",
    },
    {
        # the SMG release before 1.13.0, kept so that a router version change can be tested (smg 1.12.0 -> 1.13.0)
        "routers": ("smg 1.12.0",),
        "engines": ("sglang-pd-sim 0.1.0",),
        "nixl": ("1.5.1",),
        "evidence": "the sandbox: tests/integration/test_routers.py switches sglang-router 0.3.2 to it in front of the "
        "simulator 0.1.0 (from the offline wheelhouse) and upgrades it to 1.13.0 under load, on one router host and on "
        "two; its own parser (the 1.12.0 wheel) takes every flag the router plan emits (1.13.0 adds --discovery-*, "
        "--tenant-*, --priority-scheduler-* and others, which the plan does not emit). Not run with sglang itself",
    },
)


def pinned(dist, packages):
    """ "DIST VERSION" of DIST's == pin in PACKAGES (requirement strings; deps/venvs.engine_of reads the engine's pin
    the same way), or "DIST (not pinned with ==)"."""
    return f"{dist} {venvs.engine_of(dist, packages)['version'] or UNPINNED}"


def tested(router, engine, nixl, table=TESTED):
    """Whether a row of TABLE holds the combination ("dist version" of router, engine and NIXL)."""
    return any(router in row["routers"] and engine in row["engines"] and nixl in [f"nixl {v}" for v in row["nixl"]]
               for row in table)  # fmt: skip


def pairs(engines, nixl=None):
    """The distinct (engine, NIXL) pairs of the workers, sorted: ENGINES holds each worker's engine "dist version"
    (run with NIXL) or its (engine, nixl) pair, as its worker host pins them."""
    return sorted({(e, nixl) if isinstance(e, str) else (e[0], e[1]) for e in engines or []})


def combination_problems(router, engines, nixl=None, allow=False, table=TESTED):
    """The deployment's combinations outside TABLE, one message naming them all, unless ALLOW
    (sglang_router_allow_untested_combination). ROUTER: "dist version" of the router (pinned); ENGINES: the
    "dist version" of each worker's engine, each with NIXL ("nixl version"), or each worker's (engine, nixl) pair."""
    if allow is True:
        return []
    outside = [(e, n) for e, n in pairs(engines, nixl) if not tested(router, e, n, table)]
    if not outside:
        return []
    combos = "; ".join(f"router {router}, engine {e}, {n}" for e, n in outside)
    rows = "; ".join(
        f"{' or '.join(row['routers'])} with {' or '.join(row['engines'])} and nixl {' or '.join(row['nixl'])}"
        for row in table
    )
    return [
        f"This deployment runs a combination that was never tested together: {combos}. Tested: {rows} "
        "(plugins/module_utils/plan/compat_rules.py). Pin a tested combination (sglang_deps_router_packages, "
        f"sglang_deps_packages, sglang_deps_packages_nodeps), or set {ALLOW_VAR}: true to run it knowingly"
    ]


def untested_warnings(router, engines, nixl=None, allow=False, table=TESTED):
    """What a run that allows an untested combination says instead of refusing it."""
    if allow is not True:
        return []
    allowed = f"Allowed by {ALLOW_VAR}; to leave it, pin a tested combination"
    return [
        m.replace("Pin a tested combination", allowed)
        for m in combination_problems(router, engines, nixl, False, table)
    ]
