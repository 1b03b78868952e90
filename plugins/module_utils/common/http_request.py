# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""One HTTP request to a worker or the router, with the standard library's http.client, for every module that talks
to them (service_health.fetch, router_api).

What the callers rely on is as it was with open_url: a response with .status and .read(n), used as a context
manager; a 4xx or 5xx answer raised as urllib.error.HTTPError (its .code, its body by .read()); nothing answering
raised as OSError (a refused connection, a timeout) or http.client.HTTPException; a string body sent as UTF-8, with
urllib's Content-Type for a body when the caller gives none; certificates verified for https.

Unlike open_url: the connection goes straight to the URL's host and port (the workers' and the router's own
addresses), never through a proxy named in the environment, and a redirect is returned as it is, not followed (no
worker or router endpoint the collection calls redirects).
"""

import http.client
import ssl
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

USER_AGENT = "disagg.sglang"
# what urllib.request sends with a body when the caller gives no Content-Type
FORM = "application/x-www-form-urlencoded"


class Answer:
    """An answer of status < 400: .status, .read(n); closes its connection on leaving a with block."""

    def __init__(self, connection, response):
        self.connection = connection
        self.response = response
        self.status = response.status

    def read(self, limit=-1):
        return self.response.read(None if limit is None or limit < 0 else limit)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.connection.close()


def open_url(url, data=None, headers=None, method=None, timeout=10):
    """The answer to one request (method: GET, or POST when DATA is given); HTTPError for 4xx and 5xx."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                                 context=ssl.create_default_context())  # fmt: skip
    elif parts.scheme == "http":
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    else:
        raise URLError(f"unknown url type: {parts.scheme!r}")
    body = data.encode("utf-8") if isinstance(data, str) else data
    sent = {"User-Agent": USER_AGENT, **(headers or {})}
    if body is not None and not any(k.lower() == "content-type" for k in sent):
        sent["Content-Type"] = FORM
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(method or ("GET" if body is None else "POST"), path, body=body, headers=sent)
        response = connection.getresponse()
    except BaseException:
        connection.close()
        raise
    if response.status >= 400:
        raise HTTPError(url, response.status, response.reason, response.headers, response)
    return Answer(connection, response)
