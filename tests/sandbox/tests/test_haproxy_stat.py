"""tests/sandbox/haproxy_stat.py, the reader of HAProxy's own counters the router tests judge by
(tests/integration/test_routers.py), on HAProxy 2.6.12's real answers (tests/fixtures/haproxy/README.md)."""

from pathlib import Path

import pytest

from tests.sandbox import haproxy_stat as hs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "haproxy"
SERVING = hs.parse_stat((FIXTURES / "showstat.csv").read_text())
RESTARTED = hs.parse_stat((FIXTURES / "showstat-after-restart.csv").read_text())
INFO = hs.parse_info((FIXTURES / "showinfo.txt").read_text())


def test_show_stat_rows_are_keyed_by_the_csv_header():
    assert [(r["pxname"], r["svname"]) for r in SERVING] == [
        ("sglang_public", "FRONTEND"),
        ("sglang_routers", "rtrprobe-1-router-a"),
        ("sglang_routers", "rtrprobe-1-router-b"),
        ("sglang_routers", "BACKEND"),
        ("stats", "FRONTEND"),
    ]
    served = hs.row({"stat": SERVING}, "sglang_routers", "rtrprobe-1-router-a")
    assert served["stot"] == 10 and served["status"] == "UP" and served["hrsp_2xx"] == 10
    assert served["eresp"] == 0 and served["econ"] == 0 and served["wretr"] == 0
    # a counter the row does not carry is None, not 0 (a frontend has no econ)
    assert hs.row({"stat": SERVING}, "sglang_public", "FRONTEND")["econ"] is None
    assert hs.states({"stat": SERVING}) == {
        "sglang_routers/rtrprobe-1-router-a": "UP",
        "sglang_routers/rtrprobe-1-router-b": "DOWN",
    }


def test_show_info_names_the_process():
    assert INFO["Version"] == "2.6.12-1+deb12u3" and INFO["Pid"] == 185 and INFO["Uptime_sec"] == 2


def test_a_delta_within_one_process_subtracts_and_across_processes_starts_from_zero():
    before = {"info": {"Pid": 74}, "stat": SERVING}
    grown = [dict(r, stot=r["stot"] + 5, eresp=3) if r["svname"] == "rtrprobe-1-router-a" else r for r in SERVING]
    delta = hs.counter_delta(before, {"info": {"Pid": 74}, "stat": grown}, "sglang_routers", "rtrprobe-1-router-a")
    assert delta["stot"] == 5 and delta["eresp"] == 3 and delta["process_changed"] is False
    # killed and restarted (another Pid): the new process's counters are all there is
    delta = hs.counter_delta(before, {"info": INFO, "stat": RESTARTED}, "sglang_routers", "rtrprobe-1-router-a")
    assert delta["stot"] == 0 and delta["process_changed"] is True


def test_an_answer_that_is_not_show_stat_is_refused():
    for text in ("", "Unknown command\n", "sglang_routers,BACKEND,0\n"):
        with pytest.raises(ValueError, match="not a show stat answer"):
            hs.parse_stat(text)
