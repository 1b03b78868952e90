#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Read a GPU host's readiness settings, changing nothing (the logic: module_utils/host/readiness_look)."""

DOCUMENTATION = r"""
---
module: host_readiness
short_description: Read the host settings that decide a PCIe GPU box's peer-to-peer lane and stability
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Reads, without changing anything, the settings of a GPU host that decide whether the KV cache gets a
    peer-to-peer PCIe lane between two GPUs and whether the box stays steady, and returns them as
    C(ansible_facts.host_readiness).
  - "Files read under O(root): C(proc/cmdline) (the IOMMU and ASPM kernel parameters),
    C(sys/kernel/iommu_groups/*/type), C(sys/module/nvidia/parameters/*), C(sys/module/nvidia_uvm/parameters/*),
    C(proc/driver/nvidia/params), C(sys/module/pcie_aspm/parameters/policy), C(proc/sys/kernel/numa_balancing),
    C(sys/kernel/mm/transparent_hugepage/enabled), C(sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)."
  - For every NVIDIA display or 3D controller in C(sys/bus/pci/devices), the PCI bridges above it (from its resolved
    sysfs path) and, for each bridge, the ACS Control register read from its binary C(config) file (the PCIe ACS
    extended capability). Reading past the first 64 bytes of C(config) needs root; a shorter read is named in
    C(unread), not guessed.
  - "C(nvidia-smi -q), with C(LC_ALL=C): persistence mode, BAR1 total, ECC mode, the maximum SM clock and the PCIe
    link generation and width of each GPU."
  - Missing files are facts, not errors (a VM has no cpufreq, a host without IOMMU no groups); what should have been
    read and was not is listed in C(unread).
  - The preflight reads the same facts through M(disagg.sglang.host_look)'s O(disagg.sglang.host_look#module:readiness),
    in its one module run per host.
options:
  root:
    description:
      - The host's root directory; the files above are read under it. The sandbox keeps a fake one under
        C(/opt/fakegpu/sysroot), as for M(disagg.sglang.gpu_topology)'s
        O(disagg.sglang.gpu_topology#module:sysfs_root).
    type: path
    default: /
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). When not set, it is looked up on C(PATH), then in C(/usr/local/nvidia/bin) and other
        usual driver directories; without it the GPUs' nvidia-smi fields are null and C(unread) says why.
    type: path
attributes:
  check_mode:
    support: full
    details: Reads only, so check mode reads what a real run reads.
  diff_mode:
    support: none
    details: Changes nothing on the host, so there is nothing to show.
  facts:
    support: full
    description: Returns the readings under RV(ansible_facts.host_readiness).
notes:
  - Run it as root. The ACS Control register lies in the extended config space, which the kernel shows only to root.
requirements:
  - An NVIDIA driver with C(nvidia-smi) for the per-GPU readings; the rest needs none.
"""

EXAMPLES = r"""
- name: Read the readiness settings of a GPU host
  disagg.sglang.host_readiness:
  become: true

- name: Show the bridges that redirect peer-to-peer traffic
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts.host_readiness.acs | dict2items
         | selectattr('value.ReqRedir') | map(attribute='key') | list }}

- name: Read a simulated host (the sandbox's fake root under /opt/fakegpu/sysroot)
  disagg.sglang.host_readiness:
    root: /opt/fakegpu/sysroot
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    host_readiness:
      description: The readiness readings (plugins/module_utils/host/readiness_look.py lists them).
      returned: always
      type: dict
      contains:
        root:
          description: The root read.
          returned: always
          type: str
          sample: /
        cmdline:
          description:
            - "C({params, iommu_mode}): the IOMMU, ASPM and ACS-override parameters of C(proc/cmdline) (null for a
              bare flag) and the IOMMU mode they decide (V(off), V(passthrough), V(translated), V(unknown)); null
              when C(proc/cmdline) was not read."
          returned: always
          type: dict
          sample: {params: {iommu: pt, pcie_aspm: "off"}, iommu_mode: passthrough}
        iommu_groups:
          description: "C({groups, types, translated}): the number of IOMMU groups, their types, whether any
            translates DMA (V(DMA), V(DMA-FQ)). No groups where the IOMMU is off."
          returned: always
          type: dict
          sample: {groups: 12, types: [identity], translated: false}
        modules:
          description:
            - "C({nvidia: {param: value}, nvidia_uvm: {...}, /proc/driver/nvidia/params: {...}}), values as the
              kernel prints them (V(Y), V(N), numbers); a module not loaded is absent. The C(nvidia) module gives
              its C(NVreg_*) options no sysfs file, so they are read from C(/proc/driver/nvidia/params)."
          returned: always
          type: dict
          sample:
            nvidia: {}
            nvidia_uvm: {uvm_disable_hmm: "Y"}
            /proc/driver/nvidia/params: {EnableResizableBar: "1"}
        aspm_policy:
          description: The selected PCIe ASPM policy (V(default), V(performance), V(powersave), V(powersupersave)),
            null when the kernel shows none.
          returned: always
          type: str
          sample: performance
        gpus:
          description:
            - "By bus id (sysfs form): C(persistence_mode), C(bar1_total_mib), C(ecc_mode_current),
              C(max_sm_clock_mhz), C(pcie_gen_current), C(pcie_width_current) as C(nvidia-smi -q) gives them (null
              when it did not), and C(bridges): the PCI bridges above the GPU, root port first, nearest last."
          returned: always
          type: dict
          sample:
            "0000:17:00.0":
              persistence_mode: Enabled
              bar1_total_mib: 131072
              ecc_mode_current: Enabled
              max_sm_clock_mhz: 3090
              pcie_gen_current: 5
              pcie_width_current: 16
              bridges: ["0000:16:01.0"]
        acs:
          description:
            - "By bridge bus id, its ACS Control flags (C(SrcValid), C(TransBlk), C(ReqRedir), C(CmpltRedir),
              C(UpstreamFwd), C(EgressCtrl), C(DirectTrans)), for the bridges above a GPU that have the ACS capability.
              C(ReqRedir) or C(CmpltRedir) on sends peer-to-peer traffic up to the root complex."
          returned: always
          type: dict
          sample: {"0000:16:01.0": {SrcValid: false, TransBlk: false, ReqRedir: false, CmpltRedir: false,
                                    UpstreamFwd: false, EgressCtrl: false, DirectTrans: false}}
        numa_balancing:
          description: C(kernel.numa_balancing), null when absent.
          returned: always
          type: int
          sample: 0
        thp:
          description: The selected transparent huge pages mode, null when absent.
          returned: always
          type: str
          sample: madvise
        governors:
          description: The CPU frequency governors and how many CPUs use each; empty without cpufreq.
          returned: always
          type: dict
          sample: {performance: 64}
        unread:
          description: What should have been read and was not, and why.
          returned: always
          type: dict
          sample: {"proc/cmdline": No such file or directory}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness_look


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvidia_smi_path": {"type": "path"},
        },
        supports_check_mode=True,
    )
    facts, error = readiness_look.read_for(module, module.params)
    if error:
        module.fail_json(msg=error)
    module.exit_json(changed=False, ansible_facts={"host_readiness": facts})


if __name__ == "__main__":
    main()
