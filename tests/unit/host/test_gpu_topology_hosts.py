"""Facts of each fixture host (tests/fixtures/topology/<host>/host.yml), through each source it has.

A host with `outputs` is read through nvidia-smi (NVML absent); a host with `nvml` through NVML
(nvidia-smi absent); a host with both must give the same facts either way.
"""

import pytest
import topology_fakes as tf
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt

HOSTS = [p.name for p in tf.host_dirs()]


def _sources(spec):
    out = []
    if spec.get("outputs"):
        out.append("nvidia-smi")
    if spec.get("nvml"):
        out.append("nvml")
    return out


CASES = [(h, s) for h in HOSTS for s in _sources(tf.load_host(h))]


def gather_host(spec, source, tmp_path):
    if source == "nvml":
        return tf.gather(spec, tmp_path / "root", "nvml")
    smi = tf.FakeSmi(spec["outputs"], spec["dir"])
    facts = tf.gather(spec, tmp_path / "root", "nvidia-smi", runner=smi)
    # only the two documented invocations (and the optional p2p ones) were made, with LC_ALL-free argv
    asked = [c[1:] for c in smi.calls]
    assert asked[0] == gt.QUERY_ARGS and gt.TOPO_ARGS in asked
    assert all(a in (gt.QUERY_ARGS, gt.TOPO_ARGS, gt.P2P_ARGS, gt.P2P_WRITE_ARGS, gt.QUERY_ARGS_NO_CC) for a in asked)
    return facts


@pytest.mark.parametrize(("host", "source"), CASES, ids=[f"{h}-{s}" for h, s in CASES])
def test_host_facts(host, source, tmp_path):
    spec = tf.load_host(host)
    expect = spec["expect"]
    facts = gather_host(spec, source, tmp_path)

    assert facts["reason"] is None
    assert facts["sources"]["gpus"] == [source]
    assert [g["index"] for g in facts["gpus"]] == [g["index"] for g in expect["gpus"]]
    for want, got in zip(expect["gpus"], facts["gpus"], strict=True):
        for key, value in {**expect.get("all_gpus", {}), **want}.items():
            wanted = tf.cpus(value) if key == "cpu_affinity" else value
            assert got[key] == wanted, f"GPU {got['index']} {key}"
    assert set(facts["gpus"][0]) == {
        "index",
        "uuid",
        "name",
        "pci_bus_id",
        "memory_total_mib",
        "compute_capability",
        "numa_node",
        "cpu_affinity",
    }
    assert facts["numa_nodes"] == [{"id": n["id"], "cpus": tf.cpus(n["cpus"])} for n in expect["numa_nodes"]]
    if "links" in expect:
        assert facts["links"] == (tf.link_matrix(expect["links"]) if expect["links"] else {})
    if "p2p" in expect and (source == "nvml" or "p2p" in spec["outputs"]):
        assert facts["p2p"] == (tf.link_matrix(expect["p2p"]) if expect["p2p"] else {})
    if "p2p_pairs" in expect:
        n = len(facts["gpus"])
        assert len(facts["p2p_pairs"]) == n * (n - 1), "every ordered pair of distinct GPUs"
        for pair, status in expect["p2p_pairs"].items():
            assert facts["p2p_pairs"][pair] == status, pair
    for part, value in (expect.get("sources") or {}).items():
        assert facts["sources"][part] == value, part
    missing, extra = tf.match_all(expect.get("warnings", []), facts["warnings"])
    assert not missing and not extra, f"warnings missing {missing}, unexpected {extra}"


BOTH = [h for h in HOSTS if len(_sources(tf.load_host(h))) == 2]


@pytest.mark.parametrize("host", BOTH)
def test_sources_agree(host, tmp_path):
    """NVML and nvidia-smi give the same GPUs, locality and links on the same host."""
    spec = tf.load_host(host)
    by_nvml = gather_host(spec, "nvml", tmp_path / "a")
    by_smi = gather_host(spec, "nvidia-smi", tmp_path / "b")
    assert by_nvml["gpus"] == by_smi["gpus"]
    assert by_nvml["links"] == by_smi["links"]
    assert by_nvml["numa_nodes"] == by_smi["numa_nodes"]
    if by_nvml["p2p"] and by_smi["p2p"]:
        assert by_nvml["p2p"] == by_smi["p2p"]
    if all(s["read"] and s["write"] for f in (by_nvml, by_smi) for s in f["p2p_pairs"].values()):
        assert by_nvml["p2p_pairs"] == by_smi["p2p_pairs"]
