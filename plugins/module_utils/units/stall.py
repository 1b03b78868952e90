# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""Stall recognition: when a service's silence at its health URL is a stalled scheduler, not a load or a warm-up.
The health wait (service_health.wait_healthy) keeps one Silence per service and ends the wait once it says stalled.

Loading, warming and stalled are told apart by how the health URL answers (sglang 0.5.23,
sglang/srt/entrypoints/http_server.py): while the weights load the port is closed (connection refused); while it
warms up /health answers 503 at once (server status Starting; a SIGTERM likewise); a healthy /health takes about 1 s
(health_generate sleeps 1 s, then looks for scheduler output); a stalled scheduler's /health answers nothing until
SGLANG_HEALTH_CHECK_TIMEOUT (20 s) and then 503. So an answer that does not come within the probe's timeout, or a
non-200 answer that took longer than QUICK seconds, is the scheduler's silence; silence lasting stall_timeout seconds
is a stall (a load or a warm-up never looks like it). Tested in tests/unit/units/test_service_health.py.
"""

# seconds: sglang answers its 503s of Starting and SIGTERM before any sleep (http_server.py health_generate); its only
# later non-200 is the health check's timeout, after at least one 1 s sleep
QUICK = 1.0
SILENT = "no answer in"  # how fetch's error begins when the port took the request and nothing answered in time


def silent(status, error, seconds):
    """Whether an answer that is not healthy is the scheduler's silence: nothing within the probe's timeout, or a
    non-200 that came only after QUICK seconds. Refused (loading) and a 503 at once (warming, stopping) are not."""
    if status is None:
        return (error or "").startswith(SILENT)
    return status != 200 and seconds >= QUICK


class Silence:
    """The silence of one service, timed against STALL_TIMEOUT seconds (None: no stall is ever judged)."""

    def __init__(self, stall_timeout):
        self.stall_timeout = stall_timeout
        self.since = None

    def note(self, healthy, status, error, asked, answered):
        """One probe asked at ASKED and answered (or given up) at ANSWERED: a silence goes on or ends."""
        quiet = not healthy and silent(status, error, answered - asked)
        self.since = (asked if self.since is None else self.since) if quiet else None

    def timing(self):
        """Whether a silence is being timed (the call then holds its window open until it ends or stalls)."""
        return self.since is not None and self.stall_timeout is not None

    def bound(self, deadline):
        """When the next probe must end: the deadline, or sooner the moment a silence being timed becomes a stall."""
        return min(deadline, self.since + self.stall_timeout) if self.timing() else deadline

    def stalled(self, now):
        """Whether the silence has lasted stall_timeout seconds by NOW."""
        return self.timing() and now - self.since >= self.stall_timeout

    def reason(self, now, last):
        """What a stall is reported as, LAST being the last probe's reason."""
        return (
            f"stalled: its port takes requests, and /health has not answered for {now - self.since:.0f} s "
            f"(its scheduler does not answer; last: {last})"
        )
