# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters over the workers' /metrics pages.

disagg.sglang.kv_transfer_report: the KV transfers the workers' /metrics show between two readings.
disagg.sglang.in_flight_requests: the requests a worker still holds (its drain is done at 0).
disagg.sglang.drain_said: how a worker out of the router drained, in one phrase (the roles' own plumbing).

Documentation: kv_transfer_report.yml, in_flight_requests.yml and drain_said.yml beside this file. Logic:
plugins/module_utils/monitoring/prom_text.py.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring.prom_text import (
    drain_said,
    in_flight,
    kv_transfer_report,
)


class FilterModule:
    def filters(self):
        return {
            "kv_transfer_report": kv_transfer_report,
            "in_flight_requests": in_flight,
            "drain_said": drain_said,
        }
