"""A hub-compatible HTTP server (stdlib) for the routes huggingface_hub 2.4.0 uses to download a model.

Mirrored from the pinned client (requirements/controller.txt):
- model info: `GET /api/models/{repo}/revision/{rev}[?blobs=true]` (hf_api.py HfApi.model_info; ModelInfo reads
  id, sha and siblings {rfilename, size, blobId, lfs {size, sha256, pointerSize}});
- tree: `GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=..&expand=..` (hf_api.py _iter_repo_tree_pages; RepoFile
  reads path, size, oid, lfs {oid, size, pointerSize}); one page, so no `Link: rel="next"` header
  (utils/_pagination.py);
- resolve: `HEAD` / `GET /{repo}/resolve/{rev}/{path}` (file_download.py get_hf_file_metadata reads X-Repo-Commit,
  X-Linked-Etag or ETag, X-Linked-Size or Content-Length; http_get sends `Range: bytes=N-` to resume after a cut
  connection and accepts 206);
- errors as utils/_http.py hf_raise_for_status reads them: `X-Error-Code: RepoNotFound | RevisionNotFound |
  EntryNotFound`, 401 without a valid token when one is set.
The hub answers an LFS file's HEAD with a redirect to its CDN; this server answers it itself with the same
X-Linked-* headers, which the client prefers. No X-Xet-Hash header is sent, so the client downloads over plain HTTP.

Its own record, `GET /hubsim/stats`: per client address the body bytes of every answer (`bytes`), of files alone
(`file_bytes`) and the requests; per file the bytes, GETs and ranged GETs; tests judge a repository's bytes by it.
`POST /hubsim/faults` (JSON) arms faults: `{"cut": {"path": P, "after": N}}` closes the connection after N body
bytes of P's next GET (the client resumes with a Range from its last whole 10 MiB chunk), `{"fail": {"path": P,
"status": 500, "times": K}}` answers P's next K GETs with that status. `POST /hubsim/reset` clears the record.
"""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from .repo import Revision, is_lfs

COMMIT = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 64 * 1024


class Hub:
    """The repositories served, their refs, the token and the record."""

    def __init__(self, repos: dict[str, list[Revision]], token: str | None = None):
        # repo id -> commit -> revision; `main` names the last revision of each list.
        self.repos = {repo: {rev.commit: rev for rev in revs} for repo, revs in repos.items()}
        self.refs = {repo: {"main": revs[-1].commit} for repo, revs in repos.items()}
        self.token = token
        self.lock = threading.Lock()
        self.faults: dict[str, list[dict]] = {"cut": [], "fail": []}
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.clients: dict[str, dict[str, int]] = defaultdict(lambda: {"bytes": 0, "file_bytes": 0, "requests": 0})
            self.files: dict[str, dict[str, int]] = defaultdict(lambda: {"bytes": 0, "gets": 0, "ranged": 0})
            self.unauthorized = 0

    def stats(self) -> dict:
        with self.lock:
            return {
                "clients": {k: dict(v) for k, v in self.clients.items()},
                "files": {k: dict(v) for k, v in self.files.items()},
                "bytes": sum(v["bytes"] for v in self.clients.values()),
                "file_bytes": sum(v["file_bytes"] for v in self.clients.values()),
                "unauthorized": self.unauthorized,
            }

    def count(self, client: str, path: str | None, sent: int, ranged: bool = False) -> None:
        with self.lock:
            self.clients[client]["bytes"] += sent
            self.clients[client]["requests"] += 1
            if path is not None:
                self.clients[client]["file_bytes"] += sent
                self.files[path]["bytes"] += sent
                self.files[path]["gets"] += 1
                self.files[path]["ranged"] += int(ranged)

    def take_fault(self, kind: str, path: str) -> dict | None:
        with self.lock:
            for fault in self.faults[kind]:
                if fault["path"] == path and fault.get("times", 1) > 0:
                    fault["times"] = fault.get("times", 1) - 1
                    return dict(fault)
        return None

    def resolve(self, repo: str, rev: str) -> Revision | None:
        revs = self.repos.get(repo)
        if revs is None:
            return None
        commit = rev if COMMIT.match(rev) else self.refs[repo].get(rev)
        return revs.get(commit)


class Handler(BaseHTTPRequestHandler):
    server_version = "hubsim/1"
    protocol_version = "HTTP/1.1"

    @property
    def hub(self) -> Hub:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format, *args):
        pass

    def client(self) -> str:
        return self.client_address[0]

    # --- answers -------------------------------------------------------------------------------------------------
    def answer(
        self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False, count: bool = True
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        if count:
            self.hub.count(self.client(), None, 0 if head else len(body))

    def answer_json(self, data, status: int = 200, count: bool = True) -> None:
        self.answer(status, json.dumps(data).encode(), {"Content-Type": "application/json"}, count=count)

    def error(self, status: int, code: str, message: str, head: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self.answer(status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                   "X-Error-Message": message}, head=head)  # fmt: skip

    def authorized(self) -> bool:
        if self.hub.token is None:
            return True
        if self.headers.get("Authorization") == f"Bearer {self.hub.token}":
            return True
        with self.hub.lock:
            self.hub.unauthorized += 1
        return False

    # --- routes --------------------------------------------------------------------------------------------------
    def do_HEAD(self):
        self.route(head=True)

    def do_GET(self):
        self.route(head=False)

    def do_POST(self):
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if url.path == "/hubsim/faults":
            with self.hub.lock:
                for kind in ("cut", "fail"):
                    if kind in body:
                        self.hub.faults[kind].append(dict(body[kind]))
            return self.answer_json({"armed": body}, count=False)
        if url.path == "/hubsim/reset":
            self.hub.reset()
            return self.answer_json({"reset": True}, count=False)
        return self.error(404, "NotFound", f"no route {url.path}")

    def route(self, head: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        if path == "/hubsim/stats":
            return self.answer_json(self.hub.stats(), count=False)  # the record does not count its own reading
        match = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)(?:/(.*))?$", path)
        if match:
            repo, kind, rev, sub = match.groups()
            return self.api(repo, kind, rev, sub or "", query)
        match = re.match(r"^/(?:models/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if match:
            repo, rev, file = match.groups()
            return self.resolve_file(repo, rev, file, head)
        return self.error(404, "NotFound", f"no route {path}", head=head)

    def find(self, repo: str, rev: str, head: bool = False) -> Revision | None:
        if not self.authorized():
            self.error(401, "RepoNotFound", "Invalid credentials in Authorization header", head=head)
            return None
        if repo not in self.hub.repos:
            self.error(404, "RepoNotFound", f"Repository not found: {repo}", head=head)
            return None
        found = self.hub.resolve(repo, rev)
        if found is None:
            self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
        return found

    def api(self, repo: str, kind: str, rev: str, sub: str, query: dict) -> None:
        found = self.find(repo, rev)
        if found is None:
            return None
        paths = sorted(found.files)
        if kind == "revision":
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = [found.sibling(p) if blobs else {"rfilename": p} for p in paths]
            return self.answer_json({"id": repo, "modelId": repo, "sha": found.commit, "private": False,
                                     "siblings": siblings})  # fmt: skip
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = sub.strip("/") + "/" if sub else ""
        entries, folders = [], set()
        for p in paths:
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix) :]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/")[0])
                continue
            entries.append(found.entry(p))
        entries += [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in sorted(folders)]
        return self.answer_json(entries)

    def resolve_file(self, repo: str, rev: str, file: str, head: bool) -> None:
        found = self.find(repo, rev, head=head)
        if found is None:
            return None
        data = found.files.get(file)
        if data is None:
            return self.error(404, "EntryNotFound", f"{file} does not exist at {rev}", head=head)
        entry = found.entry(file)
        headers = {"X-Repo-Commit": found.commit, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if is_lfs(file):
            headers["ETag"] = f'"{entry["lfs"]["oid"]}"'
            headers["X-Linked-Etag"] = f'"{entry["lfs"]["oid"]}"'
            headers["X-Linked-Size"] = str(len(data))
        else:
            headers["ETag"] = f'"{entry["oid"]}"'
        if head:
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.hub.count(self.client(), None, 0)
            return None
        fail = self.hub.take_fault("fail", file)
        if fail is not None:
            return self.error(int(fail.get("status", 500)), "Internal", f"hubsim: armed failure of {file}")
        start, end, status = 0, len(data), 200
        ranged = self.headers.get("Range")
        if ranged:
            match = re.match(r"^bytes=(\d+)-(\d*)$", ranged.strip())
            if not match or int(match.group(1)) >= len(data):
                return self.error(416, "RangeNotSatisfiable", f"bad range {ranged}")
            start = int(match.group(1))
            end = int(match.group(2)) + 1 if match.group(2) else len(data)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        cut = self.hub.take_fault("cut", file)
        limit = end if cut is None else min(end, start + int(cut["after"]))
        sent = 0
        try:
            for offset in range(start, limit, CHUNK):
                piece = data[offset : min(offset + CHUNK, limit)]
                self.wfile.write(piece)
                sent += len(piece)
        finally:
            self.hub.count(self.client(), file, sent, ranged=bool(ranged))
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # SHUT_RDWR: the client sees the body end short


class HubServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], hub: Hub):
        super().__init__(address, Handler)
        self.hub = hub

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def start(hub: Hub, host: str = "127.0.0.1", port: int = 0) -> HubServer:
    """A server on a thread of this process; `server.shutdown()` ends it."""
    server = HubServer((host, port), hub)
    threading.Thread(target=server.serve_forever, name="hubsim", daemon=True).start()
    return server
