"""roles/sglang/tasks/stranded.yml against simulators on loopback: a prefill whose NIXL room was stranded (its decode
connected, then died before the transfer: tests/sandbox/pdsim, as sglang/srt/disaggregation/nixl/conn.py) is named
by the run and, when a second prefill serves, handed to the rolling restart; an idle prefill is not named.

The play is site.yml's stranded-KV step, run with a local connection; each host's sglang_worker_units stands in for
what site.yml's preflight plans (the keys the step reads: unit, role, health_url).
"""

import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
from sandbox_hosts import debug_messages, local_play
from test_pdsim_pd_semantics import connect_then_kill_decode, gauge

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
PLAY = """
- name: Stranded KV
  hosts: prefill
  gather_facts: false
  tasks:
    - name: Name the prefill workers with stranded KV
      ansible.builtin.include_role:
        name: disagg.sglang.sglang
        tasks_from: stranded.yml
    - name: Show the units handed to the rolling restart
      ansible.builtin.debug:
        msg: "deferred: {{ _sglang_deferred | default([]) | map(attribute='unit') | join(',') }}"
"""


def spec(unit, sim):
    return {"unit": unit, "role": "prefill", "host": "prefill-01", "health_url": sim.url("/health")}


def run_play(tmp_path, units, **extra):
    children = {"prefill": {"hosts": {"prefill-01": {"sglang_worker_units": units}}}}
    # what the plan (plan.yml) counts once per run; the model path the worker role's dependency requires
    extra = {"sglang_role_totals": {"prefill": len(units)}, "sglang_model_path": "/models/m", **extra}
    return [msg for _host, msg in debug_messages(local_play(tmp_path, children, PLAY, extra))]


@pytest.fixture
def stranded(sims):
    """A prefill holding a stranded NIXL room, and an idle prefill beside it."""
    prefill, _on_prefill = connect_then_kill_decode(sims, "nixl", 91)
    idle = sims.start("prefill", "--enable-metrics", "--disaggregation-transfer-backend", "nixl")
    held = 0.0
    for _poll in range(120):  # the room reaches its transfer after the simulated prefill (3.5 s)
        held = gauge(prefill, "sglang:num_used_tokens")
        if held and gauge(prefill, "sglang:num_prefill_inflight_queue_reqs"):
            break
        subprocess.run(["sleep", "0.1"], check=True)
    assert held > 0, "the prefill never stranded its room"
    return prefill, idle, round(held)


def test_a_stranded_prefill_is_named_and_rolls_when_a_second_prefill_serves(tmp_path, stranded):
    prefill, idle, held = stranded
    messages = run_play(tmp_path, [spec("sglang-prefill0", prefill), spec("sglang-prefill1", idle)],
                        _sglang_router_serving=True, sglang_rolling_batch=1)  # fmt: skip
    named = [m for m in messages if "stranded KV" in m]
    assert len(named) == 1 and named[0].startswith(f"sglang-prefill0 on prefill-01 holds {held} KV tokens"), messages
    assert "It restarts now in the rolling step" in named[0]
    assert "deferred: sglang-prefill0" in messages


def test_without_a_second_prefill_it_is_named_and_left_to_the_operator(tmp_path, stranded):
    prefill, _idle, held = stranded
    messages = run_play(tmp_path, [spec("sglang-prefill0", prefill)], _sglang_router_serving=True)
    named = [m for m in messages if "stranded KV" in m]
    assert len(named) == 1 and f"holds {held} KV tokens" in named[0], messages
    assert "systemctl restart sglang-prefill0.service" in named[0]
    assert "deferred: " in messages  # nothing handed to the rolling restart


def test_the_health_wait_s_reading_is_used_and_only_the_rest_read_again(tmp_path, stranded):
    """site.yml's health wait (service_health, rolling.health_services) read each prefill's /metrics once it was
    healthy: the step names the stranded prefill from that reading, and asks /metrics only of a prefill the wait did
    not read (here the idle one)."""
    prefill, idle, held = stranded
    with urllib.request.urlopen(prefill.url("/metrics"), timeout=10) as page:
        content = page.read().decode()
    waited = {"services": [{"healthy": True, "content": content, "item": spec("sglang-prefill0", prefill)}]}
    children = {"prefill": {"hosts": {"prefill-01": {
        "sglang_worker_units": [spec("sglang-prefill0", prefill), spec("sglang-prefill1", idle)]}}}}  # fmt: skip
    extra = {"sglang_role_totals": {"prefill": 2}, "sglang_model_path": "/models/m", "__sglang_health": waited,
             "_sglang_router_serving": True, "sglang_rolling_batch": 1}  # fmt: skip
    out = local_play(tmp_path, children, PLAY, extra)
    read = re.search(r"TASK \[[^\]]*Read the KV use of the prefill workers the health wait did not read[^\]]*\] \*+\n"
                     r"((?:ok|skipping).*\n)+", out)  # fmt: skip
    assert read and re.findall(r"item=(sglang-prefill\d)", read.group(0)) == ["sglang-prefill1"], out[-3000:]
    messages = [msg for _host, msg in debug_messages(out)]
    named = [m for m in messages if "stranded KV" in m]
    assert len(named) == 1 and named[0].startswith(f"sglang-prefill0 on prefill-01 holds {held} KV tokens"), messages
