# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters over the workers' /metrics pages.

disagg.sglang.kv_transfer_report: the KV transfers the workers' /metrics show between two readings.
disagg.sglang.in_flight_requests: the requests a worker still holds (its drain is done at 0).

Documentation: kv_transfer_report.yml and in_flight_requests.yml beside this file. Logic:
plugins/module_utils/monitoring/prom_text.py. The roles' own drain (prom_text.in_flight, drain_said) is the
batch_restart module's, for the rolling batch and the retirement alike.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.monitoring.prom_text import (
    in_flight,
    kv_transfer_report,
)


class FilterModule:
    def filters(self):
        return {
            "kv_transfer_report": kv_transfer_report,
            "in_flight_requests": in_flight,
        }
