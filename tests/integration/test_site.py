"""site.yml on sandbox hosts: rerun, partial runs, check mode, and the rtxpro6000-8x inventory rendered.

Two sandbox hosts of the 8x RTX PRO 6000 shape are booted for the module: the first is converged once and
each test runs ansible-playbook against it as a user would, then asks systemd what happened; the second
stays bare, for rendering inventories/rtxpro6000-8x in check mode onto a host that has nothing yet.
"""

import json
import re
import shlex
import time
from pathlib import Path

import pytest
import yaml
from sandbox_hosts import REPO, VENV_BIN, debug_messages, down, run, ssh_config, up, write_inventory
from unit_files import new_units_in_diff, parse_unit

SANDBOX = "pytest-site"
HOST = f"{SANDBOX}-1"
BARE = f"{SANDBOX}-2"
UNITS = ["sglang-prefill0", "sglang-decode0", "sglang-router"]
EXPECTED = yaml.safe_load((REPO / "tests/integration/expected/rtxpro6000-8x.yml").read_text())
# What the sandbox lacks for the KV probe's GPU path, in the words of plugins/module_utils/kv/kv_transport.py
# (choose_memory): its GPUs are fake and the venv has no CUDA array library.
SANDBOX_KV_REASON = "neither torch nor cupy in the venv to hold VRAM buffers"


def recap(output):
    """{'ok': n, 'changed': n, ...} of the one host in PLAY RECAP."""
    match = re.search(rf"^{re.escape(HOST)}\s+:\s+(.*)$", output, re.MULTILINE)
    assert match, f"no recap for {HOST} in:\n{output[-3000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A converged sandbox host and an inventory for it (the sandbox inventory's group_vars)."""
    up(SANDBOX, hosts=2)
    inv = write_inventory(tmp_path_factory.mktemp("inventory"), SANDBOX, HOST)
    # A first install whose decode has a flag the installed engine refuses (only the simulator's 0.2.x knows it):
    # the preflight has no venv to check with yet; the check right after deps refuses it before any unit starts.
    refused = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml",
                   "-e", json.dumps({"sglang_decode_extra_flags": {"sim-v2-feature": True}})], check=False)  # fmt: skip
    units_after_refusal = run(["ssh", "-F", str(ssh_config(SANDBOX)), HOST,
                               "ls /etc/systemd/system | grep '^sglang-' || true"]).stdout.split()  # fmt: skip
    first = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "site.yml"])
    print(f"first converge recap: {recap(first.stdout)}")
    yield {"inventory": str(inv), "ssh_config": str(ssh_config(SANDBOX)), "first": first.stdout,
           "first_stderr": first.stderr, "refused": refused, "units_after_refusal": units_after_refusal}  # fmt: skip
    down(SANDBOX)


def playbook(sandbox, *args, **kwargs):
    return run([str(VENV_BIN / "ansible-playbook"), "-i", sandbox["inventory"], "site.yml", *args], **kwargs)


def on_host(sandbox, command, host=HOST):
    return run(["ssh", "-F", sandbox["ssh_config"], host, command]).stdout


def start_times(sandbox):
    out = on_host(
        sandbox,
        " ; ".join(f"systemctl show --property=ExecMainStartTimestampMonotonic --value {u}.service" for u in UNITS),
    )
    times = dict(zip(UNITS, out.split(), strict=True))
    assert all(int(t) > 0 for t in times.values()), f"a unit is not running: {times}"
    return times


def unit_sums(sandbox):
    """{path: sha256} of each unit's unit file, environment file and record."""
    paths = [p for u in UNITS for p in (f"/etc/systemd/system/{u}.service", f"/etc/sglang/{u}.env",
                                        f"/var/lib/disagg-sglang/deployed/{u}.json")]  # fmt: skip
    out = on_host(sandbox, "sha256sum " + " ".join(paths))
    return dict(line.split()[::-1] for line in out.splitlines())


def test_a_first_install_with_a_flag_the_engine_refuses_fails_before_any_unit_starts(sandbox):
    refused = sandbox["refused"]
    assert refused.returncode != 0
    assert "sim-v2-feature" in refused.stdout and "unrecognized arguments" in refused.stdout, refused.stdout[-4000:]
    # the flags were checked after deps built the venv (the preflight had none to check with), and nothing started
    assert "TASK [Check the worker command lines the preflight could not check" in refused.stdout
    assert sandbox["units_after_refusal"] == [], sandbox["units_after_refusal"]


def test_rerun_changes_nothing_and_restarts_nothing(sandbox):
    before = start_times(sandbox)
    out = playbook(sandbox).stdout
    assert recap(out)["changed"] == 0, out[-4000:]
    assert start_times(sandbox) == before
    assert re.search(r"The capital of France is -> +\S", out), "no answer through the router was printed"


# Where the rtxpro6000-8x box's workers run (the sandbox inventory's profile): prefill on GPUs 0-3 of NUMA node 0,
# decode on 4-7 of node 1. What molecule's site scenario verifies on the oldest ansible-core (molecule/site/verify.yml),
# asked here of the newest's converge (issue 49: the newest core's molecule site scenario was this module's converge
# again).
PLACEMENT = {"sglang-prefill0": ("0,1,2,3", 0), "sglang-decode0": ("4,5,6,7", 1)}


def test_each_worker_runs_on_its_placement_and_a_request_crosses_from_prefill_to_decode(sandbox):
    """Behaviour, not files: systemd's ExecStart and each worker process's environment say its GPUs and NUMA node;
    one request through the router is answered, and the room decode finished last is one prefill saw."""
    for unit, (gpus, node) in PLACEMENT.items():
        pid = on_host(sandbox, f"systemctl show -P MainPID {unit}.service").strip()
        environ = on_host(sandbox, f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
        assert f"CUDA_VISIBLE_DEVICES={gpus}" in environ and "SGLANG_AUTO_NUMA_BIND=0" in environ, (unit, environ)
        exec_start = on_host(sandbox, f"systemctl show -P ExecStart {unit}.service")
        assert f"--cpunodebind={node} --membind={node}" in exec_start, (unit, exec_start)
    body = json.dumps({"text": "verify", "sampling_params": {"max_new_tokens": 4}})
    answer = json.loads(on_host(sandbox, "curl -sS --noproxy '*' -m 60 -H 'Content-Type: application/json' "
                                         f"-d {shlex.quote(body)} http://127.0.0.1:8000/generate"))  # fmt: skip
    assert answer["text"], answer
    seen = {port: json.loads(on_host(sandbox, f"curl -sS --noproxy '*' -m 10 "
                                              f"'http://127.0.0.1:{port}/sim/requests?path=/generate'"))
            for port in (30000, 30001)}  # fmt: skip
    prefill_rooms = [e["bootstrap_room"] for e in seen[30000]]
    decode_rooms = [e["bootstrap_room"] for e in seen[30001]]
    assert decode_rooms and decode_rooms[-1] in prefill_rooms, (prefill_rooms, decode_rooms)
    assert next(e for e in seen[30001] if e["bootstrap_room"] == decode_rooms[-1])["status"] == 200, seen[30001]


# Drift by hand, three kinds at once, repaired by one run (issue 49: each had its no-op run, repair run and quiet run
# of its own before; the three tests below judge the same runs, each its own kind):
#   a unit file changed on the host (a flag appended to decode's command line);
#   a package of sglang_deps_packages uninstalled from the engine venv (the no-op run asks pip nothing and runs no
#   interpreter in a venv whose site-packages did not change since its stamp: deps_state);
#   the state directory's mode and owner changed (a no-op run includes none of user.yml's steps: deps_state read the
#   account in place).
DECODE_UNIT = "/etc/systemd/system/sglang-decode0.service"


@pytest.fixture(scope="module")
def drift(sandbox):
    """A no-op run, the three drifts made by hand, the run that repairs them, and the run after it."""
    quiet = playbook(sandbox).stdout
    sums, before = unit_sums(sandbox), start_times(sandbox)
    engine = on_host(sandbox, "ls -d /opt/sglang/venvs/engine-*").split()
    assert len(engine) == 1, engine
    untouched_before = untouched_since_stamp(sandbox)
    on_host(
        sandbox,
        f"sed -i 's/--enable-metrics/--enable-metrics --log-level debug/' {DECODE_UNIT} && systemctl daemon-reload",
    )
    edited = unit_sums(sandbox)[DECODE_UNIT] != sums[DECODE_UNIT]
    python = f"{engine[0]}/bin/python"
    on_host(sandbox, f"{python} -m pip uninstall -q -y numpy")
    untouched_after_uninstall = untouched_since_stamp(sandbox)
    import_error = run(["ssh", "-F", sandbox["ssh_config"], HOST, f"{python} -c 'import numpy'"], check=False).stderr
    on_host(sandbox, "chmod 0777 /var/lib/sglang && chown root:root /var/lib/sglang")
    out = playbook(sandbox).stdout
    repaired = {
        "sums": unit_sums(sandbox), "starts": start_times(sandbox),
        "decode_unit": on_host(sandbox, "systemctl cat sglang-decode0.service"),
        "state_dir": on_host(sandbox, "stat -c '%a %U:%G' /var/lib/sglang").strip(),
        "numpy": run(["ssh", "-F", sandbox["ssh_config"], HOST, f"{python} -c 'import numpy'"], check=False),
    }  # fmt: skip
    again = playbook(sandbox).stdout
    return {"quiet": quiet, "sums": sums, "before": before, "engine": engine[0], "edited": edited,
            "untouched_before": untouched_before, "untouched_after_uninstall": untouched_after_uninstall,
            "import_error": import_error, "out": out, "repaired": repaired, "again": again,
            "untouched_again": untouched_since_stamp(sandbox)}  # fmt: skip


def test_a_unit_file_edited_by_hand_is_repaired_by_the_next_run(drift):
    """The next run writes the planned file back and restarts the unit onto it; the run after changes nothing."""
    assert drift["edited"], "the hand edit did not change the unit file"
    assert recap(drift["out"])["changed"] > 0, drift["out"][-3000:]
    assert drift["repaired"]["sums"] == drift["sums"], "the next run did not put the planned files back"
    assert drift["repaired"]["starts"]["sglang-decode0"] != drift["before"]["sglang-decode0"], (
        "decode does not run the repaired file"
    )
    assert "--log-level" not in drift["repaired"]["decode_unit"]
    assert recap(drift["again"])["changed"] == 0, drift["again"][-3000:]


# Per venv on the host: whether its site-packages (of the Python bin/python resolves to) is older than its stamp,
# the condition under which deps_state calls a stamped venv whole without running its distribution check.
UNTOUCHED_SCRIPT = r"""
import glob, json, os, re
out = {}
for venv in sorted(glob.glob("/opt/sglang/venvs/*")):
    version = re.search(r"python(\d+\.\d+)$", os.path.realpath(venv + "/bin/python")).group(1)
    site = os.stat(f"{venv}/lib/python{version}/site-packages").st_mtime_ns
    out[venv.rsplit("/", 1)[1]] = site < os.stat(venv + "/disagg-venv.json").st_mtime_ns
print(json.dumps(out))
"""


def untouched_since_stamp(sandbox):
    return json.loads(on_host(sandbox, f"python3 -c {shlex.quote(UNTOUCHED_SCRIPT)}"))


def test_a_package_removed_by_hand_from_the_engine_venv_is_put_back_by_the_next_run(drift):
    """The removed package is named and installed again by the next run, which dates the stamp again so the runs
    after it stay quick."""
    name = drift["engine"].rsplit("/", 1)[1]
    untouched = drift["untouched_before"]
    assert untouched.get(name) is True and all(untouched.values()), untouched
    assert drift["untouched_after_uninstall"][name] is False, "pip uninstall left the site-packages' mtime as it was"
    assert "No module named" in drift["import_error"], drift["import_error"]
    why = task_messages(drift["out"], "Say why a venv is built or repaired")
    assert why == [(HOST, f"{name}: numpy is not installed")], why
    assert re.search(r"TASK \[[^\]]*Build the engine venv[^\]]*\] \*+\nchanged:", drift["out"]), drift["out"][-3000:]
    assert drift["repaired"]["numpy"].returncode == 0, drift["repaired"]["numpy"].stderr
    assert recap(drift["again"])["changed"] == 0, drift["again"][-3000:]
    assert "Say why a venv is built or repaired" not in drift["again"]
    assert all(drift["untouched_again"].values()), (
        f"a repaired venv's stamp is older than its site-packages: {drift['untouched_again']}"
    )


def test_a_state_directory_changed_by_hand_is_put_back_and_only_then_the_account_steps_run(drift):
    """A no-op run includes none of user.yml's steps; the changed mode and owner are found, user.yml runs and puts
    them back, and the run after includes it no more."""
    assert "TASK [disagg.sglang.sglang : Create the state directory" not in drift["quiet"], drift["quiet"][-3000:]
    repaired = re.search(
        r"TASK \[disagg.sglang.sglang : Create the state directory[^\]]*\] \*+\nchanged:", drift["out"]
    )
    assert repaired, drift["out"][-3000:]
    assert drift["repaired"]["state_dir"] == "750 sglang:sglang"
    assert recap(drift["again"])["changed"] == 0, drift["again"][-3000:]
    assert "TASK [disagg.sglang.sglang : Create the state directory" not in drift["again"]


def test_the_converge_prints_no_deprecation_warning(sandbox):
    """What `make demo` runs (site.yml on the sandbox inventory) prints no Ansible deprecation (the topology step once
    read the injected top-level fact discovered_interpreter_python, which ansible-core 2.24 stops injecting)."""
    printed = sandbox["first"] + sandbox["first_stderr"]
    assert "[DEPRECATION WARNING]" not in printed, printed[printed.find("[DEPRECATION WARNING]") :][:2000]


def task_messages(output, task):
    """The debug messages of the task named `task` (its TASK block) in ansible-playbook output."""
    blocks = re.findall(rf"^TASK \[[^\]]*: {re.escape(task)}\] \**\n(.*?)(?=^TASK |^PLAY )", output, re.M | re.S)
    return [(host, msg) for block in blocks for host, msg in debug_messages(block)]


def test_the_kv_probe_says_what_it_did_in_the_sandbox_and_why(sandbox):
    """The first converge's KV probe line: without a CUDA array library the probe falls back to DRAM (host memory
    to host memory through NIXL/UCX), passes, and says why and what it measured (README.md, site.yml step 4);
    the host holds prefill and decode, so it is not "not run"."""
    lines = task_messages(sandbox["first"], "Show what the KV transport probe measured")
    print(f"KV probe: {lines}")
    assert len(lines) == 1 and lines[0][0] == HOST, f"no single KV probe line for {HOST}: {lines}"
    msg = lines[0][1]
    assert re.match(
        rf"DRAM probe passed in [\d.]+ s \(why DRAM: {re.escape(SANDBOX_KV_REASON)}\): "
        r"KV transport probe DRAM \(no GPU: host memory, not the GPU path\): \d+ MiB NIXL WRITE .* over \S+ .*"
        r"at [\d.]+ GB/s, \d+ bytes verified",
        msg,
    ), f"the KV probe line does not say that it probed DRAM, why, and what it measured: {msg!r}"
    assert "KV probe: not run" not in sandbox["first"]


def test_check_diff_shows_the_unit_diff_and_changes_nothing(sandbox):
    before, sums = start_times(sandbox), unit_sums(sandbox)
    out = playbook(sandbox, "--check", "--diff", "-e", '{"sglang_decode_extra_flags": {"log-level": "debug"}}').stdout
    assert "+    --log-level debug" in out, out[-4000:]
    assert "sglang-decode0.service" in out
    assert start_times(sandbox) == before
    assert unit_sums(sandbox) == sums


# The worker guard's files (roles/sglang/vars/main.yml, _sglang_guard_files, at the sandbox inventory's paths).
GUARD_FILES = ["/etc/sglang/sglang-guard.env", "/etc/sglang/sglang-guard.json",
               "/etc/systemd/system/sglang-guard.service", "/usr/local/lib/sglang-guard"]  # fmt: skip


def test_a_profile_in_the_inventory_converges(sandbox):
    """A user brings a profile in the inventory's profiles/ directory (no fork of the collection): it converges. The
    deployment stays on it for the next test, whose decode-only run takes it back to the shipped profile (issue 49:
    this test had a run of its own back)."""
    profile = yaml.safe_load((REPO / "profiles" / "deepseek_v4_flash_sm120.yml").read_text())
    profile["description"] = "a site's own variant: decode with a smaller static memory fraction"
    profile["flags"]["decode"]["mem-fraction-static"] = 0.55
    inventory_dir = Path(sandbox["inventory"])
    (inventory_dir / "profiles").mkdir(exist_ok=True)
    (inventory_dir / "profiles" / "site_variant.yml").write_text(yaml.safe_dump(profile))
    # The same run turns the worker guard on (off by default): the next test's run, without it, removes it.
    out = playbook(sandbox, "-e", '{"sglang_profile": "site_variant", "sglang_guard_enabled": true}').stdout
    assert recap(out)["failed"] == 0
    assert "--mem-fraction-static 0.55" in on_host(sandbox, "systemctl cat sglang-decode0.service")
    assert re.search(r"The capital of France is -> +\S", out), "no answer through the router was printed"
    assert on_host(sandbox, "systemctl is-active sglang-guard.service || true").split() == ["active"]
    assert on_host(sandbox, f"ls -d {' '.join(GUARD_FILES)} 2>/dev/null || true").split() == sorted(GUARD_FILES)


def test_tags_decode_after_a_decode_flag_change_restarts_decode_only(sandbox):
    """--tags decode with a decode flag added, from the site's own profile of the test before (its decode's static
    memory fraction) back to the shipped one: decode restarts onto both changes, nothing of prefill or the router is
    written or restarted; the worker guard the test before turned on is removed (off by default: its look found its
    files); a second decode-only run takes the flag off again."""
    before, sums = start_times(sandbox), unit_sums(sandbox)
    try:
        playbook(sandbox, "--tags", "decode", "-e", '{"sglang_decode_extra_flags": {"log-level": "debug"}}')
        after = start_times(sandbox)
        assert after["sglang-decode0"] != before["sglang-decode0"], "decode was not restarted"
        assert after["sglang-prefill0"] == before["sglang-prefill0"], "prefill was restarted"
        assert after["sglang-router"] == before["sglang-router"], "the router was restarted"
        new_sums = unit_sums(sandbox)
        changed = sorted(path for path, digest in new_sums.items() if sums[path] != digest)
        # the decode unit's file changed; nothing of the prefill or the router was written
        assert "/etc/systemd/system/sglang-decode0.service" in changed, changed
        assert not [path for path in changed if "decode0" not in path], changed
        decode_unit = on_host(sandbox, "systemctl cat sglang-decode0.service")
        assert "--log-level debug" in decode_unit and "--mem-fraction-static 0.55" not in decode_unit, decode_unit
        # the guard the test before turned on is off again (the default): stopped, and none of its files is left
        assert on_host(sandbox, "systemctl is-active sglang-guard.service || true").split() == ["inactive"]
        assert on_host(sandbox, f"ls -d {' '.join(GUARD_FILES)} 2>/dev/null || true").split() == []
    finally:
        playbook(sandbox, "--tags", "decode")  # back to the inventory's flags


def test_rtxpro6000_inventory_renders_the_units_an_expert_writes(sandbox, tmp_path):
    """inventories/rtxpro6000-8x in check mode against a bare host of its shape: the units it would write."""
    hosts = {h["name"]: h for h in json.loads((REPO / ".cache" / "sandbox" / SANDBOX / "hosts.json").read_text())}
    # The real host keeps its model (and tokenizer) under /models; give the bare host that much.
    on_host(sandbox, "mkdir -p /models && cp -a /opt/models/DeepSeek-V4-Flash /models/", host=BARE)
    target = {
        "ansible_host": hosts[BARE]["address"],
        "ansible_ssh_private_key_file": hosts[BARE]["identity_file"],
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        # The sandbox's fake GPU box stands in for the real one: only where facts are read from changes.
        "sglang_topology_sysfs_root": hosts[BARE]["sysfs_root"],
    }
    extra = tmp_path / "target.json"
    extra.write_text(json.dumps(target))
    out = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "inventories/rtxpro6000-8x",
            "site.yml",
            "--check",
            "--diff",
            "-e",
            f"@{extra}",
        ],
    ).stdout
    rendered = new_units_in_diff(out)
    assert set(rendered) == set(EXPECTED), f"rendered {sorted(rendered)}:\n{out[-3000:]}"
    for unit, want in EXPECTED.items():
        prefix, flags, env = parse_unit(rendered[unit])
        assert prefix == want["prefix"], unit
        assert flags == want["flags"], unit
        assert env == want["env"], unit
    left = on_host(
        sandbox, "ls /etc/systemd/system/ | grep -c '^sglang-' || true; test -e /opt/sglang || echo no-venv", host=BARE
    )
    assert left.split() == ["0", "no-venv"], f"check mode changed the bare host: {left}"


def router_workers(sandbox):
    """{url: id} of what the router lists (its GET /workers)."""
    out = on_host(sandbox, "curl -sS --noproxy '*' http://127.0.0.1:8000/workers")
    return {w["url"]: w["id"] for w in json.loads(out)["workers"]}


def test_a_run_fails_naming_the_router_and_a_worker_added_to_it_by_hand(sandbox):
    """Issue 39's end check: a worker the plan does not have (the decode again, under another URL, so it is healthy)
    added to the router by hand fails the run at once, naming router and worker; the run takes it out of nowhere."""
    planned = router_workers(sandbox)
    assert sorted(planned) == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    extra = "http://localhost:30001"
    body = json.dumps({"url": extra, "worker_type": "decode"})
    on_host(sandbox, f"curl -sS --noproxy '*' -X POST -H 'Content-Type: application/json' -d {shlex.quote(body)} "
                     "http://127.0.0.1:8000/workers")  # fmt: skip
    try:
        for _attempt in range(60):  # the router registers it in the background
            if extra in router_workers(sandbox):
                break
            time.sleep(0.5)
        assert extra in router_workers(sandbox), "the router never listed the worker added by hand"
        out = playbook(sandbox, check=False)
        text = " ".join((out.stdout + out.stderr).split())
        assert out.returncode != 0, out.stdout[-3000:]
        assert f"router sglang-router@{HOST} lists decode {extra} (id " in text, out.stdout[-3000:]
        assert "which the plan does not have: take it out of that router" in text
        assert extra in router_workers(sandbox), "the run took the hand-added worker out instead of naming it"
    finally:
        listed = router_workers(sandbox)
        if extra in listed:
            on_host(sandbox, f"curl -sS --noproxy '*' -X DELETE http://127.0.0.1:8000/workers/{listed[extra]}")
        for _attempt in range(60):
            if extra not in router_workers(sandbox):
                break
            time.sleep(0.5)
    assert sorted(router_workers(sandbox)) == sorted(planned)
