# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""disagg.sglang.kv_transfer_report: the KV transfers the workers' /metrics show between two readings.

Documentation: kv_transfer_report.yml beside this file. Logic: plugins/module_utils/prom_text.py.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.prom_text import kv_transfer_report


class FilterModule:
    def filters(self):
        return {"kv_transfer_report": kv_transfer_report}
