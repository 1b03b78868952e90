"""module_utils/common/http_request.open_url against a real HTTP server on the loopback: what service_health.fetch and
router_api rely on (status, body, JSON posts, 4xx/5xx as HTTPError with their body, nothing answering as OSError),
and no proxy from the environment."""

import http.server
import json
import socket
import threading
from urllib.error import HTTPError, URLError

import pytest
from ansible_collections.disagg.sglang.plugins.module_utils.common import http_request
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/fail"):
            self._answer(503, "not ready")
        else:
            self._answer(200, json.dumps({"path": self.path, "agent": self.headers["User-Agent"]}))

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length).decode()
        self._answer(200, json.dumps({"body": body, "type": self.headers["Content-Type"],
                                      "auth": self.headers.get("Authorization")}))  # fmt: skip


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_get_answers_with_status_and_body_and_keeps_the_query(server):
    with http_request.open_url(f"{server}/health?x=1", timeout=5) as answer:
        assert answer.status == 200
        assert json.loads(answer.read(1000)) == {"path": "/health?x=1", "agent": "disagg.sglang"}


def test_a_post_sends_the_string_body_and_its_headers(server):
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}
    with http_request.open_url(f"{server}/generate", data='{"text": "hi"}', headers=headers, timeout=5) as answer:
        got = json.loads(answer.read())
    assert got == {"body": '{"text": "hi"}', "type": "application/json", "auth": "Bearer k"}
    with http_request.open_url(f"{server}/x", data="a=1", timeout=5) as answer:
        assert json.loads(answer.read())["type"] == http_request.FORM


def test_an_error_status_is_raised_with_its_code_and_body(server):
    with pytest.raises(HTTPError) as caught:
        http_request.open_url(f"{server}/fail", timeout=5)
    assert caught.value.code == 503
    assert caught.value.read() == b"not ready"


def test_nothing_answering_is_an_oserror_and_fetch_says_so():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(OSError):
        http_request.open_url(f"http://127.0.0.1:{port}/health", timeout=2)
    status, body, error = service_health.fetch(f"http://127.0.0.1:{port}/health")
    assert (status, body) == (None, "") and error.startswith("no answer:")
    with pytest.raises(URLError, match="unknown url type"):
        http_request.open_url("ftp://127.0.0.1/x")


def test_service_health_fetch_reads_a_status_and_an_error_body(server):
    assert service_health.fetch(f"{server}/fail") == (503, "not ready", None)
    status, body, error = service_health.fetch(f"{server}/ok")
    assert status == 200 and error is None and json.loads(body)["path"] == "/ok"


def test_no_proxy_from_the_environment_is_used(server, monkeypatch):
    """A proxy named in the environment (one that does not exist) is not asked: the worker's own address is."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with http_request.open_url(f"{server}/direct", timeout=5) as answer:
        assert answer.status == 200
