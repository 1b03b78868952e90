# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""One HTTP request with the standard library, for every module that talks to a worker or the router
(service_health.fetch, router_api): urllib.request as ansible.module_utils.urls.open_url drives it by default
(proxies from the environment, redirects followed, certificates verified, a 4xx or 5xx answer raised as
urllib.error.HTTPError, a string body sent as UTF-8), without importing ansible.module_utils.urls, so that these
modules run lean (plugins/plugin_utils/lean_module.py).

Not taken over from open_url: credentials from ~/.netrc, client certificates, Unix sockets, GSSAPI; no module of
the collection asks for them.
"""

import urllib.request

USER_AGENT = "disagg.sglang"


def open_url(url, data=None, headers=None, method=None, timeout=10):
    """The response of one request (a context manager: .status, .read()); raises HTTPError for a 4xx or 5xx answer
    and URLError or OSError when nothing answers."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    request = urllib.request.Request(url, data=body, headers={"User-Agent": USER_AGENT, **(headers or {})},
                                     method=method)  # fmt: skip
    return urllib.request.urlopen(request, timeout=timeout)
