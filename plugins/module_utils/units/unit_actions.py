# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""What the units step asks systemd to do for the units of one host, in one call (one read of every unit's
state instead of a reset-failed, a restart and a start-and-enable task per unit). Pure decisions over the state
systemd reports, and one loop with an injected runner; tests/unit/units/test_unit_actions.py.

    parse_show(text)             {name: {LoadState, ActiveState, SubState, UnitFileState}} from `systemctl show`
    plan(states, units, restart) {name: [actions]}: what each unit needs
    settled(run, units)          {units_settled, restarts}: one read; whether no unit needs an action (the units
                                 step skips its unit_actions call then; unit_files reads it after its write)
    apply(run, units, restart, reload, check)
                                 reads, decides and acts (nothing in check mode); never fails on a unit that systemd
                                 refuses to start: the health wait sees it failed and rolls it back

Actions, in the order they run: reset-failed (a failed unit: a crash loop left its start limit hit; this run
starts it again), restart (its unit or environment file changed), start (it does not run), enable.
It returns each unit's restart count after acting (NRestarts), from which the health wait counts a crash.
"""

PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "NRestarts")
RUNNING = ("active", "activating", "reloading")


def parse_show(text):
    """{Id: properties} of `systemctl show -p Id,... A B`: one block per unit, blank lines between."""
    states = {}
    for block in (text or "").strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            states[props["Id"]] = props
    return states


def service(name):
    return name if "." in name else f"{name}.service"


def plan(states, units, restart):
    """{name: [actions]} for the units that must run and be enabled; restart: those whose unit or environment file
    changed in this run. A unit systemd does not know gets ['missing'] (in check mode: a unit file not written
    yet)."""
    restart = {service(n) for n in restart or []}
    actions = {}
    for name in (service(n) for n in units):
        state = states.get(name, {})
        if state.get("LoadState", "not-found") == "not-found":
            actions[name] = ["missing"]
            continue
        running = state.get("ActiveState") in RUNNING
        todo = ["reset-failed"] if state.get("ActiveState") == "failed" else []
        if name in restart:
            todo.append("restart")
        elif not running:
            todo.append("start")
        if state.get("UnitFileState") not in ("enabled", "static"):
            todo.append("enable")
        actions[name] = todo
    return actions


def read(run, units):
    """{name: properties} of the units, in one `systemctl show`."""
    _rc, out, _err = run(["systemctl", "show", f"--property={','.join(PROPERTIES)}", *map(service, units)])
    return parse_show(out)


def settled(run, units):
    """{units_settled, restarts}: whether every unit runs and is enabled with nothing to do (no file changed), and each
    one's restart count, from one read."""
    states = read(run, units)
    return {"units_settled": not any(plan(states, units, []).values()),
            "restarts": {name: int(p.get("NRestarts") or 0) for name, p in states.items()}}  # fmt: skip


def apply(run, units, restart, reload, check):
    """Reads the units' state, acts on each (daemon-reload first where asked), and returns {changed, actions,
    errors}; run(argv) -> (rc, out, err). Nothing runs in check mode: actions say what would."""
    errors = {}
    if reload and not check:
        rc, _out, err = run(["systemctl", "daemon-reload"])
        if rc != 0:
            errors["daemon-reload"] = err.strip()
    states = read(run, units) if units else {}
    actions = plan(states, units, restart)
    if not check:
        for name, todo in actions.items():
            for action in todo:
                if action == "missing":
                    errors[name] = "systemd does not know this unit"
                    continue
                rc, _out, err = run(["systemctl", action, name])
                if rc != 0 and action != "reset-failed":  # nothing to reset is no error
                    errors[name] = f"systemctl {action}: {err.strip() or 'rc ' + str(rc)}"
                    break
    acted = {name: todo for name, todo in actions.items() if todo and todo != ["missing"]}
    restarts = {}
    if units:  # after the actions: reset-failed clears a unit's restart count
        _rc, out, _err = run(["systemctl", "show", "--property=Id,NRestarts", *map(service, units)])
        restarts = {name: int(p.get("NRestarts") or 0) for name, p in parse_show(out).items()}
    return {"changed": bool(acted) or (reload and not check), "actions": acted, "errors": errors,
            "restarts": restarts}  # fmt: skip
