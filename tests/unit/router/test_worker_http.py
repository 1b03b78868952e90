"""The collection's HTTP calls (ansible.module_utils.urls.open_url with service_health.DIRECT) against a real HTTP
server on the loopback: what service_health.fetch, the router canary and router_api rely on (status, body, JSON
posts, 4xx/5xx with their body, nothing answering as an error), and the decision that a worker's or the router's own
address is never sent through a proxy named in the environment, checked against a real proxy that records who asked
it."""

import http.server
import json
import socket
import threading

import pytest
from ansible.module_utils.urls import open_url
from ansible_collections.disagg.sglang.plugins.module_utils.router import router_api
from ansible_collections.disagg.sglang.plugins.module_utils.units import service_health


class Handler(http.server.BaseHTTPRequestHandler):
    """A worker: GET answers its path and User-Agent (503 under /fail), POST its body and headers; the server records
    every path it was asked for."""

    def log_message(self, *args):
        pass

    def _answer(self, status, body):
        self.server.asked.append(self.path)
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/fail"):
            self._answer(503, "not ready")
        elif self.path == "/workers":
            self._answer(200, json.dumps({"workers": [{"url": "http://10.0.0.1:30000", "worker_type": "prefill",
                                                       "is_healthy": True}]}))  # fmt: skip
        else:
            self._answer(200, json.dumps({"path": self.path, "agent": self.headers["User-Agent"]}))

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length).decode()
        self._answer(200, json.dumps({"body": body, "type": self.headers["Content-Type"],
                                      "auth": self.headers.get("Authorization")}))  # fmt: skip


def serve():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.asked = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture(scope="module")
def worker():
    httpd = serve()
    yield httpd
    httpd.shutdown()


@pytest.fixture
def proxy(monkeypatch):
    """A proxy named in the environment as a site's outbound proxy would be: a real server that records every request
    it gets (a proxied request asks it for the whole URL) and answers it itself."""
    httpd = serve()
    address = f"http://127.0.0.1:{httpd.server_address[1]}"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, address)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield httpd
    httpd.shutdown()


def url(server, path):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_a_get_answers_with_status_and_body_keeps_the_query_and_names_the_collection(worker):
    status, body, error = service_health.fetch(url(worker, "/health?x=1"))
    assert (status, error) == (200, None)
    assert json.loads(body) == {"path": "/health?x=1", "agent": "disagg.sglang"}


def test_a_post_sends_the_string_body_and_its_headers(worker):
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}
    status, body, _error = service_health.fetch(url(worker, "/generate"), data='{"text": "hi"}', headers=headers)
    assert status == 200
    assert json.loads(body) == {"body": '{"text": "hi"}', "type": "application/json", "auth": "Bearer k"}


def test_a_healthy_answer_is_read_up_to_the_limit(worker):
    _status, body, _error = service_health.fetch(url(worker, "/ok"), limit=10)
    assert body == '{"path": "'


def test_an_error_status_is_a_status_with_its_body_not_a_missing_answer(worker):
    assert service_health.fetch(url(worker, "/fail")) == (503, "not ready", None)


def test_nothing_answering_is_no_answer_with_the_reason():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    status, body, error = service_health.fetch(f"http://127.0.0.1:{port}/health", timeout=2)
    assert (status, body) == (None, "")
    assert error.startswith("no answer:") and "refused" in error.lower()
    with pytest.raises(router_api.RouterNotAnswering, match="no answer"):
        router_api.SglangRouter(f"http://127.0.0.1:{port}", timeout=2).workers()


def test_the_proxy_of_the_fixture_is_one_open_url_would_use(worker, proxy):
    """Without DIRECT, open_url honours the environment's proxy even for a loopback address (so the next tests, where
    the proxy is not asked, show the decision, not a proxy that nothing could reach)."""
    with open_url(url(worker, "/through"), timeout=5) as answer:
        assert json.loads(answer.read())["path"] == url(worker, "/through")
    assert proxy.asked == [url(worker, "/through")]
    assert "/through" not in worker.asked


def test_a_worker_is_asked_directly_whatever_proxy_the_environment_names(worker, proxy):
    status, body, _error = service_health.fetch(url(worker, "/direct"))
    assert (status, json.loads(body)["path"]) == (200, "/direct")
    assert "/direct" in worker.asked and proxy.asked == []


def test_the_router_is_asked_directly_whatever_proxy_the_environment_names(worker, proxy):
    listed = router_api.SglangRouter(url(worker, "")).workers()
    assert [w["url"] for w in listed] == ["http://10.0.0.1:30000"]
    assert "/workers" in worker.asked and proxy.asked == []
