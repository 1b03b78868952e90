"""The real 2x H200 host (tests/fixtures/topology/h200-x2, captured by tests/hardware/run_topology.sh).

2 GPUs, compute capability 9.0, NV18 between them, through NVML and through nvidia-smi, which agree;
and today's code, replaying the raw outputs, gives exactly the facts the device run recorded, which
are also what the Ansible module returned there.
"""

import json

import pytest
import topology_fakes as tf

HOST = tf.load_host("h200-x2")
RECORDED = json.loads((HOST["dir"] / HOST["recorded"]).read_text())
MODULE = json.loads((HOST["dir"] / HOST["module"]).read_text())


def replay(source, tmp_path):
    """The facts through SOURCE alone, nvidia-smi where the device run found it."""
    return tf.gather(HOST, tmp_path / "root", source, source=source, nvidia_smi_path="/usr/local/nvidia/bin/nvidia-smi")


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi"])
def test_two_h200_nv18(source, tmp_path):
    facts = replay(source, tmp_path)
    assert facts["sources"]["gpus"] == [source]
    assert len(facts["gpus"]) == 2
    assert {g["compute_capability"] for g in facts["gpus"]} == {"9.0"}
    assert facts["links"]["0"]["1"] == facts["links"]["1"]["0"] == "NV18"
    assert facts["p2p"]["0"]["1"] == "OK"


def test_sources_agree(tmp_path):
    by_nvml, by_smi = replay("nvml", tmp_path / "a"), replay("nvidia-smi", tmp_path / "b")
    for part in ("gpus", "numa_nodes", "links", "p2p"):
        assert by_nvml[part] == by_smi[part], part


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi"])
def test_replay_matches_device_run(source, tmp_path):
    """What the code computes from the raw outputs is what it computed on the device."""
    facts = replay(source, tmp_path)
    assert before_p2p_pairs(facts) == RECORDED["timings"][source]["facts"]
    assert RECORDED["checks"][f"{source}: source used"] is True


def before_p2p_pairs(facts):
    """The facts as the device run recorded them, which predates `p2p_pairs` (issue 13)."""
    out = {k: v for k, v in facts.items() if k != "p2p_pairs"}
    out["sources"] = {k: v for k, v in facts["sources"].items() if k != "p2p_pairs"}
    return out


def test_p2p_pairs(tmp_path):
    """NVML's recorded write status (caps index 1) is OK both ways; the nvidia-smi capture has only `-p2p r`."""
    assert replay("nvml", tmp_path / "a")["p2p_pairs"] == {
        "0-1": {"read": "OK", "write": "OK"},
        "1-0": {"read": "OK", "write": "OK"},
    }
    assert replay("nvidia-smi", tmp_path / "b")["p2p_pairs"] == {
        "0-1": {"read": "OK", "write": None},
        "1-0": {"read": "OK", "write": None},
    }


def test_module_on_device():
    """The module itself ran there (ad-hoc, each source, and check mode): same facts, nothing changed."""
    runs = {tuple(r["argv"][r["argv"].index("-a") + 1 :]): r for r in MODULE["runs"]}
    for args, source in (
        (("source=nvml",), "nvml"),
        (("source=nvidia-smi",), "nvidia-smi"),
        (("source=auto", "--check"), "nvml"),
    ):
        run = runs[args]
        assert run["rc"] == 0 and run["result"]["changed"] is False
        assert run["result"]["ansible_facts"]["gpu_topology"] == RECORDED["timings"][source]["facts"]


def test_measured_time_under_half_a_second():
    for source in ("nvml", "nvidia-smi"):
        t = RECORDED["timings"][source]
        assert 0 < t["cold_gather_s"] < 0.5 and 0 < t["warm_median_s"] < 0.5
