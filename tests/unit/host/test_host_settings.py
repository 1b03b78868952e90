# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The opt-in host settings (module host_settings over module_utils/host/host_settings.py), run as Ansible runs the
module on a host root built in tmp_path: it changes only what it lists, reports changed once and nothing on a rerun,
writes nothing in check mode and shows its diff; an item the host cannot take fails before anything is written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.disagg.sglang.plugins.module_utils.host import host_settings as hs  # noqa: E402


def run_module(tmp_path, args, *flags, oneline=True):
    """(rc, result) of `ansible localhost -m disagg.sglang.host_settings -a ARGS FLAGS` with the local connection;
    not ONELINE, (rc, the text Ansible prints: the diff, then the result)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), LC_ALL="C.UTF-8")  # fmt: skip
    argv = [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}",
            "-m", "disagg.sglang.host_settings", "-a", json.dumps(args), *flags]  # fmt: skip
    proc = subprocess.run(argv + (["-o"] if oneline else []), capture_output=True, text=True, check=False, env=env,
                          cwd=REPO, timeout=120)  # fmt: skip
    if not oneline:
        return proc.returncode, proc.stdout
    _head, sep, body = proc.stdout.partition("=> ")
    assert sep, proc.stdout + proc.stderr
    return proc.returncode, json.loads(body)


def host_root(tmp_path, numa="1", governors=("powersave", "performance", "schedutil"), thp="always [madvise] never"):
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/numa_balancing").write_text(numa + "\n")
    for cpu, gov in enumerate(governors):
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
    (root / "sys/devices/system/cpu/cpufreq").mkdir(parents=True)  # not a cpu directory: never matched
    (root / "sys/kernel/mm/transparent_hugepage").mkdir(parents=True)
    (root / "sys/kernel/mm/transparent_hugepage/enabled").write_text(thp + "\n")
    return root


def snapshot(root):
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_check_mode_shows_the_diff_and_writes_nothing_then_a_run_writes_only_the_listed_then_a_rerun_nothing(tmp_path):
    root = host_root(tmp_path)
    before = snapshot(root)
    rc, shown = run_module(tmp_path, {"apply": ["governor"], "root": str(root)}, "--check", "--diff", oneline=False)
    assert rc == 0
    assert [line for line in shown.splitlines() if line.startswith(("+", "-")) and line[:3] not in ("---", "+++")] == [
        f"-{root}/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: powersave",
        f"-{root}/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor: schedutil",
        f"+{root}/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: performance",
        f"+{root}/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor: performance",
    ]
    rc, result = run_module(tmp_path, {"apply": ["governor"], "root": str(root)}, "--check")
    assert rc == 0 and result["changed"] is True
    assert [(w["path"].rsplit("/", 3)[-3], w["before"], w["after"]) for w in result["writes"]] == [
        ("cpu0", "powersave", "performance"),
        ("cpu2", "schedutil", "performance"),
    ]
    assert snapshot(root) == before  # check mode wrote nothing

    rc, result = run_module(tmp_path, {"apply": ["governor"], "root": str(root)})
    assert rc == 0 and result["changed"] is True
    after = snapshot(root)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "sys/devices/system/cpu/cpu2/cpufreq/scaling_governor",
    }  # numa_balancing and THP untouched: not listed
    assert after["proc/sys/kernel/numa_balancing"] == "1\n"
    assert [b["path"] for b in result["boot_files"]] == ["/etc/tmpfiles.d/disagg-sglang-governor.conf"]
    assert (
        "w /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor - - - - performance"
        in (result["boot_files"][0]["content"])
    )

    rc, result = run_module(tmp_path, {"apply": ["governor"], "root": str(root)})
    assert rc == 0 and result["changed"] is False and result["writes"] == []

    rc, result = run_module(tmp_path, {"apply": ["numa_balancing", "governor"], "root": str(root)})
    assert (rc, result["changed"], [w["item"] for w in result["writes"]]) == (0, True, ["numa_balancing"])
    assert snapshot(root)["proc/sys/kernel/numa_balancing"] == "0\n"
    assert snapshot(root)["sys/kernel/mm/transparent_hugepage/enabled"] == "always [madvise] never\n"


def test_an_item_the_host_cannot_take_fails_before_anything_is_written(tmp_path):
    root = host_root(tmp_path, governors=())
    before = snapshot(root)
    rc, result = run_module(tmp_path, {"apply": ["numa_balancing", "governor"], "root": str(root)})
    assert rc != 0 and result["changed"] is False and result["writes"] == []
    assert result["msg"] == (
        f"sglang_host_apply lists governor, but this host has no "
        f"sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor under {root}: remove governor from "
        "sglang_host_apply for this host"
    )
    assert snapshot(root) == before  # numa_balancing, which it could write, was not written either


def test_a_unit_item_whose_unit_systemd_does_not_know_is_named():
    assert hs.load_states("Id=nvidia-persistenced.service\nLoadState=not-found\n") == ["not-found"]
    assert hs.load_states("Id=a.service\nLoadState=loaded\n\nId=b.service\nLoadState=not-found\n") == [
        "loaded",
        "not-found",
    ]
    (problem,) = hs.missing_unit_problems({"nvidia-persistenced.service": "not-found"})
    assert problem.startswith("sglang_host_apply lists persistence, but nvidia-persistenced.service is not installed")
    assert hs.missing_unit_problems({"nvidia-persistenced.service": "loaded"}) == []
    assert hs.units(["governor", "persistence"]) == [{"item": "persistence", "unit": "nvidia-persistenced.service"}]


@pytest.mark.parametrize("item", sorted(hs.SETTINGS))
def test_every_file_item_sets_at_boot_what_it_sets_now(item):
    row = hs.SETTINGS[item]
    (boot,) = hs.boot_files([item])
    assert boot["path"].startswith(tuple(hs.BOOT_DIR.values()))
    assert row["value"] in boot["content"]
    assert item in hs.ITEMS
