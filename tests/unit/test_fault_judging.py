"""tests/integration/faults.py: how a fault is judged from what the services and the load recorded."""

import json

import faults
from samples import Clock

METRICS = """# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.0
sglang:num_used_tokens_other 5.0
"""


def test_the_kv_reading_sums_the_gauges_and_ignores_other_series():
    busy = METRICS.replace('pp_rank="0"} 0.0\n# TYPE sglang:token', 'pp_rank="0"} 96.0\n# TYPE sglang:token')
    assert faults.prefill_kv(METRICS) == {"num_used_tokens": 0.0, "token_usage": 0.0}
    assert faults.prefill_kv(busy)["num_used_tokens"] == 96.0
    assert faults.kv_idle(faults.prefill_kv(METRICS))
    assert not faults.kv_idle(faults.prefill_kv(busy))
    assert not faults.kv_idle({"num_used_tokens": 0.0}), "a missing gauge is no reading of idle"


def loads(*ranks):
    """A prefill's /v1/loads answer (sglang 0.5.23 v1_loads.py, ?include=core), one load per (used, usage) rank."""
    return json.dumps({"version": "0.5.23", "loads": [
        {"dp_rank": i, "num_running_reqs": 0, "num_waiting_reqs": 0, "num_used_tokens": used, "token_usage": usage}
        for i, (used, usage) in enumerate(ranks)]})  # fmt: skip


def test_the_kv_reading_of_a_v1_loads_answer_sums_its_dp_ranks():
    assert faults.prefill_kv(loads((0, 0.0), (0, 0.0))) == {"num_used_tokens": 0.0, "token_usage": 0.0}
    assert faults.prefill_kv(loads((0, 0.0), (96, 0.0002))) == {"num_used_tokens": 96.0, "token_usage": 0.0002}
    assert faults.kv_idle(faults.prefill_kv(loads((0, 0.0))))
    assert not faults.kv_idle(faults.prefill_kv(loads((96, 0.0002))))
    for error in ('{"detail": "Unauthorized"}', '{"loads": "x"}', "{not json", '{"loads": [{"dp_rank": 0}]}'):
        assert not faults.kv_idle(faults.prefill_kv(error)), f"{error}: no reading of idle"


def test_the_kv_wait_reads_the_load_snapshot_not_a_stale_gauge():
    # the wait polls what it is given: the fault tests give it /v1/loads, which the idle scheduler publishes at once,
    # where /metrics may still hold the freed KV (a request waiting in the bootstrap queue keeps the gauges)
    clock = Clock()
    answers = iter([None, loads((48, 0.0001)), loads((0, 0.0))])
    assert faults.wait_kv_idle(lambda: next(answers), timeout=10, clock=clock, sleep=clock.sleep)[:2] == (True, 2.0)


def test_the_kv_wait_ends_at_idle_or_on_the_clock():
    clock = Clock()
    texts = iter([None, METRICS.replace("} 0.0", "} 7.0", 1), METRICS])
    assert faults.wait_kv_idle(lambda: next(texts), timeout=10, clock=clock, sleep=clock.sleep)[:2] == (True, 2.0)
    clock = Clock()
    busy = METRICS.replace("} 0.0", "} 7.0", 1)
    idle, waited, reading = faults.wait_kv_idle(lambda: busy, timeout=5, clock=clock, sleep=clock.sleep)
    assert (idle, waited, reading["num_used_tokens"]) == (False, 5.0, 7.0)


def test_a_request_is_late_when_it_ends_more_than_the_bound_after_it_was_sent():
    result = {"t0": 100.0, "timeline": [[1.0, 3.0, "200"], [2.0, 32.0, "TimeoutError"], [3.0, 17.9, "500"]]}
    assert faults.late_requests(result) == [(2.0, 30.0, "TimeoutError")]
    assert faults.latest_end_s(result) == 30.0


GUARD_JOURNAL = """\
1764900010.500000 w-1 sglang-guard[77]: guarding sglang-decode0 (127.0.0.1:30001), sglang-prefill0 (...): ...
1764900031.250000 w-1 sglang-guard[77]: killing sglang-prefill0.service (pid 812, frozen): silent for 8.1 s (bound \
8 s): neither /health nor /v1/loads answered (the whole process is silent); systemd restarts it (...: rc 0)
1764900090.000000 w-1 sglang-guard[77]: killing sglang-decode0.service (pid 990, stalled): silent for 8 s (bound 8 s): x
1764900095.000000 w-1 sglang-guard[77]: not killing sglang-decode0.service (pid 991, stalled): silent for 8 s; x
"""


def test_the_guards_kills_are_read_from_its_journal_per_unit():
    kills = faults.guard_kills(GUARD_JOURNAL, "sglang-prefill0")
    assert [(t, phase) for t, phase, _reason in kills] == [(1764900031.25, "frozen")]
    assert kills[0][2].startswith("silent for 8.1 s (bound 8 s): neither /health nor /v1/loads answered")
    # a hold is no kill; another unit's kill is not this one's
    assert [phase for _t, phase, _r in faults.guard_kills(GUARD_JOURNAL, "sglang-decode0")] == ["stalled"]
    assert faults.guard_kills(GUARD_JOURNAL, "sglang-decode1") == []
    assert faults.guard_recognition_bound(8, 1, 2) == 13


def test_no_fault_is_exempt_from_the_fail_fast_bound():
    assert not hasattr(faults, "KNOWN_HANGS") and not hasattr(faults, "hang_problems")
    assert faults.FAULT_CLIENT_TIMEOUT > faults.FAIL_FAST_S == 20.0


def test_recovery_is_bounded_per_role_and_a_missing_one_is_over():
    assert faults.recovery_problems({"recovery_s": 51.2}, "decode") == []
    assert faults.recovery_problems({"recovery_s": faults.RECOVERY_BOUND["router"] + 1}, "router")
    assert faults.recovery_problems({"recovery_s": None}, "prefill")


def test_the_decode_must_end_what_it_held_at_a_prefill_freeze_within_the_heartbeat_bound():
    stop = 1000.0

    def req(start, end, completed=False, status=500):
        return {"start": stop + start, "end": None if end is None else stop + end, "completed": completed,
                "status": status}  # fmt: skip

    bound = faults.HEARTBEAT_FAIL_S + faults.DECODE_POLL_SLACK
    fine = [req(-3, -2, True, 200), req(-0.5, 0.2, True, 200), req(-0.2, bound - 0.4), req(2, 2 + bound - 0.1)]
    assert faults.decode_hold_problems(fine, stop) == []
    # a room that waited out the client's 30 s, one still open, one taken in while the prefill was still known
    late = [req(-0.1, 29.9, status=None), req(1, None, status=None), req(4, 4 + bound + 1)]
    problems = faults.decode_hold_problems(fine + late, stop)
    assert len(problems) == 1 and problems[0].startswith("3 of the 6 requests"), problems
    # taken in after the decode could have dropped the prefill: looked up anew, not the heartbeat's to end
    assert faults.decode_hold_problems([req(faults.KNOWN_FOR_S + 1, 40)], stop) == []
    assert "the longest 30.00 s" in faults.decode_held([*fine, req(-0.1, 29.9)], stop)


STALL_JOURNAL = """\
1764900000.100000 decode-1 systemd[1]: Stopping sglang-decode0.service - SGLang decode worker...
1764900001.000000 decode-1 systemd[1]: Started sglang-decode0.service - SGLang decode worker.
1764900031.500000 decode-1 python3[812]: [2026-12-05 03:00:31] INFO The server is fired up and ready to roll! (30.4s)
1764900045.000000 decode-1 python3[812]: [2026-12-05 03:00:45] WARNING Health check failed
1764900055.750000 decode-1 systemd[1]: Stopping sglang-decode0.service - SGLang decode worker...
1764900070.000000 decode-1 python3[990]: [2026-12-05 03:01:10] INFO The server is fired up and ready to roll! (14.2s)
"""


def test_stall_recognition_runs_from_the_stalled_servers_start_to_the_rollbacks_stop():
    # the old process's stop (before any start in the window) is not the verdict; the restored one's start is after
    assert faults.stall_recognition_s(STALL_JOURNAL, "sglang-decode0") == 24.25
    # another unit's stop is not this one's, and a journal without both lines has no answer
    assert faults.stall_recognition_s(STALL_JOURNAL, "sglang-decode1") is None
    assert faults.stall_recognition_s(STALL_JOURNAL.splitlines()[2], "sglang-decode0") is None
    slow = STALL_JOURNAL.replace("1764900055.750000", "1764900101.000000")
    assert faults.stall_recognition_s(slow, "sglang-decode0") == 69.5 > faults.STALL_RECOGNISED_WITHIN
