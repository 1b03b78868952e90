# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The plan: inventory + topology facts + profile -> every unit spec of a host, and every problem with them.

Planned once per run, in the preflight play (roles/sglang/tasks/plan.yml), before any host changes:

    host_plan(inputs)            on each worker host: rules on the settings and instances, placement, the
                                 worker unit specs, rules on their flags -> {units, problems, placement}
    pd_problems(plans)           once: prefill and decode agree on what the KV handoff needs
    router_plans(workers, inputs) on each router host: a router spec per router instance from the worker specs
                                 (router_plan.py) -> {units, problems}

Apply (units.yml, wait.yml, the rolling step, the router's smoke request) reads these specs. What it decides
itself is what only the hosts can tell: which unit files changed (the restart rule, rolling.restart_decision),
and what each host's records say was deployed before (units.record: the instances to retire, the router's
restart key, and, for a rollback, the health URL of the previous configuration).
"""

from ansible_collections.disagg.sglang.plugins.module_utils.guard import verdict as guard_verdict
from ansible_collections.disagg.sglang.plugins.module_utils.model import revision_rules, source
from ansible_collections.disagg.sglang.plugins.module_utils.plan import kv_rules, profile_rules, readiness_rules, rules
from ansible_collections.disagg.sglang.plugins.module_utils.plan.pd_placement import PlacementError, place
from ansible_collections.disagg.sglang.plugins.module_utils.units import rolling, units
from ansible_collections.disagg.sglang.plugins.module_utils.units import sglang_flags as sf

WORKER_ROLES = sf.WORKER_ROLES


def settings_problems(inputs):
    """Rules on the settings every unit of a host shares, beyond each variable's own type and range (checked
    before the plan, against module_utils/plan/variables.py). inputs: see host_plan."""
    s = inputs["settings"]
    variables = inputs.get("variables") or {}
    src = variables.get("sglang_model_source")
    if src:
        # the workers load <sglang_models_dir>/<name>-<revision>, staged by the run (roles/sglang/tasks/model*.yml)
        # (sglang_models_dir's own shape is the variable table's row)
        problems = source.problems(src)
    else:
        problems = rules.model_path_problems(s.get("model_path"))
    if not s.get("venv"):
        problems.append(
            "this run's venvs are not named (sglang_deps_venv_paths is not set): the sglang_deps role's preflight "
            "names them from the package lists; run disagg.sglang.site, or the sglang_deps role before this one"
        )
    problems += rules.health_wait_problems(s.get("health_timeout"), s.get("health_poll"))
    if inputs.get("roles"):  # the drain and sglang's stop after it happen where workers run, not on a router host
        problems += rules.drain_timeout_problems(s.get("drain_timeout"), s.get("stop_timeout"))
    rw_paths = s.get("read_write_paths") if isinstance(s.get("read_write_paths"), list) else []
    model = s.get("model_path")
    more = {k: variables[k] for k in ("sglang_unit_dir", "sglang_deps_wheelhouse") if isinstance(variables.get(k), str)}
    problems += rules.account_problems(
        s.get("user"),
        s.get("group"),
        s.get("state_dir"),
        {
            # the model path's own rule says when it is not absolute
            **(
                {("sglang_models_dir" if src else "sglang_model_path"): model}
                if isinstance(model, str) and model.startswith("/")
                else {}
            ),
            "sglang_venvs_dir": s.get("venvs_dir"),
            "sglang_env_dir": s.get("env_dir"),
            "sglang_numactl_path": s.get("numactl_path"),
            **more,
            **{f"sglang_read_write_paths[{i}]": p for i, p in enumerate(rw_paths)},
        },
        variables.get("sglang_gpu_groups"),
    )
    problems += rules.secret_problems(inputs.get("secrets") or {})
    problems += rules.host_path_problems(inputs.get("host"), inputs.get("host_paths"))
    if inputs.get("model"):  # host_look's reading of the model directory: why sglang could not load it
        problems.append(
            f"{inputs.get('host')}: sglang_model_path {s.get('model_path')} is not a model sglang can load: "
            + "; ".join(inputs["model"])
            + ". Put the model's files there (its config.json and every shard its model.safetensors.index.json "
            "names) or point sglang_model_path at a directory that holds them"
        )
    return [p for i, p in enumerate(problems) if p not in problems[:i]]


def managed_units(inputs, specs):
    """The units of the collection on a host: SPECS' (its planned workers), its router units (the one of the older
    variables, and every instance's, inputs' router_units)."""
    prefix = inputs["settings"].get("unit_prefix") or "sglang-"
    return {s["unit"] for s in specs} | {f"{prefix}router"} | set(inputs.get("router_units") or [])


def allowed_owners(inputs, managed):
    """Units that may hold a planned port now: the collection's own, and those the run stops first."""
    conflicting = inputs.get("conflicting_units")
    names = {str(u).removesuffix(".service") for u in conflicting} if isinstance(conflicting, list) else set()
    return managed | names


def _settings(inputs, role_inputs):
    return {
        **inputs["settings"],
        "inventory_host": inputs["host"],
        "extra_flags": role_inputs.get("extra_flags") or {},
        "extra_env": role_inputs.get("extra_env") or {},
        "hf_token_set": bool(inputs.get("secrets", {}).get("sglang_hf_token")),
    }


def host_plan(inputs):
    """Plan the worker units of one host.

    inputs: {
      host:      the inventory hostname,
      roles:     {prefill: {instances, extra_flags, extra_env}, decode: {...}} for the roles the host is in,
      topology:  the gpu_topology facts of the host (or None on a host without workers),
      strict:    sglang_topology_strict,
      profile:   the loaded profile mapping, profile_name: where it came from,
      settings:  the shared settings (model_path, served_model_name, host, dist_init_host, advertise_address,
                 venv, server_module, numactl_path, unit_prefix, user, group, env_dir, state_dir,
                 read_write_paths, device_policy, device_allow, restart_sec, start_limit_burst,
                 start_limit_interval, health_timeout, health_poll, stop_timeout),
      secrets:   {variable: value} (only checked, never put into a spec),
      kv_p2p_policy: sglang_kv_p2p_policy (fail | warn | off),
      readiness: the host_readiness facts of the host (read with the topology; None where not read),
      readiness_policies: {p2p, stability, tuning}: sglang_host_<class>_policy (readiness_rules.POLICY_VARS),
      readiness_apply: sglang_host_apply (the settings this run changes itself),
      variables: {sglang_unit_dir, sglang_deps_wheelhouse, sglang_gpu_groups}: what the account rule looks at,
      conflicting_units: sglang_conflicting_units,
      host_paths: {variable: {path, exists, isdir}}, what the preflight's stat found on the host,
      listeners:  {port: owner} of the TCP listeners on the host (owner: systemd unit or process name),
      deployed:   {unit: record} of the units the collection deployed on the host (the preflight's reading),
      model:      why the model directory is not a model sglang can load (host_look's reading; None: not read),
    }
    Returns {units: [spec], placement: [slot], problems: [message], warnings: [message], retired: [record],
    readiness: [finding]}; units is empty when problems is not. Each spec also names the NIXL its host's engine
    venv pins (spec["nixl"], the settings' nixl), which the router's plan judges with the router's version.
    readiness: the host readiness findings not switched off (readiness_rules.judge), each with its message (the KV
    probe names the p2p ones). retired: the deployed workers of the host's roles the plan no longer has.

    The steps, each a function of its own: input_problems (the settings, the profile, the instances, the host's
    ports), place_instances (GPUs, NUMA node and CPUs), worker_specs (the specs and the rules on their flags),
    host_findings (peer-to-peer and the host's readiness), port_owner_problems (units and programs holding a port).
    """
    problems, warnings, instances = input_problems(inputs)
    deployed = {k: v for k, v in (inputs.get("deployed") or {}).items() if isinstance(v, dict)}
    if problems or not instances:  # no worker role here, or only empty lists (a scale-in): nothing to place
        retired = [] if problems else rolling.retired(deployed, [], WORKER_ROLES)
        return {"units": [], "placement": [], "problems": problems, "warnings": warnings, "retired": retired}
    placement, problems = place_instances(inputs, instances)
    if problems:
        return {"units": [], "placement": [], "problems": problems, "warnings": [], "retired": []}
    specs, problems = worker_specs(inputs, placement)
    found_warnings, found_problems, readiness = host_findings(inputs, specs)
    warnings += found_warnings
    problems += found_problems
    problems += port_owner_problems(inputs, specs, deployed)
    retired = rolling.retired(deployed, [s["unit"] for s in specs], WORKER_ROLES)
    return {"units": [] if problems else specs, "placement": placement, "problems": problems, "warnings": warnings,
            "retired": [] if problems else retired, "readiness": readiness}  # fmt: skip


def _instance_lists(roles):
    """{role: [instance mapping]} of ROLES (host_plan's roles), leaving out what is not a mapping (rules name it)."""
    return {
        role: [i for i in role_inputs.get("instances") if isinstance(i, dict)]
        for role, role_inputs in roles.items()
        if isinstance(role_inputs.get("instances"), list)
    }


def input_problems(inputs):
    """(problems, warnings, instances) of the host's inputs before anything is placed: the shared settings, the
    profile, each role's instances, extra flags and environment, the host's worker ports, and the profile's flags
    that would undo what the collection derives. WARNINGS: an empty instance list; INSTANCES: every role's instance
    mappings (none: nothing to place)."""
    host = inputs["host"]
    problems = settings_problems(inputs)
    roles = inputs.get("roles") or {}
    if not roles:
        return problems, [], []
    profile, profile_name = inputs.get("profile"), inputs.get("profile_name", "?")
    problems += profile_rules.profile_problems(profile, profile_name)
    warnings = []
    for role, role_inputs in roles.items():
        instances = role_inputs.get("instances")
        warnings += rules.empty_role_warnings(host, role, instances)
        problems += rules.instance_problems(instances, role, inputs["settings"].get("unit_prefix") or "sglang-")
        problems += rules.flags_shape_problems(role_inputs.get("extra_flags"), f"sglang_{role}_extra_flags")
        problems += rules.derived_flag_problems(role_inputs.get("extra_flags"), f"sglang_{role}_extra_flags")
        problems += rules.env_problems(role_inputs.get("extra_env"), f"sglang_{role}_extra_env")
    by_role = _instance_lists(roles)
    instances = [i for role_instances in by_role.values() for i in role_instances]
    problems += rules.host_port_problems(host, instances)
    ports = {
        f"sglang_{role}_instances ({i.get('name')}).{key}": i[key]
        for role, role_instances in by_role.items()
        for i in role_instances
        for key in rules.WORKER_PORT_KEYS
        if key in i
    }
    problems += rules.privileged_port_problems(host, ports, inputs["settings"].get("user"))
    if isinstance(profile, dict) and isinstance(profile.get("flags"), dict):
        for part, flags in profile["flags"].items():
            problems += rules.derived_flag_problems(flags, f"the profile {profile_name}: flags.{part}")
    if roles and inputs["settings"].get("guard_enabled", True):
        s = inputs["settings"]  # the worker guard's bound against sglang's health check timeout
        bound = guard_verdict.effective_bound(
            s.get("guard_bound"), s.get("stall_timeout"), s.get("health_check_timeout")
        )
        problems += guard_verdict.bound_problems(
            bound,
            s.get("health_check_timeout"),
            {f"sglang_{r}_extra_env": ri.get("extra_env") for r, ri in roles.items()},
            s.get("guard_probe_timeout"),
        )
    return problems, warnings, instances


def place_instances(inputs, instances):
    """(placement, problems): the GPUs, NUMA node and CPUs of each instance (pd_placement.place) on the host's
    topology, or the one message saying why they do not fit."""
    try:
        return place(inputs["topology"], instances, strict=bool(inputs.get("strict"))), []
    except (PlacementError, TypeError) as exc:
        fix = ", or set sglang_topology_strict: false to accept an instance across NUMA nodes"
        n_gpus = len((inputs.get("topology") or {}).get("gpus") or [])
        return [], [
            f"pd_placement: {exc}. Fix sglang_prefill_instances / sglang_decode_instances of {inputs['host']} (tp, or "
            f"explicit gpus that exist, do not overlap and match tp){fix if inputs.get('strict') else ''}. "
            f"The host has {n_gpus} GPUs"
        ]


def worker_specs(inputs, placement):
    """(specs, problems): the worker unit spec of each instance of the host's roles on PLACEMENT, each naming the
    NIXL its host's engine venv pins, and the rules on their flags (the profile's limits, the KV transport's
    environment)."""
    specs, problems = [], []
    profile = inputs.get("profile")
    for role, role_inputs in (inputs.get("roles") or {}).items():
        try:
            specs += units.worker_units(
                role_inputs["instances"], placement, profile, role, _settings(inputs, role_inputs)
            )
        except sf.FlagError as exc:
            problems.append(str(exc))
    limits = profile.get("limits") if isinstance(profile, dict) else None
    for spec in specs:
        spec["nixl"] = inputs["settings"].get("nixl")
        problems += profile_rules.flag_value_problems(spec, inputs.get("profile_name", "?"), limits)
        problems += [m for m in kv_rules.transport_env_problems(spec["flags"], spec["env"], spec["role"])
                     if m not in problems]  # fmt: skip
    return specs, problems


def host_findings(inputs, specs):
    """(warnings, problems, readiness) of the host under SPECS: the prefill -> decode GPU pairs that cannot write
    peer-to-peer (kv_p2p_findings) and the host's readiness (readiness_rules.judge)."""
    warnings, problems = kv_p2p_findings(inputs, specs)
    ready_warnings, ready_problems, readiness = readiness_rules.judge(
        inputs["host"],
        inputs.get("readiness"),
        specs,
        inputs.get("topology"),
        policies=inputs.get("readiness_policies"),
        apply=inputs.get("readiness_apply"),
    )
    return warnings + ready_warnings, problems + ready_problems, readiness


def port_owner_problems(inputs, specs, deployed):
    """sglang_conflicting_units, and the planned ports of SPECS that a program other than the collection's units (or
    a unit the run stops first) already listens on. DEPLOYED: the host's records (a retired unit holds its ports until
    the run stops it, before any new unit starts)."""
    managed = managed_units(inputs, specs)
    problems = rules.conflicting_units_problems(inputs.get("conflicting_units"), managed)
    planned = {
        int(s[key]): f"{s['unit']} {key} (sglang_{s['role']}_instances)"
        for s in specs
        for key in ("port", "bootstrap_port")
        if s.get(key) is not None
    }
    planned |= {
        int(
            str(s["flags"]["dist-init-addr"]).rsplit(":", 1)[1]
        ): f"{s['unit']} dist_init_port (sglang_{s['role']}_instances)"
        for s in specs
        if s["flags"].get("dist-init-addr")
    }
    owners = allowed_owners(inputs, managed | set(deployed))
    return problems + rules.listener_problems(inputs["host"], planned, inputs.get("listeners"), owners)


def kv_p2p_findings(inputs, specs):
    """(warnings, problems) of the prefill -> decode GPU pairs of one host that cannot write peer-to-peer, as
    sglang_kv_p2p_policy says: fail (problems, the default), warn (warnings) or off."""
    policy = inputs.get("kv_p2p_policy", "fail")
    policy_problems = kv_rules.p2p_policy_problems(policy)
    if policy_problems:
        return [], policy_problems
    prefill = sorted({g for s in specs if s["role"] == "prefill" for g in s["gpus"]})
    decode = sorted({g for s in specs if s["role"] == "decode" for g in s["gpus"]})
    if policy == "off" or not prefill or not decode:
        return [], []
    found = kv_rules.p2p_problems((inputs.get("topology") or {}).get("p2p_pairs"), prefill, decode, inputs["host"])
    return (found, []) if policy == "warn" else ([], found)


COMPAT_VAR = "sglang_engine_compatible_versions"


def compat_problems(groups):
    """sglang_engine_compatible_versions must be a list of lists of version strings, each version in one group."""
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(isinstance(v, str) and v.strip() for v in g) for g in groups
    ):
        example = '[["0.5.23", "0.5.24"]]'
        return [f"{COMPAT_VAR} must be a list of lists of engine versions, such as {example}; got {groups!r}"]
    versions = [v for g in groups for v in g]
    twice = sorted({v for v in versions if versions.count(v) > 1})
    if twice:
        return [f"{COMPAT_VAR} names {', '.join(twice)} in more than one group: merge those groups"]
    return []


def _shared(values, groups):
    """A contract's values with the engine's version replaced by its compatibility group (the first version of
    the group that holds it), so versions that hand KV to each other compare equal."""
    engine = values.get("engine")
    if not engine or " " not in str(engine):
        return values
    dist, version = str(engine).rsplit(" ", 1)
    for group in groups:
        if version in group:
            return {**values, "engine": f"{dist} {group[0]} (or {', '.join(v for v in group if v != group[0])})"}
    return values


def pd_problems(worker_specs, inputs=None):
    """Prefill and decode of the whole deployment must agree on the KV contract (page size, KV dtype, the engine's
    version, ...), and a change of the contract must not roll: the rolling step would let the old and the new
    contract serve together.

    inputs: {compatible: sglang_engine_compatible_versions, batch: sglang_rolling_batch,
             batches: {host: sglang_rolling_batch} as each worker host's variables give it (its restart rule reads
             its own; batch stands in for a host not named),
             deployed: {host: {unit: record}} (the preflight's reading of each host's records)}."""
    inputs = inputs or {}
    groups = inputs.get("compatible") or []
    problems = compat_problems(groups)
    if problems:
        return problems
    contracts = [dict(units.kv_contract(spec), host=spec.get("host", "?")) for spec in worker_specs]
    contracts = [dict(c, values=_shared(c["values"], groups)) for c in contracts]
    # the model revision is part of the contract, compared on the plan alone: a change of revision rolls
    # as an engine upgrade does (the rolling step's business), a plan of two revisions never serves
    revisions = revision_rules.model_revision_problems(worker_specs)
    found = kv_rules.kv_mismatches(contracts, (*units.KV_CONTRACT, "engine"))
    if found:
        engine = any(m.startswith("--engine ") for m in found)
        return [
            *revisions,
            ". ".join(found).replace("--engine differs", "The engine version differs") + ". SGLang refuses the KV "
            "handoff between such workers at connect time: make the profile, sglang_prefill_extra_flags / "
            "sglang_decode_extra_flags and the instances' flags agree"
            + (
                "; pin one engine version on every host (or, for versions known to hand KV over to each other, "
                f"list them in one group of {COMPAT_VAR})"
                if engine
                else ""
            ),
        ]
    return revisions + transition_problems(worker_specs, contracts, inputs)


def transition_problems(worker_specs, contracts, inputs):
    """A change of the KV contract of deployed workers, where the rolling step would restart them batch by batch:
    the old and the new contract would serve together. Whether a worker's change rolls is its own host's
    sglang_rolling_batch (inputs' batches; batch where a host is not named)."""
    deployed = inputs.get("deployed") or {}
    groups = inputs.get("compatible") or []
    batches = inputs.get("batches") or {}
    moved, rolling_hosts = [], False
    for spec, contract in zip(worker_specs, contracts, strict=True):
        record = ((deployed.get(spec.get("host")) or {}).get(spec["unit"])) or {}
        old = record.get("kv_contract") if isinstance(record, dict) else None
        if isinstance(old, dict) and _shared(old, groups) != contract["values"]:
            changed = sorted(k for k in contract["values"] if _shared(old, groups).get(k) != contract["values"][k])
            moved.append(f"{spec['unit']}@{spec.get('host', '?')} ({', '.join(changed)}: "
                         + "; ".join(f"{old.get(k)} -> {contract['values'][k]}" for k in changed) + ")")  # fmt: skip
            rolling_hosts = rolling_hosts or int(batches.get(spec.get("host"), inputs.get("batch")) or 0) > 0
    rolls = rolling_hosts and any(n > 1 for n in rolling.role_totals(worker_specs).values())
    if not moved or not rolls:
        return []
    return [
        f"This change moves {', '.join(moved)} to another KV contract. The rolling restart would let prefill and "
        "decode on the old and on the new contract serve together, and SGLang refuses the KV handoff between them. "
        "Set sglang_rolling_batch: 0 for this run (every changed worker restarts at once: serving pauses), or, for "
        f"engine versions known to hand KV over to each other, list them in one group of {COMPAT_VAR}"
    ]


def profile_candidates(name, inventory_dir, shipped_dir):
    """Where sglang_profile may be: a file path, or NAME.yml in the inventory's profiles/ then the shipped ones."""
    name = str(name or "")
    if "/" in name or name.endswith((".yml", ".yaml")):
        if name.startswith("/"):
            return [name]
        return [f"{inventory_dir}/{name}"] if inventory_dir else [name]
    found = [f"{inventory_dir}/profiles/{name}.yml"] if inventory_dir else []
    return [*found, f"{shipped_dir}/{name}.yml"]


def host_paths(paths):
    """{variable: path or [paths]} -> {variable or variable[i]: path}: the absolute ones (the rules name the rest)."""
    found = {}
    for var, value in (paths or {}).items():
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, path in items:
            if isinstance(path, str) and path.startswith("/") and not rules.CONTROL.search(path):
                found[var if index is None else f"{var}[{index}]"] = path
    return found


def cli_check_groups(units_by_host, venv_ready=None, deployed=None):
    """The worker command lines of the deployment, grouped by the program that parses them: one group per (python,
    module), each [{python, module, delegate, hosts, units, argvs, owners}]. argvs are keyed "HOST NAME" (the
    parser's messages then read "HOST NAME: --flag: ..."), owners name each one's HOST (cli_check's refused: each host
    whose line was refused fails on its own, whichever host ran the check); delegate is the first host of the group
    that has its python (VENV_READY {host: {path: exists}}, the hosts' looks), else its first host (which then says
    "flags not checked").
    A spec whose record (DEPLOYED {host: {unit: record}}, the hosts' looks) holds its argv_key is left out: that
    parser accepted that command line before the record was written (units.argv_key); a group left with nothing to
    check is left out.

    One check per group speaks for every host of it: the python is this run's venv, sglang_venvs_dir/engine-DIGEST,
    whose digest names the package set (with the interpreter and the wheelhouse), and the engine it parses with is
    pinned with == (venvs.engine_problems), so every host that builds that venv gets the same parser. What could still
    differ between hosts is an unpinned dependency of the engine that changes its flags, which the collection does not
    guard against anywhere else either."""
    groups = {}
    ready = venv_ready or {}
    for host, specs in (units_by_host or {}).items():
        records = (deployed or {}).get(host) or {}
        for spec in specs or []:
            if (records.get(spec.get("unit")) or {}).get("argv_key") == units.argv_key(spec):
                continue
            key = (str(spec.get("python")), str(spec.get("module")))
            group = groups.setdefault(key, {"python": key[0], "module": key[1], "hosts": [], "units": [], "argvs": {},
                                            "owners": {}})  # fmt: skip
            if host not in group["hosts"]:
                group["hosts"].append(host)
            if spec.get("unit") not in group["units"]:
                group["units"].append(spec.get("unit"))
            group["argvs"][f"{host} {spec.get('name')}"] = units.checked_argv(spec)
            group["owners"][f"{host} {spec.get('name')}"] = host
    for group in groups.values():
        group["delegate"] = next(
            (h for h in group["hosts"] if (ready.get(h) or {}).get(group["python"]) is True), group["hosts"][0]
        )
    return list(groups.values())


def placement_lines(specs):
    """One line per worker spec for the preflight to show: "UNIT: GPUs 0,1, NUMA node 0, CPUs 0-31" and the
    placement's warnings."""
    lines = []
    for spec in specs or []:
        line = (f"{spec.get('unit')}: GPUs {','.join(str(g) for g in spec.get('gpus') or [])}, NUMA node "
                f"{spec.get('numa_node')}, CPUs {spec.get('cpus')}")  # fmt: skip
        warnings = spec.get("warnings") or []
        lines.append(line + (f"; WARNING: {'; '.join(warnings)}" if warnings else ""))
    return lines


def moved_lines(specs, deployed, topology=None):
    """One line per running worker the plan moves to other GPUs (an instance added or grown now claims its GPUs), for
    the preflight to show before anything restarts: "UNIT moves from GPUs 0,1 (NUMA node 0) to GPUs 2,3 (NUMA node 1):
    its GPUs 0,1 go to sglang-decode1". DEPLOYED: {unit: record} of the host (the record keeps the GPUs it runs on);
    TOPOLOGY: the host's gpu_topology, for the NUMA node of the old GPUs."""
    node = {}
    for gpu in (topology or {}).get("gpus") or [] if isinstance(topology, dict) else []:
        if isinstance(gpu, dict) and gpu.get("index") is not None:
            node[int(gpu["index"])] = gpu.get("numa_node")
    lines = []
    for spec in specs or []:
        old = ((deployed or {}).get(spec.get("unit")) or {}).get("gpus")
        new = list(spec.get("gpus") or [])
        if not isinstance(old, list) or not old or old == new:
            continue
        nodes = sorted({str(node.get(g)) for g in old})
        taken = [s.get("unit") for s in specs if s is not spec and set(s.get("gpus") or []) & set(old)]

        def gpus(ids):
            return ",".join(str(g) for g in ids)

        lines.append(
            f"{spec.get('unit')} moves from GPUs {gpus(old)} (NUMA node {','.join(nodes)}) to GPUs {gpus(new)} "
            f"(NUMA node {spec.get('numa_node')}, CPUs {spec.get('cpus')})"
            + (f": its GPUs {gpus(sorted(set(old) - set(new)))} go to {', '.join(taken)}" if taken else "")
        )
    return lines


def deployment(looks):
    """The deployment's plans joined once per run: LOOKS {host: what its host_plan returned (registered; {} where it
    did not run)} -> {units, deployed, venv_ready, bind, lines: {host: ...} (lines only of hosts with some), retired:
    every host's retired units, batches: {host: sglang_rolling_batch} of the worker hosts}."""
    looks = {host: look if isinstance(look, dict) else {} for host, look in (looks or {}).items()}
    planned = {host: look.get("plan") or {} for host, look in looks.items()}
    return {
        "units": {host: list(p.get("units") or []) for host, p in planned.items()},
        "deployed": {host: look.get("records") or {} for host, look in looks.items()},
        "venv_ready": {host: look.get("exists") or {} for host, look in looks.items()},
        "bind": {host: look.get("bind") or {} for host, look in looks.items()},
        "lines": {host: list(look["lines"]) for host, look in looks.items() if look.get("lines")},
        "retired": [unit for p in planned.values() for unit in p.get("retired") or []],
        # each worker host's sglang_rolling_batch (host_plan's rolling_batch): its restart rule reads its own
        "batches": {host: look["rolling_batch"] for host, look in looks.items() if "rolling_batch" in look},
    }
