"""HTTP for the tests on this machine: JSON requests to the servers they start or reach (simulators, the router,
Prometheus), never through a proxy named in the environment. Imported as `tests.http_client` (the repository root
on sys.path: tests/unit/conftest.py and tests/integration/conftest.py put it there).

    status, answer = http("POST", url, {"text": "..."})  # answer: parsed JSON, else text, else None
    with stream("POST", url, body) as resp:               # an answer that streams (server-sent events)
        for line in resp: ...

Code that runs on another machine keeps its own few lines of urllib, as it cannot import this file:
tests/sandbox/load.py and the probe scripts in tests/integration/test_{hardening,robust_values,bad_inventories}.py
run on a sandbox host's python3, the simulator (tests/sandbox/pdsim/sglang_pd_sim) is a wheel installed on the
hosts, and roles/sglang_bench/files/*_step.py run on the benchmark's client host.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy"})
JSON_HEADERS = {"Content-Type": "application/json"}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now, for a server the test starts there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def without_proxies(env=None) -> dict:
    """ENV (default: this process's environment) without the proxy variables, for a process the test starts: the
    router's HTTP client honours them too."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k.lower() not in PROXY_VARS}


def _request(method: str, url: str, body=None, headers: dict | None = None) -> urllib.request.Request:
    data = json.dumps(body).encode() if body is not None else None
    return urllib.request.Request(url, data=data, method=method, headers={**JSON_HEADERS, **(headers or {})})


def http(method: str, url: str, body=None, headers: dict | None = None, timeout: float = 10.0):
    """(status, answer) of one request with BODY as JSON: the answer parsed as JSON, else its text, None when
    empty. An HTTP error status is an answer, not an exception; no answer at all (refused, timed out) raises
    OSError."""
    try:
        with DIRECT.open(_request(method, url, body, headers), timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def stream(method: str, url: str, body=None, headers: dict | None = None, timeout: float = 10.0):
    """The open response of one request whose answer streams: read it line by line inside a `with`. An HTTP error
    status raises urllib.error.HTTPError."""
    return DIRECT.open(_request(method, url, body, headers), timeout=timeout)
