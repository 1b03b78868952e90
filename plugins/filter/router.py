# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the router's plan (roles/sglang_router/tasks/plan.yml).

disagg.sglang.router_lb_plan: HAProxy's configuration on one router host, over every router instance of the
deployment.

Documentation: router_lb_plan.yml beside this file. Logic: plugins/module_utils/router/lb.py (plan).
"""

from ansible_collections.disagg.sglang.plugins.module_utils.router import lb


def router_lb_plan(by_host, listen):
    """lb.plan: {spec, problems}."""
    return lb.plan(dict(by_host or {}), dict(listen or {}))


class FilterModule:
    def filters(self):
        return {"router_lb_plan": router_lb_plan}
