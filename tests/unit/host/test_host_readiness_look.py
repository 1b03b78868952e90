"""The host-readiness reader (plugins/module_utils/host/readiness_look.py) over host roots built in tmp_path: one from
the real capture of the lent H200 VM (tests/fixtures/host_readiness/h200-vm-2026-12-04), one hand-built two-socket
PCIe box (a GPU behind a switch, one behind a root port whose config space was read unprivileged), and the config-space
parser readiness.pci_config_acs on hand-built blobs."""

import os
from pathlib import Path

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.host import readiness, readiness_look
from samples import H200_VM_GPU

FIXTURES = str(Path(__file__).resolve().parents[2] / "fixtures" / "host_readiness")
H200 = os.path.join(FIXTURES, "h200-vm-2026-12-04")
PARAMS = "/proc/driver/nvidia/params"


def fixture(name):
    with open(os.path.join(H200, name), encoding="utf-8") as handle:
        return handle.read()


# ---------------------------------------------------------------- config space blobs


def header(cap_id, version, next_offset):
    return (cap_id | version << 16 | next_offset << 20).to_bytes(4, "little")


def config(caps=(), size=4096):
    """A bridge's config space: a type-1 header (class 0x060400) and the extended capabilities CAPS, each (offset,
    cap id, next offset, ACS control or None)."""
    data = bytearray(size)
    data[0:4] = bytes.fromhex("86802a35")  # vendor 0x8086, device 0x352a, little-endian
    data[0x0A:0x0C] = bytes((0x04, 0x06))  # subclass 0x04 (PCI bridge), class 0x06
    data[0x0E] = 0x01  # header type 1
    for offset, cap_id, next_offset, ctrl in caps:
        data[offset : offset + 4] = header(cap_id, 1, next_offset)
        if ctrl is not None:
            data[offset + 4 : offset + 6] = (0x7F).to_bytes(2, "little")  # ACS capability: every feature
            data[offset + 6 : offset + 8] = ctrl.to_bytes(2, "little")
    return bytes(data)


AER, ACS = 0x0001, 0x000D
KERNEL_ACS = 0x001D  # what drivers/pci/pci.c pci_std_enable_acs sets: SV | RR | CR | UF
NONE = dict.fromkeys(readiness.ACS_FLAGS, False)
KERNEL = NONE | {"SrcValid": True, "ReqRedir": True, "CmpltRedir": True, "UpstreamFwd": True}

CONFIGS = [
    ("acs-first-all-off", config([(0x100, ACS, 0, 0)]), NONE),
    ("acs-first-as-the-kernel-enables-it", config([(0x100, ACS, 0, KERNEL_ACS)]), KERNEL),
    ("acs-behind-aer", config([(0x100, AER, 0x148, None), (0x148, ACS, 0, KERNEL_ACS)]), KERNEL),
    ("every-bit", config([(0x100, ACS, 0, 0x7F)]), dict.fromkeys(readiness.ACS_FLAGS, True)),
    ("only-direct-trans", config([(0x100, ACS, 0, 0x40)]), NONE | {"DirectTrans": True}),
    ("aer-only", config([(0x100, AER, 0, None)]), None),
    ("no-extended-capability", config(), None),
    ("unprivileged-read-64-bytes", config([(0x100, ACS, 0, KERNEL_ACS)])[:64], None),
    ("standard-space-only-256-bytes", config([(0x100, ACS, 0, KERNEL_ACS)])[:256], None),
    ("list-that-loops", config([(0x100, AER, 0x148, None), (0x148, AER, 0x100, None)]), None),
    ("next-below-0x100-ends-the-list", config([(0x100, AER, 0x40, None), (0x148, ACS, 0, KERNEL_ACS)]), None),
    ("all-ones-header", b"\xff" * 4096, None),
]


@pytest.mark.parametrize(("blob", "expected"), [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_pci_config_acs_walks_the_extended_capabilities_to_the_acs_control_register(blob, expected):
    assert readiness.pci_config_acs(blob) == expected


def redirects(ctl):
    """ReqRedir or CmpltRedir: peer-to-peer traffic goes up to the root complex (plan/readiness_rules.py's acs rule)."""
    return bool(ctl.get("ReqRedir") or ctl.get("CmpltRedir"))


def test_what_the_kernel_enables_blocks_p2p_and_all_off_does_not():
    assert redirects(readiness.pci_config_acs(config([(0x100, ACS, 0, KERNEL_ACS)])))
    assert not redirects(readiness.pci_config_acs(config([(0x100, ACS, 0, 0x11)])))


# ---------------------------------------------------------------- host roots


def write(root, rel, content):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def pci_device(root, chain, vendor, klass, cfg=None):
    """A device at the end of CHAIN (pci0000:bb/<bdf>/.../<bdf>) with its bus/pci/devices link; each bridge of the
    chain gets its own link too."""
    rel = "sys/devices/" + chain
    write(root, rel + "/vendor", vendor + "\n")
    write(root, rel + "/class", klass + "\n")
    if cfg is not None:
        write(root, rel + "/config", cfg)
    link = root / "sys/bus/pci/devices" / chain.rsplit("/", 1)[1]
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(root / rel, link.parent))


def h200_root(root):
    """The lent H200 VM, from its capture: the module parameters, /proc/driver/nvidia/params, the sysctl and THP
    readings; its GPU 0000:00:06.0 straight on the host bridge (a VM: no bridge above it). No /proc/cmdline,
    no IOMMU groups and no cpufreq were captured: they stay absent, as the capture says the VM has none."""
    mods = readiness.module_params(fixture("nvidia-modules.txt"))
    for module, params in mods.items():
        if module == PARAMS:
            write(root, "proc/driver/nvidia/params", "".join(f"{k}: {v}\n" for k, v in params.items()))
            continue
        (root / "sys/module" / module).mkdir(parents=True, exist_ok=True)
        for key, value in params.items():
            write(root, f"sys/module/{module}/parameters/{key}", value + "\n")
    system = fixture("system.txt").splitlines()
    write(root, "proc/sys/kernel/numa_balancing", str(readiness.numa_balancing(system[0])) + "\n")
    write(root, "sys/kernel/mm/transparent_hugepage/enabled", system[2] + "\n")
    pci_device(root, "pci0000:00/0000:00:06.0", "0x10de", "0x030200")
    return mods


class Smi:
    """nvidia-smi: `-q` answers TEXT with RC; records the calls."""

    def __init__(self, text, rc=0):
        self.text, self.rc, self.calls = text, rc, []

    def __call__(self, argv):
        self.calls.append(argv)
        return (self.rc, self.text, "") if argv[1:] == ["-q"] else (2, "", "not simulated")


def snapshot(root):
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            st = os.lstat(path)
            out[path] = (st.st_mode, st.st_mtime_ns, st.st_size)
    return out


def test_the_h200_vm_capture_reads_back_as_its_parsers_read_it(tmp_path):
    mods = h200_root(tmp_path)
    smi = Smi(fixture("nvidia-smi-q.txt"))
    before = snapshot(tmp_path)

    facts = readiness_look.look(str(tmp_path), run=smi, nvidia_smi="/usr/bin/nvidia-smi")

    assert snapshot(tmp_path) == before, "look() changed the host root"
    assert smi.calls == [["/usr/bin/nvidia-smi", "-q"]]
    assert facts == {
        "root": str(tmp_path),
        "cmdline": None,
        "iommu_groups": {"groups": 0, "types": [], "translated": False},
        "modules": {"nvidia": {}, "nvidia_uvm": mods["nvidia_uvm"], PARAMS: mods[PARAMS]},
        "aspm_policy": None,
        "gpus": {
            "0000:00:06.0": {**H200_VM_GPU, "bridges": []},
        },
        "acs": {},
        "numa_balancing": 0,
        "thp": "madvise",
        "governors": {},
        "unread": {"proc/cmdline": "No such file or directory"},
    }
    assert facts["modules"]["nvidia_uvm"]["uvm_disable_hmm"] == "N"
    assert facts["modules"][PARAMS]["EnableResizableBar"] == "0"


def box_root(root):
    """A hand-built two-socket PCIe box: GPU 0000:19:00.0 behind a switch (root port 0000:16:01.0 with ACS as the
    kernel enables it, behind AER; switch upstream port 0000:17:00.0 without ACS; downstream port 0000:18:00.0 with
    ACS all off) plus its HDMI audio function; GPU 0000:99:00.0 behind root port 0000:98:01.0 whose config was read
    unprivileged (64 bytes); a BMC's VGA (ASPEED, not NVIDIA); a translated IOMMU; two governors."""
    write(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.8.0 ro intel_iommu=on iommu.passthrough=0 quiet\n")
    for group, kind in (("0", "DMA-FQ"), ("1", "DMA"), ("2", "identity")):
        write(root, f"sys/kernel/iommu_groups/{group}/type", kind + "\n")
    write(root, "sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave\n")
    (root / "sys/module/nvidia").mkdir(parents=True)
    write(root, "sys/module/nvidia_uvm/parameters/uvm_disable_hmm", "Y\n")
    write(root, "proc/driver/nvidia/params", 'EnableResizableBar: 1\nRegistryDwords: ""\n')
    write(root, "proc/sys/kernel/numa_balancing", "1\n")
    write(root, "sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
    for cpu in range(6):
        governor = "performance" if cpu < 4 else "powersave"
        write(root, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", governor + "\n")
    write(root, "sys/devices/system/cpu/cpu6/online", "1\n")  # a CPU without cpufreq: not counted
    bridge = "0x060400"
    pci_device(root, "pci0000:16/0000:16:01.0", "0x8086", bridge,
               config([(0x100, AER, 0x148, None), (0x148, ACS, 0, KERNEL_ACS)]))  # fmt: skip
    pci_device(root, "pci0000:16/0000:16:01.0/0000:17:00.0", "0x1000", bridge, config([(0x100, AER, 0, None)]))
    pci_device(root, "pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:00.0", "0x1000", bridge,
               config([(0x100, ACS, 0, 0)]))  # fmt: skip
    gpu = "pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:00.0/0000:19:00.0"
    pci_device(root, gpu, "0x10de", "0x030200")
    pci_device(root, gpu[:-1] + "1", "0x10de", "0x040300")  # the GPU's audio function
    pci_device(root, "pci0000:98/0000:98:01.0", "0x8086", bridge, config([(0x100, ACS, 0, KERNEL_ACS)])[:64])
    pci_device(root, "pci0000:98/0000:98:01.0/0000:99:00.0", "0x10de", "0x030000")
    pci_device(root, "pci0000:00/0000:00:1c.0/0000:02:00.0", "0x1a03", "0x030000")


BOX_GPUS = {
    "0000:19:00.0": ["0000:16:01.0", "0000:17:00.0", "0000:18:00.0"],
    "0000:99:00.0": ["0000:98:01.0"],
}
NO_SMI = dict.fromkeys(readiness_look.SMI_FIELDS)


def smi_q(*buses):
    """`nvidia-smi -q` in the layout the driver prints (tests/fixtures/host_readiness/h200-vm-2026-12-04), abridged
    to the sections read."""
    body = []
    for bus in buses:
        body += [
            f"GPU {bus}",
            "    Persistence Mode                                   : Disabled",
            "    PCI",
            "        GPU Link Info",
            "            PCIe Generation",
            "                Max                                    : 5",
            "                Current                                : 1",
            "            Link Width",
            "                Max                                    : 16x",
            "                Current                                : 16x",
            "    BAR1 Memory Usage",
            "        Total                                          : 256 MiB",
            "    ECC Mode",
            "        Current                                        : Disabled",
            "    Max Clocks",
            "        Graphics                                       : 3090 MHz",
            "        SM                                             : 3090 MHz",
        ]
    return "\n==============NVSMI LOG==============\n\n" + "\n".join(body) + "\n"


SMI_ROWS = {
    "persistence_mode": "Disabled",
    "bar1_total_mib": 256,
    "ecc_mode_current": "Disabled",
    "max_sm_clock_mhz": 3090,
    "pcie_gen_current": 1,
    "pcie_width_current": 16,
}

BOX_CASES = [
    (
        "nvidia-smi-answers",
        Smi(smi_q("00000000:19:00.0", "00000000:99:00.0")),
        {bus: SMI_ROWS | {"bridges": b} for bus, b in BOX_GPUS.items()},
        {},
    ),
    (
        "nvidia-smi-fails",
        Smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", rc=9),
        {bus: NO_SMI | {"bridges": b} for bus, b in BOX_GPUS.items()},
        {
            "nvidia-smi -q": "/opt/nvidia-smi -q exited 9: NVIDIA-SMI has failed because it couldn't communicate with "
            "the NVIDIA driver."
        },
    ),
    (
        "nvidia-smi-knows-a-gpu-sysfs-does-not-show",
        Smi(smi_q("00000000:19:00.0", "00000000:B1:00.0")),
        {
            "0000:19:00.0": SMI_ROWS | {"bridges": BOX_GPUS["0000:19:00.0"]},
            "0000:99:00.0": NO_SMI | {"bridges": BOX_GPUS["0000:99:00.0"]},
            "0000:b1:00.0": SMI_ROWS | {"bridges": []},
        },
        {"sys/bus/pci/devices/0000:b1:00.0": "nvidia-smi reports this GPU; sysfs shows no such NVIDIA function"},
    ),
]


@pytest.mark.parametrize(("smi", "gpus", "smi_unread"), [c[1:] for c in BOX_CASES], ids=[c[0] for c in BOX_CASES])
def test_a_pcie_box_reads_its_bridges_acs_iommu_and_settings(tmp_path, smi, gpus, smi_unread):
    box_root(tmp_path)
    before = snapshot(tmp_path)

    facts = readiness_look.look(str(tmp_path), run=smi, nvidia_smi="/opt/nvidia-smi")

    assert snapshot(tmp_path) == before, "look() changed the host root"
    assert facts["cmdline"] == {
        "params": {"intel_iommu": "on", "iommu.passthrough": "0"},
        "iommu_mode": "translated",
    }
    assert facts["iommu_groups"] == {"groups": 3, "types": ["DMA", "DMA-FQ", "identity"], "translated": True}
    assert facts["modules"] == {"nvidia": {}, "nvidia_uvm": {"uvm_disable_hmm": "Y"},
                                PARAMS: {"EnableResizableBar": "1", "RegistryDwords": '""'}}  # fmt: skip
    assert facts["aspm_policy"] == "default"
    assert facts["gpus"] == gpus
    # the root port as the kernel enables it (redirecting), the downstream port all off; the switch's upstream port
    # has no ACS capability and the unprivileged read of 0000:98:01.0 is no reading at all: both absent
    assert facts["acs"] == {"0000:16:01.0": KERNEL, "0000:18:00.0": NONE}
    assert [b for b, ctl in facts["acs"].items() if redirects(ctl)] == ["0000:16:01.0"]
    assert (facts["numa_balancing"], facts["thp"]) == (1, "always")
    assert facts["governors"] == {"performance": 4, "powersave": 2}
    assert facts["unread"] == {
        "sys/bus/pci/devices/0000:98:01.0/config": "64 bytes, without the extended config space where ACS is (read "
        "as root: an unprivileged read gets the first 64 bytes)",
        **smi_unread,
    }


def test_an_empty_root_reads_as_nothing_known_and_says_what_it_could_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(readiness_look, "find_nvidia_smi", lambda: None)
    smi = Smi("")
    facts = readiness_look.look(str(tmp_path), run=smi)
    assert smi.calls == []
    assert facts == {
        "root": str(tmp_path),
        "cmdline": None,
        "iommu_groups": {"groups": 0, "types": [], "translated": False},
        "modules": {},
        "aspm_policy": None,
        "gpus": {},
        "acs": {},
        "numa_balancing": None,
        "thp": None,
        "governors": {},
        "unread": {
            "proc/cmdline": "No such file or directory",
            "nvidia-smi -q": "nvidia-smi not found on PATH nor in " + ", ".join(readiness_look.NVIDIA_SMI_DIRS),
        },
    }


def test_a_module_loaded_without_proc_params_is_named_unread(tmp_path):
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    facts = readiness_look.look(str(tmp_path), run=Smi(""), nvidia_smi="/x/nvidia-smi")
    assert facts["modules"] == {"nvidia": {}}
    assert facts["unread"]["proc/driver/nvidia/params"] == "No such file or directory"


@pytest.mark.parametrize(
    ("path", "bridges"),
    [
        ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0", ["0000:16:01.0"]),
        ("/sys/devices/pci0000:00/0000:00:06.0", []),
        (
            "/r/sys/devices/pci0000:a0/0000:a0:03.1/0000:a1:00.0/0000:a2:08.0/0000:a3:00.0",
            ["0000:a0:03.1", "0000:a1:00.0", "0000:a2:08.0"],
        ),
    ],
)
def test_the_bridges_above_a_device_are_read_from_its_resolved_path_root_port_first(path, bridges):
    assert readiness_look.bridges_above(path) == bridges
