# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Rolling restarts of changed worker units, so the other instances of a role keep serving.

units.yml decides per host which changed units wait for the rolling step (`deferred`): a unit that ran before
this run, of a role with more than one instance in the deployment, while the router serves. rolling.yml then
restarts them batch by batch through the router's worker API (sglang-router 0.3.2: DELETE /workers/{id},
POST /workers {url, worker_type, bootstrap_port, api_key}):

    take the batch out of the router -> restart (SIGTERM: sglang drains its in-flight requests, then exits)
    -> healthy at its health URL -> back into the router, healthy there -> next batch

A batch that does not become healthy is rolled back instance by instance (previous unit file) and put back
into the router; the remaining batches are left alone and the run fails.
"""

ROLE_ORDER = {"prefill": 0, "decode": 1}


def defer(unit, role_totals, router_serving, batch):
    """Whether a changed unit (a spec with `existed`) waits for the rolling step instead of restarting now: it ran
    before this run, it is a worker of a role with more than one instance in the deployment, the router serves,
    and rolling is on (batch > 0)."""
    return bool(
        unit.get("existed")
        and unit.get("role") != "router"
        and router_serving
        and int(batch or 0) > 0
        and role_totals.get(unit["role"], 0) > 1
    )


def restart_decision(units, changed, new, inputs):
    """The restart rule, once per host (roles/sglang/tasks/units.yml): which changed units restart now and which
    the rolling step restarts.

    units: the host's planned specs ({unit, role}); changed: names of the units whose unit or environment file
    changed in this run; new: names of those that had no unit file before it; inputs: {totals: role_totals of the
    deployment, router_serving, batch: sglang_rolling_batch}.
    inputs may also hold records ({unit: record} of the host, as the preflight read them), env_changed (names
    whose environment file changed) and router_roll (the deployment has two or more router instances behind
    a serving HAProxy, roles/sglang_router/tasks/main.yml).
    Returns {now: [name], deferred: [name], synced: [name]}, each in the order of `changed`. synced: a router whose
    worker list alone changed (its record's restart_key is the spec's, its secrets did not change): its unit
    file is written for its next start and the running router takes the list through its worker API. With
    router_roll, a router that ran before and must restart is deferred too: the router roll (roles/sglang_router/tasks/
    roll.yml) restarts the routers one at a time over the deployment, each drained in HAProxy first.
    """
    specs = {u["unit"]: u for u in units}
    totals, serving, batch = inputs.get("totals") or {}, inputs.get("router_serving"), inputs.get("batch")
    records, env_changed = inputs.get("records") or {}, set(inputs.get("env_changed") or [])
    changed = list(dict.fromkeys(changed))
    deferred = [
        name
        for name in changed
        if name in specs
        and defer({"role": specs[name].get("role"), "existed": name not in new}, totals, serving, batch)
    ]
    synced = [
        name
        for name in changed
        if name in specs
        and name not in new
        and name not in env_changed
        and specs[name].get("role") == "router"
        and specs[name].get("restart_key")
        and (records.get(name) or {}).get("restart_key") == specs[name]["restart_key"]
    ]
    if inputs.get("router_roll"):
        rolled = {
            n for n in changed if n in specs and n not in new and n not in synced and specs[n].get("role") == "router"
        }
        deferred = [n for n in changed if n in deferred or n in rolled]
    return {"now": [n for n in changed if n not in deferred and n not in synced], "deferred": deferred,
            "synced": synced}  # fmt: skip


def retired(records, planned, roles):
    """The records of the worker units of ROLES that the plan no longer has (removed or renamed in the inventory),
    in unit order. records: {unit: record} of one host; planned: the host's planned unit names."""
    planned = set(planned)
    return [
        records[name]
        for name in sorted(records)
        if isinstance(records[name], dict) and records[name].get("role") in roles and name not in planned
    ]


def role_totals(worker_specs):
    """{role: number of instances in the whole deployment}."""
    totals = {}
    for spec in worker_specs:
        totals[spec["role"]] = totals.get(spec["role"], 0) + 1
    return totals


def rolling_plan(changed, inputs):
    """Batches of the deferred units: [[unit, ...], ...], one role per batch, prefill first.

    changed: the deferred units of every host ({unit, role, host, url, bootstrap_port, health_url, previous}).
    inputs:  {batch: sglang_rolling_batch, totals: role_totals of the deployment}.
    A batch never takes every instance of a role out: it holds at most total - 1 of them.
    """
    batch = max(1, int(inputs.get("batch") or 1))
    totals = inputs.get("totals") or {}
    batches = []
    for role in sorted({u["role"] for u in changed}, key=lambda r: ROLE_ORDER.get(r, 9)):
        units = sorted((u for u in changed if u["role"] == role), key=lambda u: (str(u.get("host")), u["unit"]))
        size = max(1, min(batch, totals.get(role, len(units)) - 1))
        batches += [units[i : i + size] for i in range(0, len(units), size)]
    return batches


def health_services(specs, restarts):
    """What service_health waits for, from the unit specs the run started: [{unit, url, expect, restarts, item}]. The
    router's readiness must count its expected workers healthy; restarts: {unit.service: NRestarts after the units
    step} (unit_actions), so a crash during the wait counts; a unit without one is read when the wait begins."""
    services = []
    for spec in specs:
        unit = f"{spec['unit']}.service"
        expect = {"healthy_workers": spec["expected_workers"]} if "expected_workers" in spec else {}
        service = {"unit": unit, "url": spec["health_url"], "expect": expect, "restarts": (restarts or {}).get(unit),
                   "item": spec}  # fmt: skip
        services.append(service)
    return services
