# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The two socket probes a host runs for the address checks (plugins/modules/address_check.py, host_look): can a
listener bind an address of this host, and does a TCP connect to a worker's address get an answer. The socket calls
are injectable, so the tables in tests/unit/plan/test_cluster_rules.py run without a network; the rules that word their
outcomes are plan/cluster_rules.py's.
"""

import errno
import socket

# Outcomes of a TCP connect from the router host to a worker's address. Before the first run nothing listens,
# so "refused" (the host answered) counts as reachable; a timeout or no route means a firewall or a wrong address.
REACHABLE = ("open", "refused")


def connect_outcome(host, port, timeout=3.0, connect=None):
    """'open', 'refused', 'timeout', 'unreachable' or 'unresolved: ...' for a TCP connect to host:port."""
    if connect is None:
        connect = socket.create_connection
    try:
        conn = connect((host, int(port)), timeout)
    except socket.gaierror as exc:
        return f"unresolved: {exc.strerror or exc}"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
            return "unreachable"
        return f"unreachable: {exc.strerror or exc}"
    conn.close()
    return "open"


def bind_outcome(address, bind=None):
    """'ok' when a listener can bind ADDRESS on this host (it is one of its own addresses), else why not."""
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"unresolved: {exc.strerror or exc}"
    family, _unused, _unused2, _unused3, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        (bind or sock.bind)((sockaddr[0], 0))
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            return f"not an address of this host ({sockaddr[0]})"
        return f"cannot bind: {exc.strerror or exc}"
    finally:
        sock.close()
    return "ok"
