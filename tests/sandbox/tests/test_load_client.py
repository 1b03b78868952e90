"""tests/sandbox/load.py, the bounded load of the sandbox tests: what its --rate holds back.

Its `run` against a local server that answers the first requests slowly and then stops listening (a router's
restart: slow answers, then refused connections that fail at once). The starts must stay at least 1/rate apart
throughout: a load that ran below its rate must not spend the starts it "saved" in a burst of instant failures.
"""

import http.server
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

LOAD = Path(__file__).resolve().parents[1] / "load.py"
SLOW_ANSWERS, SLOW_S, RATE = 4, 0.4, 20.0


def serve_slowly_then_close():
    """A server on a free loopback port answering SLOW_ANSWERS POSTs, each after SLOW_S, closing its socket before the
    last answer is sent."""
    answered = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(SLOW_S)
            if len(answered) == SLOW_ANSWERS - 1:
                # closed before the last answer leaves: a connection the client opens once it has that answer is
                # refused. Closed after it, a connection that came first sat in the backlog and was reset instead
                # (seen under load).
                server.socket.close()
            body = json.dumps({"text": "Paris"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            answered.append(time.time())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)

    def loop():
        while len(answered) < SLOW_ANSWERS:
            server.handle_request()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return server.server_address[1], thread


def run_load(port, requests, rate):
    args = [sys.executable, str(LOAD), "--url", f"http://127.0.0.1:{port}", "run", "--requests", str(requests),
            "--concurrency", "1", "--timeout", "5", "--deadline", "30"]  # fmt: skip
    if rate:
        args += ["--rate", str(rate)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_rate_spaces_every_start_even_when_requests_begin_to_fail_at_once():
    port, server = serve_slowly_then_close()
    result = run_load(port, 40, RATE)
    server.join(5)
    starts = sorted(start for start, _end, _status in result["timeline"])
    statuses = [status for _start, _end, status in sorted(result["timeline"])]
    assert statuses[:SLOW_ANSWERS] == ["200"] * SLOW_ANSWERS, statuses
    assert set(statuses[SLOW_ANSWERS:]) == {"ConnectionRefusedError"}, statuses
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # a refused connection takes well under a millisecond here: without spacing, the failures would start together
    # (half the interval: one sleep that wakes late makes the next gap shorter; the span below holds the mean)
    assert min(gaps) >= 0.5 / RATE, gaps
    # the 36 failures took about 36/RATE s, not the moment the old schedule (counted from t0) allowed
    failing = starts[SLOW_ANSWERS:]
    assert failing[-1] - failing[0] >= 0.9 * (len(failing) - 1) / RATE, failing


def test_without_a_rate_failures_come_as_fast_as_they_fail():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_load(port, 30, 0)
    assert result["total"] == 30 and result["errors"] == {"ConnectionRefusedError": 30}, result
    assert result["elapsed"] < 1.5, result
