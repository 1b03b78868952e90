# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The model revision across the deployment: prefill and decode must load one revision of the model.

A pure function over the planned worker specs of every host (their model_revision and model_path), returning
messages; the deployment's plan (plan.pd_problems) calls it. tests/unit/model/test_model_revision_rule.py holds its
table.
"""


def model_revision_problems(worker_specs):
    """Prefill and decode of the whole deployment must load one revision of the model (the model revision
    is part of the KV contract). A decode continues from the KV its prefill computed with the prefill's weights;
    SGLang checks page size and KV dtype at connect time but no weights, so on two revisions the handoff works and
    the answers are wrong. spec["model_revision"]: the commit of sglang_model_source, None where the directory is
    managed outside (sglang_model_path: its revision is unknown, so it cannot be shown to agree with a staged one)."""
    seen = {}
    for spec in worker_specs:
        revision = spec.get("model_revision")  # .get: a spec planned before the key existed is managed outside
        seen.setdefault(revision, []).append(f"{spec['unit']}@{spec.get('host', '?')}")
    if len(seen) < 2:
        return []

    def named(revision, specs_at):
        if revision is not None:
            return f"revision {revision} on {', '.join(specs_at)}"
        paths = sorted({str(s.get("model_path") or s.get("flags", {}).get("model-path")) for s in worker_specs
                        if s.get("model_revision") is None})  # fmt: skip
        return f"a directory managed outside ({', '.join(paths)}, revision unknown) on {', '.join(specs_at)}"

    parts = "; ".join(named(revision, at) for revision, at in seen.items())
    return [
        f"The model revision differs between PD workers: {parts}. A decode continues from the KV cache its prefill "
        "computed with the prefill's weights, and SGLang does not compare them (the KV handoff works, the answers "
        "are wrong): give every prefill and decode host the same sglang_model_source (one revision, set where all "
        "worker hosts read it, e.g. group_vars/all, not in one host's host_vars)"
        + ("" if None not in seen else ", or leave it empty ({}) on all of them and manage sglang_model_path outside")
    ]
