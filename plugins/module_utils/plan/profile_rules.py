# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Preflight rules for a profile and the flag values of a planned worker unit: what sglang 0.5.23 would refuse
at start or at the KV handoff, and a profile's own limits. Pure functions that return messages, as rules.py;
plan.py calls them. Their cases are rows of tests/cases/bad_inventories.yml.
"""

from ansible_collections.disagg.sglang.plugins.module_utils.plan.rules import env_problems, flags_shape_problems

# Speculative algorithms whose draft input sglang 0.5.23 hands from prefill to decode
# (SpeculativeInfo.build_disagg_draft_input in sglang/srt/speculative/spec_info.py: EAGLE family,
# DSPARK, DFLASH; NEXTN is an alias of EAGLE). NGRAM, STANDALONE and UNO have no PD handoff.
PD_SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP", "DSPARK", "DFLASH")


def _int_or(value, default):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def flag_value_problems(spec, profile_name, limits=None):
    """What sglang would refuse at start or at the KV handoff, and the profile's own limits, for one unit spec."""
    flags, role, name = spec["flags"], spec["role"], spec["name"]
    found = []
    page = _int_or(flags.get("page-size", 1), 0)
    chunk = _int_or(flags.get("chunked-prefill-size", -1), 0)
    if "page-size" in flags and page <= 0:
        found.append(f"page-size {flags['page-size']} must be a positive number")
    elif not (chunk == -1 or (page > 0 and chunk > 0 and chunk % page == 0)):
        found.append(f"chunked-prefill-size {chunk} is not a multiple of page-size {page} (sglang refuses it)")
    memfrac = flags.get("mem-fraction-static")
    if memfrac is not None:
        try:
            ok = 0 < float(memfrac) < 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            found.append(f"mem-fraction-static {memfrac} must lie strictly between 0 and 1")
    spec_algo = flags.get("speculative-algorithm")
    if spec_algo is not None and str(spec_algo).upper() not in PD_SPECULATIVE_ALGORITHMS:
        found.append(
            f"speculative-algorithm {spec_algo} has no PD draft handoff in sglang 0.5.23 (use one of "
            f"{', '.join(PD_SPECULATIVE_ALGORITHMS)})"
        )
    found += limit_problems(flags, limits)
    if not found:
        return []
    return [
        f"{role} instance {name}: {'; '.join(found)}; fix it in the profile {profile_name}, "
        f"sglang_{role}_extra_flags or the instance's flags"
    ]


LIMIT_KEYS = ("min", "max", "below", "multiple_of", "reason")


def limit_problems(flags, limits):
    """A profile's limits: {flag: {min, max, below, multiple_of, reason}} checked against the merged flags."""
    found = []
    for flag, limit in (limits or {}).items():
        if flag not in flags or flags[flag] in (None, False):
            continue
        value = flags[flag]
        try:
            number = float(value)
        except (TypeError, ValueError):
            found.append(f"{flag} {value!r} must be a number (the profile limits it)")
            continue
        why = f" ({limit['reason']})" if limit.get("reason") else ""
        if "min" in limit and number < float(limit["min"]):
            found.append(f"{flag} {value} is below the profile's minimum {limit['min']}{why}")
        if "max" in limit and number > float(limit["max"]):
            found.append(f"{flag} {value} is above the profile's maximum {limit['max']}{why}")
        if "below" in limit and number >= float(limit["below"]):
            found.append(f"{flag} {value} must stay below {limit['below']}{why}")
        step = limit.get("multiple_of")
        if step and number != -1 and number % float(step):
            found.append(f"{flag} {value} must be a multiple of {step}{why}")
    return found


def profile_problems(profile, source):
    """The shape of a loaded profile."""
    if not isinstance(profile, dict):
        return [f"the profile {source} must be a mapping with flags and env, got {type(profile).__name__}"]
    problems = []
    for section in ("flags", "env"):
        value = profile.get(section) or {}
        if not isinstance(value, dict):
            problems.append(f"the profile {source}: {section} must be a mapping of common/prefill/decode")
            continue
        for part, entries in value.items():
            if part not in ("common", "prefill", "decode"):
                problems.append(f"the profile {source}: {section}.{part} is not one of common, prefill, decode")
            elif section == "flags":
                problems += flags_shape_problems(entries, f"the profile {source}: flags.{part}")
            else:
                problems += env_problems(entries, f"the profile {source}: env.{part}")
    limits = profile.get("limits") or {}
    if not isinstance(limits, dict) or not all(isinstance(v, dict) for v in limits.values()):
        problems.append(f"the profile {source}: limits must map a flag to {{min, max, below, multiple_of, reason}}")
        return problems
    for flag, limit in limits.items():
        unknown = sorted(str(k) for k in limit if k not in LIMIT_KEYS)
        if unknown:
            problems.append(
                f"the profile {source}: limits.{flag} has unknown key(s) {', '.join(unknown)} "
                f"(a limit takes {', '.join(LIMIT_KEYS)})"
            )
        for key in ("min", "max", "below", "multiple_of"):
            if key in limit and (isinstance(limit[key], bool) or not isinstance(limit[key], (int, float))):
                problems.append(f"the profile {source}: limits.{flag}.{key} must be a number, got {limit[key]!r}")
    return problems
