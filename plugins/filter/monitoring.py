# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""disagg.sglang.scrape_targets: Prometheus file_sd target groups of the workers, routers and HAProxy.

Documentation: monitoring.yml beside this file. Logic: plugins/module_utils/monitoring/monitoring.py.
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.module_utils.monitoring.monitoring import MonitoringError, scrape_targets


def scrape_targets_filter(workers, routers, cluster, addresses=None, balancers=None):
    """worker unit specs | scrape_targets(router unit specs, cluster, addresses={host: address},
    balancers={router host: sglang_router_lb or none})."""
    try:
        return scrape_targets(workers, routers, cluster, addresses, balancers)
    except (MonitoringError, TypeError) as exc:
        raise AnsibleFilterError(f"scrape_targets: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"scrape_targets": scrape_targets_filter}
