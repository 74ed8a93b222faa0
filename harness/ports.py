"""Free loopback ports for servers the harness and the tests start."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports that nothing listens on right now.

    Separate `free_port()` calls can hand out the same port twice (it is free again as
    soon as its probe socket closes), and two services of one stack on one port fail
    to start; here every probe socket stays bound until all the ports are picked.
    """
    with ExitStack() as sockets:
        probes = [sockets.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for probe in probes:
            probe.bind((host, 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def wait_for_port(host: str, port: int, *, timeout: float = 10.0) -> bool:
    """True once something accepts TCP connections on host:port, False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False
