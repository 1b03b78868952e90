"""The units step's one call to systemd (units/unit_actions.py): one read of every unit's state, then only what
each unit needs; a table of states and what must happen, with a scripted systemctl."""

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.units import unit_actions


def show(**units):
    """`systemctl show` text: NAME=(LoadState, ActiveState, UnitFileState)."""
    blocks = []
    for name, (load, active, enabled) in units.items():
        blocks.append(f"Id={name}.service\nLoadState={load}\nActiveState={active}\nSubState=x\nUnitFileState={enabled}")
    return "\n\n".join(blocks) + "\n"


class Systemctl:
    def __init__(self, text, refuse=()):
        self.text, self.refuse, self.calls = text, refuse, []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[1] == "show" and argv[2] == "--property=Id,NRestarts":
            return 0, "".join(f"Id={n}\nNRestarts=0\n\n" for n in argv[3:]), ""
        if argv[1] == "show":
            return 0, self.text, ""
        if argv[1] == "reset-failed" and argv[2] in self.refuse:
            return 1, "", f"Failed to reset failed state of unit {argv[2]}: Unit {argv[2]} not loaded."
        if argv[1] in ("start", "restart") and argv[2] in self.refuse:
            return 1, "", f"Job for {argv[2]} failed because the control process exited with error code."
        return 0, "", ""


RUNNING = ("loaded", "active", "enabled")


@pytest.mark.parametrize(
    ("states", "units", "restart", "acted"),
    [
        # a no-op run: running and enabled, nothing changed - nothing is done
        ({"p": RUNNING, "d": RUNNING}, ["p", "d"], [], {}),
        # a changed unit restarts; the other is left alone
        ({"p": RUNNING, "d": RUNNING}, ["p", "d"], ["d"], {"d.service": ["restart"]}),
        # a crash loop left it failed: its start limit is cleared and it starts
        ({"p": ("loaded", "failed", "enabled")}, ["p"], [], {"p.service": ["reset-failed", "start"]}),
        # a new unit: not running, not enabled, its file changed
        ({"p": ("loaded", "inactive", "disabled")}, ["p"], ["p"], {"p.service": ["restart", "enable"]}),
        # stopped by hand: started, nothing to reset
        ({"p": ("loaded", "inactive", "enabled")}, ["p"], [], {"p.service": ["start"]}),
        # disabled by hand while running: enabled again, not restarted
        ({"p": ("loaded", "active", "disabled")}, ["p"], [], {"p.service": ["enable"]}),
        # still starting (activating) counts as running: not started twice
        ({"p": ("loaded", "activating", "enabled")}, ["p"], [], {}),
        # a unit systemd does not know (check mode before the file is written) is not acted on
        ({"p": ("not-found", "inactive", "")}, ["p"], [], {}),
    ],
)
def test_each_unit_gets_only_what_it_needs(states, units, restart, acted):
    systemctl = Systemctl(show(**states))
    result = unit_actions.apply(systemctl, units, restart, reload=False, check=False)
    assert result["actions"] == acted
    assert result["changed"] == bool(acted)
    done = [argv[1:] for argv in systemctl.calls if argv[1] != "show"]
    assert done == [[action, name] for name, todo in acted.items() for action in todo]
    assert len([argv for argv in systemctl.calls if argv[1] == "show"]) == 2  # the state, then the restart counts
    assert result["restarts"] == {f"{name}.service": 0 for name in units}


def test_check_mode_says_what_it_would_do_and_does_nothing():
    systemctl = Systemctl(show(p=("loaded", "failed", "enabled")))
    result = unit_actions.apply(systemctl, ["p"], ["p"], reload=True, check=True)
    assert result == {"changed": True, "actions": {"p.service": ["reset-failed", "restart"]}, "errors": {},
                      "restarts": {"p.service": 0}}  # fmt: skip
    assert [argv[1] for argv in systemctl.calls] == ["show", "show"]


def test_a_unit_systemd_refuses_is_named_and_the_others_still_act():
    systemctl = Systemctl(show(p=("loaded", "failed", "enabled"), d=("loaded", "inactive", "enabled")),
                          refuse=("p.service",))  # fmt: skip
    result = unit_actions.apply(systemctl, ["p", "d"], ["p"], reload=True, check=False)
    assert systemctl.calls[0] == ["systemctl", "daemon-reload"]
    assert result["errors"] == {"p.service": "systemctl restart: Job for p.service failed because the control process "
                                             "exited with error code."}  # fmt: skip
    assert ["systemctl", "start", "d.service"] in systemctl.calls
    assert result["changed"]


@pytest.mark.parametrize(
    ("states", "settled"),
    [
        ({"p": RUNNING, "d": RUNNING}, True),  # the no-op run: unit_actions is not called
        ({"p": RUNNING, "d": ("loaded", "activating", "enabled")}, True),  # starting counts as running
        ({"p": RUNNING, "d": ("loaded", "failed", "enabled")}, False),  # crashed since the last run
        ({"p": RUNNING, "d": ("loaded", "inactive", "enabled")}, False),  # stopped by hand
        ({"p": RUNNING, "d": ("loaded", "active", "disabled")}, False),  # disabled by hand
        ({"p": RUNNING, "d": ("not-found", "inactive", "")}, False),  # its file is gone: unit_actions names it
    ],
)
def test_settled_is_true_only_when_no_unit_needs_an_action(states, settled):
    """What the write's own read tells the units step (unit_files' `units`): settled exactly where apply, with no file
    changed, would do nothing; one read, no action; each unit's restart count comes back."""
    text = show(**states).replace("UnitFileState=", "NRestarts=2\nUnitFileState=")
    systemctl = Systemctl(text)
    got = unit_actions.settled(systemctl, list(states))
    assert got["units_settled"] is settled
    assert [argv[1] for argv in systemctl.calls] == ["show"]
    assert got["restarts"] == {f"{name}.service": 2 for name in states}
