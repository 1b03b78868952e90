# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""A host that holds a verified revision serves it to the other hosts of its cluster, for the duration of the stage
(one copy from outside per cluster; the others copy from a peer and verify again).

    server(directory, address, port)   a threaded HTTP server of the staged directory: GET and HEAD of the files its
                                       stamp's manifest names and of the stamp itself, nothing else (no listing, no
                                       path outside), with Range (206) so a cut copy resumes; its `served` record
                                       counts body bytes per client address
    serve(httpd, idle, deadline, clock, sleep)
                                       serves until none was served for `idle` seconds after the first request (a
                                       file being sent is not idle), or the deadline passed; returns the record
"""

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from .staging import STAMP

CHUNK = 1 << 20
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def allowed_paths(directory):
    with open(os.path.join(directory, STAMP), encoding="utf-8") as handle:
        stamp = json.load(handle)
    return set(stamp["manifest"]) | {STAMP}


class PeerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, directory, clock):
        self.directory = directory
        self.allowed = allowed_paths(directory)
        self.clock = clock
        self.lock = threading.Lock()
        self.served = {}
        self.requests = 0
        self.active = 0
        self.last = None
        super().__init__(address, Handler)

    def begin(self):
        with self.lock:
            self.active += 1

    def note(self, client, sent):
        with self.lock:
            entry = self.served.setdefault(client, {"bytes": 0, "requests": 0})
            entry["bytes"] += sent
            entry["requests"] += 1
            self.requests += 1
            self.active -= 1
            self.last = self.clock()

    def idle_for(self):
        """Seconds since the last request ended, None before the first one or while one is served."""
        with self.lock:
            if self.last is None or self.active:
                return None
            return self.clock() - self.last


class Handler(BaseHTTPRequestHandler):
    server_version = "disagg-model-peer/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        return

    def do_HEAD(self):
        self.answer(head=True)

    def do_GET(self):
        self.answer(head=False)

    def answer(self, head):
        self.server.begin()
        path = unquote(urlsplit(self.path).path).lstrip("/")
        if path not in self.server.allowed:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.server.note(self.client_address[0], 0)
            return
        full = os.path.join(self.server.directory, path)
        size = os.path.getsize(full)
        start, end, status = 0, size, 200
        match = RANGE.match(self.headers.get("Range") or "")
        if match and int(match.group(1)) < size:
            start = int(match.group(1))
            end = min(int(match.group(2)) + 1, size) if match.group(2) else size
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        sent = 0
        if not head:
            with open(full, "rb") as handle:
                handle.seek(start)
                while sent < end - start:
                    data = handle.read(min(CHUNK, end - start - sent))
                    if not data:
                        break
                    self.wfile.write(data)
                    sent += len(data)
        self.server.note(self.client_address[0], sent)


def server(directory, address, port, clock):
    return PeerServer((address, port), directory, clock)


def serve(httpd, idle, deadline, clock, sleep):
    """Serve on a thread until `idle` seconds passed without a request after the first one, or `deadline` seconds
    from now; then close. Returns {served: {address: {bytes, requests}}, requests, reason}."""
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    started = clock()
    reason = "deadline"
    try:
        while clock() - started < deadline:
            quiet = httpd.idle_for()
            if quiet is not None and quiet >= idle:
                reason = "idle"
                break
            sleep(0.2)
    finally:
        httpd.shutdown()
        httpd.server_close()
    return {"served": dict(httpd.served), "requests": httpd.requests, "reason": reason}
