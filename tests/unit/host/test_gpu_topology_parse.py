"""Parsers of nvidia-smi and sysfs text, table-driven from tests/fixtures/topology/parse_cases.yml."""

import pytest
import topology_fakes as tf
import yaml
from ansible_collections.disagg.sglang.plugins.module_utils.host import gpu_topology as gt

CASES = yaml.safe_load((tf.FIXTURES / "parse_cases.yml").read_text())


def _ids(cases):
    return [c.get("title") or repr(c["input"]) for c in cases]


def _rows(rows):
    return {i: dict(enumerate(row.split())) for i, row in enumerate(rows)}


@pytest.mark.parametrize("case", CASES["matrix"], ids=_ids(CASES["matrix"]))
def test_topo_matrix(case):
    got = gt.parse_topo_matrix(case["input"])
    assert got["gpus"] == list(range(len(case["links"])))
    assert got["links"] == _rows(case["links"])
    assert [got["cpu_affinity"][i] for i in got["gpus"]] == [tf.cpus(c) if c else None for c in case["cpu"]]
    assert [got["numa_affinity"][i] for i in got["gpus"]] == [tf.cpus(n) if n else None for n in case["numa"]]
    missing, extra = tf.match_all(case["warnings"], got["warnings"])
    assert not missing and not extra, f"warnings missing {missing}, unexpected {extra}"


@pytest.mark.parametrize("case", CASES["matrix_errors"], ids=_ids(CASES["matrix_errors"]))
def test_topo_matrix_errors(case):
    with pytest.raises(ValueError, match=case["error"]):
        gt.parse_topo_matrix(case["input"])


@pytest.mark.parametrize("case", CASES["cpulist"], ids=_ids(CASES["cpulist"]))
def test_cpulist(case):
    if case.get("error"):
        with pytest.raises(ValueError):
            gt.parse_cpulist(case["input"])
        return
    want = [c for lo, hi in case["cpus"] for c in range(lo, hi + 1)]
    assert gt.parse_cpulist(case["input"]) == want
    assert gt.parse_cpulist(gt.format_cpulist(want)) == want


@pytest.mark.parametrize("case", CASES["bus_id"], ids=_ids(CASES["bus_id"]))
def test_bus_id(case):
    assert gt.normalize_bus_id(case["input"]) == case["sysfs"]


@pytest.mark.parametrize("case", CASES["query"], ids=_ids(CASES["query"]))
def test_query(case):
    assert gt.parse_query_gpu(case["input"]) == case["gpus"]


@pytest.mark.parametrize("case", CASES["p2p"], ids=_ids(CASES["p2p"]))
def test_p2p(case):
    assert gt.parse_p2p(case["input"]) == _rows(case["result"])


def test_strip_ansi_keeps_na_brackets():
    assert gt.strip_ansi("\x1b[4mGPU0\x1b[0m [N/A] [4mx[0m") == "GPU0 [N/A] x"


def test_format_cpulist():
    assert gt.format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert gt.format_cpulist([]) == ""
