"""The preflight's stages on an inventory's variables, as roles/*/tasks/plan.yml run them on a host: dependency lists,
the variable table, the profile, the host plan, the PD contract, the router plan. `preflight` returns the messages
of the first stage that fails (tests/unit/plan/test_rules.py runs every bad-inventory row through it)."""

from pathlib import Path

import topology_fakes as tf
import yaml
from ansible_collections.disagg.sglang.plugins.action import router_plan as router_plan_action
from ansible_collections.disagg.sglang.plugins.module_utils.plan import cluster_rules, plan_inputs, router_plan
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan as plan_mod
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf
from inventory_vars import GROUPS, Resolved, host_vars

REPO = Path(__file__).resolve().parents[2]
# the roles of the variable table whose variables site.yml's preflight checks in its one task per host (host_plan)
PREFLIGHT_TABLE_ROLES = yaml.safe_load((REPO / "playbooks/preflight.yml").read_text())[0]["tasks"][0]["vars"][
    "_sglang_variable_roles"
]


def gather(fixture, tmp):
    """gpu_topology facts of a host of tests/fixtures/topology, gathered from its fixture."""
    return tf.gather(tf.load_host(fixture), tmp, "nvml")


def host_looks(v, worker_roles, missing=(), listeners=None):
    """What plan.yml's stat and listener scan would find on a converged sandbox host: every path the look
    stats exists as a directory except those in `missing`; `listeners` {port: owner}."""
    # the paths the preflight's look stats (plan_inputs.host_look)
    paths = plan_inputs.host_look(v, worker_roles, {}, False)["paths"]
    found = {var: {"path": path, "exists": var not in missing, "isdir": True} for var, path in paths.items()}
    return found, {str(k): o for k, o in (listeners or {}).items()}


def preflight(
    topology,
    *,
    groups=GROUPS,
    extra=None,
    host_extra=None,
    inventory="inventories/sandbox",
    with_units=False,
    missing=(),
    listeners=None,
):
    """The messages of the first preflight stage that fails, as roles/*/tasks/plan.yml compute them; [] if none.
    with_units: also the planned specs (the workers', then the routers'). missing: variables whose paths the
    host lacks; listeners: {port: owner} already listening on the host."""
    _templar, variables, v = host_vars(inventory=inventory, groups=groups, extra=extra, host_extra=host_extra)

    values = Resolved(variables, v)

    def table(role):
        """The role's step that checks its defined variables against module_utils/plan/variables.py."""
        return lambda: plan_inputs.table_problems(values, role)

    worker_roles = plan_inputs.worker_roles(values, list(groups))
    # the preflight's dependency checks (host_plan, where no venvs are named yet)
    stages = [lambda: plan_inputs.deps_problems(values, list(groups))]
    # host_plan's check of the variables of every play of site.yml (playbooks/preflight.yml names the roles), one step
    stages.append(lambda: [m for role in PREFLIGHT_TABLE_ROLES for m in table(role)()])
    found_paths, found_listeners = host_looks(values, worker_roles, missing, listeners)
    shared = {"settings": plan_inputs.settings(values, variables["_sglang_colocated"], v("sglang_deps_venv_paths")),
              "secrets": plan_inputs.secrets(values)}  # fmt: skip
    looks = {
        "variables": plan_inputs.user_vars(values),
        "conflicting_units": v("sglang_conflicting_units"),
        "host_paths": found_paths,
        "listeners": found_listeners,
    }
    found = plan_inputs.profile_file(v("sglang_profile"), str(REPO / inventory), str(REPO / "profiles"))
    profile = yaml.safe_load(Path(found["path"]).read_text()) if found["path"] else {}
    stages.append(lambda: found["problems"] if worker_roles else [])
    plan = plan_mod.host_plan(
        {
            "host": v("inventory_hostname"),
            "roles": worker_roles,
            **shared,
            "topology": topology if worker_roles else None,
            "strict": v("sglang_topology_strict"),
            "kv_p2p_policy": v("sglang_kv_p2p_policy"),
            "profile": profile,
            "profile_name": found["path"] or v("sglang_profile"),
            **looks,
        }
    )
    stages.append(lambda: plan["problems"])
    stages.append(
        lambda: plan_mod.pd_problems(
            plan["units"], {"compatible": v("sglang_engine_compatible_versions"), "batch": v("sglang_rolling_batch")}
        )
    )
    if "router" in groups:
        # the router's plan as disagg.sglang.router_plan (plugins/action/router_plan.py) derives its inputs
        look = {"paths": found_paths, "listeners": found_listeners}
        try:
            router_inputs = router_plan_action.router_inputs(values, v("inventory_hostname"), variables["groups"], look)
            router = router_plan.router_plans(plan["units"], router_inputs)
        except sf.FlagError as exc:  # an impl the table refuses never gets this far in a run
            router = {"problems": [str(exc)], "units": []}
        stages.append(table("sglang_router"))
        stages.append(
            lambda: (
                router["problems"]
                + cluster_rules.deployment_api_key_problems(
                    {v("inventory_hostname"): v("sglang_worker_api_key")}, v("sglang_router_api_key")
                )
            )
        )
    for stage in stages:
        messages = stage()
        if messages:
            return (messages, []) if with_units else messages
    if with_units:
        return [], plan["units"] + (router["units"] if "router" in groups else [])
    return []
