"""The rolling_plan action (plugins/action/rolling_plan.py) as roles/sglang_worker/tasks/rolling_restart.yml runs it:
the units every host deferred, in batches of one role (prefill first), never every instance of a role at once; a
wrong option fails the task naming it."""

import json

from sandbox_hosts import controller_playbook, debug_messages, local_play

PLAY = """
- name: Rolling plan
  hosts: workers
  gather_facts: false
  tasks:
    - name: Plan the batches
      disagg.sglang.rolling_plan:
        deferred: "{{ ansible_play_hosts | map('extract', hostvars, 'deferred') | flatten }}"
        batch: "{{ batch }}"
        totals: {prefill: 2, decode: 3}
      register: planned
      run_once: true
    - name: Show the batches
      ansible.builtin.debug:
        msg: "{{ planned.batches | map('map', attribute='unit') | map('list') | list | to_json }}"
      run_once: true
"""


def unit(name, role, host):
    return {"unit": name, "role": role, "host": host, "backup": {"unit_file": "", "env_file": "", "record": ""}}


def children():
    return {"workers": {"hosts": {
        "w1": {"deferred": [unit("d1", "decode", "w1"), unit("p0", "prefill", "w1")]},
        "w2": {"deferred": [unit("d0", "decode", "w2"), unit("p1", "prefill", "w2"), unit("d2", "decode", "w2")]},
    }}}  # fmt: skip


def test_the_batches_take_one_role_prefill_first_and_never_every_instance(tmp_path):
    out = local_play(tmp_path, children(), PLAY, {"batch": 5})
    [(_host, msg)] = debug_messages(out)
    # batch 5, but at most total - 1 of a role: prefill 1 at a time, decode 2
    assert json.loads(msg) == [["p0"], ["p1"], ["d1", "d0"], ["d2"]]


def test_an_unknown_option_fails_naming_it(tmp_path):
    play = PLAY.replace("totals: {prefill: 2, decode: 3}", "totals: {}\n        batches: 2")
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"vars": {"ansible_connection": "local"}, "children": children()}}))
    (tmp_path / "play.yml").write_text(play)
    proc = controller_playbook(inv, tmp_path / "play.yml", {"batch": 1}, tmp_path, check=False)
    assert proc.returncode != 0 and "Unsupported parameters" in proc.stdout and "batches" in proc.stdout
