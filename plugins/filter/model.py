# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the model staging step (roles/sglang/tasks/model.yml).

disagg.sglang.model_staging_plan: which worker host fetches a revision from its source and which copy it from there.
disagg.sglang.model_staging_report: the bytes from outside and from the peers, and their GB/s.

Documentation: model_staging_plan.yml and model_staging_report.yml beside this file. Logic:
plugins/module_utils/model/cluster.py.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.model.cluster import report, staging_plan


class FilterModule:
    def filters(self):
        return {
            "model_staging_plan": staging_plan,
            "model_staging_report": report,
        }
