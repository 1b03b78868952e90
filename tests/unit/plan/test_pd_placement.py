"""Placements on each fixture host (the `placements` of its host.yml), through the filter plugin."""

import re

import pytest
import topology_fakes as tf
from ansible.errors import AnsibleFilterError
from ansible_collections.disagg.sglang.plugins.filter.pd_placement import FilterModule
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt
from ansible_collections.disagg.sglang.plugins.module_utils.plan import pd_placement as pp

pd_placement = FilterModule().filters()["pd_placement"]

CASES = []
for _host in tf.host_dirs():
    for _n, _case in enumerate(tf.load_host(_host.name).get("placements") or []):
        CASES.append(pytest.param(_host.name, _case, id=f"{_host.name}-{_n}-{_case['title']}"))


def facts_of(host, tmp_path):
    """The host's facts through nvidia-smi where it has its outputs, else through NVML."""
    spec = tf.load_host(host)
    return tf.gather(spec, tmp_path / "root", "nvidia-smi" if spec.get("outputs") else "nvml")


@pytest.mark.parametrize(("host", "case"), CASES)
def test_placement(host, case, tmp_path):
    facts = facts_of(host, tmp_path)
    strict = case.get("strict", False)
    if "error" in case:
        with pytest.raises(AnsibleFilterError) as err:
            pd_placement(facts, case["instances"], strict)
        assert re.search(case["error"], str(err.value)), str(err.value)
        return
    got = pd_placement(facts, case["instances"], strict)
    assert [g["name"] for g in got] == [e["name"] for e in case["expect"]]
    for want, have in zip(case["expect"], got, strict=True):
        assert set(have) == {"name", "gpus", "numa_node", "cpus", "warnings"}
        for key, value in want.items():
            if key == "cpus":
                assert have["cpus"] == tf.cpus(value), have["name"]
            elif key == "warnings":
                missing, extra = tf.match_all(value, have["warnings"])
                assert not missing and not extra, f"{have['name']}: missing {missing}, unexpected {extra}"
            else:
                assert have[key] == value, f"{have['name']} {key}"
    # disjoint, and deterministic
    used = [g for p in got for g in p["gpus"]]
    assert len(used) == len(set(used))
    assert pd_placement(facts, case["instances"], strict) == got


def test_sandbox_1p1d_tp4_tp4(tmp_path):
    """The deployment's shape on the default sandbox host, derived from facts: 0-3/node 0, 4-7/node 1."""
    facts = facts_of("rtxpro6000-8x", tmp_path)
    got = pd_placement(facts, [{"name": "prefill0", "tp": 4}, {"name": "decode0", "tp": 4}])
    assert got == [
        {"name": "prefill0", "gpus": [0, 1, 2, 3], "numa_node": 0, "cpus": list(range(32)), "warnings": []},
        {"name": "decode0", "gpus": [4, 5, 6, 7], "numa_node": 1, "cpus": list(range(32, 64)), "warnings": []},
    ]


def test_no_gpu_host_fails_with_reason():
    facts = gt.empty_facts("no GPU found: nvidia-smi: not found on PATH")
    with pytest.raises(AnsibleFilterError, match=r"no GPU to place prefill0.*not found on PATH"):
        pd_placement(facts, [{"name": "prefill0", "tp": 1}])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (None, "needs a non-empty list"),
        ([], "needs a non-empty list"),
        (["prefill0"], "needs a name"),
        ([{"name": "a", "tp": 1}, {"name": "a", "tp": 1}], "used twice"),
        ([{"name": "a", "tp": 0}], "at least 1"),
        ([{"name": "a", "tp": "four"}], "not a number"),
        ([{"name": "a", "gpus": [0, 0]}], "names a GPU twice"),
    ],
)
def test_bad_requests(bad, message, tmp_path):
    facts = facts_of("rtxpro6000-8x", tmp_path)
    with pytest.raises(AnsibleFilterError, match=message):
        pd_placement(facts, bad)


def test_not_facts():
    with pytest.raises(AnsibleFilterError, match="needs the gpu_topology facts"):
        pd_placement({"nothing": 1}, [{"name": "a", "tp": 1}])


@pytest.mark.parametrize(
    ("codes", "order"),
    [
        (
            ["SYS", "NV4", "PIX", "NODE", "NV18", "PHB", "PXB", "??"],
            ["NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS", "??"],
        ),
    ],
)
def test_link_order(codes, order):
    assert sorted(codes, key=pp.link_rank) == order


def synthetic(nodes, per_node, link_in="NV18", link_across="NV18"):
    """Facts of a made-up host: `nodes` NUMA nodes of `per_node` GPUs, 4 CPUs per GPU."""
    gpus, numa_nodes = [], []
    for n in range(nodes):
        cpus = list(range(n * per_node * 4, (n + 1) * per_node * 4))
        numa_nodes.append({"id": n, "cpus": cpus})
        for k in range(per_node):
            gpus.append({"index": n * per_node + k, "numa_node": n, "cpu_affinity": cpus})
    node = {g["index"]: g["numa_node"] for g in gpus}
    links = {
        str(i): {str(j): "X" if i == j else (link_in if node[i] == node[j] else link_across) for j in node}
        for i in node
    }
    return {"gpus": gpus, "numa_nodes": numa_nodes, "links": links, "p2p": {}, "warnings": [], "reason": None}


def test_large_host_is_quick_and_sound():
    facts = synthetic(4, 8, "NV18", "SYS")
    got = pd_placement(facts, [{"name": f"i{n}", "tp": 4} for n in range(8)])
    assert [p["numa_node"] for p in got] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all(not p["warnings"] for p in got)
    big = pd_placement(facts, [{"name": "big", "tp": 20}])[0]  # C(32, 20) subsets: grown greedily
    assert len(big["gpus"]) == 20 and big["warnings"]
    assert big["gpus"][:16] == list(range(16))  # two whole nodes first (fewest sets spanned)


def test_many_small_instances():
    facts = synthetic(2, 8)
    got = pd_placement(facts, [{"name": f"w{n}", "tp": 1} for n in range(16)])
    assert [p["gpus"][0] for p in got] == list(range(16))
    assert [p["numa_node"] for p in got] == [0] * 8 + [1] * 8


def test_without_links_locality_still_decides():
    facts = synthetic(2, 4)
    facts["links"] = {}
    got = pd_placement(facts, [{"name": "p", "tp": 2}, {"name": "d", "tp": 4}])
    assert got[0]["gpus"] == [0, 1] and got[1]["gpus"] == [4, 5, 6, 7]


def test_strict_as_positional_argument():
    facts = synthetic(2, 4)
    with pytest.raises(AnsibleFilterError, match="strict placement"):
        pd_placement(facts, [{"name": "big", "tp": 8}], True)


@pytest.mark.parametrize(("strict", "fails"), [("true", True), ("false", False), ("yes", True), (0, False)])
def test_strict_given_as_text(strict, fails):
    facts = synthetic(2, 4)
    if fails:
        with pytest.raises(AnsibleFilterError, match="strict placement"):
            pd_placement(facts, [{"name": "big", "tp": 8}], strict)
    else:
        assert pd_placement(facts, [{"name": "big", "tp": 8}], strict)[0]["warnings"]
