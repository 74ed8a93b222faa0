"""One JSON document per line over a stream socket: what the supervisor's control
socket (harness.stack.control) and the Locust fork server (harness.load.forkserver)
speak. Standard library only."""

from __future__ import annotations

import socket


def read_line(connection: socket.socket, *, timeout: float | None) -> bytes:
    """Bytes up to and including the first newline, or what came before the peer
    closed; `timeout` seconds for each receive (None: no limit). OSError as recv."""
    connection.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return data
