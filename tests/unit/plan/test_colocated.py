"""Whether one host serves every role: roles/sglang/vars/main.yml's _sglang_colocated (Jinja, read by the default
of sglang_bind_host) and plan_inputs.colocated (the preflight's host_plan and the unit tests) say the same."""

from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan_inputs

REPO = Path(__file__).resolve().parents[3]
EXPRESSION = yaml.safe_load((REPO / "roles/sglang/vars/main.yml").read_text())["_sglang_colocated"]


@pytest.mark.parametrize(
    ("groups", "colocated"),
    [
        ({"prefill": ["a"], "decode": ["a"], "router": ["a"]}, True),
        ({"prefill": ["a"], "decode": ["a"]}, True),
        ({"prefill": ["a"], "decode": ["a"], "router": []}, True),
        ({"prefill": ["a"], "decode": ["b"], "router": ["a"]}, False),
        ({"prefill": ["a", "b"], "decode": ["a"], "router": ["a"]}, False),
        ({"prefill": ["a"], "decode": ["a"], "router": ["a", "b"]}, False),
        ({"all": ["a"], "ungrouped": []}, False),
        ({"prefill": ["a"], "decode": ["a"], "router": ["a"], "monitoring": ["m"]}, True),
    ],
)
def test_the_role_vars_and_the_plan_agree_on_one_host_serving_every_role(groups, colocated):
    rendered = jinja2.Environment().from_string(EXPRESSION).render(groups=groups).strip()
    assert rendered == str(colocated)
    assert plan_inputs.colocated(groups) is colocated
