"""Every row of tests/cases/bad_inventories.yml on the plan's pure functions, in the order the preflight play runs
them (dependency lists, profile, host plan, PD contract, router plan): each fails with its message fragments.
The same inputs, without the row's change, plan cleanly. Rows that need the installed program's parser or a look
at the host are proved elsewhere (tests/unit/test_cli_check.py, the sandbox rows)."""

from pathlib import Path

import pytest
import topology_fakes as tf
import yaml
from ansible_collections.disagg.sglang.plugins.filter.plan import FilterModule
from ansible_collections.disagg.sglang.plugins.module_utils import gpu_topology as gt
from inventory_vars import GROUPS, host_vars

REPO = Path(__file__).resolve().parents[2]
ROWS = yaml.safe_load((REPO / "tests/cases/bad_inventories.yml").read_text())
F = FilterModule().filters()


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    """gpu_topology facts of the sandbox's 8x RTX PRO 6000 host, gathered from its fixture."""
    spec = tf.load_host("rtxpro6000-8x")
    root = tf.write_sysfs(tmp_path_factory.mktemp("sysfs"), spec.get("sysfs"), spec["dir"])
    return gt.gather(
        sysfs_root=root,
        nvidia_smi_path="/nonexistent",
        runner=tf.FakeSmi(),
        nvml_loader=tf.nvml_loader(spec["dir"], spec["nvml"]),
        source="nvml",
    )


def preflight(
    topology, *, groups=GROUPS, extra=None, host_extra=None, inventory="inventories/sandbox", with_units=False
):
    """The messages of the first preflight stage that fails, as roles/*/tasks/plan.yml compute them; [] if none.
    with_units: also the planned specs (the workers', then the router's)."""
    _templar, _variables, v = host_vars(inventory=inventory, groups=groups, extra=extra, host_extra=host_extra)
    stages = []
    stages.append(lambda: F["deps_problems"](v("sglang_deps_packages"), v("sglang_deps_packages_nodeps"),
                                             v("sglang_deps_wheelhouse")))  # fmt: skip
    worker_roles = v("_sglang_worker_roles")
    found = F["profile_file"](v("sglang_profile"), str(REPO / inventory), str(REPO / "profiles"))
    profile = yaml.safe_load(Path(found["path"]).read_text()) if found["path"] else {}
    stages.append(lambda: found["problems"] if worker_roles else [])
    plan = F["host_plan"](
        {
            "host": v("inventory_hostname"),
            "roles": worker_roles,
            "settings": v("_sglang_settings"),
            "secrets": v("_sglang_secrets"),
            "topology": topology if worker_roles else None,
            "strict": v("sglang_topology_strict"),
            "kv_p2p_policy": v("sglang_kv_p2p_policy"),
            "profile": profile,
            "profile_name": found["path"] or v("sglang_profile"),
        }
    )
    stages.append(lambda: plan["problems"])
    stages.append(lambda: F["pd_problems"](plan["units"]))
    if "router" in groups:
        extra_flags = v("sglang_router_extra_flags")
        router_inputs = {
            "host": v("inventory_hostname"),
            "settings": v("_sglang_settings"),
            "secrets": v("_sglang_secrets"),
            "unit": "sglang-router",
            "flags": {**v("_sglang_router_flags"), **(extra_flags if isinstance(extra_flags, dict) else {})},
            "extra_flags": extra_flags,
            "env": v("sglang_router_extra_env"),
            "ports": {
                "sglang_router_port": v("sglang_router_port"),
                "sglang_router_prometheus_port": v("sglang_router_prometheus_port"),
            },
        }
        router = F["router_plan"](plan["units"], router_inputs)
        stages.append(lambda: router["problems"])
    for stage in stages:
        messages = stage()
        if messages:
            return (messages, []) if with_units else messages
    if with_units:
        return [], plan["units"] + ([router["unit"]] if "router" in groups else [])
    return []


def collapse(text):
    return " ".join(str(text).split())


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, id=r["id"]) for r in ROWS if r.get("checked_by", "rules") == "rules" and not r.get("xfail")],
)
def test_bad_inventory_row_fails_with_its_message(topology, row):
    messages = preflight(topology, groups=tuple(row.get("groups") or GROUPS), extra=row.get("extra"),
                         host_extra=row.get("host_vars"))  # fmt: skip
    text = collapse(". ".join(messages) + ".")
    assert messages, f"{row['id']}: planned without a problem"
    missing = [fragment for fragment in row["expect"] if collapse(fragment) not in text]
    assert not missing, f"{row['id']}: {missing} not in: {text}"


def test_the_sandbox_inventory_plans_cleanly(topology):
    assert preflight(topology) == []


def test_the_table_has_distinct_rows():
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids))
