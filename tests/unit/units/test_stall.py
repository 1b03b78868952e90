"""Stall recognition (module_utils/units/stall.py): which answers of a health URL are a scheduler's silence, and when
a silence becomes a stall."""

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.units import stall


@pytest.mark.parametrize(
    ("status", "error", "seconds", "silent"),
    [
        (None, f"{stall.SILENT} 5 s", 5.0, True),  # the port took the request, nothing answered
        (None, "no answer: [Errno 111] Connection refused", 0.0, False),  # loading: port closed
        (503, "", 0.01, False),  # warming up or stopping: 503 at once
        (503, "", 20.0, True),  # the health check's own timeout: 503 after 20 s
        (200, "", 1.0, False),
    ],
)
def test_silence_is_told_from_a_load_and_a_warm_up(status, error, seconds, silent):
    assert stall.silent(status, error, seconds) is silent


def test_a_silence_becomes_a_stall_after_stall_timeout_and_ends_on_an_answer():
    silence = stall.Silence(30)
    silence.note(False, None, f"{stall.SILENT} 5 s", 100.0, 105.0)
    assert silence.timing() and silence.bound(1000.0) == 130.0 and not silence.stalled(129.0)
    assert silence.stalled(130.0)
    assert silence.reason(131.0, "no answer in 5 s").startswith("stalled: its port takes requests")
    silence.note(False, 503, "", 131.0, 131.01)  # a quick 503: the silence is over
    assert not silence.timing() and silence.bound(1000.0) == 1000.0 and not silence.stalled(500.0)


def test_without_a_stall_timeout_no_stall_is_judged():
    silence = stall.Silence(None)
    silence.note(False, None, f"{stall.SILENT} 5 s", 0.0, 5.0)
    assert not silence.timing() and not silence.stalled(10_000.0) and silence.bound(50.0) == 50.0
