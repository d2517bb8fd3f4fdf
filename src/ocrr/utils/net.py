"""Whether a server takes connections, asked before handing its address to a client library
that would retry it for minutes in silence (MLflow's tracking client, ``ray.init``)."""

from __future__ import annotations

import socket

__all__ = ["CONNECT_TIMEOUT", "refused_connection"]

#: How long a door waits for a server to take a connection.
CONNECT_TIMEOUT = 5.0


def refused_connection(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> OSError | None:
    """Why a TCP connection to ``host:port`` failed within ``timeout`` s (nothing listening, a
    host that does not resolve, no route), or None: something there takes connections."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return e
    return None
