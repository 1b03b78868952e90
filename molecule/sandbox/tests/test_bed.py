"""The sandbox bed: real systemd, the simulated GPU box, and the PD simulator behind the real router."""

import json
import time

import pytest

UNITS = ["bed-prefill", "bed-decode", "bed-router"]


def curl(host, *args):
    return host.run("curl -sS --max-time 10 " + " ".join(args))


def test_systemd_is_pid_1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), host.run("systemctl --failed --no-legend").stdout


def test_a_transient_unit_runs(host):
    unit = "bed-transient-probe"
    host.run(f"systemctl reset-failed {unit}")
    result = host.run(f"systemd-run --wait --quiet --unit={unit} --property=Type=oneshot /bin/true")
    assert result.rc == 0, result.stderr
    assert host.run(f"systemctl show -P Result {unit}").stdout.strip() in ("success", "")


@pytest.mark.parametrize("unit", UNITS)
def test_bed_units_run(host, unit):
    service = host.service(unit)
    if not service.is_running:
        print(host.run(f"journalctl -u {unit} --no-pager -n 50").stdout)
    assert service.is_running
    assert service.is_enabled


def test_fake_gpu_box(host):
    out = host.check_output("nvidia-smi --query-gpu=index,name,memory.total,compute_cap --format=csv,noheader,nounits")
    rows = [line.split(", ") for line in out.splitlines()]
    assert len(rows) == 8
    assert rows[0] == ["0", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "97887", "12.0"]
    assert host.file("/opt/fakegpu/sysroot/sys/devices/system/node/node1/cpulist").content_string.strip() == "32-63"
    assert host.file("/opt/fakegpu/sysroot/sys/bus/pci/devices/0000:99:00.0/numa_node").content_string.strip() == "1"
    assert host.run("/opt/fakegpu/bin/numactl --cpunodebind=2 true").rc == 1


def test_decode_runs_under_the_numactl_shim(host):
    pid = host.check_output("systemctl show -P MainPID bed-decode")
    environ = host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert "NUMACTL_SANDBOX_BINDING=cpunodebind=1 membind=1" in environ.splitlines()


def test_generate_through_the_router_in_pd_mode(host):
    deadline = time.monotonic() + 60
    while curl(host, "-o /dev/null -w '%{http_code}' http://127.0.0.1:8000/readiness").stdout != "200":
        if time.monotonic() > deadline:
            print(host.run("journalctl -u bed-router --no-pager -n 80").stdout)
            pytest.fail("router /readiness did not answer 200 within 60 s")
        time.sleep(0.5)
    body = json.dumps({"text": "Hello from the bed", "sampling_params": {"max_new_tokens": 8}})
    result = curl(
        host,
        "-X POST http://127.0.0.1:8000/generate -H 'Content-Type: application/json'",
        f"-d '{body}' -w '\\n%{{http_code}}'",
    )
    payload, _sep, code = result.stdout.rpartition("\n")
    assert code == "200", result.stdout + result.stderr
    answer = json.loads(payload)
    assert answer["text"]
    assert answer["meta_info"]["completion_tokens"] == 8
