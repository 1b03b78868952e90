"""Versioned venvs (module_utils/deps/venvs.py) and the KV contract across a change (plan.pd_problems): table tests."""

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.deps import venvs
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan, plan_inputs

BASE = {"dir": "/opt/sglang/venvs", "packages": ["sglang==0.5.23", "nvidia-ml-py==13.615.71"],
        "nodeps": ["nixl==1.5.1"], "router_packages": ["sglang-router==0.3.2"], "python": "python3",
        "wheelhouse": "", "module": "sglang.launch_server"}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "engine_moves", "router_moves"),
    [
        ({}, False, False),
        ({"packages": ["sglang==0.5.24", "nvidia-ml-py==13.615.71"]}, True, False),
        ({"packages": ["nvidia-ml-py==13.615.71", "sglang==0.5.23"]}, True, False),  # pip reads the list in order
        ({"nodeps": ["nixl==1.5.2"]}, True, False),
        ({"router_packages": ["sglang-router==0.3.3"]}, False, True),
        ({"python": "python3.11"}, True, True),
        ({"wheelhouse": "/opt/wheelhouse"}, True, True),
        ({"dir": "/srv/venvs"}, True, True),
        ({"module": "sglang_pd_sim"}, False, False),  # the module picks the engine's pin, not the venv
    ],
)
def test_a_venv_is_named_by_what_makes_it_and_the_engine_and_router_move_apart(change, engine_moves, router_moves):
    before, after = venvs.venvs(BASE), venvs.venvs({**BASE, **change})
    assert (before["engine"] != after["engine"], before["router"] != after["router"]) == (engine_moves, router_moves)
    assert after["engine"].startswith(f"{after['engine'].rsplit('/', 1)[0]}/engine-")
    assert after["router"].rsplit("/", 1)[1].startswith("router-")
    assert after["engine_stamp"]["packages"] == ({**BASE, **change})["packages"]


@pytest.mark.parametrize(
    ("module", "packages", "want"),
    [
        ("sglang.launch_server", ["sglang==0.5.23"], "0.5.23"),
        ("sglang.launch_server", ["sglang[all] == 0.5.23"], "0.5.23"),
        ("sglang_pd_sim", ["numpy", "sglang-pd-sim==0.2.0"], "0.2.0"),
        ("sglang_pd_sim", ["SGLang_PD.Sim===0.1.0"], "0.1.0"),
        ("sglang.launch_server", ["sglang>=0.5.23"], None),
        ("sglang.launch_server", ["sglang"], None),
        ("sglang.launch_server", ["sglang-router==0.3.2"], None),
        ("sglang.launch_server", [], None),
    ],
)
def test_the_engine_version_is_its_exact_pin(module, packages, want):
    assert venvs.engine_of(module, packages)["version"] == want
    assert (venvs.engine_problems(module, packages) == []) is (want is not None)


def stamp(path, mtime):
    return venvs.found(f"{path}/{venvs.STAMP}", mtime)


@pytest.mark.parametrize(
    ("found", "in_use", "current", "removed"),
    [
        # first run: one venv of each kind, nothing to remove
        ([("engine-a", 1), ("router-a", 1)], ["engine-a", "router-a"], ["engine-a", "router-a"], []),
        # upgrade done: a (previous) is kept beside b (current, in use)
        ([("engine-a", 1), ("engine-b", 2)], ["engine-b"], ["engine-b"], []),
        # the third: the oldest goes, the previous stays
        ([("engine-a", 1), ("engine-b", 2), ("engine-c", 3)], ["engine-c"], ["engine-c"], ["engine-a"]),
        # --tags deps: c built, the units still run b: b is the previous one, a goes
        ([("engine-a", 1), ("engine-b", 2), ("engine-c", 3)], ["engine-b"], ["engine-c"], ["engine-a"]),
        # a unit still runs the oldest (a failed host of an earlier run): never removed
        ([("engine-a", 1), ("engine-b", 2), ("engine-c", 3)], ["engine-a", "engine-c"], ["engine-c"], ["engine-b"]),
        # kinds are counted apart; a stamped directory of another name is never ours to remove
        ([("engine-a", 1), ("engine-b", 2), ("router-a", 1), ("router-b", 2), ("router-c", 3), ("other", 0)],
         ["engine-b", "router-c"], ["engine-b", "router-c"], ["router-a"]),
    ],
)  # fmt: skip
def test_the_venvs_a_host_no_longer_needs(found, in_use, current, removed):
    root = "/opt/sglang/venvs"
    got = venvs.to_remove(
        [stamp(f"{root}/{name}", mtime) for name, mtime in found],
        [venvs.venv_of(f"{root}/{name}/bin/python") for name in in_use],
        [f"{root}/{name}" for name in current],
    )
    assert got == [f"{root}/{name}" for name in removed]


def spec(unit, role, engine, host="h1", page="256"):
    flags = {"page-size": page, "kv-cache-dtype": "fp8_e4m3", "disaggregation-transfer-backend": "nixl"}
    return {"unit": unit, "role": role, "host": host, "engine": engine, "flags": flags}


V1, V2 = "sglang 0.5.23", "sglang 0.5.24"
TWO_BY_TWO = [("sglang-prefill0", "prefill"), ("sglang-prefill1", "prefill"), ("sglang-decode0", "decode"),
              ("sglang-decode1", "decode")]  # fmt: skip


def deployed(engine, page="256"):
    from ansible_collections.disagg.sglang.plugins.module_utils.units import units  # noqa: PLC0415

    contracts = {u: units.kv_contract(spec(u, r, engine, page=page))["values"] for u, r in TWO_BY_TWO}
    return {"h1": {u: {"kv_contract": c} for u, c in contracts.items()}}


@pytest.mark.parametrize(
    ("planned", "inputs", "fragments"),
    [
        # one version everywhere, nothing deployed: fine
        ([spec(u, r, V1) for u, r in TWO_BY_TWO], {}, []),
        # prefill and decode on different versions, not declared compatible
        ([spec("sglang-prefill0", "prefill", V2), spec("sglang-decode0", "decode", V1)], {},
         ["The engine version differs between PD workers: sglang 0.5.24 on sglang-prefill0@h1",
          "list them in one group of sglang_engine_compatible_versions"]),
        # ... declared compatible: fine
        ([spec("sglang-prefill0", "prefill", V2), spec("sglang-decode0", "decode", V1)],
         {"compatible": [["0.5.23", "0.5.24"]]}, []),
        # an upgrade of a 2P2D deployment that would roll: refused, naming the fix
        ([spec(u, r, V2) for u, r in TWO_BY_TWO], {"batch": 1, "deployed": deployed(V1)},
         ["moves sglang-prefill0@h1 (engine: sglang 0.5.23 -> sglang 0.5.24)", "Set sglang_rolling_batch: 0"]),
        # ... with the versions declared compatible: it rolls
        ([spec(u, r, V2) for u, r in TWO_BY_TWO],
         {"batch": 1, "deployed": deployed(V1), "compatible": [["0.5.23", "0.5.24"]]}, []),
        # ... with every changed worker restarted at once: no old and new together
        ([spec(u, r, V2) for u, r in TWO_BY_TWO], {"batch": 0, "deployed": deployed(V1)}, []),
        # a page size change of every worker would roll too
        ([spec(u, r, V1, page="128") for u, r in TWO_BY_TWO], {"batch": 1, "deployed": deployed(V1)},
         ["(page-size: 256 -> 128)"]),
        # 1P1D restarts both at once (no redundancy): no roll
        ([spec("sglang-prefill0", "prefill", V2), spec("sglang-decode0", "decode", V2)],
         {"batch": 1, "deployed": deployed(V1)}, []),
        # a record of before the contract was recorded: not compared
        ([spec(u, r, V2) for u, r in TWO_BY_TWO], {"batch": 1, "deployed": {"h1": {"sglang-prefill0": {}}}}, []),
        # bad declarations
        ([spec("sglang-prefill0", "prefill", V1)], {"compatible": ["0.5.23"]}, ["must be a list of lists"]),
        ([spec("sglang-prefill0", "prefill", V1)], {"compatible": [["0.5.23"], ["0.5.23", "0.5.24"]]},
         ["names 0.5.23 in more than one group"]),
    ],
)  # fmt: skip
def test_prefill_and_decode_on_different_kv_contracts_never_serve_together(planned, inputs, fragments):
    text = ". ".join(plan.pd_problems(planned, inputs))
    if not fragments:
        assert text == ""
    for fragment in fragments:
        assert fragment in text, text


@pytest.mark.parametrize(
    ("impl", "want"),
    [
        ("sglang_router", ["--router-module", "sglang_router.launch_router", "--router-dist", "sglang-router",
                           "--other-router-dists", "smg"]),
        ("smg", ["--router-module", "smg.launch_router", "--router-dist", "smg",
                 "--other-router-dists", "sglang-router"]),
        ("nginx", []),  # not a router the collection runs: the router host's dependency checks refuse it first
    ],
)  # fmt: skip
def test_the_router_venv_is_verified_for_the_chosen_router_and_against_the_other(impl, want):
    """roles/sglang_deps/tasks/build.yml passes router_verify to verify_venv.py for the router venv."""
    paths = plan_inputs.venv_paths({"sglang_router_impl": impl, "sglang_venvs_dir": BASE["dir"],
                                    "sglang_deps_router_packages": BASE["router_packages"]})  # fmt: skip
    assert paths["router_verify"] == want
    assert paths["router"].startswith(f"{BASE['dir']}/router-")
