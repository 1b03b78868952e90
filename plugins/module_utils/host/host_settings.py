# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The run-time host settings a run changes itself when sglang_host_apply lists them: the kernel values
written now, under a host root, and the files that set them again at boot.

What belongs here: the table SETTINGS (each item's live files, value and boot-time file) and the pure plan of the
writes. The module plugins/modules/host_settings.py reads the live files, writes what differs and returns the
boot-time files, which the role writes with ansible.builtin.copy (roles/sglang_worker/tasks/host_settings.yml); the
persistence daemon is a systemd unit (ansible.builtin.systemd_service there). Nothing that needs a reboot is here.

A live value is written the way sysctl(8) and cpupower write it: the text into the /proc/sys or sysfs file.
"""

import glob
import os

BOOT_DIR = {"sysctl": "/etc/sysctl.d", "tmpfiles": "/etc/tmpfiles.d"}
SETTINGS = {
    "numa_balancing": {
        "live": "proc/sys/kernel/numa_balancing",
        "value": "0",
        # systemd-sysctl reads /etc/sysctl.d at boot (sysctl.d(5))
        "boot": {
            "path": BOOT_DIR["sysctl"] + "/90-disagg-sglang-numa-balancing.conf",
            "content": "# disagg.sglang (sglang_host_apply: numa_balancing)\nkernel.numa_balancing = 0\n",
        },
    },
    "governor": {
        "live": "sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",
        "value": "performance",
        # systemd-tmpfiles writes a "w" line's argument into each matching file at boot (tmpfiles.d(5))
        "boot": {
            "path": BOOT_DIR["tmpfiles"] + "/disagg-sglang-governor.conf",
            "content": (
                "# disagg.sglang (sglang_host_apply: governor)\n"
                "w /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor - - - - performance\n"
            ),
        },
    },
}
# items a systemd unit carries, not a file (roles/sglang_worker/tasks/host_settings.yml)
UNIT_ITEMS = {"persistence": "nvidia-persistenced.service"}
ITEMS = sorted(set(SETTINGS) | set(UNIT_ITEMS))


def live_files(root, item):
    """The live files of ITEM under ROOT, sorted (one for a sysctl, one per CPU for the governor)."""
    pattern = os.path.join(root, SETTINGS[item]["live"])
    return sorted(glob.glob(pattern), key=lambda p: [int(t) if t.isdigit() else t for t in _split_digits(p)])


def _split_digits(text):
    out, cur = [], ""
    for ch in text:
        if cur and ch.isdigit() != cur[-1].isdigit():
            out.append(cur)
            cur = ""
        cur += ch
    return out + ([cur] if cur else [])


def plan_writes(root, items, read):
    """([{item, path, before, after}] of the live files that differ from their value, [problem]) for ITEMS (the
    file items of sglang_host_apply). READ(path) -> the file's text, or None where it cannot be read. An item with
    no live file (no cpufreq in a VM) is a problem naming it, not a silent pass."""
    writes, problems = [], []
    for item in [i for i in items if i in SETTINGS]:
        files = live_files(root, item)
        if not files:
            problems.append(
                f"sglang_host_apply lists {item}, but this host has no {SETTINGS[item]['live']} under {root}: "
                f"remove {item} from sglang_host_apply for this host"
            )
            continue
        want = SETTINGS[item]["value"]
        for path in files:
            before = read(path)
            if before is None:
                problems.append(f"{path} could not be read ({item} in sglang_host_apply)")
            elif before.strip() != want:
                writes.append({"item": item, "path": path, "before": before.strip(), "after": want})
    return writes, problems


def units(items):
    """[{item, unit}] of the unit items of ITEMS (enabled and started by the role)."""
    return [{"item": i, "unit": UNIT_ITEMS[i]} for i in items if i in UNIT_ITEMS]


def load_states(text):
    """`systemctl show --property=Id,LoadState U1 U2 ...` (blocks separated by a blank line) -> [LoadState] in order."""
    out = []
    for block in (text or "").strip().split("\n\n"):
        props = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        out.append(props.get("LoadState"))
    return out


def missing_unit_problems(found):
    """FOUND: {unit: LoadState} -> a problem per unit item whose unit systemd does not know."""
    item_of = {unit: item for item, unit in UNIT_ITEMS.items()}
    return [
        f"sglang_host_apply lists {item_of.get(unit, unit)}, but {unit} is not installed on this host (it comes with "
        f"the NVIDIA driver's nvidia-persistenced package): install it, or remove {item_of.get(unit, unit)} from "
        "sglang_host_apply for this host"
        for unit, state in sorted(found.items())
        if state == "not-found"
    ]


def boot_files(items):
    """[{item, path, content}] of the boot-time files of ITEMS."""
    return [{"item": i, **SETTINGS[i]["boot"]} for i in items if i in SETTINGS]


def diff(writes):
    """One before/after text per run, a line per file written: what --diff shows."""
    return {
        "before_header": "live host settings",
        "after_header": "live host settings",
        "before": "".join(f"{w['path']}: {w['before']}\n" for w in writes),
        "after": "".join(f"{w['path']}: {w['after']}\n" for w in writes),
    }
