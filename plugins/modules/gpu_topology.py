#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Gather NVIDIA GPU, NUMA and GPU-link facts of a host
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.topology]
description:
  - Reads the GPUs of a host, the NUMA node and CPUs close to each, the NUMA nodes with their CPUs, and
    the GPU-to-GPU link matrix, and returns them as C(ansible_facts.gpu_topology). Changes nothing.
  - "Sources, best first, each optional: NVML through the Python binding C(pynvml) (package
    C(nvidia-ml-py)) when it imports and initialises; otherwise
    C(nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap --format=csv,noheader,nounits)
    and C(nvidia-smi topo -m) (C(nvidia-smi topo -p2p r) and C(-p2p w) are tried for peer-to-peer status
    and may fail);
    always sysfs: C(sys/devices/system/node/node*/cpulist) and, per GPU,
    C(sys/bus/pci/devices/<bus id>/numa_node) and C(local_cpulist)."
  - A GPU's NUMA node is sysfs's C(numa_node) when it is 0 or more, else the single node NVML or
    C(nvidia-smi topo -m) report, else null with a warning (sysfs says -1 in many VMs). Its CPU affinity
    comes from NVML or C(topo -m), else sysfs C(local_cpulist), else its node's CPUs.
  - The C(topo -m) parser takes what real drivers print, old and new, NIC rows, colour codes, N/A and
    cells merged by copy-paste.
  - A host without GPU, driver, C(pynvml) or C(nvidia-smi) gets zero GPUs and a C(reason), not an error,
    unless O(require_gpus=true).
  - Commands run with C(LC_ALL=C).
options:
  source:
    description:
      - Which source to ask for GPUs and links. V(auto) tries NVML, then C(nvidia-smi). V(nvml) and
        V(nvidia-smi) ask only that one (to compare them). sysfs is read in every case.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  nvml_venv:
    description:
      - A venv whose site-packages hold C(pynvml) (the engine venv installs C(nvidia-ml-py)), looked in when the
        interpreter that runs the module has none. Where it is absent or not there yet (a first install), only the
        interpreter's own is tried.
    type: path
  require_gpus:
    description:
      - Fail, with the reason, when no GPU is found. The message names the host (O(name)) and what to check, as the
        preflight of C(disagg.sglang) says it (C(plugins/module_utils/plan/rules.py) C(no_gpu_problems)).
    type: bool
    default: false
  name:
    description:
      - The host's name in the message of O(require_gpus) (its inventory name).
    type: str
    default: this host
attributes:
  check_mode:
    support: full
    details: Only reads sysfs and runs C(nvidia-smi), so check mode gathers the same facts as a real run.
  diff_mode:
    support: none
    details: Changes nothing on the host, so there is nothing to show.
  facts:
    support: full
    description: Returns the GPU, NUMA and link facts under RV(ansible_facts).
notes:
  - GPU indices are those of NVML and C(nvidia-smi) (PCI bus order). CUDA numbers devices the same way
    only with C(CUDA_DEVICE_ORDER=PCI_BUS_ID).
  - Use M(disagg.sglang.gpu_topology) with the filter P(disagg.sglang.pd_placement#filter) to place
    prefill and decode workers.
requirements:
  - An NVIDIA driver on the host, with C(nvidia-smi) or the C(nvidia-ml-py) package for the Python that runs
    the module. Without them the module reports zero GPUs.
"""

EXAMPLES = r"""
- name: Read the GPU topology
  disagg.sglang.gpu_topology:

- name: Show what was found
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts.gpu_topology.gpus | length }} GPUs,
      NUMA nodes {{ ansible_facts.gpu_topology.numa_nodes | map(attribute='id') | list }},
      warnings {{ ansible_facts.gpu_topology.warnings }}

- name: Ask nvidia-smi only, and fail on a host without GPU
  disagg.sglang.gpu_topology:
    source: nvidia-smi
    nvidia_smi_path: /usr/bin/nvidia-smi
    require_gpus: true
    name: "{{ inventory_hostname }}"

- name: Read a simulated host (fake sysfs tree under /opt/fakegpu/sysroot)
  disagg.sglang.gpu_topology:
    sysfs_root: /opt/fakegpu/sysroot
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_topology:
      description: The topology.
      returned: always
      type: dict
      contains:
        gpus:
          description:
            - One entry per GPU, by index. C(pci_bus_id) is in sysfs form (4-digit domain, lowercase).
              C(memory_total_mib) and C(compute_capability) are null when the source cannot tell.
              C(numa_node) is null when unknown; C(cpu_affinity) is a list of CPU ids.
          returned: always
          type: list
          elements: dict
          sample:
            - index: 0
              uuid: GPU-1a616c80-bf81-546c-a8a4-bc441705a75e
              name: NVIDIA RTX PRO 6000 Blackwell Server Edition
              pci_bus_id: "0000:17:00.0"
              memory_total_mib: 97887
              compute_capability: "12.0"
              numa_node: 0
              cpu_affinity: [0, 1, 2, 3]
        numa_nodes:
          description: NUMA nodes with their CPU ids, from sysfs (derived from the GPUs when sysfs has none).
          returned: always
          type: list
          elements: dict
          sample: [{id: 0, cpus: [0, 1, 2, 3]}, {id: 1, cpus: [4, 5, 6, 7]}]
        links:
          description:
            - GPU-to-GPU matrix, keyed by GPU index strings; values as C(nvidia-smi topo -m) prints them
              (V(X) self, V(NV18) a bond of 18 NVLinks, V(PIX), V(PXB), V(PHB), V(NODE), V(SYS)). Empty when
              unknown.
          returned: always
          type: dict
          sample: {"0": {"0": X, "1": NODE}, "1": {"0": NODE, "1": X}}
        p2p:
          description:
            - Peer-to-peer read status by GPU index strings (V(OK), V(NS), V(CNS), V(GNS), V(TNS), V(DR),
              V(U), V(X) self), from NVML or C(nvidia-smi topo -p2p r). Empty when unknown.
          returned: always
          type: dict
          sample: {"0": {"0": X, "1": OK}, "1": {"0": OK, "1": X}}
        p2p_pairs:
          description:
            - Peer-to-peer status of every ordered pair of distinct GPUs, keyed C(i-j) (GPU C(i) reaching
              GPU C(j)'s memory), each with C(read) and C(write) in the codes of C(p2p); null where the source
              did not tell. From NVML (C(nvmlDeviceGetP2PStatus) with the read and write caps indices) or
              C(nvidia-smi topo -p2p r) and C(nvidia-smi topo -p2p w). Empty when unknown.
            - A KV cache WRITE from prefill GPU C(p) to decode GPU C(d) needs C(p-d) write V(OK) for
              zero-copy C(cuda_ipc); anything else means a TCP or host-staged lane
              (C(disagg.sglang) preflight's C(kv_rules.p2p_problems) refuses or warns).
          returned: always
          type: dict
          sample: {"0-1": {read: OK, write: OK}, "0-4": {read: CNS, write: CNS}}
        sources:
          description:
            - Which source gave each part (V(nvml), V(nvidia-smi), V(sysfs)), as lists (empty when the part is
              unknown); C(skipped) lists the sources not used and why.
          returned: always
          type: dict
          sample:
            gpus: [nvidia-smi]
            links: [nvidia-smi]
            p2p: []
            p2p_pairs: []
            numa_node: [sysfs]
            cpu_affinity: [nvidia-smi]
            numa_nodes: [sysfs]
            skipped: ["nvml: pynvml not importable (ModuleNotFoundError: No module named 'pynvml')"]
        warnings:
          description: What may make placement worse, such as a NUMA node that could not be read.
          returned: always
          type: list
          elements: str
          sample: ["GPU 0 (0000:00:05.0): NUMA node unknown (sysfs numa_node is -1 (common in VMs), ...)"]
        reason:
          description: Why there are zero GPUs; null when GPUs were found.
          returned: always
          type: str
          sample: >-
            no GPU found: nvml: NVML did not initialise (libnvidia-ml.so.1 does not load: ...); nvidia-smi: not
            found on PATH
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.host.gpu_topology import read_for
from ansible_collections.disagg.sglang.plugins.module_utils.plan import rules


def main():
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/"},
            "nvidia_smi_path": {"type": "path"},
            "source": {"type": "str", "default": "auto", "choices": ["auto", "nvml", "nvidia-smi"]},
            "require_gpus": {"type": "bool", "default": False},
            "nvml_venv": {"type": "path"},
            "name": {"type": "str", "default": "this host"},
        },
        supports_check_mode=True,
    )
    params = module.params
    facts, error = read_for(module, params)
    if error:
        module.fail_json(msg=error)
    if params["require_gpus"] and not facts["gpus"]:
        module.fail_json(msg=". ".join(rules.no_gpu_problems(facts, params["name"])) + ".",
                         ansible_facts={"gpu_topology": facts})  # fmt: skip
    module.exit_json(changed=False, ansible_facts={"gpu_topology": facts})


if __name__ == "__main__":
    main()
