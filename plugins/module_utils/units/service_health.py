# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0
"""The health wait with stall recognition (stall.py): is a systemd unit's service healthy, did it fail or restart,
has it stalled, or is the time up. Pure functions plus one loop whose systemctl runner, HTTP fetch, sleep and clock
are injected, so every outcome is tested without a host (tests/unit/units/test_service_health.py).

Every wait ends on the clock: a deadline (the whole wait's, fixed when it began, passed to each call of the role's
until loop: roles/sglang/tasks/health_wait.yml) and, within one call, a window of `wait` seconds for a progress line.
No probe outlasts the deadline (its HTTP timeout is cut to what is left). Within a call, the unit counts as failed
when it is failed or inactive, waits in systemd's auto-restart, or has been restarted (NRestarts grew) since the
whole wait began. Loading, warming and stalled are told apart by how the health URL answers (stall.py); a stall ends
the wait at once, and a call does not end its window while a silence is being timed.
"""

import json
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.disagg.sglang.plugins.module_utils.units.stall import SILENT, Silence

BODY_LIMIT = 2000  # characters of the last answer returned to the caller
READ_LIMIT = 100000  # bytes read from a healthy answer (a /readiness or /health body is far smaller)
HTTP_TIMEOUT = 5  # seconds for one request
POLL_INTERVAL = 1  # seconds between two polls within one wait
MIN_PROBE = 1.5  # seconds: the shortest HTTP timeout of a probe (a healthy sglang /health takes about 1 s)
METRICS_LIMIT = 16 << 20  # bytes read from a /metrics page: the whole page (histograms of every rank can be large)
# How every request to a worker or the router is made (ansible.module_utils.urls.open_url's options): straight to its
# address, never through a proxy named in the environment (http_proxy, https_proxy). The collection talks HTTP only to
# the deployment's own workers and router, addresses of the serving network that a site's outbound proxy cannot reach
# or should not see (the prompts of the canary, the worker API key); a proxy set for the package downloads of the
# same run would otherwise take them too, as urllib sends loopback and private addresses to it unless no_proxy says.
DIRECT = {"use_proxy": False, "http_agent": "disagg.sglang"}


def parse_unit_state(rc, out):
    """(active_state, sub_state, n_restarts) from `systemctl show --property=...` output; unknowns when rc != 0."""
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}
    restarts = props.get("NRestarts", "0")
    return props.get("ActiveState", "unknown"), props.get("SubState", "unknown"), int(restarts or 0)


def unit_state(run, unit):
    """(active_state, sub_state, n_restarts) of the unit; run(argv) -> (rc, stdout, stderr)."""
    rc, out, _err = run(["systemctl", "show", unit, "--property=ActiveState,SubState,NRestarts"])
    return parse_unit_state(rc, out)


def unit_failed(state, restarts_at_start):
    """Whether the unit failed, stopped or was restarted since the wait began (state from unit_state)."""
    active, sub, restarts = state
    return active in ("failed", "inactive") or sub == "auto-restart" or restarts > restarts_at_start


def fetch(url, timeout=HTTP_TIMEOUT, *, data=None, headers=None, limit=READ_LIMIT):
    """One GET, or a POST of DATA when given: (status, body, error). status is None when nothing answered; error then
    says why. LIMIT: bytes read from a 2xx answer (the router canary reads whole /metrics pages)."""
    # imported here, not at the top: the HTTP and TLS stack is most of this file's import time, and the filters that
    # import it (through rolling.py) load it in every forked worker of a run, where nothing fetches
    from http.client import HTTPException  # noqa: PLC0415
    from urllib.error import HTTPError, URLError  # noqa: PLC0415

    from ansible.module_utils.urls import ConnectionError as UrlsConnectionError  # noqa: PLC0415
    from ansible.module_utils.urls import open_url  # noqa: PLC0415

    method = "GET" if data is None else "POST"
    try:
        # use_proxy=False: a worker's or the router's own address, never through a proxy of the environment (DIRECT)
        with open_url(url, data=data, headers=headers, method=method, timeout=timeout, **DIRECT) as resp:
            return resp.status, resp.read(limit).decode("utf-8", "replace"), None
    except HTTPError as exc:  # a 4xx/5xx answer: it carries a status and a body
        return exc.code, exc.read(BODY_LIMIT).decode("utf-8", "replace"), None
    except TimeoutError:  # the probes go to the host's own address, where a closed port is refused at once
        return None, "", f"{SILENT} {timeout:g} s"
    except (URLError, OSError, HTTPException, UrlsConnectionError) as exc:
        return None, "", f"no answer: {getattr(exc, 'reason', exc)}"


def judge(status, body, error, expect):
    """(healthy, reason) of one answer. expect maps JSON keys to the smallest value each must reach."""
    if status is None:
        return False, error
    if status != 200:
        return False, f"HTTP {status}"
    if expect:
        try:
            data = json.loads(body)
        except ValueError:
            return False, "answer is not JSON"
        if not isinstance(data, dict):
            return False, "answer is not a JSON object"
        for key, want in expect.items():
            have = data.get(key)
            if not isinstance(have, (int, float)) or have < want:
                return False, f"{key} is {have}, waiting for {want}"
    return True, "healthy"


def probe(url, expect, *, fetch=fetch, timeout=HTTP_TIMEOUT):
    """(healthy, reason, body) of one request to url."""
    status, body, error = fetch(url, timeout)
    healthy, reason = judge(status, body, error, expect)
    return healthy, reason, body


def wait_healthy(run, unit, url, expect, wait, *, restarts_at_start=None, sleep=time.sleep, clock=time.monotonic,
                 fetch=fetch, poll=POLL_INTERVAL, deadline=None, stall_timeout=None):  # fmt: skip
    """Polls url until it is healthy, the unit failed or restarted, it stalled, the deadline passed, or this call's
    window of `wait` seconds is over (at least one poll). restarts_at_start: the unit's NRestarts when the whole wait
    began (a wait of several calls passes the same one, so a restart between two calls still counts); read now when
    None. deadline: when the whole wait ends, in clock's time (None: this call's window only). stall_timeout: seconds
    of silence (stall.py) that make a stall (None: never judged). poll: seconds between two polls.

    Returns healthy, unit_failed, stalled, timed_out (at most one true), done (one of them is), unit_state, reason
    and body (first BODY_LIMIT chars).
    """
    window = clock() + wait
    deadline = float("inf") if deadline is None else deadline
    if restarts_at_start is None:
        restarts_at_start = unit_state(run, unit)[2]
    silence = Silence(stall_timeout)
    while True:
        asked = clock()
        # no probe outlasts the deadline, nor the stall bound of a silence being timed
        status, body, error = fetch(url, max(min(HTTP_TIMEOUT, silence.bound(deadline) - asked), MIN_PROBE))
        healthy, reason = judge(status, body, error, expect)
        silence.note(healthy, status, error, asked, clock())
        state = unit_state(run, unit)
        failed = unit_failed(state, restarts_at_start) and not healthy
        now = clock()
        timing = silence.timing()
        stalled = not (healthy or failed) and silence.stalled(now)
        timed_out = not (healthy or failed or stalled) and now >= deadline
        if stalled:
            reason = silence.reason(now, reason)
        if healthy or failed or stalled or timed_out or (now >= window and not timing):
            active, sub, restarts = state
            return {
                "healthy": healthy,
                "unit_failed": failed,
                "stalled": stalled,
                "timed_out": timed_out,
                "done": healthy or failed or stalled or timed_out,
                "unit_state": f"{active}/{sub}, {restarts} restarts",
                "reason": reason,
                "body": body[:BODY_LIMIT],
            }
        sleep(max(min(poll, deadline - now), 0))


def journal_tail(run, unit, lines):
    """The last LINES lines of UNIT's journal (what went wrong, for a unit that is not healthy)."""
    _rc, out, err = run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"])
    return out or err


def metrics_url(health_url):
    """The /metrics URL beside an instance's /health URL (both served by sglang's HTTP server); "" for another URL."""
    base, sep, last = health_url.rpartition("/")
    return f"{base}/metrics" if sep and last == "health" else ""


def wait_all(run, services, wait, *, journal, sleep=time.sleep, clock=time.time, fetch=fetch,
             poll=POLL_INTERVAL, deadline=None, stall_timeout=None):  # fmt: skip
    """wait_healthy for every service at once (one thread each, so a host's units are polled together and the wait
    is the slowest one's, not their sum). services: [{unit, url, expect, restarts, deadline}, ...]
    (restarts: NRestarts when the whole wait began, see wait_healthy; deadline: the service's own, else DEADLINE, in
    clock's time: the modules use the epoch, time.time, so that a deadline fixed by the controller or by an earlier
    call holds in this one); journal(unit) -> the tail of its journal, read for each service that is not healthy.
    Returns one result per service, in order, each with the service's own `item` (whatever the caller passed there)
    and its journal."""

    def one(service):
        result = wait_healthy(run, service["unit"], service["url"], service.get("expect") or {}, wait,
                              restarts_at_start=service.get("restarts"), sleep=sleep, clock=clock, fetch=fetch,
                              poll=poll, deadline=service.get("deadline") or deadline,
                              stall_timeout=stall_timeout)  # fmt: skip
        result["journal"] = "" if result["healthy"] else journal(service["unit"])
        result["item"] = service.get("item", service)
        return result

    return at_once(one, services)


def at_once(one, items):
    """[one(item) for item in items], one thread per item (none for a single one); results in order."""
    if len(items) <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(one, items))
