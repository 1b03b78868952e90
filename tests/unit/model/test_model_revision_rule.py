"""The model revision is part of the KV contract: a plan that would serve prefill and decode on two revisions of the
model is refused by the deployment-wide PD checks (plan.pd_problems, rule revision_rules.model_revision_problems),
naming the workers, both revisions, sglang_model_source and the fix. Table tests."""

from __future__ import annotations

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.model import revision_rules
from ansible_collections.disagg.sglang.plugins.module_utils.plan import plan

A = "0123456789abcdef0123456789abcdef01234567"
B = "89abcdef0123456789abcdef0123456789abcdef"
UNSET = object()  # a spec planned before the key existed (S's model_revision key not yet there)


def spec(unit, role, host, revision=UNSET, path=None):
    staged = f"/opt/models/DeepSeek-V4-Flash-{revision}" if isinstance(revision, str) else "/opt/models/V4"
    flags = {
        "page-size": "256",
        "kv-cache-dtype": "fp8_e4m3",
        "disaggregation-transfer-backend": "nixl",
        "model-path": path or staged,
    }
    out = {"unit": unit, "role": role, "host": host, "engine": "sglang 0.5.23", "flags": flags}
    if revision is not UNSET:
        out["model_revision"] = revision
        out["model_path"] = flags["model-path"]
    return out


@pytest.mark.parametrize(
    ("planned", "fragments"),
    [
        # one revision everywhere: fine
        ([spec("sglang-prefill0", "prefill", "p1", A), spec("sglang-decode0", "decode", "d1", A),
          spec("sglang-decode1", "decode", "d2", A)], []),
        # every directory managed outside: nothing the collection can compare
        ([spec("sglang-prefill0", "prefill", "p1", None), spec("sglang-decode0", "decode", "d1", None)], []),
        # specs without the key (planned before it existed): as managed outside, nothing breaks
        ([spec("sglang-prefill0", "prefill", "p1"), spec("sglang-decode0", "decode", "d1")], []),
        # one decode host on another revision (its host_vars): refused, naming hosts, revisions, variable, fix
        ([spec("sglang-prefill0", "prefill", "p1", A), spec("sglang-decode0", "decode", "d1", A),
          spec("sglang-decode1", "decode", "d2", B)],
         [f"The model revision differs between PD workers: revision {A} on sglang-prefill0@p1, sglang-decode0@d1; "
          f"revision {B} on sglang-decode1@d2",
          "give every prefill and decode host the same sglang_model_source",
          "not in one host's host_vars"]),
        # a staged revision beside a directory managed outside: its revision is unknown, refused
        ([spec("sglang-prefill0", "prefill", "p1", A),
          spec("sglang-decode0", "decode", "d1", None, path="/srv/weights/V4")],
         [f"revision {A} on sglang-prefill0@p1",
          "a directory managed outside (/srv/weights/V4, revision unknown) on sglang-decode0@d1",
          "or leave it empty ({}) on all of them and manage sglang_model_path outside"]),
    ],
)  # fmt: skip
def test_prefill_and_decode_on_two_model_revisions_never_serve_together(planned, fragments):
    text = ". ".join(plan.pd_problems(planned, {}))
    if not fragments:
        assert text == ""
    for fragment in fragments:
        assert fragment in text, text


def test_a_revision_mismatch_is_reported_beside_a_kv_flag_mismatch():
    planned = [spec("sglang-prefill0", "prefill", "p1", A), spec("sglang-decode0", "decode", "d1", B)]
    planned[1]["flags"]["page-size"] = "128"
    problems = plan.pd_problems(planned, {})
    assert len(problems) == 2
    assert problems[0].startswith("The model revision differs") and "--page-size differs" in problems[1]


def test_a_revision_change_of_the_whole_deployment_is_no_mismatch():
    """The plan holds the new revision on every worker: how the change rolls is the rolling step's business (as an
    engine upgrade), not a refusal of the plan."""
    planned = [spec("sglang-prefill0", "prefill", "p1", B), spec("sglang-decode0", "decode", "d1", B)]
    deployed = {"p1": {"sglang-prefill0": {"model_revision": A}}, "d1": {"sglang-decode0": {"model_revision": A}}}
    assert plan.pd_problems(planned, {"deployed": deployed, "batch": 1}) == []
    assert revision_rules.model_revision_problems(planned) == []
