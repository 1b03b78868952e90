"""The sample PD pair the unit tests render: the 1P1D TP4+TP4 instances of the deployment notes; a loopback HTTP
server (a quiet handler base, a module-scoped fixture) for the tests of the modules that ask a URL."""

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

INSTANCES = {
    "prefill": {"name": "prefill0", "tp": 4, "port": 30000, "bootstrap_port": 8998, "dist_init_port": 30335},
    "decode": {"name": "decode0", "tp": 4, "port": 30001, "bootstrap_port": 8999, "dist_init_port": 30435},
}
# What the worker role passes besides the profile (identity of the model, where workers bind).
SETTINGS = {
    "model_path": "/models/DeepSeek-V4-Flash",
    "served_model_name": "deepseek-v4-flash",
    "host": "127.0.0.1",
    "dist_init_host": "127.0.0.1",
}


@contextlib.contextmanager
def loopback_server(handler):
    """HANDLER (a BaseHTTPRequestHandler class) served on 127.0.0.1 at a free port, in a thread; yields the base URL
    and shuts the server down after."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class QuietHandler(BaseHTTPRequestHandler):
    """A loopback handler that answers with one call and logs nothing (pytest shows what a test asserts, not the
    server's access log)."""

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def loopback_fixture(handler):
    """A module-scoped fixture `server`: the base URL of HANDLER served on loopback for the module's tests."""

    @pytest.fixture(scope="module")
    def server():
        with loopback_server(handler) as url:
            yield url

    return server


class Clock:
    """A clock for code that takes (now, sleep): time passes only when the code sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
