# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""disagg.sglang.pd_placement: GPUs, NUMA node and CPUs for each prefill/decode instance.

Documentation: pd_placement.yml beside this file. Logic: plugins/module_utils/plan/pd_placement.py.
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.disagg.sglang.plugins.module_utils.plan.pd_placement import PlacementError, place


def pd_placement(gpu_topology, instances, strict=False):
    """gpu_topology facts | pd_placement([{name, tp} or {name, gpus}, ...], strict=false)."""
    try:
        return place(gpu_topology, instances, strict=boolean(strict, strict=True))
    except (PlacementError, TypeError) as exc:
        raise AnsibleFilterError(f"pd_placement: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"pd_placement": pd_placement}
