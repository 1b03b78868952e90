# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The router unit of one host in one task (documentation: plugins/modules/router_plan.py).

On the controller, from the task's variables and the deployment's worker specs (O(workers)): the router's variables
against the collection's table, then router_plan.router_plans on the inputs (module_utils/plan/plan_inputs.py derives
what every unit of a host shares, as the preflight's host_plan does), and the rule that the workers' API key is the
router's (cluster_rules.deployment_api_key_problems: the key of each worker host as its own variables give it, and
this host's, which its router registers the workers with). Nothing runs on the host: what it read there is the
preflight's look (O(look), host_plan's registered result)."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disagg.sglang.plugins.action.host_plan import TaskVariables
from ansible_collections.disagg.sglang.plugins.module_utils.plan import (
    cluster_rules,
    compat_rules,
    plan,
    plan_inputs,
    router_plan,
)
from ansible_collections.disagg.sglang.plugins.module_utils.units import router_flags as rf
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf

OPTIONS = {
    "workers": {"type": "list", "elements": "dict", "required": True},
    "look": {"type": "dict", "default": {}},
    "variables": {"type": "str"},
}
# the router's listeners, by the variable that sets each (router_plan.router_plan's ports)
PORTS = ("sglang_router_port", "sglang_router_prometheus_port")


def router_inputs(v, host, groups, look):
    """router_plan.router_plans' inputs from the host's variables V (templated when read) and LOOK (host_look's paths
    and listeners as host_plan returned them). KeyError names a variable that is not defined (the router role's defaults
    define every one); sf.FlagError an sglang_router_impl the collection does not run."""
    impl = v["sglang_router_impl"]
    flag_variables = list(rf.router_impl(impl)["flags"].values())
    return {
        "host": host,
        "impl": impl,
        "settings": plan_inputs.settings(v, plan_inputs.colocated(groups), dict(v.get("sglang_deps_venv_paths") or {})),
        "secrets": plan_inputs.secrets(v),
        "unit": f"{v['sglang_unit_prefix']}router",
        "flag_values": {name: v[name] for name in flag_variables},
        "extra_flags": v["sglang_router_extra_flags"],
        "env": v["sglang_router_extra_env"],
        "variables": plan_inputs.user_vars(v),
        "conflicting_units": v["sglang_conflicting_units"],
        "host_paths": look.get("paths") or {},
        "listeners": look.get("listeners") or {},
        "ports": {name: v[name] for name in PORTS},
        "instances": v["sglang_router_instances"],
        # with instances: HAProxy in front (module_utils/router/lb.py), the instances on sglang_router_instance_host
        "lb": _lb_inputs(v, groups) if v["sglang_router_instances"] else {},
        # the router this host's venv pins; each worker's engine and NIXL are its spec's, as its own host's lists
        # pin them (a router host installs no engine and no NIXL): compat_rules.TESTED
        "versions": {
            "router": compat_rules.pinned(rf.router_impl(impl)["dist"], v["sglang_deps_router_packages"]),
            "allow": v[compat_rules.ALLOW_VAR],
        },
    }


def _lb_inputs(v, groups):
    """router_rules.lb_problems' inputs: where the router instances bind, the deployment's router hosts, and the
    ports HAProxy listens on (the clients' and its exporter's)."""
    return {
        "instance_host": v["sglang_router_instance_host"],
        "router_hosts": list((groups or {}).get("router") or []),
        "public_port": v["sglang_router_port"],
        "stats_port": v["sglang_router_lb_stats_port"],
    }


def worker_keys(task_vars, templar, workers):
    """{host: sglang_worker_api_key} of each worker host whose specs (WORKERS) take a key (their secret_env names
    SGLANG_WORKER_API_KEY), read from that host's variables: the key its workers require is its own, whatever the
    router host's variables say."""
    hostvars = task_vars.get("hostvars") or {}
    keyed = sorted({str(s.get("host")) for s in workers if "SGLANG_WORKER_API_KEY" in (s.get("secret_env") or {})})
    return {host: templar.template(hostvars[host].get("sglang_worker_api_key")) for host in keyed if host in hostvars}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=OPTIONS)
        v = TaskVariables(self._templar, task_vars)
        host = task_vars["inventory_hostname"]
        problems = plan_inputs.table_problems(v, args["variables"]) if args.get("variables") else []
        if not problems:
            try:
                inputs = router_inputs(v, host, task_vars.get("groups"), dict(args.get("look") or {}))
            except KeyError as exc:
                raise AnsibleActionFail(f"the router's plan reads {exc.args[0]}, which is not defined") from exc
            except sf.FlagError as exc:
                problems = [str(exc)]
        if not problems:
            planned = router_plan.router_plans(list(args["workers"]), inputs)
            problems = list(planned["problems"])
            keys = {host: v.get("sglang_worker_api_key"), **worker_keys(task_vars, self._templar, args["workers"])}
            problems += cluster_rules.deployment_api_key_problems(keys, v.get("sglang_router_api_key"))
        if problems:
            return {**result, "failed": True, "changed": False, "msg": ". ".join(problems) + "."}
        units = planned["units"]
        deployed = dict(v.get("sglang_deployed") or {})
        if planned["warnings"]:
            result["warnings"] = list(planned["warnings"])
        result.update(
            changed=False,
            # every router unit of the host (sglang_router_instances), and the first, which the worker roles' rolling
            # and retire steps and the single-router readers (site.yml, monitoring) read as sglang_router_unit
            units=units,
            unit=units[0],
            # the host's router instances as HAProxy's servers (none without sglang_router_instances): every router
            # host's go into every router host's HAProxy (tasks/plan.yml, the filter disagg.sglang.router_lb_plan)
            lb_routers=planned["lb_routers"],
            # the program each deployed router unit runs: the run talks to it until it restarts it
            running_impls={u["unit"]: rf.running_impl(deployed.get(u["unit"]), u["impl"]) for u in units},
            running_impl=rf.running_impl(deployed.get(units[0]["unit"]), units[0]["impl"]),
            # where the worker API calls of a run reach each router (router_workers' routers): its unit, host, the
            # URL and readiness URL it answers at now and the program that answers there. That is its deployed
            # record's until this run restarts it: the workers' play runs before the router's, so a router whose
            # address this run moves (a second router host joins: sglang_router_instance_host leaves loopback)
            # still answers at its old address while the workers roll and retire.
            endpoints=[
                {
                    "unit": u["unit"],
                    "host": host,
                    **rf.running_urls(deployed.get(u["unit"]), u),
                    "implementation": rf.running_impl(deployed.get(u["unit"]), u["impl"]),
                }
                for u in units
            ],
            # whether the routers' command lines still need their parser's check: not where each router's record says
            # this parser accepted this command line (units.argv_key, as plan.cli_check_groups leaves it out)
            cli_check=len(plan.cli_check_groups({host: units}, {}, {host: deployed})) > 0,
        )
        return result
