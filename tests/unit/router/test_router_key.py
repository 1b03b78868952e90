"""roles/sglang_worker/tasks/router_key.yml reads the running router's key from its environment file, as
roles/sglang/templates/sglang.env.j2 wrote it (NAME="VALUE", with \\ " ` $ escaped): the key comes back as it was,
whatever characters it holds, and '' when the file has none or is missing."""

import json

import pytest
from sandbox_hosts import debug_messages, local_play

PLAY = """
- name: Router key
  hosts: router
  gather_facts: false
  tasks:
    - name: Read the running router's key
      ansible.builtin.include_role:
        name: disagg.sglang.sglang_worker
        tasks_from: router_key.yml
    - name: Show the key read
      ansible.builtin.debug:
        msg: "{{ {'key': _sglang_worker_rolling_router_key} | to_json }}"
"""


def env_line(value):
    """One line as sglang.env.j2 renders it."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return f'SGLANG_ROUTER_API_KEY="{escaped}"\n'


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (env_line("abc"), "abc"),
        ('HF_TOKEN="x"\n' + env_line('a"b\\c$d`e'), 'a"b\\c$d`e'),
        (env_line("-lead"), "-lead"),
        ('HF_TOKEN="x"\n', ""),
        (None, ""),
    ],
    ids=["plain", "every escaped character", "a leading dash", "no key", "no file"],
)
def test_the_running_routers_key_is_read_back_as_it_was_written(tmp_path, text, key):
    env = tmp_path / "router.env"
    if text is not None:
        env.write_text(text)
    unit = {"unit": "sglang-router", "impl": "sglang_router", "environment_file": str(env)}
    children = {"router": {"hosts": {"router-01": {"sglang_router_unit": unit}}}}
    variables = {"_sglang_worker_rolling_router": "router-01", "sglang_model_path": "/models/m"}
    out = local_play(tmp_path, children, PLAY, variables)
    [(_host, msg)] = [m for m in debug_messages(out) if m[1].startswith("{")]
    assert json.loads(msg) == {"key": key}


ROUTERS_PLAY = """
- name: Routers the worker API calls reach
  hosts: router
  gather_facts: false
  tasks:
    - name: Read the running router's key and every router
      ansible.builtin.include_role:
        name: disagg.sglang.sglang_worker
        tasks_from: router_key.yml
    - name: Show the routers
      ansible.builtin.debug:
        msg: "{{ _sglang_worker_routers | to_json }}"
"""


def test_the_worker_api_calls_reach_every_router_unit_of_every_router_host(tmp_path):
    """Two router hosts, two router units on the first (sglang_router_instances): the rolling and retire steps get
    all three, each with its host and the program that answers there."""

    def endpoint(unit, host, port, impl="sglang_router"):
        return {"unit": unit, "host": host, "url": f"http://127.0.0.1:{port}", "implementation": impl}

    env = str(tmp_path / "none.env")
    first = [endpoint("sglang-router-a", "router-01", 8001), endpoint("sglang-router-b", "router-01", 8002, "smg")]
    second = [endpoint("sglang-router", "router-02", 8000)]
    hosts = {
        "router-01": {"sglang_router_unit": {"unit": "sglang-router-a", "impl": "sglang_router",
                                             "environment_file": env}, "sglang_router_endpoints": first},
        "router-02": {"sglang_router_unit": {"unit": "sglang-router", "impl": "sglang_router",
                                             "environment_file": env}, "sglang_router_endpoints": second},
    }  # fmt: skip
    variables = {"_sglang_worker_rolling_router": "router-01", "sglang_model_path": "/models/m"}
    out = local_play(tmp_path, {"router": {"hosts": hosts}}, ROUTERS_PLAY, variables)
    # run once, for the play's hosts: each shows the same list
    shown = [json.loads(msg) for _host, msg in debug_messages(out) if msg.startswith("[")]
    assert shown == [first + second, first + second]


def test_without_planned_endpoints_the_one_router_is_reached_as_before(tmp_path):
    unit = {"unit": "sglang-router", "impl": "smg", "url": "http://127.0.0.1:8000",
            "environment_file": str(tmp_path / "none.env")}  # fmt: skip
    children = {"router": {"hosts": {"router-01": {"sglang_router_unit": unit}}}}
    variables = {"_sglang_worker_rolling_router": "router-01", "sglang_model_path": "/models/m"}
    out = local_play(tmp_path, children, ROUTERS_PLAY, variables)
    [(_host, msg)] = [m for m in debug_messages(out) if m[1].startswith("[")]
    assert json.loads(msg) == [{"unit": "sglang-router", "host": "router-01", "url": "http://127.0.0.1:8000",
                                "implementation": "smg"}]  # fmt: skip
