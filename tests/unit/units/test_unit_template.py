"""The unit template renders the planned spec and nothing else: the units planned for inventories/rtxpro6000-8x
on the fixture of that host are what an expert writes by hand (tests/integration/expected/rtxpro6000-8x.yml),
rendered offline with the role's own template."""

from pathlib import Path

import jinja2
import pytest
import yaml
from plan_stages import preflight
from unit_files import parse_unit

REPO = Path(__file__).resolve().parents[3]
EXPECTED = yaml.safe_load((REPO / "tests/integration/expected/rtxpro6000-8x.yml").read_text())
TEMPLATE = REPO / "roles/sglang/templates/sglang.service.j2"


def render(spec):
    """The template as the template module renders it (trim_blocks); it needs no filter of the collection."""
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    return env.from_string(TEMPLATE.read_text()).render(item=spec, ansible_managed="Ansible managed")


@pytest.fixture(scope="module")
def planned(topology):
    messages, units = preflight(topology, inventory="inventories/rtxpro6000-8x", with_units=True)
    assert messages == []
    return {spec["unit"]: spec for spec in units}


def test_the_rtxpro6000_inventory_renders_the_units_an_expert_writes(planned):
    assert set(planned) == set(EXPECTED)
    for unit, want in EXPECTED.items():
        prefix, flags, env = parse_unit(render(planned[unit]))
        assert prefix == want["prefix"], unit
        assert flags == want["flags"], unit
        assert env == want["env"], unit


def test_the_template_renders_every_hardening_setting_of_the_spec(planned):
    for spec in planned.values():
        text = render(spec)
        for key, value in spec["hardening"]:
            assert f"\n{key}={value}\n" in text, (spec["unit"], key)
        assert f"User={spec['user']}\n" in text and f"EnvironmentFile={spec['environment_file']}\n" in text
