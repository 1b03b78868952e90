"""tests/bench/error_budget.py and the rows it tabulates (tests/integration/faults.py summary() and change_cost()):
what one load.py result makes of a fault or a change, and the document written from the rows."""

import importlib.util
import json
from pathlib import Path

import faults

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "error_budget.py"
_spec = importlib.util.spec_from_file_location("error_budget", SCRIPT)
error_budget = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(error_budget)

A, B, C = "http://10.0.0.2:30000", "http://10.0.0.3:30001", "http://10.0.0.4:30011"
T0 = 1000.0  # the load's t0, epoch
STARTED = 990.0  # the run's start, epoch: the load starts 10 s into the run


def load_result(timeline, workers):
    ok = sum(1 for _s, _e, status in timeline if status == "200")
    errors = {}
    for _s, _e, status in timeline:
        if status != "200":
            errors[status] = errors.get(status, 0) + 1
    return {"t0": T0, "total": len(timeline), "ok": ok, "errors": errors, "timeline": timeline, "workers": workers}


def test_a_rolling_change_costs_its_failures_from_the_run_start_and_recovers_when_every_planned_worker_is_back():
    timeline = [[0.0, 5.0, "200"], [1.0, 7.0, "200"], [4.5, 6.0, "502"], [6.5, 9.0, "200"], [8.0, 8.5, "503"]]
    # B leaves at 5.0 (2 in flight then: [0,5) ends at 5, so [1,7) and [4.5,6)), comes back at 6.2, A leaves at 7.5
    # ([6.5,9) in flight), is back at 9.4
    workers = [[0.0, f"{A},{B}"], [5.0, A], [6.2, f"{A},{B}"], [7.5, B], [9.4, f"{A},{B}"]]
    cost = faults.change_cost(load_result(timeline, workers), STARTED, [B, A], [B, A])
    assert cost["sent"] == 5 and cost["failed"] == 2 and cost["errors"] == {"502": 1, "503": 1}
    assert cost["in_flight"] == 1, "the fewest in flight at a worker's removal: one at A's (7.5)"
    assert (cost["first_failure_s"], cost["last_failure_s"]) == (14.5, 18.0)
    assert cost["recovery_s"] == 19.4


def test_a_change_that_ends_without_its_planned_workers_has_no_recovery():
    workers = [[0.0, f"{A},{B}"], [5.0, A]]
    cost = faults.change_cost(load_result([[0.0, 1.0, "200"]], workers), STARTED, [A, B], [B])
    assert cost["recovery_s"] is None and cost["failed"] == 0 and cost["last_failure_s"] is None


def test_a_scale_out_counts_in_flight_when_the_router_first_routes_to_the_added_worker():
    timeline = [[0.0, 3.0, "200"], [2.0, 4.0, "200"], [2.5, 2.9, "200"]]
    workers = [[0.0, A], [1.0, "ConnectionRefusedError"], [1.2, A], [3.5, f"{A},{C}"]]
    cost = faults.change_cost(load_result(timeline, workers), STARTED, [A, C], [C])
    assert cost["in_flight"] == 1 and cost["recovery_s"] == 13.5
    # a moved worker the router never let go (the rolling step left its batch alone): no moment, no count
    assert faults.change_cost(load_result(timeline, workers), STARTED, [A, C], [B])["in_flight"] is None


def test_a_fault_counts_the_requests_in_flight_at_the_kill():
    timeline = [[0.0, 2.0, "200"], [1.0, 4.0, "502"], [2.5, 3.0, "200"], [3.5, 5.0, "502"]]
    cost = faults.summary(load_result(timeline, []), T0 + 2.6, T0 + 9.0)
    assert cost["in_flight"] == 2 and cost["failed"] == 2
    assert (cost["last_failure_s"], cost["recovery_s"]) == (0.9, 6.4)


META = {
    "date": "2026-12-05 01:00 UTC",
    "commit": "abc1234",
    "machine": "2 CPUs (nproc), 7.8 GiB memory, load average 0.10/0.20/0.30 at the start",
    "command": "tests/bench/error_budget.py",
    "partial": False,
    "modules": {"faults": {"target": "tests/integration/test_faults.py -k 'kill_9 or frozen'", "rc": 0,
                           "seconds": 1234.4}},
}  # fmt: skip


def test_the_document_tables_the_rows_beside_the_peers_with_their_sources_and_says_how_it_was_made():
    row = {"fault": "scale-in: decode1 removed (smg)", "redundancy": "2P2D", "sent": 812, "failed": 0, "errors": {},
           "in_flight": 15, "first_failure_s": None, "last_failure_s": None, "recovery_s": 61.237}  # fmt: skip
    kill = {**row, "fault": "kill -9 decode (sglang_router)", "failed": 3, "errors": {"502": 2, "TimeoutError": 1},
            "last_failure_s": 21.5}  # fmt: skip
    doc = error_budget.markdown([row, kill], faults.PEERS, META)
    lines = doc.splitlines()
    head = lines.index("| event | deployment | sent | failed | errors | in flight at the event | last failure (s) | "
                       "recovery (s) |")  # fmt: skip
    assert lines[head + 2] == "| scale-in: decode1 removed (smg) | 2P2D | 812 | 0 | - | 15 | - | 61.24 |"
    assert (
        lines[head + 3]
        == "| kill -9 decode (sglang_router) | 2P2D | 812 | 3 | 502 2, TimeoutError 1 | 15 | 21.50 | 61.24 |"
    )
    assert "| Dynamo: prefill worker killed | 1P1D (none) | 800 | 2 | - | - | - | 42.31 | ai-dynamo/dynamo" in doc
    assert sum("ai-dynamo/dynamo tests/fault_tolerance/README.md" in line for line in lines) == 4
    for peer in faults.PEERS:
        assert sum(line.startswith(f"| {peer['fault']} |") and peer["source"] in line for line in lines) == 1, peer
    for said in (
        META["date"],
        META["commit"],
        META["machine"],
        f"`{META['command']}`",
        "`pytest tests/integration/test_faults.py -k 'kill_9 or frozen'`: passed in 1234 s",
        "**recovery (s)**",
        '## Not measured\n\n- The router rows marked "not measured yet"',
    ):
        assert said in doc, said  # fmt: skip
    assert "Partial" not in doc and "No test recorded a row" not in doc


def test_a_narrowed_or_failed_run_says_so_in_the_document():
    meta = {**META, "partial": True, "modules": {"m": {"target": "t -k x", "rc": 1, "seconds": 5.0}}}
    doc = error_budget.markdown([], faults.PEERS, meta)
    assert "**Partial**" in doc and "No test recorded a row" in doc
    assert "`pytest t -k x`: FAILED (pytest exit status 1) in 5 s" in doc


def fake_pytest(monkeypatch, returncode=0, row=None):
    """error_budget's subprocess.run answered without running anything: git says commit abc1234 (clean), each pytest
    command is kept in the list returned and exits RETURNCODE, after writing ROW (when given) to the report file the
    script hands it, as a recording test would."""
    ran = []

    def fake_run(cmd, **kwargs):
        if cmd[0] == "git":
            return type("P", (), {"stdout": "abc1234\n" if "rev-parse" in cmd else "", "returncode": 0})()
        ran.append(cmd)
        if row is not None:
            with open(kwargs["env"]["DISAGG_FAULT_REPORT"], "a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
        return type("P", (), {"returncode": returncode})()

    monkeypatch.setattr(error_budget.subprocess, "run", fake_run)
    return ran


def test_the_script_writes_what_the_tests_recorded_and_fails_when_a_module_failed(tmp_path, monkeypatch):
    row = {"fault": "rename: prefill1 -> prefill2 (sglang_router)", "redundancy": "2P2D", "sent": 9, "failed": 0,
           "errors": {}, "in_flight": 14, "last_failure_s": None, "recovery_s": 70.0}  # fmt: skip
    ran = fake_pytest(monkeypatch, returncode=1, row=row)
    out = tmp_path / "budget.md"
    assert error_budget.main(["--only", "multihost", "--select", "scale_in", "--output", str(out)]) == 1
    assert ran[0][-2:] == ["-k", f"({error_budget.MODULES['multihost'][1]}) and (scale_in)"]
    doc = out.read_text()
    assert "| rename: prefill1 -> prefill2 (sglang_router) | 2P2D | 9 | 0 | - | 14 | - | 70.00 |" in doc
    assert "**Partial**" in doc and "FAILED (pytest exit status 1)" in doc


ROUTER_EVENTS = [
    ("router planned change", "two routers behind HAProxy"),
    ("router planned change", "one router"),
    ("router kill -9", "two routers behind HAProxy"),
    ("router kill -9", "one router"),
    ("haproxy kill -9", "HAProxy on the router host"),
]
NOT_YET = " | ".join(["not measured yet"] * 6)


def test_the_router_events_no_test_recorded_are_rows_not_measured_yet_never_numbers():
    """Until a run includes tests/integration/test_routers.py, each router event of issue 39 is in the table, every
    number of it "not measured yet"."""
    assert list(error_budget.EXPECTED) == ROUTER_EVENTS
    kill = {"fault": "kill -9 decode (sglang_router)", "redundancy": "1P1D (none)", "sent": 10, "failed": 3,
            "errors": {"502": 3}, "in_flight": 2, "last_failure_s": 1.5, "recovery_s": 40.0}  # fmt: skip
    lines = error_budget.markdown([kill], faults.PEERS, META).splitlines()
    measured = lines[lines.index("## Measured") : lines.index("## Published peer figures")]
    rows = [line for line in measured if line.startswith("| ") and not line.startswith("| event")]
    assert rows == [
        "| kill -9 decode (sglang_router) | 1P1D (none) | 10 | 3 | 502 3 | 2 | 1.50 | 40.00 |",
        *[f"| {fault} | {redundancy} | {NOT_YET} |" for fault, redundancy in ROUTER_EVENTS],
    ]


def test_a_recorded_router_row_fills_its_event_and_the_others_stay_not_measured():
    """test_routers.py records e.g. `router kill -9: router-a (smg)` for two routers: that row replaces the event's
    placeholder; a row of the same fault with another deployment fills nothing else."""
    row = {"fault": "router kill -9: router-a (smg)", "redundancy": "two routers behind HAProxy", "sent": 1500,
           "failed": 2, "errors": {"ConnectionResetError": 2}, "in_flight": 16, "last_failure_s": 0.4,
           "recovery_s": 6.2}  # fmt: skip
    other = {**row, "fault": "router kill -9 (smg)", "redundancy": "1P1D (none)"}
    doc = error_budget.markdown([row, other], faults.PEERS, META)
    assert (
        "| router kill -9: router-a (smg) | two routers behind HAProxy | 1500 | 2 | ConnectionResetError 2 | 16 |"
        in doc
    )
    assert f"| router kill -9 | two routers behind HAProxy | {NOT_YET} |" not in doc
    assert f"| router kill -9 | one router | {NOT_YET} |" in doc
    assert doc.count(NOT_YET) == 4  # the four events left


def test_the_routers_module_runs_whole_and_is_narrowed_only_by_select(tmp_path, monkeypatch):
    ran = fake_pytest(monkeypatch)
    assert error_budget.main(["--only", "routers", "--output", str(tmp_path / "a.md")]) == 0
    assert ran[-1][-1] == "tests/integration/test_routers.py" and "-k" not in ran[-1]
    assert error_budget.main(["--only", "routers", "--select", "kill_9", "--output", str(tmp_path / "b.md")]) == 0
    assert ran[-1][-3:] == ["tests/integration/test_routers.py", "-k", "(kill_9)"]
    doc = (tmp_path / "a.md").read_text()
    assert "No test recorded a row" in doc and f"| haproxy kill -9 | HAProxy on the router host | {NOT_YET} |" in doc


def test_the_peer_figures_of_the_routers_are_llm_d_failover_and_the_single_router_change_of_issue_39():
    by_fault = {p["fault"]: p for p in faults.PEERS}
    llm_d = by_fault["llm-d: router (EPP) stopped, standby takes over"]
    assert (llm_d["sent"], llm_d["failed"]) == (18000, 0) and "llm-d/llm-d-router PR #2228" in llm_d["source"]
    ours = by_fault["router planned change: decode policy (smg)"]
    assert (ours["sent"], ours["failed"], ours["in_flight"], ours["redundancy"]) == (2888, 2005, 16, "one router")


def test_only_given_twice_runs_those_two_modules_in_one_partial_table(tmp_path, monkeypatch):
    ran = fake_pytest(monkeypatch)
    out = tmp_path / "budget.md"
    assert error_budget.main(["--only", "faults", "--only", "routers", "--output", str(out)]) == 0
    targets = [cmd[cmd.index("-q") + 1] for cmd in ran]
    assert targets == [error_budget.MODULES["faults"][0], error_budget.MODULES["routers"][0]], ran
    assert "**Partial**" in out.read_text()


def test_a_row_that_names_its_event_shows_it_beside_the_fault_and_still_fills_its_placeholder():
    row = {"fault": "router planned change", "redundancy": "two routers behind HAProxy", "sent": 217, "failed": 0,
           "errors": {}, "in_flight": 16, "last_failure_s": None, "recovery_s": None,
           "event": "router version change smg 1.12.0 -> 1.13.0"}  # fmt: skip
    doc = error_budget.markdown([row], faults.PEERS, META)
    assert (
        "| router planned change: version change smg 1.12.0 -> 1.13.0 | two routers behind HAProxy | 217 | 0 |" in doc
    )
    assert f"| router planned change | two routers behind HAProxy | {NOT_YET} |" not in doc
