"""The KV-path preflight rules (plugins/module_utils/plan/kv_rules.py) on the table in
tests/fixtures/kv_transport/rules_cases.yml; the P2P rows read the facts gather() gives on a fixture host."""

import re
from pathlib import Path

import pytest
import topology_fakes as tf
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt
from ansible_collections.disagg.sglang.plugins.module_utils.plan import kv_rules

CASES = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "fixtures" / "kv_transport" / "rules_cases.yml").read_text()
)


def _match(patterns, messages):
    assert len(messages) == len(patterns), messages
    for pattern, message in zip(patterns, messages, strict=True):
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def _host_pairs(name, tmp_path, source):
    spec = tf.load_host(name)
    root = tf.write_sysfs(tmp_path / "root", spec.get("sysfs"), spec["dir"])
    if source == "nvml":
        facts = gt.gather(sysfs_root=root, nvml_loader=tf.nvml_loader(spec["dir"], spec["nvml"]), source="nvml")
    else:
        smi = tf.FakeSmi(spec["outputs"], spec["dir"])
        facts = gt.gather(sysfs_root=root, nvidia_smi_path="/usr/bin/nvidia-smi", runner=smi, nvml_loader=tf.no_nvml)
    return facts["p2p_pairs"]


P2P = [(c, s) for c in CASES["p2p"] for s in (["nvml", "nvidia-smi"] if "host_fixture" in c else [None])]


@pytest.mark.parametrize(("case", "source"), P2P, ids=[f"{c['title']}-{s}" if s else c["title"] for c, s in P2P])
def test_p2p(case, source, tmp_path):
    pairs = _host_pairs(case["host_fixture"], tmp_path, source) if source else case["pairs"]
    _match(case["messages"], kv_rules.p2p_problems(pairs, case["prefill"], case["decode"]))


@pytest.mark.parametrize("case", CASES["env"], ids=[c["title"] for c in CASES["env"]])
def test_transport_env(case):
    messages = kv_rules.transport_env_problems(case["flags"], case["env"], case.get("role", "prefill"))
    _match(case["messages"], messages)


def test_host_named():
    msgs = kv_rules.p2p_problems({"0-1": {"read": "NS", "write": "NS"}}, [0], [1], host="gpu-a")
    assert msgs[0].startswith("gpu-a: prefill GPU -> decode GPU")


@pytest.mark.parametrize(("policy", "ok"), [("fail", True), ("warn", True), ("off", True), ("maybe", False)])
def test_policy(policy, ok):
    assert (kv_rules.p2p_policy_problems(policy) == []) is ok
