# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of a deployment over several hosts. Logic: plugins/module_utils/plan/cluster_rules.py, rolling.py."""

from ansible_collections.disagg.sglang.plugins.module_utils.common.lazy import Lazy

# imported at a filter's first call, not when a template naming one is compiled (module_utils/common/lazy.py says why)
cluster_rules = Lazy("plan.cluster_rules")
rolling = Lazy("units.rolling")
rules = Lazy("plan.rules")
unit_files = Lazy("units.unit_files")
units = Lazy("units.units")


def connect_targets(worker_specs):
    """[{unit, host, address, port}] that the router dials, from the worker specs."""
    return cluster_rules.connect_targets(list(worker_specs))


def deployment_bind_problems(worker_specs, bind_outcomes):
    """The bind problems of every worker host from the outcomes each host found (see
    cluster_rules.deployment_bind_problems)."""
    return cluster_rules.deployment_bind_problems(list(worker_specs or []), dict(bind_outcomes or {}))


def rolling_plan(changed, inputs):
    """The restart batches of the changed worker units (see rolling.rolling_plan)."""
    return rolling.rolling_plan(list(changed), inputs)


def restart_decision(units, changed, new, inputs):
    """{now, deferred}: the changed units that restart now and those the rolling step restarts (see
    rolling.restart_decision)."""
    return rolling.restart_decision(list(units), list(changed), list(new), inputs)


def with_previous(specs, previous_files, previous_env_files, host, previous_records=None):
    """The units to roll back with their host and previous files (see rolling.with_previous)."""
    return rolling.with_previous(list(specs), previous_files, previous_env_files, host, previous_records)


def health_services(specs, restarts):
    """What the health wait polls for the started units (see rolling.health_services)."""
    return rolling.health_services(list(specs or []), dict(restarts or {}))


def unit_file_specs(units, texts, unit_dir, record_dir):
    """The unit file and record of each unit as unit_files writes them (see unit_files.file_specs)."""
    return unit_files.file_specs(list(units), dict(texts), unit_dir, record_dir)


def env_file_specs(specs, texts):
    """The environment file of each unit spec as unit_files writes it (see unit_files.env_file_specs)."""
    return unit_files.env_file_specs(list(specs), dict(texts))


def files_of_kind(result, kind):
    """unit_files' answer for one kind of file, shaped as a registered loop (see unit_files.of_kind)."""
    return unit_files.of_kind(result, kind)


def unit_record(spec, unit_dir):
    """The record of a deployed unit (see units.record)."""
    return units.record(spec, unit_dir)


def retire_problems(retired, totals, retire_roles):
    """Messages when the run would retire every instance of a role (see rules.retire_problems)."""
    return rules.retire_problems(list(retired), totals, retire_roles)


def rolling_left(batches, done):
    """The units of the batches a failed rolling restart left alone (see rolling.rolling_left)."""
    return rolling.rolling_left(list(batches), list(done))


def env_file_value(text):
    """The value of one NAME="VALUE" line of an environment file as sglang.env.j2 writes it (quotes, \\ escapes)."""
    return rolling.env_file_value(text)


class FilterModule:
    def filters(self):
        return {
            "connect_targets": connect_targets,
            "deployment_bind_problems": deployment_bind_problems,
            "rolling_plan": rolling_plan,
            "restart_decision": restart_decision,
            "rolling_left": rolling_left,
            "with_previous": with_previous,
            "health_services": health_services,
            "unit_file_specs": unit_file_specs,
            "env_file_specs": env_file_specs,
            "files_of_kind": files_of_kind,
            "env_file_value": env_file_value,
            "unit_record": unit_record,
            "retire_problems": retire_problems,
        }
